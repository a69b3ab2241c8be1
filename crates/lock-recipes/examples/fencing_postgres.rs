//! Fencing tokens protecting a real store: workers write to PostgreSQL under a ZooKeeper lock, and the store itself
//! refuses a write whose token is older than one it has already accepted.
//!
//! A lock alone cannot stop a holder that was paused (a GC pause, swapping, a stopped VM) past its session timeout:
//! ZooKeeper expires the session and lets the next holder in, and when the first one resumes it still believes it
//! holds the lock. Its next write is then stale. The guard's lease (`is_valid()`, `guarded_steps`) narrows that
//! window, but a pause can start right after the last check. The fencing token closes it at the store:
//! `guard.fencing_token()` strictly increases across holders of a lock path, and the store keeps the highest token it
//! has accepted per resource and checks it **in the same transaction** as the write.
//!
//! The store is two tables in a schema of their own (created when missing):
//!
//! ```sql
//! CREATE TABLE fence  (resource text PRIMARY KEY, token numeric(39) NOT NULL);   -- the highest token accepted
//! CREATE TABLE ledger (id bigserial PRIMARY KEY, resource text NOT NULL, token numeric(39) NOT NULL,
//!                      worker text NOT NULL, written_at timestamptz NOT NULL DEFAULT now());  -- the writes
//! ```
//!
//! and one write is one transaction: raise the fence to our token unless it is already higher, and only if it
//! accepted us, append to the ledger (`Store::begin_write` below).
//!
//! # Running it
//!
//! It needs a ZooKeeper and a PostgreSQL; `scripts/zk start` and `scripts/pg start` start local ones and print
//! their connect strings on their last line:
//!
//! ```text
//! ZK=$(scripts/zk start --dir /tmp/zk | tail -n 1)
//! PG=$(scripts/pg start --dir /tmp/pg | tail -n 1)     # host=127.0.0.1 port=P user=postgres dbname=postgres
//! cargo run -p lock-recipes --example fencing_postgres -- "$ZK" "$PG"
//! scripts/pg stop --dir /tmp/pg; scripts/zk stop --dir /tmp/zk
//! ```
//!
//! The default mode (`demo`) runs three workers at once, each with its own ZooKeeper session: each takes the lock in
//! turn and writes twice under its token. Then the first worker's token comes back, as if that worker had been paused
//! before a write and resumed after the others: the store rejects it. It prints the ledger at the end.
//!
//! The `worker` mode is one worker per process, for tests and for trying it by hand in several terminals:
//!
//! ```text
//! fencing_postgres ZK PG worker [--resource R] [--worker-name W] [--session-timeout-ms N] [--wait-ms N]
//!                               [--writes N] [--hold-then-write] [--elect ID] [--schema S] [--lock-root P]
//! ```
//!
//! With `--elect ID` the worker is a singleton consumer rather than a lock holder: it stands as candidate `ID` in the
//! election at the resource's path (`locks.election(path).candidate(id).leadership()`), and writes while it leads,
//! under its term, which is the fencing token of its leadership. A paused leader is fenced off exactly as a paused
//! holder is (the test's `paused_leader_is_fenced_off_and_the_next_leader_writes`).
//!
//! It takes the lock, prints `HOLDING token=T`, writes (`WRITE OK token=T`, or `WRITE REJECTED token=T store=S`),
//! releases and exits 0. With `--hold-then-write` it waits for a line on stdin between the two, and then writes
//! *without looking at its lease*: it plays a holder whose last check passed just before a pause, the worst case,
//! which only the store can catch. `tests/tests/suite/fencing_postgres.rs` runs it so: it stops a holder with SIGSTOP past
//! its session timeout, lets a second worker take the lock and write, resumes the first and checks that its write is
//! rejected. Try it by hand: start a holder with `--hold-then-write --session-timeout-ms 2000`, `kill -STOP` it,
//! run a second worker, `kill -CONT` the first and press Enter in its terminal.
//!
//! Real code checks its lease as well, and should: the demo's writes and the worker's without `--hold-then-write` go
//! through `guard.guarded_steps(..)` (`guard.guarded(..)` is the two-step form; `guard.is_valid()` the bare check),
//! which begins a write only while the lease is valid and commits it only if it still is; and long work stops when
//! `guard.lost()` resolves. Those catch most stale holders early. The fence is the last line of defence, for the
//! pause that falls between the last check and the write.
//!
//! Exit codes (sysexits, as `zklock`'s where they overlap): 0 done (a rejected write is an outcome, printed, not a failure of the program),
//! 64 bad usage, 66 stdin closed before the go-ahead of `--hold-then-write`, 69 ZooKeeper or PostgreSQL unreachable
//! (for PostgreSQL: not connected, with the tables made, within the connection string's `connect_timeout`, default
//! 10 s), 70 any other error, 75 the lock was not acquired within `--wait-ms`.

