//! The owned guard every acquire returns.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::SessionId;
use crate::cohort::CohortHold;
use crate::driver::HeldNode;
use crate::error::{LostReason, Result};
use crate::lock::Member;
use crate::owner::Owner;
use crate::path::LockPath;
use crate::reentrant::Hold;

/// Proof that a lock is held. Owned (`'static`) and `Send`: it may move between tasks.
///
/// The lock is released by [`release`](LockGuard::release), which reports errors, or when the guard is dropped,
/// in the background. For reentrant and read/write locks, each guard is one hold of its owner: the lock node is
/// deleted when the owner's last guard goes.
///
/// # Contract
/// - [`fencing_token`](LockGuard::fencing_token) strictly increases across successive holders of one path.
/// - A guard is released at most once: `release` consumes it, so a second release does not compile:
///
/// ```compile_fail
/// # async fn f(g: recipes_core::LockGuard) {
/// let _ = g.release().await;
/// let _ = g.release().await; // error: use of moved value
/// # }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    node: Arc<HeldNode>,
    share: Share,
}

/// How a guard shares its node.
#[derive(Debug)]
enum Share {
    /// The node is this guard's alone.
    Alone,
    /// For the owned recipes (reentrant, read/write), the hold this guard counts; it counts itself out when dropped.
    Counted(Hold<Member>),
    /// One local hold of a cohort's node; when dropped, it passes the node to the next task of the cohort or lets it
    /// go.
    Cohort(CohortHold),
}

impl LockGuard {
    pub(crate) fn plain(node: HeldNode) -> Self {
        LockGuard {
            node: Arc::new(node),
            share: Share::Alone,
        }
    }

    pub(crate) fn counted(hold: Hold<Member>) -> Self {
        LockGuard {
            node: hold.node().node().clone(),
            share: Share::Counted(hold),
        }
    }

    pub(crate) fn in_cohort(hold: CohortHold) -> Self {
        LockGuard {
            node: hold.node().clone(),
            share: Share::Cohort(hold),
        }
    }

    /// The cohort hold this guard counts on, if any (its own, or its owner's).
    fn cohort_hold(&self) -> Option<&CohortHold> {
        match &self.share {
            Share::Cohort(c) => Some(c),
            Share::Counted(h) => h.node().cohort(),
            Share::Alone => None,
        }
    }

    /// The hold's pass of its node: 0 but for the second and later holds of a cohort's node.
    fn pass(&self) -> u32 {
        self.cohort_hold().map_or(0, CohortHold::pass)
    }

    fn counted_hold(&self) -> Option<&Hold<Member>> {
        match &self.share {
            Share::Counted(h) => Some(h),
            _ => None,
        }
    }

    fn held(&self) -> &HeldNode {
        &self.node
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        &self.held().path
    }

    /// The full path of the lock node that holds the lock.
    pub fn node(&self) -> &str {
        &self.held().node
    }

    /// A number that strictly increases across successive holders of this path: the node's creation id times 2³²,
    /// plus the hold's pass of the node (0, but for the second and later holds of a
    /// [cohort](crate::LocksBuilder::cohorts)'s node, which the tasks of one process pass among themselves).
    ///
    /// Pass it to every downstream store the lock protects and have the store reject any write carrying a token
    /// lower than the highest it has seen: that stops a holder that was paused past its lease from doing damage.
    ///
    /// ```
    /// # tokio_test_block_on(async {
    /// use recipes_core::Locks;
    /// use recipes_mem::MemCluster;
    /// let cluster = MemCluster::new();
    /// let locks = Locks::new(cluster.client());
    /// let lock = locks.fair("/jobs/report").unwrap();
    /// let first = lock.acquire().await.unwrap();
    /// let t1 = first.fencing_token();
    /// first.release().await.unwrap();
    /// let second = lock.acquire().await.unwrap();
    /// assert!(second.fencing_token() > t1);
    /// # });
    /// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    /// # }
    /// ```
    pub fn fencing_token(&self) -> u128 {
        token(self.held().czxid, self.pass())
    }

    /// The session the lock node belongs to.
    pub fn session_id(&self) -> SessionId {
        self.held().session
    }

    /// The owner of this hold (`None` for the non-reentrant recipes).
    pub fn owner(&self) -> Option<Owner> {
        self.counted_hold().map(Hold::owner)
    }

    /// How many holds this guard's owner has on this side of the lock (1 for the non-reentrant recipes).
    pub fn hold_count(&self) -> u32 {
        self.counted_hold().map_or(1, Hold::count)
    }

