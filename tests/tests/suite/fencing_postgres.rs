//! The fencing example (`crates/lock-recipes/examples/fencing_postgres.rs`) on a real ZooKeeper (`ZK_CONNECT`) and a
//! real PostgreSQL (`PG_CONNECT`; `scripts/test` starts both), its workers run as separate processes: a holder stopped
//! with SIGSTOP past its session timeout resumes and writes, and the store rejects it, while the holder that took
//! over in the meantime wrote. Two writers at once: the test itself holds the fence row in an open transaction while
//! a worker writes, and the worker's write waits for it, then is judged against what the test committed (or not).
//! And a PostgreSQL that accepts the connection but never answers ends a worker within its `connect_timeout`.
//!
//! Each test uses a schema and a lock path of its own (the lock path under the suite's root, so the leftovers test
//! checks it), drops the schema at the end and checks that no lock node is left.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::types::ToSql;

use recipes_conformance::zk::{server_or_skip, unique_path, ROOT};
use recipes_core::backend::BackendExt;
use recipes_zk::{ZkBackend, ZkOptions};

const BIN: &str = env!("CARGO_BIN_EXE_fencing-postgres");
/// The paused holder's session timeout.
const SHORT_SESSION: Duration = Duration::from_secs(2);
/// The bound on every wait for a worker's line or exit.
const PATIENCE: Duration = Duration::from_secs(30);
/// The bound on the test's own PostgreSQL connect and on each of its statements.
const DB_PATIENCE: Duration = Duration::from_secs(10);
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
        let mut args: Vec<&str> = vec![&self.zk, &self.pg, "worker"];
        args.extend(["--resource", RESOURCE, "--worker-name", name]);
        args.extend(["--schema", &self.schema, "--lock-root", &self.lock_root]);
        args.extend(["--wait-ms", "20000"]);
        args.extend(extra);
        Worker::start(name, &args)
    }

    /// The ledger's rows for the resource, in the order written: (token, worker).
    fn ledger(&self) -> Vec<(u128, String)> {
        let sql = format!(
            "SELECT token::text, worker FROM {}.ledger WHERE resource = $1 ORDER BY id",
            self.schema
        );
        self.db
            .query(&sql, &[&RESOURCE])
            .iter()
            .map(|r| (number(r.get(0)), r.get(1)))
            .collect()
    }

    /// The fence's token for the resource.
    fn fence(&self) -> Option<u128> {
        let sql = format!("SELECT token::text FROM {}.fence WHERE resource = $1", self.schema);
        self.db.query(&sql, &[&RESOURCE]).first().map(|r| number(r.get(0)))
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
    /// Connects, within DB_PATIENCE as a whole: tokio-postgres's `connect_timeout` bounds the TCP connect only, and a
    /// server that accepts and then stalls would otherwise hold the test until nextest's own limit.
    fn connect(pg: &str) -> Db {
        let rt = runtime();
        let client = rt.block_on(async {
            let mut config: tokio_postgres::Config = pg.parse().expect("PG_CONNECT is a connection string");
            config.connect_timeout(DB_PATIENCE);
            let connected = tokio::time::timeout(DB_PATIENCE, config.connect(tokio_postgres::NoTls))
                .await
                .unwrap_or_else(|_| {
                    panic!("PostgreSQL ({pg}) did not accept the test's connection within {DB_PATIENCE:?}: stalled?")
                });
            let (client, connection) = connected.unwrap_or_else(|e| panic!("connect to PostgreSQL ({pg}): {e}"));
            tokio::spawn(connection);
            client
        });
        Db { rt, client }
    }

    fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Vec<tokio_postgres::Row> {
        self.rt
            .block_on(async { tokio::time::timeout(DB_PATIENCE, self.client.query(sql, params)).await })
            .unwrap_or_else(|_| panic!("{sql}: took over {DB_PATIENCE:?}"))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn execute(&self, sql: &str) -> Result<(), String> {
        let q = self.client.batch_execute(sql);
        match self.rt.block_on(async { tokio::time::timeout(DB_PATIENCE, q).await }) {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("timed out after {DB_PATIENCE:?}")),
        }
    }

    /// This connection's server process id.
    fn backend_pid(&self) -> i32 {
        self.query("SELECT pg_backend_pid()", &[])[0].get(0)
    }
}