// An example: what it prints is the point.
#![allow(clippy::print_stdout)]

use std::fmt;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use lock_recipes::zookeeper::{ZkBackend, ZkOptions};
use lock_recipes::{Error as LockError, GuardedError, LockGuard, Locks};
use tokio_postgres::{Client, NoTls, Transaction};

const USAGE: &str = "\
usage: fencing_postgres <zk connect> <pg connect> [demo] [--workers N] [OPTIONS]
       fencing_postgres <zk connect> <pg connect> cohort [--workers N] [OPTIONS]
       fencing_postgres <zk connect> <pg connect> worker [--worker-name W] [--session-timeout-ms N] [--wait-ms N]
                        [--writes N] [--hold-then-write] [--elect ID] [OPTIONS]
OPTIONS: [--resource R] [--schema S] [--lock-root P]
  <zk connect>  host:port[,host:port...][/chroot], e.g. 127.0.0.1:2181
  <pg connect>  a libpq connection string, e.g. 'host=127.0.0.1 port=5432 user=postgres dbname=postgres';
                its connect_timeout=N (default 10) bounds connecting and setting up the tables, in seconds
  --resource R          the store's key, and the lock path's last component (default invoice-17)
  --schema S            the schema of the fence and ledger tables, made when missing (default fencing_example)
  --lock-root P         the lock path is P/R (default /fencing-example)
  --workers N           demo: how many workers contend (default 3); cohort: how many tasks of this process
  --worker-name W       worker: the name written to the ledger (default worker-<pid>)
  --session-timeout-ms  worker: the ZooKeeper session timeout asked for (default 10000)
  --wait-ms N           worker: how long to wait for the lock (default 30000; then exit 75)
  --writes N            worker: how many writes under one hold (default 1)
  --hold-then-write     worker: after HOLDING, wait for a line on stdin, then write without checking the lease
  --elect ID            worker: lead the election at the lock path as candidate ID, and write under its term";

/// Why the program stopped; each has its exit code.
#[derive(Debug)]
enum Failure {
    /// Bad arguments (64).
    Usage(String),
    /// `--hold-then-write` got end-of-file instead of its go-ahead (66).
    NoGoAhead,
    /// ZooKeeper or PostgreSQL could not be reached (69).
    Unreachable(String),
    /// The lock was not acquired in time (75).
    WaitRanOut(String),
    /// A lock error other than those (70).
    Lock(LockError),
    /// Anything else (70).
    Internal(String),
    /// A PostgreSQL error (70).
    Store(tokio_postgres::Error),
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => 64,
            Failure::NoGoAhead => 66,
            Failure::Unreachable(_) => 69,
            Failure::Lock(_) | Failure::Store(_) | Failure::Internal(_) => 70,
            Failure::WaitRanOut(_) => 75,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(why) => write!(f, "{why}\n{USAGE}"),
            Failure::NoGoAhead => write!(f, "stdin closed before the go-ahead to write: released without writing"),
            Failure::Unreachable(why) => write!(f, "{why}"),
            Failure::WaitRanOut(path) => write!(f, "the lock {path} was not acquired in time"),
            Failure::Lock(e) => write!(f, "lock error: {e}"),
            Failure::Store(e) => write!(f, "PostgreSQL error: {}", chain(e)),
            Failure::Internal(why) => write!(f, "{why}"),
        }
    }
}