    /// Until when the lock is known valid: the send time of the last request of its session that the server
    /// answered, plus the session timeout less the [lease margin](crate::LeaseMargin). Every answered request or
    /// heartbeat pushes it forward; nothing else does. `None` once the session is gone.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::Locks;
    /// let locks = Locks::new(recipes_mem::MemCluster::new().client());
    /// let guard = locks.fair("/ledger").unwrap().acquire().await.unwrap();
    /// let until = guard.valid_until().expect("session alive");
    /// assert!(until > tokio::time::Instant::now());
    /// assert!(guard.is_valid());
    /// # drop(guard);
    /// # });
    /// ```
    pub fn valid_until(&self) -> Option<Instant> {
        self.held().valid_until()
    }

    /// Whether the lease is valid now. Cheap and synchronous: check it before each protected step.
    pub fn is_valid(&self) -> bool {
        self.is_valid_for(Duration::ZERO)
    }

    /// Whether the lease stays valid for at least `budget` from now (for a step that takes that long).
    pub fn is_valid_for(&self, budget: Duration) -> bool {
        self.valid_until().is_some_and(|t| Instant::now() + budget < t)
    }

    /// Runs `op` under the lock's lease: checks validity (and does not run `op` when the lease is gone), runs it,
    /// checks again, and calls `rollback` with the result when the lease ran out in between. `Ok` means the lease held
    /// from before `op` started until after it ended: commit. (It is [`guarded_steps`](LockGuard::guarded_steps)
    /// with a commit that only hands the result back.)
    ///
    /// This does not depend on any callback being scheduled in time: the checks read the lease on the clock.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::{GuardedError, Locks};
    /// let locks = Locks::new(recipes_mem::MemCluster::new().client());
    /// let guard = locks.fair("/accounts/7").unwrap().acquire().await.unwrap();
    /// let mut balance = 100;
    /// let before = balance;
    /// let r = guard
    ///     .guarded(
    ///         || async { balance -= 30; Ok::<_, std::io::Error>(balance) },
    ///         |_| async { /* restore `before` here */ },
    ///     )
    ///     .await;
    /// assert_eq!(r.unwrap(), 70);
    /// # let _ = before; drop(guard);
    /// # });
    /// ```
    ///
    /// # Notable errors
    /// [`GuardedError::NotRun`], [`GuardedError::RolledBack`], [`GuardedError::Failed`].
    ///
    /// # Cancel safety
    /// Dropping the future drops `op` or `rollback` wherever they are; nothing is committed by this method.
    pub async fn guarded<T, E, F, Fut, R, RFut>(&self, op: F, rollback: R) -> Result<T, GuardedError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        R: FnOnce(T) -> RFut,
        RFut: Future<Output = ()>,
    {
        let commit = |out| async move { Ok(out) };
        self.guarded_steps(op, commit, rollback).await
    }

    /// The three-step form: `prepare` does the work and returns what `commit` or `rollback` need (the saved
    /// pre-operation state, a transaction); `commit` runs only if the lease is still valid after `prepare`,
    /// otherwise `rollback` does.
    ///
    /// # Notable errors
    /// [`GuardedError::NotRun`] (lease gone before `prepare`), [`GuardedError::RolledBack`] (lease ran out during
    /// `prepare`), [`GuardedError::Failed`] (`prepare` or `commit` failed).
    ///
    /// # Cancel safety
    /// As [`guarded`](LockGuard::guarded).
    pub async fn guarded_steps<P, T, E, Fp, FutP, Fc, FutC, Fr, FutR>(
        &self,
        prepare: Fp,
        commit: Fc,
        rollback: Fr,
    ) -> Result<T, GuardedError<E>>
    where
        Fp: FnOnce() -> FutP,
        FutP: Future<Output = Result<P, E>>,
        Fc: FnOnce(P) -> FutC,
        FutC: Future<Output = Result<T, E>>,
        Fr: FnOnce(P) -> FutR,
        FutR: Future<Output = ()>,
    {
        if !self.is_valid() {
            return Err(GuardedError::NotRun);
        }
        let prepared = prepare().await.map_err(GuardedError::Failed)?;
        if !self.is_valid() {
            rollback(prepared).await;
            return Err(GuardedError::RolledBack);
        }
        commit(prepared).await.map_err(GuardedError::Failed)
    }

    /// Resolves when the lock is known lost: its session expired, its node was deleted by someone else, or its
    /// lease ran out (see [`LostReason`]).
    ///
    /// It needs no callback of the application to be scheduled: await it beside the protected work (for example in
    /// `tokio::select!`) and stop the work when it resolves. It reads the lease on the clock, so it fires when the
    /// server stops answering even while the client still believes it is connected.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future only drops a watch registration.
    pub async fn lost(&self) -> LostReason {
        self.held().lost().await
    }

