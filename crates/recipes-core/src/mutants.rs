//! Switches that re-introduce bugs this library once had, one at a time, so that the model checker and the tests
//! can show that they find each of them.
//!
//! Compiled to nothing (every switch reads `false`, and nothing reads the environment) unless the compiler is given
//! `--cfg recipes_mutants` (`RUSTFLAGS="--cfg recipes_mutants"`, as `scripts/test` sets it): no Cargo feature or
//! profile turns them on, so no build of an application, a release or `zklock` contains them (decision 0053). Even
//! then every switch is off until a test turns it on for its own thread, or, for a child process (`zklock` in the
//! fault campaign), names it in the environment variable `RECIPES_MUTANTS`.
//!
//! Not part of the API: for the project's own tests. Without the cfg, [`set`] refuses to switch a mutant on: a test
//! that needs them fails with a message that says how to build them in.

/// A bug that once was (or nearly was) in the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mutant {
    /// The in-memory backend applies a request under whatever session is current when the request reaches the
    /// server, not the session it was issued for (a release could then delete the next holder's node).
    UnboundRequests,
    /// `lost()` watches whatever node now carries the lock node's name, without comparing its creation id.
    LostIgnoresCzxid,
    /// Re-entering a reentrant lock (or downgrading) succeeds even after the lock was lost.
    ReentryIgnoresLoss,
    /// When the decision cannot find our own node, the driver forgets it instead of deleting it by its path.
    MissingForgetsNode,
    /// The kazoo layout does not parse the sequences ZooKeeper writes from -999999999 to -1.
    KazooNineDigits,
    /// Recipes ignore lock nodes of other recipes and layouts on their path.
    NoForeignCheck,
    /// The acquire cleanup ignores a create whose reply is outstanding (it may still land on the server).
    CleanupIgnoresInFlight,
    /// The ZooKeeper backend extends the lease on any answered request, reads answered by a follower cut off from
    /// the leader included.
    LeaseFromReads,
    /// The ZooKeeper backend's lease keeps the session timeout of the first connection (a reconnection may
    /// renegotiate a shorter one).
    FirstTimeoutOnly,
    /// `zklock` gives the command a fixed 3 s between SIGTERM and SIGKILL when the lock is at risk, whatever the
    /// session's margin.
    FixedTermGrace,
    /// `zklock` signals only the command's process group (processes that left it survive).
    GroupOnlyStop,
    /// After a lost reply, the driver reads (to recover a create, or to check a fixed-name node before deleting it)
    /// without a `sync` first, on a server that may not show the lost request's effect yet.
    NoSyncAfterLostReply,
    /// `zklock` gives the watchdog no kill deadline: a `zklock` that is stopped (SIGSTOP, Ctrl-Z) leaves its command
    /// running past the lease.
    NoKillDeadline,
    /// The ZooKeeper backend applies the session timeouts the servers grant only once every server has answered
    /// (one server that does not answer holds the shorter timeout back for the connect timeout).
    ProbeRoundAtOnce,
    /// `lost()` sleeps until the end of the lease it read, and the backend does not wake it when the lease moves
    /// back (a shorter timeout after a reconnection goes unnoticed).
    LostSleepsToLeaseEnd,
    /// An acquire hands out a guard without making its lease current first: a claim that waited on a watch event
    /// while the session's own requests held back its evidence returns a guard that is not valid.
    NoLeaseConfirm,
    /// A reader's release hands the lock over within the session too, though other sessions' readers may hold beside
    /// it: a writer of the session waiting on the reader holds while another session's reader still does (found by
    /// review: no configuration of the checker had another session's reader ahead).
    ReadersHandOver,
    /// A semaphore's claim holds when the permits claimed ahead of it are fewer than the count, whatever its own
    /// weight: a claim on several permits goes in when one is free, and more permits than the count are out.
    PermitOverGrant,
    /// The kazoo-layout semaphore trusts the count it made under the mutex: it lets the mutex go once it has
    /// counted, and does not count again with its create. Two clients then count the same free permit.
    KazooCountOnly,
    /// A waiter in line takes any data change of its blocker for the `first` mark, as before revocation: a revoked
    /// reader's `__REVOKE__` then lets the writer behind it in when that reader goes, beside the readers ahead.
    AnyDataChangeIsMark,
    /// A waiter in line still takes a change of its blocker's data for a sign that the blocker held after reading
    /// the data back as something other than the `first` mark (an operator's write over a waiting node, Curator's
    /// `Revoker`): when that waiting node goes, the waiter gets in beside the holder (found by review).
    TrustForeignWrites,
    /// A waiter of a `Locks` built with `foreign_writes` still takes a change of its blocker's data, with the blocker
    /// gone when it reads it back, for the blocker's hold (the default's rule): a request to let go written into a
    /// waiting node whose acquire is then given up lets the waiter behind in beside the holder (found by review,
    /// helper-96).
    ForeignWritesTrusted,
    /// Not a bug, a cost: built with `foreign_writes`, a release still sends the `first` mark with its delete, which
    /// no waiter can read back, and whose change the waiter behind reads back for nothing (found by review,
    /// helper-97).
    MarkSentUnread,
    /// A waiter in line holds on its blocker's deletion after a disconnection during its wait, trusting that its own
    /// node's deletion, had there been one, was reported first: after a reconnection ZooKeeper reports the changes
    /// of the re-registered watches in the order of the re-registration, not of the changes (found by review).
    TrustAcrossReconnection,
    /// The multi-lock hands out its set without checking that every member is still held on one live session: a
    /// member taken on a session that then expired (while another member's try hid the expiry) is handed out lost.
    MultiHandsOutLost,
    /// The Curator-layout semaphore checks its permit count before it takes its mutex, not after: the container
    /// reaper can remove the emptied path in between, the mutex's own path creation makes it again without a count,
    /// and a client of another count writes its own.
    CountCheckedBeforeMutex,
    /// Not a bug: no same-session handoff (a waiter ignores the release of a task of its own session and waits for
    /// the deletion's watch event), so that a test can show what the handoff changes.
    NoHandoff,
    /// A cohort passes its node to the next local task however many holds the node has had: a waiter of another
    /// session queued behind the node waits for as long as the process's tasks keep asking (it starves).
    CohortUnbounded,
    /// A task of a cohort takes a pass of the node without looking at its lease again: the session may have ended
    /// between the pass and the taker's turn (found by review: the acquire returned a guard known lost).
    CohortPassUnchecked,
    /// Not a bug: every waiter that came to hold the lock marks itself `first`, not only one behind a long queue,
    /// so that the model checker explores the marking optimisation with a few clients.
    AlwaysMark,
    /// Not a bug: a node that marks itself `first` writes the mark as soon as it holds, in a write of its own, as
    /// before decision 0064, instead of in its release's transaction (a test shows what each costs a drain).
    MarkWhenHeld,
    /// A release whose transaction (the `first` mark and the delete) is refused for the mark alone (the node's ACL
    /// lets its owner delete it but not write it) fails, and leaves the node behind (found by review of decision
    /// 0064: every waiter then waited on a lock nobody held).
    MarkRefusalKeepsNode,
    /// An election's observer names the first node of a peer layout's queue even when a sequence has wrapped (found by
    /// review: it reported a newcomer whose wrapped node sorts first as the leader, then the older leader again).
    ObserverIgnoresWrap,
    /// A holder trusts its hold (a leader its term) for three session timeouts from its lease's base instead of
    /// less than one: the check of the term against the session's lease switched off, in effect, for an election's
    /// sensitivity check (a leader cut off past its session goes on leading beside the next one).
    TermPastLease,
    /// On a backend that orders children by creation (etcd), a waiter orders the listing by name instead of taking
    /// its order: a contender whose attempt id sorts first holds, whenever it came.
    CreationOrderIgnored,
    /// A release of a shared name (the fixed node, etcd's key named by its session) reads the node and deletes it by
    /// name even where the backend can condition the delete on the node's creation (found by review, helper-49: an
    /// operator's delete and a session-mate's create between the read and the delete had the release delete the mate's
    /// key, and another session held beside the mate).
    ReleaseByNameAlone,
    /// A waiter in line takes its scout's deletion (the node ahead of its blocker) for a sign that nothing is ahead of
    /// the blocker any more, without listing again: a scout that was cancelled, or whose session expired, while
    /// others still waited ahead of it lets the waiter in beside the holder once its blocker goes too.
    ScoutMeansFirst,
    /// A wait uses the blocker's watch kept through its scout's list whatever blocker the list named (found by review,
    /// helper-89): when the blocker gives up while that list is in flight, the list names the holder as the blocker,
    /// first, and the kept watch, fired by the old blocker's deletion, lets the waiter in beside the holder.
    KeptWatchOfAnotherBlocker,
    /// A wait that uses the blocker's watch kept through its scout's list compares the session's state with its state
    /// at the reuse, not at the watch's arming (found by review, helper-89): a disconnection in between goes unseen,
    /// and the blocker's deletion, which ZooKeeper may report out of order after the reconnection, is trusted.
    KeptWatchFreshState,
    /// Not a bug: no scout (a waiter whose blocker is not first lists again only after the blocker's deletion, on the
    /// handoff's critical path, as before the scout), so that a test can show what the scout changes.
    NoScout,
    /// Not a bug: a release that hands the lock to a task of its session deletes its node without the mark its
    /// release would write (as before decision 0080), so that a test can show what the mark changes: a contender
    /// whose scout is the node lists the whole queue.
    HandoffDeletesBare,
    /// Not a bug: no view of the queue (every waiter in line keeps one-shot watches of its own, as before decision
    /// 0085), so that a test can show what the view changes.
    NoViews,
    /// Not a bug: a session's waiters go through its view from the second in line on, not the 128th, so that the
    /// model checker's configurations and the tests of a few tasks meet the view.
    ViewsFromTwo,
    /// A waiter in the session's view ignores what the view tells of its own node, as if the view stood in for the
    /// blocker's watch alone: an operator's delete of our node is missed, and the waiter holds with its node gone once
    /// its blocker goes, beside whoever came to hold behind it.
    ViewIgnoresOwn,
    /// A waiter in the session's view decides from what the view's task has told it so far, without draining the
    /// watch first (found by review, helper-110): the task may not have run since the event of our node's deletion,
    /// which came before the reply that shows the blocker gone, and the waiter holds with its node gone.
    ViewLags,
    /// Not a bug, a cost: a waiter in line never watches its blocker's deletion alone (as before decision 0092), and
    /// reads the blocker back after every change of its data, so that a test can show what that watch changes.
    NoGoneWatch,
    /// A waiter in line takes its blocker's deletion, told by the watch of its deletion alone, as the end of a hold
    /// after any change of its data, trusted or not: where others may write lock-node data (`foreign_writes`), a
    /// request to let go written over a waiting blocker, then that blocker's deletion, lets it in beside the holder.
    GoneWatchUntrusted,
}