/// An error and its sources, `a: b: c` (tokio-postgres keeps the cause, "connection refused", in a source).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out = format!("{out}: {s}");
        source = s.source();
    }
    out
}

impl From<LockError> for Failure {
    fn from(e: LockError) -> Self {
        match e {
            LockError::Unreachable { .. } => Failure::Unreachable(e.to_string()),
            LockError::InvalidPath { .. } | LockError::InvalidArgument(_) => Failure::Usage(e.to_string()),
            e => Failure::Lock(e),
        }
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Store(e)
    }
}

/// Why a write did not happen.
#[derive(Debug)]
enum WriteError {
    /// The fence holds a newer token: a newer holder has written. The transaction was rolled back.
    Rejected { token: u128, store: u128 },
    /// PostgreSQL failed.
    Db(tokio_postgres::Error),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Rejected { token, store } => {
                write!(f, "rejected: token {token} is older than the store's {store}")
            }
            WriteError::Db(e) => write!(f, "PostgreSQL error: {}", chain(e)),
        }
    }
}

impl From<tokio_postgres::Error> for WriteError {
    fn from(e: tokio_postgres::Error) -> Self {
        WriteError::Db(e)
    }
}

/// The arguments every mode shares.
#[derive(Clone, Debug)]
struct Common {
    zk: String,
    pg: String,
    resource: String,
    schema: String,
    lock_root: String,
}

impl Common {
    fn lock_path(&self) -> String {
        format!("{}/{}", self.lock_root.trim_end_matches('/'), self.resource)
    }
}

/// The `worker` mode's arguments.
#[derive(Clone, Debug)]
struct Worker {
    name: String,
    session_timeout: Duration,
    wait: Duration,
    writes: u32,
    hold_then_write: bool,
    /// Stand as this candidate in the election at the resource's path instead of taking its lock.
    elect: Option<String>,
}

#[derive(Debug)]
enum Mode {
    Help,
    Demo { workers: u32 },
    Cohort { tasks: u32 },
    Worker(Worker),
}