    /// Resolves when another client asks this holder to let go ([`Locks::revoke`](crate::Locks::revoke), Curator's
    /// `Revoker.attemptRevoke`, `zklock revoke`): the lock node's data was set to
    /// [`REVOKE_MESSAGE`](crate::REVOKE_MESSAGE), Curator's revocation protocol. Revocation is a request, not a
    /// loss: the lock stays held until the holder releases it. Await it beside the work, as [`lost`](LockGuard::lost).
    ///
    /// [`Locks::revoke`](crate::Locks::revoke) refuses the exclusive recipe's fixed node; a request written there by
    /// another tool (Curator's `Revoker`, `zkCli set`) still reaches its holder, whose release still deletes it (a
    /// held node is known by its creation id, not its data).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::Locks;
    /// let cluster = recipes_mem::MemCluster::new();
    /// let (holder, other) = (Locks::new(cluster.client()), Locks::new(cluster.client()));
    /// let guard = holder.fair("/reports/nightly")?.acquire().await?;
    /// let asked = other.revoke("/reports/nightly").await?;
    /// assert_eq!(asked.len(), 1);
    /// guard.revocation_requested().await?; // resolves: let go
    /// guard.release().await?;
    /// # Ok::<(), recipes_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Notable errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the node went first (released, deleted);
    /// [`Error::SessionExpired`](crate::Error::SessionExpired) when its session ended;
    /// [`Error::Closed`](crate::Error::Closed) when the application closed it.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future only drops a watch registration.
    pub async fn revocation_requested(&self) -> Result<()> {
        let asked = self.held().revocation_requested().await;
        if let (Ok(()), Some(c)) = (&asked, self.cohort_hold()) {
            // The node is let go after this hold, not passed on (nor joined).
            c.revoked();
        }
        asked
    }

    /// Releases this hold and, when it is the last hold on the lock node, deletes the node.
    ///
    /// # Notable errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the node was already gone (deleted by someone else),
    /// [`Error::SessionExpired`](crate::Error::SessionExpired) when the session that held it ended: in both cases
    /// the lock had been lost before the release. Nothing is deleted that is not ours.
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that dropping the future midway leaves the outcome unknown; the node is then
    /// deleted in the background.
    pub async fn release(self) -> Result<()> {
        // Judged before the await, so that the future keeps only the node through it (a smaller future to move).
        let node = {
            let shared = self.known_loss();
            match self.into_node() {
                Some(n) => n,
                None => return shared,
            }
        };
        node.release().await
    }

    /// What the release of a hold that shares its node (a re-entry, a downgraded side, a reader of a cohort) reports:
    /// a loss known now, as the node's last hold will (`NotHeld` with `Deleted` for a node that `lost()` saw go,
    /// replaced or not; the last hold's delete tells the two apart).
    pub(crate) fn known_loss(&self) -> Result<()> {
        match self.loss_known() {
            Some(LostReason::SessionExpired) => Err(self.session_end()),
            Some(LostReason::NodeDeleted) => Err(crate::Error::NotHeld {
                path: self.path().to_string(),
                why: crate::error::NotHeldReason::Deleted,
            }),
            Some(LostReason::LeaseExpired) | None => Ok(()),
        }
    }

    /// A loss this client knows of and that cannot be undone (the session is over, or `lost()` saw the node go).
    pub(crate) fn loss_known(&self) -> Option<LostReason> {
        self.held().loss_known()
    }

    /// Resolves when this guard's session is over (see `HeldNode::session_over`).
    pub(crate) async fn session_over(&self) {
        self.held().session_over().await;
    }

    /// The error of a call that found this guard's session over (`Closed` after `Locks::close`, else
    /// `SessionExpired`).
    pub(crate) fn session_end(&self) -> crate::Error {
        self.held().session_end()
    }

    /// Counts this guard's hold out, and returns its node when nothing else holds it (no other hold or downgraded
    /// side shares it): the node to delete.
    pub(crate) fn into_node(self) -> Option<HeldNode> {
        let LockGuard { node, share } = self;
        drop(share);
        Arc::into_inner(node)
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("node", &self.node.node)
            .field("fencing_token", &self.fencing_token())
            .field("owner", &self.owner())
            .finish()
    }
}

/// The fencing token of the `pass`-th hold of a node made at `czxid`: the creation id above 32 bits of pass.
pub(crate) fn token(czxid: i64, pass: u32) -> u128 {
    (u128::from(czxid.max(0).unsigned_abs()) << 32) | u128::from(pass)
}

/// Why a guarded operation did not complete under the lock.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GuardedError<E> {
    /// The lease was not valid before the operation: it was not run.
    #[error("the lock's lease is not valid: the operation was not run")]
    NotRun,
    /// The lease ran out while the operation ran: the rollback was called.
    #[error("the lock's lease ran out during the operation: it was rolled back")]
    RolledBack,
    /// The operation (or the commit) failed.
    #[error("the guarded operation failed: {0}")]
    Failed(E),
}
