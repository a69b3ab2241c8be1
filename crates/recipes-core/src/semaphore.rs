//! The semaphore: up to `permits` holders at once, granted in queue order, on the one driver.

use std::sync::Arc;
use std::time::Duration;

use crate::driver::{self, Claim, Ctx};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock::{Lock, LockFuture};
use crate::owner::Owner;
use crate::path::LockPath;
use crate::patience::{forever, Patience};
use crate::recipe::Recipe;

/// A counting semaphore: at most [`permits`](Semaphore::permits) permits held at once across every client, granted
/// in the order they were asked for (a claim on several waits its turn; nobody behind it overtakes it).
///
/// Each claim is one ephemeral sequential node `P/S-<id>-<seq>` (`P/S-<id>-<n>-<seq>` for `n` permits at once). The
/// claims ahead of a node and its own add up to at most `permits`: it holds. Otherwise it watches only the few nodes
/// right ahead of it whose deletion can let it in (at most `permits` of them: see
/// [`permit_window`](crate::protocol::permit_window)), never the whole queue. The permit count is stored once, as the
/// data of `P`, by the client that makes it; a client asking with another count gets
/// [`Error::PermitsMismatch`](crate::Error::PermitsMismatch) instead of over-granting.
///
/// In the Curator and kazoo layouts it is their peers' semaphore on their paths (Curator's `InterProcessSemaphoreV2`,
/// kazoo's `Semaphore`): a mutex taken to make and count one lease, one permit per lease
/// ([`acquire_many`](Semaphore::acquire_many) above 1 is refused), interoperating with the peers' processes.
///
/// Each permit is a [`LockGuard`] like a lock's: [`lost`](LockGuard::lost), [`is_valid`](LockGuard::is_valid), a
/// fencing token (unique among the semaphore's claims, increasing in the order they were made), release with its
/// outcome; acquires are cancel safe and leave no node behind.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::Locks;
/// let cluster = recipes_mem::MemCluster::new();
/// let (a, b) = (Locks::new(cluster.client()), Locks::new(cluster.client()));
/// let deploys = a.semaphore("/fleet/deploys", 2)?;
/// let one = deploys.acquire().await?;
/// let two = b.semaphore("/fleet/deploys", 2)?.acquire().await?;
/// assert!(deploys.try_acquire().await?.is_none()); // both permits are out
/// assert!(matches!(b.semaphore("/fleet/deploys", 3)?.try_acquire().await, Err(recipes_core::Error::PermitsMismatch { .. })));
/// one.release().await?;
/// let both = deploys.acquire_many_timeout(2, std::time::Duration::from_millis(50)).await?;
/// assert!(both.is_none()); // one permit is still out, and a claim on two waits for both
/// # drop(two);
/// # Ok::<(), recipes_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    ctx: Arc<Ctx>,
    path: LockPath,
    permits: u32,
}

impl Semaphore {
    pub(crate) fn new(ctx: Arc<Ctx>, path: LockPath, permits: u32) -> Result<Self> {
        if permits == 0 {
            return Err(Error::InvalidArgument(format!(
                "a semaphore (at {path}) needs at least one permit"
            )));
        }
        Ok(Semaphore { ctx, path, permits })
    }

    /// The semaphore's path.
    pub fn path(&self) -> &LockPath {
        &self.path
    }

    /// How many permits may be held at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    async fn get(&self, n: u32, p: Patience) -> Result<Option<LockGuard>> {
        if n == 0 || n > self.permits {
            return Err(Error::InvalidArgument(format!(
                "a claim on {n} permits of the semaphore at {} (of {}) could never hold: claim from 1 to {}",
                self.path, self.permits, self.permits
            )));
        }
        let held = driver::acquire_claim(&self.ctx, &self.path, Claim::permits(self.permits, n), p).await?;
        Ok(held.map(LockGuard::plain))
    }

    /// Waits for one permit.
    ///
    /// # Notable errors
    /// [`Error::PermitsMismatch`] when the path stores another permit count; [`Error::ForeignLock`] when a lock's
    /// nodes are on the path; [`Error::SessionExpired`], [`Error::RetriesExhausted`], [`Error::Closed`] as for the
    /// locks.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves no node behind.
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.acquire_many(1).await
    }

    /// Takes one permit if one is free now and nobody is queued ahead; never queues.
    ///
    /// # Notable errors
    /// As [`acquire`](Semaphore::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.get(1, Patience::TryOnce).await
    }

    /// Waits at most `timeout` for one permit (zero: as [`try_acquire`](Semaphore::try_acquire)). `None`: the time
    /// ran out, and our node is gone.
    ///
    /// # Notable errors
    /// As [`acquire`](Semaphore::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.get(1, Patience::from_timeout(timeout)).await
    }

    /// Waits for `n` permits at once, all or nothing: one node claims them all, so a claim never holds some of its
    /// permits while it waits for the rest.
    ///
    /// # Notable errors
    /// [`Error::InvalidArgument`] when `n` is 0 or more than [`permits`](Semaphore::permits); otherwise as
    /// [`acquire`](Semaphore::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn acquire_many(&self, n: u32) -> Result<LockGuard> {
        forever(self.get(n, Patience::Forever)).await
    }

    /// As [`acquire_many`](Semaphore::acquire_many), if the `n` permits are free now and nobody is queued ahead.
    ///
    /// # Notable errors
    /// As [`acquire_many`](Semaphore::acquire_many).
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn try_acquire_many(&self, n: u32) -> Result<Option<LockGuard>> {
        self.get(n, Patience::TryOnce).await
    }

    /// As [`acquire_many`](Semaphore::acquire_many), waiting at most `timeout`.
    ///
    /// # Notable errors
    /// As [`acquire_many`](Semaphore::acquire_many).
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn acquire_many_timeout(&self, n: u32, timeout: Duration) -> Result<Option<LockGuard>> {
        self.get(n, Patience::from_timeout(timeout)).await
    }
}

/// A semaphore is a [`Lock`] whose acquires take one permit, for frameworks that hold `Arc<dyn Lock>`.
impl Lock for Semaphore {
    fn path(&self) -> &LockPath {
        &self.path
    }
    fn recipe(&self) -> Recipe {
        Recipe::Semaphore
    }
    fn acquire(&self) -> LockFuture<'_, LockGuard> {
        Box::pin(Semaphore::acquire(self))
    }
    fn try_acquire(&self) -> LockFuture<'_, Option<LockGuard>> {
        Box::pin(Semaphore::try_acquire(self))
    }
    fn acquire_timeout(&self, timeout: Duration) -> LockFuture<'_, Option<LockGuard>> {
        Box::pin(Semaphore::acquire_timeout(self, timeout))
    }
    fn __try_acquire_eagerly(&self) -> LockFuture<'_, Option<LockGuard>> {
        Box::pin(self.get(1, Patience::TryEagerly))
    }
    fn with_owner(&self, _owner: Owner) -> Arc<dyn Lock> {
        Arc::new(self.clone())
    }
}