fn parse(args: &[String]) -> Result<(Common, Mode), Failure> {
    let mut common = Common {
        zk: String::new(),
        pg: String::new(),
        resource: "invoice-17".into(),
        schema: "fencing_example".into(),
        lock_root: "/fencing-example".into(),
    };
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok((common, Mode::Help));
    }
    let mut it = args.iter().peekable();
    for (what, field) in [
        ("the ZooKeeper connect string", &mut common.zk),
        ("the PostgreSQL connection string", &mut common.pg),
    ] {
        match it.next() {
            Some(a) if !a.starts_with("--") => *field = a.clone(),
            _ => return Err(Failure::Usage(format!("missing {what}"))),
        }
    }
    let cohort_mode = it.peek().is_some_and(|a| a.as_str() == "cohort");
    let worker_mode = match it.peek().map(|a| a.as_str()) {
        Some("worker") => true,
        Some("demo" | "cohort") | None => false,
        Some(a) if a.starts_with("--") => false, // no mode word: the demo
        Some(a) => return Err(Failure::Usage(format!("unknown mode {a:?} (demo, cohort or worker)"))),
    };
    if it.peek().is_some_and(|a| !a.starts_with("--")) {
        it.next();
    }
    let mut workers = 3;
    let mut worker = Worker {
        name: format!("worker-{}", std::process::id()),
        session_timeout: Duration::from_secs(10),
        wait: Duration::from_secs(30),
        writes: 1,
        hold_then_write: false,
        elect: None,
    };
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| Failure::Usage(format!("{flag} needs a value")))
        };
        let number = |v: String, max: u64| match v.parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(Failure::Usage(format!(
                "{flag} takes a whole number from 1 to {max}, not {v:?}"
            ))),
        };
        match (flag.as_str(), worker_mode) {
            ("--resource", _) => common.resource = value()?,
            ("--schema", _) => common.schema = value()?,
            ("--lock-root", _) => common.lock_root = value()?,
            ("--workers", false) => workers = number(value()?, 100)?,
            ("--worker-name", true) => worker.name = value()?,
            ("--session-timeout-ms", true) => {
                worker.session_timeout = Duration::from_millis(number(value()?, 3_600_000)?);
            }
            ("--wait-ms", true) => worker.wait = Duration::from_millis(number(value()?, 86_400_000)?),
            ("--writes", true) => worker.writes = number(value()?, 1000)? as u32,
            ("--hold-then-write", true) => worker.hold_then_write = true,
            ("--elect", true) => worker.elect = Some(value()?),
            (other, _) => {
                let mode = if worker_mode { "worker" } else { "demo" };
                return Err(Failure::Usage(format!("unknown option {other:?} for the {mode} mode")));
            }
        }
    }
    if common.resource.is_empty() || common.resource.contains('/') {
        return Err(Failure::Usage(format!(
            "--resource must be one path component, not {:?}",
            common.resource
        )));
    }
    // The schema name goes into the SQL text (identifiers cannot be parameters): accept plain identifiers only.
    let s = &common.schema;
    let plain = s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !plain {
        return Err(Failure::Usage(format!(
            "--schema must be a plain lower-case identifier ([a-z_][a-z0-9_]*, at most 63 bytes), not {s:?}"
        )));
    }
    lock_recipes::LockPath::new(common.lock_path())?; // InvalidPath: a usage error (64)
    let mode = if worker_mode {
        Mode::Worker(worker)
    } else if cohort_mode {
        Mode::Cohort { tasks: workers as u32 }
    } else {
        Mode::Demo {
            workers: workers as u32,
        }
    };
    Ok((common, mode))
}

/// How long `Store::open` may take (connect, authenticate, make the tables) when the connection string names no
/// `connect_timeout`.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The store: a PostgreSQL connection and the names of our two tables.
struct Store {
    client: Client,
    schema: String,
}

impl Store {
    /// Connects and makes the schema and tables when missing, all within the connection string's `connect_timeout`
    /// (`OPEN_TIMEOUT` when it names none); past that, `Unreachable` (69).
    ///
    /// tokio-postgres's own `connect_timeout` bounds each TCP connect only: a server that accepts the connection and
    /// then says nothing (stopped with SIGSTOP, overloaded, a wedged proxy in front of it) would hold us in the
    /// start-up exchange, or in the setup statements, for ever. So the whole of it runs under one deadline, as
    /// libpq's `connect_timeout` bounds its whole connection set-up.
    async fn open(pg: &str, schema: &str) -> Result<Store, Failure> {
        let config: tokio_postgres::Config = pg
            .parse()
            .map_err(|e| Failure::Usage(format!("bad PostgreSQL connection string {pg:?}: {e}")))?;
        let bound = config.get_connect_timeout().copied().unwrap_or(OPEN_TIMEOUT);
        match tokio::time::timeout(bound, Store::connect_and_set_up(&config, pg, schema)).await {
            Ok(opened) => opened,
            Err(_) => Err(Failure::Unreachable(format!(
                "PostgreSQL ({pg}) did not accept the connection and set up the store within {} s (stalled or \
                 overloaded? the connection string's connect_timeout=N sets this bound)",
                bound.as_secs_f64()
            ))),
        }
    }

