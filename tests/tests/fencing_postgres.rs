//! The fencing example (`crates/lock-recipes/examples/fencing_postgres.rs`) on a real ZooKeeper (`ZK_CONNECT`) and a
//! real PostgreSQL (`PG_CONNECT`; `scripts/test` starts both), its workers run as separate processes: a holder stopped
//! with SIGSTOP past its session timeout resumes and writes, and the store rejects it, while the holder that took
//! over in the meantime wrote.
//!
//! Each test uses a schema and a lock path of its own (the lock path under the suite's root, so the leftovers test
//! checks it), drops the schema at the end and checks that no lock node is left.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use recipes_conformance::zk::{server_or_skip, unique_path, ROOT};
use recipes_core::BackendExt;
use recipes_zk::{ZkBackend, ZkOptions};

const BIN: &str = env!("CARGO_BIN_EXE_fencing-postgres");
/// The paused holder's session timeout.
const SHORT_SESSION: Duration = Duration::from_secs(2);
/// The bound on every wait for a worker's line or exit.
const PATIENCE: Duration = Duration::from_secs(30);
const RESOURCE: &str = "invoice-17";

/// The PostgreSQL connection string, or `None` after saying why the test is skipped. Panics in CI when there is none
/// (as `recipes_conformance::zk::server` does for ZooKeeper).
fn pg_or_skip(test: &str) -> Option<String> {
    match std::env::var("PG_CONNECT") {
        Ok(s) if !s.trim().is_empty() => Some(s),
        _ if std::env::var_os("CI").is_some() => {
            panic!("PostgreSQL is required in CI: PG_CONNECT is not set (run the tests through scripts/test)")
        }
        _ => {
            eprintln!("SKIPPED fencing_postgres::{test}: PG_CONNECT not set (scripts/test sets it; see scripts/pg)");
            None
        }
    }
}

/// ZooKeeper's and PostgreSQL's connect strings, or `None` (skipped) outside CI when either is missing.
fn servers(test: &str) -> Option<(String, String)> {
    let pg = pg_or_skip(test)?;
    let zk = server_or_skip()?;
    Some((zk, pg))
}

/// What one test owns: a schema in PostgreSQL and a lock root in ZooKeeper, both unique to it. Dropping it drops the
/// schema (on every way out, a failed assertion's included).
struct Scene {
    zk: String,
    pg: String,
    schema: String,
    lock_root: String,
    db: Db,
}

impl Scene {
    /// The scene of the test `test`, its lock root named after `tag`; `None` when the test is skipped.
    fn new(test: &str, tag: &str) -> Option<Scene> {
        let (zk, pg) = servers(test)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let schema = format!("fencing_test_{}_{nanos}", std::process::id());
        let lock_root = unique_path(ROOT.trim_start_matches('/'), &format!("fencing-postgres-{tag}"));
        let db = Db::connect(&pg);
        Some(Scene {
            zk,
            pg,
            schema,
            lock_root,
            db,
        })
    }

    /// Starts a worker of the example: `worker --resource .. --worker-name NAME` and `extra`.
    fn worker(&self, name: &str, extra: &[&str]) -> Worker {
        let mut cmd = Command::new(BIN);
        cmd.args([&self.zk, &self.pg, "worker"])
            .args(["--resource", RESOURCE, "--worker-name", name])
            .args(["--schema", &self.schema, "--lock-root", &self.lock_root])
            .args(["--wait-ms", "20000"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("start the fencing-postgres worker");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Worker {
            name: name.to_owned(),
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// The ledger's rows for the resource, in the order written: (token, worker).
    fn ledger(&self) -> Vec<(i64, String)> {
        let sql = format!(
            "SELECT token, worker FROM {}.ledger WHERE resource = $1 ORDER BY id",
            self.schema
        );
        self.db
            .query(&sql, RESOURCE)
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }

    /// The fence's token for the resource.
    fn fence(&self) -> Option<i64> {
        let sql = format!("SELECT token FROM {}.fence WHERE resource = $1", self.schema);
        self.db.query(&sql, RESOURCE).first().map(|r| r.get(0))
    }

    /// Checks (for up to 10 s: a worker's close may still be on its way) that no lock node is left under our root.
    fn assert_no_lock_nodes(&self) {
        let rt = runtime();
        rt.block_on(async {
            let zk = ZkBackend::connect(ZkOptions::new(self.zk.clone()))
                .await
                .expect("connect");
            let path = format!("{}/{RESOURCE}", self.lock_root);
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let left = zk.current().children(&path).await.unwrap_or_default();
                if left.is_empty() {
                    break;
                }
                assert!(Instant::now() < deadline, "lock nodes left under {path}: {left:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            zk.close_now();
        });
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let dropped = self
            .db
            .execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        if let Err(e) = dropped {
            eprintln!("could not drop the test schema {}: {e}", self.schema);
        }
    }
}

/// A PostgreSQL connection of the test's own, on a small runtime (the test itself is not async).
struct Db {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

impl Db {
    fn connect(pg: &str) -> Db {
        let rt = runtime();
        let client = rt.block_on(async {
            let mut config: tokio_postgres::Config = pg.parse().expect("PG_CONNECT is a connection string");
            config.connect_timeout(Duration::from_secs(10));
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("connect to PostgreSQL ({pg}): {e}"));
            tokio::spawn(connection);
            client
        });
        Db { rt, client }
    }

    fn query(&self, sql: &str, resource: &str) -> Vec<tokio_postgres::Row> {
        self.rt
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(10), self.client.query(sql, &[&resource])).await
            })
            .expect("the query took over 10 s")
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn execute(&self, sql: &str) -> Result<(), String> {
        let q = self.client.batch_execute(sql);
        match self
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), q).await })
        {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("timed out after 10 s".into()),
        }
    }
}