impl Mutant {
    /// The mutant's name, as `RECIPES_MUTANTS` lists it.
    pub fn name(self) -> String {
        format!("{self:?}")
    }
}

#[cfg(recipes_mutants)]
mod on {
    use std::cell::RefCell;

    use super::Mutant;

    thread_local! {
        static ACTIVE: RefCell<Vec<Mutant>> = const { RefCell::new(Vec::new()) };
    }

    /// Whether `m` is switched on for this thread, or for this process by `RECIPES_MUTANTS`.
    pub fn is_active(m: Mutant) -> bool {
        static FROM_ENV: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let env = FROM_ENV.get_or_init(|| {
            std::env::var("RECIPES_MUTANTS")
                .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
                .unwrap_or_default()
        });
        // The names are compared only when the environment lists any: the checker asks millions of times.
        ACTIVE.with(|a| a.borrow().contains(&m)) || (!env.is_empty() && env.contains(&m.name()))
    }

    /// Switches `m` on (or off) for this thread.
    pub fn set(m: Mutant, on: bool) {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            a.retain(|x| *x != m);
            if on {
                a.push(m);
            }
        });
    }
}

#[cfg(recipes_mutants)]
pub use on::{is_active, set};

/// What a test that needs the switches says when they are not compiled in.
#[cfg(not(recipes_mutants))]
const HOW_TO_BUILD: &str = "the mutant switches are compiled out: build with RUSTFLAGS=\"--cfg recipes_mutants\" \
                                (scripts/test sets it)";

#[cfg(not(recipes_mutants))]
mod off {
    use super::{Mutant, HOW_TO_BUILD};

    /// Whether `m` is switched on for this thread (never, without `--cfg recipes_mutants`).
    #[inline(always)]
    pub fn is_active(_m: Mutant) -> bool {
        false
    }

    /// Switches `m` on (or off) for this thread: without `--cfg recipes_mutants`, switching one on panics.
    pub fn set(m: Mutant, on: bool) {
        assert!(!on, "cannot switch {m:?} on: {HOW_TO_BUILD}");
    }
}

#[cfg(not(recipes_mutants))]
pub use off::{is_active, set};