    /// `open` without its deadline.
    async fn connect_and_set_up(config: &tokio_postgres::Config, pg: &str, schema: &str) -> Result<Store, Failure> {
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| Failure::Unreachable(format!("could not connect to PostgreSQL ({pg}): {}", chain(&e))))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("PostgreSQL connection ended: {e}");
            }
        });
        // A writer paused inside its transaction would hold the fence row's lock and block everyone else: PostgreSQL
        // ends such a session after 10 s idle in a transaction (rolling it back). And no write waits for a row lock
        // for ever.
        client
            .batch_execute("SET idle_in_transaction_session_timeout = '10s'; SET lock_timeout = '10s'")
            .await?;
        // Concurrent CREATE ... IF NOT EXISTS can still collide: one maker at a time (a transaction-level advisory
        // lock, released at COMMIT).
        client
            .batch_execute(&format!(
                "BEGIN;
                 SELECT pg_advisory_xact_lock(hashtext('fencing_postgres example setup'));
                 CREATE SCHEMA IF NOT EXISTS {schema};
                 CREATE TABLE IF NOT EXISTS {schema}.fence (
                     resource text PRIMARY KEY,
                     token numeric(39) NOT NULL);
                 CREATE TABLE IF NOT EXISTS {schema}.ledger (
                     id bigserial PRIMARY KEY,
                     resource text NOT NULL,
                     token numeric(39) NOT NULL,
                     worker text NOT NULL,
                     written_at timestamptz NOT NULL DEFAULT now());
                 COMMIT;"
            ))
            .await?;
        Ok(Store {
            client,
            schema: schema.to_owned(),
        })
    }

    /// Begins one write: raises the fence to `token` and appends the ledger row, in one transaction, returned
    /// uncommitted. `Rejected` (rolled back) when the fence holds a newer token.
    ///
    /// The fence accepts a token **at least** as high as its own and rejects only a strictly lower one. Tokens strictly
    /// increase across holders, so a token lower than the fence's is always an older holder's: a newer holder has
    /// written since. An *equal* token is the same holder (the same lock node) writing again under one hold, which
    /// must pass. (Rejecting equal tokens too would allow one write per hold.)
    ///
    /// The `INSERT ... ON CONFLICT DO UPDATE` locks the fence row until the transaction ends, whether the `WHERE`
    /// accepted the token or not: two writers of one resource are serialised there, and between our check and our
    /// commit nobody can raise the fence. So no write with an older token commits after a newer one.
    async fn begin_write(&mut self, resource: &str, token: u128, worker: &str) -> Result<Transaction<'_>, WriteError> {
        // A token is a u128 (a creation id above 32 bits of pass): numeric(39) holds it, sent and read as text.
        let text = token.to_string();
        let tx = self.client.transaction().await?;
        let accepted = tx
            .query_opt(
                &format!(
                    "INSERT INTO {s}.fence (resource, token) VALUES ($1, $2::text::numeric)
                     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
                        WHERE fence.token <= EXCLUDED.token
                     RETURNING token",
                    s = self.schema
                ),
                &[&resource, &text],
            )
            .await?;
        if accepted.is_none() {
            // The row is locked by the INSERT above, so this reads the value that refused us.
            let store: String = tx
                .query_one(
                    &format!("SELECT token::text FROM {}.fence WHERE resource = $1", self.schema),
                    &[&resource],
                )
                .await?
                .try_get(0)?;
            let store = store.parse().unwrap_or(u128::MAX);
            tx.rollback().await?;
            return Err(WriteError::Rejected { token, store });
        }
        tx.execute(
            &format!(
                "INSERT INTO {}.ledger (resource, token, worker) VALUES ($1, $2::text::numeric, $3)",
                self.schema
            ),
            &[&resource, &text, &worker],
        )
        .await?;
        Ok(tx)
    }

    /// One write, committed if the fence accepts it, with no look at any lease: what a holder does when its check of
    /// the lease passed just before it was paused.
    async fn write(&mut self, resource: &str, token: u128, worker: &str) -> Result<(), WriteError> {
        let tx = self.begin_write(resource, token, worker).await?;
        tx.commit().await?;
        Ok(())
    }

    /// One write as real code should do it: under the lease too. `guarded_steps` begins it only while the lease is
    /// valid, and commits it only if the lease is still valid after the work, else rolls it back. The fence stays the
    /// last line of defence, for the pause that starts right after the last check.
    async fn write_guarded(
        &mut self,
        guard: &LockGuard,
        resource: &str,
        worker: &str,
    ) -> Result<(), GuardedError<WriteError>> {
        let token = guard.fencing_token();
        guard
            .guarded_steps(
                || self.begin_write(resource, token, worker),
                |tx| async move { tx.commit().await.map_err(WriteError::Db) },
                |tx| async move {
                    let _ = tx.rollback().await;
                },
            )
            .await
    }

    /// The ledger's rows for `resource` with a token of at least `from`, in the order they were written.
    async fn ledger(&self, resource: &str, from: u128) -> Result<Vec<(String, String, String)>, tokio_postgres::Error> {
        let from = from.to_string();
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT token::text, worker, to_char(written_at, 'HH24:MI:SS.MS') FROM {}.ledger
                      WHERE resource = $1 AND token >= $2::text::numeric ORDER BY id",
                    self.schema
                ),
                &[&resource, &from],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect()
    }

    /// The fence's token for `resource`.
    async fn fence(&self, resource: &str) -> Result<Option<String>, tokio_postgres::Error> {
        let sql = format!("SELECT token::text FROM {}.fence WHERE resource = $1", self.schema);
        match self.client.query_opt(&sql, &[&resource]).await? {
            Some(row) => Ok(Some(row.try_get(0)?)),
            None => Ok(None),
        }
    }
}

