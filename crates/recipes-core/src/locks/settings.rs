//! The settings of a [`Locks`]: its builder, the lease margin, and their defaults.

use std::sync::Arc;

use super::Locks;
use crate::backend::Backend;
use crate::driver::Ctx;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::metrics::Counters;

/// How many failed creates one acquire may make by default before giving up (see [`LocksBuilder::max_attempts`]).
pub(super) const DEFAULT_MAX_ATTEMPTS: u32 = 10;
/// How many holds in a row a cohort's node may have by default (see [`LocksBuilder::cohorts`]).
///
/// ```
/// use recipes_core::{Locks, DEFAULT_COHORT_HOLDS};
/// let locks = Locks::builder(recipes_mem::MemCluster::new().client())
///     .cohorts(DEFAULT_COHORT_HOLDS)
///     .build();
/// assert_eq!(locks.cohorts(), Some(32));
/// ```
pub const DEFAULT_COHORT_HOLDS: u32 = 32;

/// The share of the session timeout a lease does not count on (default 0.2): a lock is trusted until
/// `answered_send + session_timeout × (1 − margin)`.
///
/// The server cannot expire the session before `answered_send + session_timeout`; the margin covers the difference
/// between the client's and the server's clock rates, the server's tick granularity, and the time a check takes to
/// act on.
///
/// ```
/// use recipes_core::LeaseMargin;
/// assert!(LeaseMargin::new(0.25).is_ok());
/// assert!(LeaseMargin::new(0.6).is_err()); // no lease could ever be valid (see `new`)
/// assert!(LeaseMargin::new(1.0).is_err());
/// assert!(LeaseMargin::new(f64::NAN).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct LeaseMargin(pub(super) f64);

impl LeaseMargin {
    /// A margin in `[0, 0.5]`. On ZooKeeper the lease counts from evidence a quarter of the timeout old, and the
    /// heartbeat adds up to an eighth more: with a margin above 0.625 no lease could ever be valid, so every acquire
    /// would fail; 0.5 leaves a lease at least an eighth of the timeout long.
    ///
    /// # Notable errors
    /// [`Error::InvalidArgument`] outside that range (or NaN).
    pub fn new(margin: f64) -> Result<Self> {
        if (0.0..=0.5).contains(&margin) {
            Ok(LeaseMargin(margin))
        } else {
            Err(Error::InvalidArgument(format!(
                "lease margin {margin} must be at least 0 and at most 0.5 (above 0.625 no lease on ZooKeeper could \
                 ever be valid)"
            )))
        }
    }

    /// The margin as a fraction.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Default for LeaseMargin {
    fn default() -> Self {
        LeaseMargin(0.2)
    }
}

/// Builds a [`Locks`] with non-default settings.
#[derive(Debug)]
pub struct LocksBuilder {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) layout: Layout,
    pub(super) max_attempts: u32,
    pub(super) lease_margin: LeaseMargin,
    pub(super) metrics_path_label: bool,
    pub(super) cohorts: Option<u32>,
    pub(super) foreign_writes: bool,
}

impl LocksBuilder {
    /// Whether the series recorded through the [`metrics`](crate::metrics) facade carry the lock path as the label
    /// `path` (default `false`: one series per recipe; with it, one per path, which can be many).
    pub fn metrics_path_label(self, on: bool) -> Self {
        LocksBuilder {
            metrics_path_label: on,
            ..self
        }
    }

    /// The lease margin (default [`LeaseMargin::default`], 0.2).
    pub fn lease_margin(self, lease_margin: LeaseMargin) -> Self {
        LocksBuilder { lease_margin, ..self }
    }

    /// The node layout (default [`Layout::Native`]).
    pub fn layout(self, layout: Layout) -> Self {
        LocksBuilder { layout, ..self }
    }

