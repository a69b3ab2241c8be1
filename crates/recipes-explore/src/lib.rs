//! Explore an application's own use of distributed locks under every interleaving and fault.
//!
//! The code that gets locks wrong is mostly the code that uses them: it writes after the lease ran out, skips the
//! fencing token, takes two locks in opposite orders. An [`Explorer`] runs that code on several simulated processes,
//! each with a session of its own on the in-memory cluster ([`recipes_mem`]), and chooses the order of everything the
//! processes cannot control: which session's request the server applies next, when a reply or a watch event arrives,
//! when virtual time runs, and where a fault strikes (an expired session, a partition, a short disconnection that
//! loses replies in flight, a crash, a delay with requests on the wire). After every step it checks the oracles:
//! the application's own ([`Explorer::check`], and any panic in its code), and the built-in ones ([`Builtin`]).
//!
//! It is the explorer this library's own model checker runs on: the same scheduler, the same in-memory cluster, the
//! same faults, exhaustive within a bound ([`Explorer::exhaustive`]) or by seeded random walks
//! ([`Explorer::random_walks`]). Every failure carries a readable trace and the choices (or the seed) that replay it.
//!
//! # Example: a write after the lease ran out
//!
//! Two processes share a ledger under one lock: process 0 is a slow batch job (its work takes longer than its
//! session timeout), process 1 a quick request handler. Each takes the lock, does its work and writes to a store
//! ([`Store`]) without the fencing token. A partition during the batch job's work lets the server expire its session
//! and the handler take the lock and write; the batch job's late write then lands over the handler's:
//!
//! ```
//! use std::time::Duration;
//! use recipes_explore::{Explorer, Fault};
//!
//! let explorer = Explorer::new("late writer").faults(1, &[Fault::Partition]);
//! let report = explorer.run(|p| async move {
//!     let work = if p.id() == 0 { p.session_timeout() * 2 } else { Duration::ZERO };
//!     let lock = p.locks().fair("/ledger")?;
//!     let guard = p.track(lock.acquire().await?);
//!     tokio::time::sleep(work).await;
//!     p.store().put("balance", format!("written by {}", p.id())).await; // no token: the bug
//!     guard.release().await
//! });
//! let failure = report.expect_failure();
//! assert!(failure.message.contains("had lost the lock"), "{failure}");
//! ```
//!
//! With the token on the read and the write (`p.store().get_fenced("balance", token)`,
//! `put_fenced("balance", value, token)`), the store refuses the late write and every schedule passes:
//! `crates/lock-recipes/examples/explore_late_write.rs` shows both, and the guide's "Testing your application"
//! walks through them.
//!
//! # What the explorer needs of the code it runs
//! - **Determinism:** a schedule must repeat exactly from its choices, so the code runs on the explorer's
//!   current-thread runtime with a paused clock: tokio's timers (virtual time) and tasks are fine; threads, real I/O,
//!   wall-clock time and randomness are not (the search reports a run that did not repeat).
//! - **Tasks:** spawn with [`Process::spawn`], so that a crash of the process stops them.
//! - **Guards:** hand them to the oracles with [`Process::track`] (or [`Process::track_shared`] for read locks and
//!   permits); the oracle of one holder and the store's order of writes see only tracked guards.
//! - **Processes talk through the servers:** the exhaustive search takes two processes' steps to commute unless they
//!   meet at the cluster or the store. A process whose code branches on what another wrote to the shared state
//!   ([`Explorer::state`]) or on [`Process::cluster`] read directly may have orders it never runs; checks may read
//!   both. Random walks have no such reduction.
//! - **`tokio::select!`:** write `biased;`, or tokio picks among ready branches at random and the schedule does not
//!   repeat.

#![warn(missing_docs)]

mod choice;
mod chooser;
mod explorer;
mod oracles;
mod process;
mod report;
mod store;
mod strategy;
mod tracked;
mod world;

use std::time::Duration;

use recipes_mem::MemCluster;

pub use explorer::{Explorer, Setup};
pub use process::{Activity, Process, Schedule};
pub use report::{Failure, Report};
pub use store::{Rejected, Store, Write};
pub use tracked::{Holds, Tracked};