/// Prints a line on stdout at once (a test reads it while we wait).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A ZooKeeper session of our own.
async fn connect_locks(zk: &str, session_timeout: Duration) -> Result<Locks, Failure> {
    let backend = ZkBackend::connect(ZkOptions::new(zk).session_timeout(session_timeout)).await?;
    Ok(Locks::new(backend))
}

/// Releases the lock (bounded), saying so when it had been lost already: a rejected holder's had.
async fn release(guard: LockGuard, who: &str) {
    match tokio::time::timeout(Duration::from_secs(10), guard.release()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("{who}: release: {e}"),
        Err(_) => eprintln!("{who}: the release did not finish within 10 s (the session's close ends it)"),
    }
}

/// The `worker` mode: one holder, one process.
async fn worker(common: &Common, w: &Worker) -> Result<(), Failure> {
    let mut store = Store::open(&common.pg, &common.schema).await?;
    let locks = connect_locks(&common.zk, w.session_timeout).await?;
    let result = hold_and_write(&locks, &mut store, common, w).await;
    // On every way out: what the session still holds passes on at once, not after the session timeout.
    locks.close().await;
    result
}

async fn hold_and_write(locks: &Locks, store: &mut Store, common: &Common, w: &Worker) -> Result<(), Failure> {
    let path = common.lock_path();
    let guard = match &w.elect {
        // A singleton consumer: it writes while it leads, under its term (its leadership's fencing token).
        Some(id) => locks
            .election(&path)?
            .candidate(id.clone())?
            .leadership_timeout(w.wait)
            .await?
            .map(|leading| leading.into_guard()),
        None => locks.fair(&path)?.acquire_timeout(w.wait).await?,
    }
    .ok_or_else(|| Failure::WaitRanOut(path.clone()))?;
    let token = guard.fencing_token();
    say(&format!("HOLDING token={token}"));
    if w.hold_then_write {
        // The pause: the test stops us here (SIGSTOP) past the session timeout, then resumes us and sends the line.
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|n| n > 0)
        })
        .await;
        if !matches!(line, Ok(Ok(true))) {
            release(guard, &w.name).await;
            return Err(Failure::NoGoAhead);
        }
    }
    for _ in 0..w.writes {
        // With --hold-then-write the write goes straight to the store, without `is_valid()`: this plays a holder
        // whose last check passed just before its pause, the case only the store can catch. Real code checks the
        // lease as well (the other branch), and stops on `guard.lost()`; the fence is the last line of defence.
        let written = if w.hold_then_write {
            store.write(&common.resource, token, &w.name).await
        } else {
            match store.write_guarded(&guard, &common.resource, &w.name).await {
                Ok(()) => Ok(()),
                Err(GuardedError::Failed(e)) => Err(e),
                Err(GuardedError::NotRun) => {
                    say(&format!("WRITE NOT RUN token={token} (the lease is gone)"));
                    break;
                }
                Err(GuardedError::RolledBack) => {
                    say(&format!(
                        "WRITE ROLLED BACK token={token} (the lease ran out during the write)"
                    ));
                    break;
                }
                Err(e) => {
                    say(&format!("WRITE NOT DONE token={token} ({e})"));
                    break;
                }
            }
        };
        match written {
            Ok(()) => say(&format!("WRITE OK token={token}")),
            Err(WriteError::Rejected { token, store }) => {
                say(&format!("WRITE REJECTED token={token} store={store}"));
                eprintln!(
                    "{}: {} (the lease: {})",
                    w.name,
                    WriteError::Rejected { token, store },
                    if guard.is_valid() { "valid" } else { "gone" }
                );
                break; // fenced off: a newer holder has written; stop
            }
            Err(WriteError::Db(e)) => {
                release(guard, &w.name).await;
                return Err(Failure::Store(e));
            }
        }
    }
    release(guard, &w.name).await;
    Ok(())
}