    /// How many failed creates one acquire may make before giving up with [`Error::RetriesExhausted`], when replies
    /// are lost, the parent vanishes or our node is deleted under us (default 10, at least 1). The first create of an
    /// acquire that finds no parent is how a new path is made, and does not count. An exclusive acquire's creates that
    /// found the path gone count only until it finds the lock's node there again (mostly another's: a waiter meets the
    /// container reaper after a release at any number of the handoffs it waits through).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// Cohorts for the fair and read/write locks (default: off): the tasks of this `Locks` that wait for one fair
    /// lock path (or one side of a read/write path) share one place in its queue, one lock node, and a release passes
    /// the lock to the next of them without a request to the store, for at most `max_holds` holds of one node in a
    /// row (at least 1; [`DEFAULT_COHORT_HOLDS`] is 32). Then the node is released and the cohort queues again behind
    /// the other processes' nodes. Readers share their cohort's node instead: a reader joins the node while it holds,
    /// up to `max_holds` holds of it, and the readers past that lead a new node at the back of the queue.
    ///
    /// What changes: the fair lock's order is FIFO among the tasks of the cohort and among processes, but a process
    /// waiting behind a cohort's node now waits for up to `max_holds` holds of that process's tasks instead of one;
    /// the [fencing token](crate::LockGuard::fencing_token) of a passed hold carries its pass, so tokens still
    /// strictly increase. For read/write locks, an owner's first hold of a side goes through the cohort (its
    /// re-entries and a downgrade count on that hold, and a downgraded writer's node is passed only once its read hold
    /// is gone too). The exclusive and reentrant recipes and semaphores are unchanged. A request to
    /// let go ([`Locks::revoke`](crate::Locks::revoke)) ends the passes once a holder of the node has learned of it
    /// ([`LockGuard::revocation_requested`](crate::LockGuard::revocation_requested)); until then, at most the bound. Worth it when
    /// many tasks of one process contend for one path: a local pass costs no round trip (docs/performance.md).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::Locks;
    /// let locks = Locks::builder(recipes_mem::MemCluster::new().client()).cohorts(8).build();
    /// let lock = locks.fair("/queue/head").unwrap();
    /// let first = lock.acquire().await.unwrap();
    /// let next = tokio::spawn({
    ///     let lock = lock.clone();
    ///     async move { lock.acquire().await.unwrap() }
    /// });
    /// let node = first.node().to_owned();
    /// let token = first.fencing_token();
    /// # tokio::task::yield_now().await;
    /// drop(first); // passed to the waiting task: same node, a higher token
    /// let second = next.await.unwrap();
    /// assert_eq!(second.node(), node);
    /// assert!(second.fencing_token() > token);
    /// # });
    /// ```
    pub fn cohorts(self, max_holds: u32) -> Self {
        LocksBuilder {
            cohorts: Some(max_holds.max(1)),
            ..self
        }
    }

    /// Whether something other than this library may write the data of lock nodes on this `Locks`' paths (default
    /// `false`): an operator's `set`, or Curator's `Revoker.attemptRevoke`, which writes its request to let go into
    /// any participant's node, waiting or holding.
    ///
    /// The default trusts the contract of [`info`](crate::info): lock-node data is this library's to write,
    /// and it writes a node's data only once the node holds (its `first` mark, and
    /// [`revoke_node`](crate::Locks::revoke_node)'s request, which refuses a node that waits). So a waiter in a long
    /// queue that sees its blocker's data change, and then finds the blocker gone, holds without listing the queue:
    /// that is what keeps a drain linear (docs/algorithm.md, optimisation 3). A write over a *waiting* node breaks the
    /// contract, and if that node is deleted (its acquire given up, its session ended) before the waiter behind it
    /// reads it back, that waiter would hold beside the holder.
    ///
    /// With `true`, a waiter holds through its blocker's mark only when it reads the mark back, and a change whose node
    /// is gone by then sends it to list the queue again: no foreign write over a queue's node can let two hold. A
    /// release no longer sends the mark with its delete (nobody could read it back), and a drain of a long queue costs
    /// one listing of the queue per handoff (docs/performance.md). Only the native layout on ZooKeeper and in memory
    /// is affected: the peer layouts list again at every wake-up, as their peers do, and on etcd no waiter waits in
    /// line (decision 68).
    ///
    /// Not covered: the exclusive recipe's node (`P/lock`) and etcd's session-named key, which an acquire whose create
    /// reply was lost, or the cleanup of one dropped with its create in flight, recognises by the attempt id in their
    /// data (so [`revoke_node`](crate::Locks::revoke_node) refuses them). A write over one at that moment makes the
    /// acquire take the node for another's, and wait on it until its deadline (until its session ends if it has
    /// none), or the cleanup leave it until its session ends; no two hold.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::Locks;
    /// let locks = Locks::builder(recipes_mem::MemCluster::new().client()).foreign_writes(true).build();
    /// assert!(locks.foreign_writes());
    /// let guard = locks.fair("/shared/with/curator-tools").unwrap().acquire().await.unwrap();
    /// guard.release().await.unwrap();
    /// # });
    /// ```
    pub fn foreign_writes(self, on: bool) -> Self {
        LocksBuilder {
            foreign_writes: on,
            ..self
        }
    }

    /// The `Locks`.
    pub fn build(self) -> Locks {
        Locks {
            ctx: Arc::new(Ctx {
                backend: self.backend,
                layout: self.layout,
                counters: Counters::new(self.metrics_path_label),
                max_attempts: self.max_attempts,
                lease_margin: self.lease_margin.get(),
                foreign_writes: self.foreign_writes,
                handoffs: Default::default(),
                turns: Default::default(),
                views: Default::default(),
            }),
            registry: Arc::default(),
            cohorts: self.cohorts,
        }
    }
}