/// A fault the explorer may inject (within [`Explorer::faults`]'s budget per schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The server expires a process's session and the process learns at once (Curator's `KillSession`).
    Expire,
    /// The process is cut off past its session timeout: the server expires its session, and the process learns only
    /// when it reconnects.
    Partition,
    /// The connection breaks for a moment: replies in flight are lost, requests in flight may still land.
    Blip,
    /// The process dies (SIGKILL): its tasks stop, and the server expires its session after the timeout.
    Crash,
    /// An operator deletes a lock node (opt-in: it breaks the lease's promise on purpose).
    OperatorDelete,
    /// Time runs while requests are in flight: a caller's deadline passes with its request on the wire.
    Delay,
    /// An operator, or a peer's tool (Curator's `Revoker`), writes a request to let go into a lock node, waiting or
    /// holding (opt-in, and not in [`ALL`](Fault::ALL): the default settings' contract forbids it; a `Locks` built
    /// with [`foreign_writes`](recipes_core::LocksBuilder::foreign_writes) allows for it).
    OperatorWrite,
}

impl Fault {
    /// Every kind the explorer knows but the operator's write.
    pub const ALL: &'static [Fault] = &[
        Fault::Expire,
        Fault::Partition,
        Fault::Blip,
        Fault::Crash,
        Fault::OperatorDelete,
        Fault::Delay,
    ];

    /// Every kind but the operator's delete and write: the faults a correct application must survive.
    pub const USUAL: &'static [Fault] = &[Fault::Expire, Fault::Partition, Fault::Blip, Fault::Crash, Fault::Delay];
}

/// A built-in oracle ([`Explorer::without`] switches one off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Builtin {
    /// At every step: among the [tracked](Process::track) guards of live processes that are valid
    /// (`is_valid()`), at most one exclusive hold per lock path, and none beside another node's shared hold.
    OneHolder,
    /// At every step: the [`Store`] never accepts a write sent from a hold older than the hold of a write it has
    /// already accepted for the same key (the holds' fencing tokens compared, whether or not the writes carried
    /// them): no write from a holder that had lost the lock lands after its successor's.
    WritesInLockOrder,
    /// At every step: every [`Process::within`] step ends within its limit.
    Deadlines,
    /// At the end: every process that did not crash finished (a deadlock, or a wait that never ends, fails).
    AllFinish,
    /// At the end: no ephemeral node of a live session is left (a lock node leaked by a cancelled or failed step).
    /// It counts every ephemeral node: a program that keeps one on purpose (a registration) switches it off.
    NoNodeLeft,
}

/// What a check sees after a step.
pub struct Step<'a, S> {
    pub(crate) cluster: &'a MemCluster,
    pub(crate) state: &'a S,
    pub(crate) store: &'a Store,
    pub(crate) procs: &'a [world::Proc],
    pub(crate) deleted: &'a [(String, i64)],
    pub(crate) elapsed: Duration,
    pub(crate) at_end: bool,
}

impl<S> Step<'_, S> {
    /// The schedule's cluster (the tree as the server has it now).
    pub fn cluster(&self) -> &MemCluster {
        self.cluster
    }

    /// The schedule's shared state ([`Explorer::state`]).
    pub fn state(&self) -> &S {
        self.state
    }

    /// The simulated store ([`Store::value`], [`Store::writes`]).
    pub fn store(&self) -> &Store {
        self.store
    }

    /// Whether process `i` crashed.
    pub fn crashed(&self, i: usize) -> bool {
        self.procs.get(i).is_some_and(world::Proc::crashed)
    }

    /// The nodes an operator deleted so far: (path, creation id).
    pub fn operator_deletes(&self) -> &[(String, i64)] {
        self.deleted
    }

    /// Virtual time since the schedule began.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Whether the schedule has ended (a check at the end).
    pub fn at_end(&self) -> bool {
        self.at_end
    }
}

/// How a process's program ended, as the trace tells it: `()`, or a `Result` whose error is written into the trace
/// (an error is not a violation: under faults, many are expected; assert what must not happen).
pub trait Ending {
    /// `Some(error)` for an ending worth a line in the trace.
    fn describe(self) -> Option<String>;
}

impl Ending for () {
    fn describe(self) -> Option<String> {
        None
    }
}

impl<T, E: std::fmt::Display> Ending for Result<T, E> {
    fn describe(self) -> Option<String> {
        self.err().map(|e| e.to_string())
    }
}