/// The default mode: contention, fencing and the ledger in one run.
async fn demo(common: &Common, workers: u32) -> Result<(), Failure> {
    let mut store = Store::open(&common.pg, &common.schema).await?;
    let path = common.lock_path();
    println!(
        "{workers} workers, each with its own ZooKeeper session, take the fair lock {path} and write twice to \
         {s}.ledger under their fencing token; {s}.fence keeps the highest token accepted for {r:?}:",
        s = common.schema,
        r = common.resource
    );
    let mut tasks = tokio::task::JoinSet::new();
    for i in 1..=workers {
        let common = common.clone();
        tasks.spawn(async move { demo_worker(&common, &format!("worker-{i}")).await });
    }
    let mut tokens = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(t)) => tokens.push(t),
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(Failure::Internal(format!("a worker task failed: {e}"))),
        }
    }
    tokens.sort_unstable();
    let Some(&(first, ref first_name)) = tokens.first() else {
        return Ok(());
    };
    println!(
        "\n{first_name} again, with its token {first}: as if it had been paused (GC, a stopped VM) before a write and \
         resumed after the others, still believing it holds the lock:"
    );
    match store
        .write(&common.resource, first, &format!("{first_name} (stale)"))
        .await
    {
        Ok(()) => println!("  accepted?! (the fence did not hold)"),
        Err(e @ WriteError::Rejected { .. }) => println!("  {e}"),
        Err(WriteError::Db(e)) => return Err(Failure::Store(e)),
    }
    println!("\nThe ledger for {:?} (this run):", common.resource);
    for (token, worker, at) in store.ledger(&common.resource, first).await? {
        println!("  {at}  token {token:>12}  {worker}");
    }
    if let Some(fence) = store.fence(&common.resource).await? {
        println!("The fence: {fence}");
    }
    Ok(())
}