/// A worker process, killed on drop (resumed first, should it be stopped).
struct Worker {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    /// Its stderr so far (passed on to ours as well, line by line).
    stderr: Arc<Mutex<Vec<String>>>,
    /// The thread reading it, until joined after the exit.
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Starts the example with `args`; `name` is for messages.
    fn start(name: &str, args: &[&str]) -> Worker {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the fencing-postgres worker");
        let stdout = child.stdout.take().expect("stdout");
        let stderr_pipe = child.stderr.take().expect("stderr");
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
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (kept, who) = (Arc::clone(&stderr), name.to_owned());
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr_pipe).lines() {
                let Ok(line) = line else { break };
                eprintln!("[{who}] {line}");
                kept.lock().unwrap().push(line);
            }
        });
        Worker {
            name: name.to_owned(),
            child,
            stdin,
            lines,
            seen: Vec::new(),
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    /// All its stderr, once it has exited (the pipe is then at its end).
    fn stderr_after_exit(&mut self) -> String {
        assert!(
            matches!(self.child.try_wait(), Ok(Some(_))),
            "{} is still running",
            self.name
        );
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        self.stderr.lock().unwrap().join("\n")
    }

    /// The lines printed so far without waiting; panics if one starts with `forbidden`.
    fn assert_no_line_yet(&mut self, forbidden: &str) {
        loop {
            match self.lines.try_recv() {
                Ok(line) => {
                    self.seen.push(line.clone());
                    assert!(
                        !line.starts_with(forbidden),
                        "{}: printed {line:?} too early; its output: {:?}",
                        self.name,
                        self.seen
                    );
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => panic!(
                    "{}: exited early ({:?}); its output: {:?}, stderr: {:?}",
                    self.name,
                    self.child.try_wait(),
                    self.seen,
                    self.stderr.lock().unwrap()
                ),
            }
        }
    }

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
                    "{}: exited ({:?}) without printing {prefix:?}; its output: {:?}, stderr: {:?}",
                    self.name,
                    self.child.try_wait(),
                    self.seen,
                    self.stderr.lock().unwrap()
                ),
            }
        }
    }

    /// The token of a line `... token=T ...`.
    fn token(line: &str) -> u128 {
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

    /// Waits (at most `patience`) for the exit.
    fn wait_exit(&mut self, patience: Duration) -> ExitStatus {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {patience:?}; its output: {:?}, stderr: {:?}",
                self.name,
                self.seen,
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) for the exit, and checks it was 0.
    fn expect_success(&mut self) {
        let status = self.wait_exit(PATIENCE);
        assert!(
            status.success(),
            "{} exited with {status}; its output: {:?}, stderr: {:?}",
            self.name,
            self.seen,
            self.stderr.lock().unwrap()
        );
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

/// A token as PostgreSQL's `numeric(39)` prints it.
fn number(text: String) -> u128 {
    text.parse().unwrap_or_else(|_| panic!("not a token: {text:?}"))
}

/// The value of `name=V` in `line`.
fn field(line: &str, name: &str) -> u128 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}=N in {line:?}"))
}

/// A lock's holder paused past its session timeout is fenced off: the new holder writes, and the paused one's write
/// under its old token, when it resumes, is refused by the store.
#[test]
fn paused_holder_is_fenced_off_and_the_new_holder_writes() {
    paused_first_is_fenced_off("paused_holder_is_fenced_off_and_the_new_holder_writes", "paused", false);
}

/// The singleton consumer of an election (`--elect`): a leader paused past its session timeout is replaced by the
/// next candidate, whose term is higher; the paused leader's write under its old term, when it resumes, is refused
/// by the store.
#[test]
fn paused_leader_is_fenced_off_and_the_next_leader_writes() {
    paused_first_is_fenced_off("paused_leader_is_fenced_off_and_the_next_leader_writes", "elect", true);
}

