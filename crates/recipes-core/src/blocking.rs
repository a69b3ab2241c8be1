//! The blocking API, for code outside async: thread-owned holds and guards that stay on their thread.

use std::marker::PhantomData;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use crate::error::{Error, LostReason, Result};
use crate::guard::LockGuard;
use crate::lock::Lock;

fn runtime() -> Result<Handle> {
    static RT: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("recipes-blocking")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map(|rt| rt.handle().clone())
    .map_err(|e| Error::Backend(format!("could not start the runtime of the blocking API: {e}")))
}

pub(crate) fn block_on<F: std::future::Future>(f: F) -> Result<F::Output> {
    if Handle::try_current().is_ok() {
        return Err(Error::BlockingInAsync);
    }
    Ok(runtime()?.block_on(f))
}

/// A guard of the blocking API. Not `Send`: the hold belongs to the thread that acquired it (reentrant and
/// read/write locks count holds per thread here), so the guard stays on that thread.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct BlockingGuard {
    guard: LockGuard,
    _not_send: PhantomData<*const ()>,
}

impl BlockingGuard {
    /// The guard of the async API behind this one.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// See [`LockGuard::fencing_token`].
    pub fn fencing_token(&self) -> u128 {
        self.guard.fencing_token()
    }

    /// See [`LockGuard::hold_count`].
    pub fn hold_count(&self) -> u32 {
        self.guard.hold_count()
    }

    /// Blocks until the lock is known lost; see [`LockGuard::lost`].
    ///
    /// # Notable errors
    /// [`Error::BlockingInAsync`] when called inside an async runtime.
    pub fn wait_lost(&self) -> Result<LostReason> {
        block_on(self.guard.lost())
    }

    /// Releases the hold; see [`LockGuard::release`].
    ///
    /// # Notable errors
    /// As [`LockGuard::release`], and [`Error::BlockingInAsync`].
    pub fn release(self) -> Result<()> {
        if Handle::try_current().is_ok() {
            return Err(Error::BlockingInAsync);
        }
        block_on(self.guard.release())?
    }
}

/// Blocking forms of the [`Lock`] methods, for every lock. Holds are owned by the calling thread.
///
/// Each call fails with [`Error::BlockingInAsync`] when made inside an async runtime (it would stall it).
///
/// ```
/// use recipes_core::{BlockingLock, Locks};
/// let locks = Locks::new(recipes_mem::MemCluster::new().client());
/// let lock = locks.reentrant("/batch/import").unwrap();
/// let a = lock.acquire_blocking().unwrap();
/// let b = lock.acquire_blocking().unwrap(); // same thread: re-enters
/// assert_eq!(b.hold_count(), 2);
/// b.release().unwrap();
/// a.release().unwrap();
/// ```
pub trait BlockingLock: Lock {
    /// Blocks until the lock is held.
    fn acquire_blocking(&self) -> Result<BlockingGuard> {
        wrap(block_on(self.acquire())??)
    }

    /// Takes the lock if it is free now; never queues.
    fn try_acquire_blocking(&self) -> Result<Option<BlockingGuard>> {
        block_on(self.try_acquire())??.map(wrap).transpose()
    }

    /// Blocks at most `timeout`.
    fn acquire_timeout_blocking(&self, timeout: Duration) -> Result<Option<BlockingGuard>> {
        block_on(self.acquire_timeout(timeout))??.map(wrap).transpose()
    }
}

impl<L: Lock + ?Sized> BlockingLock for L {}

fn wrap(guard: LockGuard) -> Result<BlockingGuard> {
    Ok(BlockingGuard {
        guard,
        _not_send: PhantomData,
    })
}