/// A worker process, killed on drop (resumed first, should it be stopped).
struct Worker {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Worker {
    /// Waits (bounded) for the next line starting with `prefix`, and returns it.
    fn expect_line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no line {prefix:?} within {PATIENCE:?}; its output: {:?}",
                    self.name, self.seen
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{}: exited ({:?}) without printing {prefix:?}; its output: {:?}",
                    self.name,
                    self.child.try_wait(),
                    self.seen
                ),
            }
        }
    }

    /// The token of a line `... token=T ...`.
    fn token(line: &str) -> i64 {
        field(line, "token")
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {}", self.name);
    }

    /// Sends the go-ahead line of `--hold-then-write`.
    fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin
            .write_all(b"write\n")
            .and_then(|()| stdin.flush())
            .expect("write to the worker's stdin");
    }

    /// Waits (bounded) for the exit, and checks it was 0.
    fn expect_success(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                assert!(
                    status.success(),
                    "{} exited with {status}; its output: {:?}",
                    self.name,
                    self.seen
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {PATIENCE:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-CONT", &self.child.id().to_string()])
                .status();
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The value of `name=V` in `line`.
fn field(line: &str, name: &str) -> i64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}=N in {line:?}"))
}

#[test]
fn paused_holder_is_fenced_off_and_the_new_holder_writes() {
    let t0 = Instant::now();
    let Some(scene) = Scene::new("paused_holder_is_fenced_off_and_the_new_holder_writes", "paused") else {
        return;
    };
    let short = SHORT_SESSION.as_millis().to_string();

    // A holds, and will write only when told to (after its pause), without looking at its lease.
    let mut a = scene.worker("A", &["--session-timeout-ms", &short, "--hold-then-write"]);
    let ta = Worker::token(&a.expect_line("HOLDING "));
    eprintln!("A holds with token {ta} at {:?}", t0.elapsed());

    // A is paused: no heartbeat, so ZooKeeper expires its session after SHORT_SESSION and deletes its node. B, which
    // asked for the lock meanwhile, gets it only then.
    a.signal("-STOP");
    let stopped = Instant::now();
    let mut b = scene.worker("B", &[]);
    let tb = Worker::token(&b.expect_line("HOLDING "));
    let waited = stopped.elapsed();
    eprintln!("B holds with token {tb}, {waited:?} after A was stopped");
    assert!(
        tb > ta,
        "the new holder's token {tb} is not above the paused holder's {ta}"
    );
    assert!(
        waited >= SHORT_SESSION / 2,
        "B got the lock {waited:?} after A was stopped, before A's session ({SHORT_SESSION:?}) could expire"
    );
    assert_eq!(b.expect_line("WRITE "), format!("WRITE OK token={tb}"));
    b.expect_success();

    // A resumes, its go-ahead already waiting: it writes at once, with its old token, and the store refuses it.
    a.go();
    a.signal("-CONT");
    assert_eq!(a.expect_line("WRITE "), format!("WRITE REJECTED token={ta} store={tb}"));
    a.expect_success();
    eprintln!("A was rejected at {:?}", t0.elapsed());

    assert_eq!(
        scene.ledger(),
        vec![(tb, "B".to_owned())],
        "the ledger holds B's write, and not A's"
    );
    assert_eq!(scene.fence(), Some(tb));
    scene.assert_no_lock_nodes();
    eprintln!("done in {:?}", t0.elapsed());
}

#[test]
fn uncontended_holders_write() {
    let t0 = Instant::now();
    let Some(scene) = Scene::new("uncontended_holders_write", "uncontended") else {
        return;
    };

    // A holder writes twice under one token (an equal token passes the fence), with --hold-then-write: told at once.
    let mut first = scene.worker("first", &["--hold-then-write", "--writes", "2"]);
    let t1 = Worker::token(&first.expect_line("HOLDING "));
    first.go();
    assert_eq!(first.expect_line("WRITE "), format!("WRITE OK token={t1}"));
    assert_eq!(first.expect_line("WRITE "), format!("WRITE OK token={t1}"));
    first.expect_success();

    // The next holder, in the default mode (its writes guarded by the lease as well).
    let mut second = scene.worker("second", &[]);
    let t2 = Worker::token(&second.expect_line("HOLDING "));
    assert!(t2 > t1, "tokens {t1} then {t2}");
    assert_eq!(second.expect_line("WRITE "), format!("WRITE OK token={t2}"));
    second.expect_success();

    assert_eq!(
        scene.ledger(),
        vec![
            (t1, "first".to_owned()),
            (t1, "first".to_owned()),
            (t2, "second".to_owned())
        ]
    );
    assert_eq!(scene.fence(), Some(t2));
    scene.assert_no_lock_nodes();
    eprintln!("done in {:?}", t0.elapsed());
}