/// A (a lock's holder, or with `elect` the leader of the election, candidates `A` and `B`) is paused past its session
/// timeout; B gets in only once A's session expired, with a higher token, and writes; A resumes and its write is
/// refused.
fn paused_first_is_fenced_off(test: &str, tag: &str, elect: bool) {
    let t0 = Instant::now();
    let Some(scene) = Scene::new(test, tag) else {
        return;
    };
    let short = SHORT_SESSION.as_millis().to_string();
    let candidate = |id: &'static str| if elect { vec!["--elect", id] } else { Vec::new() };

    // A holds, and will write only when told to (after its pause), without looking at its lease.
    let mut args = vec!["--session-timeout-ms", short.as_str(), "--hold-then-write"];
    args.extend(candidate("A"));
    let mut a = scene.worker("A", &args);
    let ta = Worker::token(&a.expect_line("HOLDING "));
    eprintln!("A holds with token {ta} at {:?}", t0.elapsed());

    // A is paused: no heartbeat, so ZooKeeper expires its session after SHORT_SESSION and deletes its node. B, which
    // asked meanwhile, gets in only then.
    a.signal("-STOP");
    let stopped = Instant::now();
    let mut b = scene.worker("B", &candidate("B"));
    let tb = Worker::token(&b.expect_line("HOLDING "));
    let waited = stopped.elapsed();
    eprintln!("B holds with token {tb}, {waited:?} after A was stopped");
    assert!(
        tb > ta,
        "the new holder's token {tb} is not above the paused holder's {ta}"
    );
    assert!(
        waited >= SHORT_SESSION / 2,
        "B got in {waited:?} after A was stopped, before A's session ({SHORT_SESSION:?}) could expire"
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

/// Tasks of one process in a cohort pass the lock among themselves: each hold has a token of its own, above the last
/// (several of one node, by their pass), each writes under it, and the first hold's token, replayed after the later
/// passes wrote, is refused by the fence.
#[test]
fn cohort_passes_write_under_rising_tokens_and_a_stale_pass_is_refused() {
    let Some(scene) = Scene::new(
        "cohort_passes_write_under_rising_tokens_and_a_stale_pass_is_refused",
        "cohort",
    ) else {
        return;
    };
    let args = [
        scene.zk.as_str(),
        &scene.pg,
        "cohort",
        "--workers",
        "4",
        "--resource",
        RESOURCE,
        "--schema",
        &scene.schema,
        "--lock-root",
        &scene.lock_root,
    ];
    let mut cohort = Worker::start("cohort", &args);
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let t = Worker::token(&cohort.expect_line("COHORT HOLD "));
        assert_eq!(cohort.expect_line("WRITE "), format!("WRITE OK token={t}"));
        tokens.push(t);
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens {tokens:?}");
    assert!(
        tokens.windows(2).any(|w| w[0] >> 32 == w[1] >> 32),
        "no hold was passed within the cohort (one node each): {tokens:?}"
    );
    let last = tokens[3];
    assert_eq!(
        cohort.expect_line("STALE "),
        format!("STALE WRITE REJECTED token={} store={last}", tokens[0])
    );
    cohort.expect_success();
    let ledger: Vec<u128> = scene.ledger().into_iter().map(|(t, _)| t).collect();
    assert_eq!(ledger, tokens, "every pass wrote once, in token order");
    assert_eq!(scene.fence(), Some(last));
    scene.assert_no_lock_nodes();
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

/// A token above any the lock hands out in these tests, and so above the worker's.
const HIGH: u128 = 1 << 100;
/// How long the worker's write may take to reach the fence row's lock and wait there: well under the example's
/// `lock_timeout` (10 s), after which it would give up waiting.
const REACH_THE_LOCK: Duration = Duration::from_secs(5);

/// Two writers at once. The test, on a connection of its own, raises the fence to `HIGH` in a transaction it keeps
/// open: it holds the fence row's lock, as a writer between its check and its commit does. A worker whose token lies
/// between the committed fence and `HIGH` writes meanwhile: its write must wait for that lock (a fence read without the
/// lock would see only the committed, lower value and let the write through), and then be judged against what the
/// test's transaction left: rejected after its `COMMIT`, accepted after its `ROLLBACK`.
fn writer_meets_an_uncommitted_fence(test: &str, tag: &str, commit: bool) {
    let t0 = Instant::now();
    let Some(scene) = Scene::new(test, tag) else {
        return;
    };

    // A first holder writes: the tables exist, and the fence holds its token, committed.
    let mut first = scene.worker("first", &[]);
    let t1 = Worker::token(&first.expect_line("HOLDING "));
    assert_eq!(first.expect_line("WRITE "), format!("WRITE OK token={t1}"));
    first.expect_success();

    // The test's own writer: the fence raised to HIGH, uncommitted. (Should the test fail, its connection closes when
    // `other` is dropped, before `scene` drops the schema, and PostgreSQL rolls the transaction back.)
    let other = Db::connect(&scene.pg);
    let other_pid = other.backend_pid();
    other
        .execute(&format!(
            "SET idle_in_transaction_session_timeout = '60s';
             BEGIN;
             INSERT INTO {s}.fence (resource, token) VALUES ('{RESOURCE}', {HIGH})
                 ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token",
            s = scene.schema
        ))
        .expect("raise the fence in an open transaction");

    // The worker: with --hold-then-write its write goes straight to the store (the fence alone judges it); without,
    // through guarded_steps (the lease as well), which must commit after the wait all the same.
    let extra: &[&str] = if commit { &["--hold-then-write"] } else { &[] };
    let mut second = scene.worker("second", extra);
    let t2 = Worker::token(&second.expect_line("HOLDING "));
    assert!(t1 < t2 && t2 < HIGH, "tokens {t1}, then {t2}; the test's {HIGH}");
    if commit {
        second.go();
    }

    // Its write waits for our row lock: PostgreSQL reports a backend blocked by ours (only the worker's can be), and
    // the worker has printed no WRITE line, then or a moment later.
    let blocked_sql = "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))";
    let deadline = Instant::now() + REACH_THE_LOCK;
    loop {
        second.assert_no_line_yet("WRITE ");
        if !scene.db.query(blocked_sql, &[&other_pid]).is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker's write did not wait for the fence row's lock within {REACH_THE_LOCK:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    second.assert_no_line_yet("WRITE ");
    assert!(
        !scene.db.query(blocked_sql, &[&other_pid]).is_empty(),
        "the worker's write stopped waiting while the test still held the fence row"
    );
    eprintln!(
        "the worker's write waits for the test's transaction at {:?}",
        t0.elapsed()
    );

    if commit {
        other.execute("COMMIT").expect("commit the test's fence");
        assert_eq!(
            second.expect_line("WRITE "),
            format!("WRITE REJECTED token={t2} store={HIGH}")
        );
        second.expect_success();
        assert_eq!(
            scene.ledger(),
            vec![(t1, "first".to_owned())],
            "the ledger holds no write of the worker's"
        );
        assert_eq!(scene.fence(), Some(HIGH));
    } else {
        other.execute("ROLLBACK").expect("roll the test's fence back");
        assert_eq!(second.expect_line("WRITE "), format!("WRITE OK token={t2}"));
        second.expect_success();
        assert_eq!(
            scene.ledger(),
            vec![(t1, "first".to_owned()), (t2, "second".to_owned())]
        );
        assert_eq!(scene.fence(), Some(t2));
    }
    scene.assert_no_lock_nodes();
    eprintln!("done in {:?}", t0.elapsed());
}

#[test]
fn write_waits_for_a_concurrent_fence_and_is_rejected_when_it_commits() {
    writer_meets_an_uncommitted_fence(
        "write_waits_for_a_concurrent_fence_and_is_rejected_when_it_commits",
        "concurrent-commit",
        true,
    );
}

#[test]
fn write_waits_for_a_concurrent_fence_and_is_accepted_when_it_rolls_back() {
    writer_meets_an_uncommitted_fence(
        "write_waits_for_a_concurrent_fence_and_is_accepted_when_it_rolls_back",
        "concurrent-rollback",
        false,
    );
}

/// A PostgreSQL that accepts the connection and then never answers (stopped, wedged) ends a worker with 69 within the
/// connection string's `connect_timeout`, start-up exchange included. Needs neither server: the store is opened
/// before ZooKeeper is reached.
#[test]
fn stalled_postgres_ends_a_worker_within_its_connect_timeout() {
    // The kernel completes the TCP handshake from the listen backlog; nobody ever accepts, reads or writes.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = stalled.local_addr().expect("local address").port();
    let pg = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=1");
    let t0 = Instant::now();
    let mut w = Worker::start("stalled", &["127.0.0.1:1", &pg, "worker", "--wait-ms", "1000"]);
    let status = w.wait_exit(PATIENCE);
    let took = t0.elapsed();
    let stderr = w.stderr_after_exit();
    assert_eq!(status.code(), Some(69), "exit status {status}; stderr: {stderr}");
    assert!(
        stderr.contains("did not accept the connection and set up the store within 1 s"),
        "stderr: {stderr}"
    );
    // connect_timeout=1 is the bound, not the 10 s default (nor no bound at all).
    assert!(took < Duration::from_secs(6), "the worker gave up after {took:?}");
    drop(stalled);
    eprintln!("the worker gave up after {took:?}");
}