/// The `cohort` mode: `tasks` tasks of this process share one ZooKeeper session and a cohort of the fair lock
/// (`LocksBuilder::cohorts`): they pass the lock among themselves without a request, each hold with a token of its
/// own (the node's creation id × 2³² + the pass), and each writes under it. Then the first hold's token comes back,
/// as a task paused before its write would: the fence, raised by the later passes of the same node, refuses it.
///
/// Prints `COHORT HOLD task=I token=T`, `WRITE OK token=T` (or `WRITE NOT DONE ...`) per hold, then
/// `STALE WRITE REJECTED token=T store=S` (or `STALE WRITE ACCEPTED token=T`, which would be a bug).
async fn cohort(common: &Common, tasks: u32) -> Result<(), Failure> {
    let backend = ZkBackend::connect(ZkOptions::new(&common.zk).session_timeout(Duration::from_secs(10))).await?;
    let locks = Locks::builder(backend).cohorts(tasks).build();
    let lock = locks.fair(common.lock_path())?;
    // The first task holds before the others ask, so that they queue in the cohort behind it.
    let first = lock.acquire().await?;
    let mut set = tokio::task::JoinSet::new();
    for i in 1..tasks {
        let (lock, common) = (lock.clone(), common.clone());
        set.spawn(async move {
            let mut store = Store::open(&common.pg, &common.schema).await?;
            let guard = lock.acquire().await?;
            cohort_write(&mut store, &guard, &common.resource, i).await?;
            release(guard, &format!("task {i}")).await;
            Ok::<_, Failure>(())
        });
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut store = Store::open(&common.pg, &common.schema).await?;
    let stale = first.fencing_token();
    cohort_write(&mut store, &first, &common.resource, 0).await?;
    release(first, "task 0").await;
    while let Some(done) = set.join_next().await {
        done.map_err(|e| Failure::Internal(format!("a task failed: {e}")))??;
    }
    match store.write(&common.resource, stale, "task 0 (stale)").await {
        Ok(()) => say(&format!("STALE WRITE ACCEPTED token={stale}")),
        Err(WriteError::Rejected { token, store }) => say(&format!("STALE WRITE REJECTED token={token} store={store}")),
        Err(WriteError::Db(e)) => return Err(Failure::Store(e)),
    }
    locks.close().await;
    Ok(())
}

/// One write of a task of the cohort, under its hold's token.
async fn cohort_write(store: &mut Store, guard: &LockGuard, resource: &str, task: u32) -> Result<(), Failure> {
    let token = guard.fencing_token();
    say(&format!("COHORT HOLD task={task} token={token}"));
    match store.write_guarded(guard, resource, &format!("task {task}")).await {
        Ok(()) => say(&format!("WRITE OK token={token}")),
        Err(GuardedError::Failed(WriteError::Db(e))) => return Err(Failure::Store(e)),
        Err(e) => say(&format!("WRITE NOT DONE token={token} ({e})")),
    }
    Ok(())
}

/// One demo worker: its own ZooKeeper session and PostgreSQL connection; the lock, two writes, the release.
async fn demo_worker(common: &Common, name: &str) -> Result<(u128, String), Failure> {
    let mut store = Store::open(&common.pg, &common.schema).await?;
    let locks = connect_locks(&common.zk, Duration::from_secs(10)).await?;
    let result = async {
        let guard = locks.fair(common.lock_path())?.acquire().await?;
        let token = guard.fencing_token();
        println!("  {name} holds the lock, token {token}");
        for n in 1..=2 {
            match store.write_guarded(&guard, &common.resource, name).await {
                Ok(()) => println!("  {name}: write {n} accepted (token {token})"),
                Err(e) => println!("  {name}: write {n} not done: {e}"),
            }
        }
        release(guard, name).await;
        Ok((token, name.to_owned()))
    }
    .await;
    locks.close().await;
    result
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match parse(&args) {
        Ok((_, Mode::Help)) => {
            println!("{USAGE}");
            Ok(())
        }
        Ok((common, Mode::Demo { workers })) => demo(&common, workers).await,
        Ok((common, Mode::Cohort { tasks })) => cohort(&common, tasks).await,
        Ok((common, Mode::Worker(w))) => worker(&common, &w).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fencing_postgres: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
