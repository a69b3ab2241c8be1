//! Layer 3: the recipes and the [`Lock`] trait they share.
//!
//! Each recipe is thin: the plain ones (exclusive, fair) are a path and a recipe for the driver; the owned ones
//! (reentrant, read/write) put the generic reentrancy layer in front of the same driver call.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use crate::cohort::Cohort;
use crate::driver::Ctx;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::owner::Owner;
use crate::path::LockPath;
use crate::patience::{forever, Patience};
use crate::recipe::Recipe;
use crate::reentrant::Side;

mod inner;

pub(crate) use inner::{Holds, Member, Owned, Plain};

/// The future a [`Lock`] method returns: boxed, so that the trait stays object safe (`Arc<dyn Lock>`).
pub type LockFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// What every recipe offers, object safe so frameworks can hold `Arc<dyn Lock>` chosen at run time.
///
/// Each concrete recipe type has inherent `async fn`s of the same names, so the trait need not be imported to use
/// them; through the trait each returns a boxed future ([`LockFuture`]).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use recipes_core::{Lock, Locks, OwnerToken, Recipe};
/// let locks = Locks::new(recipes_mem::MemCluster::new().client());
/// let lock: Arc<dyn Lock> = locks.lock("/jobs/7", "reentrant".parse::<Recipe>().unwrap()).unwrap();
/// // Work that moves between tasks holds as one owner:
/// let job = lock.with_owner(OwnerToken::new().into());
/// let outer = job.acquire().await.unwrap();
/// let inner = job.acquire().await.unwrap();
/// assert_eq!(inner.hold_count(), 2);
/// # drop((inner, outer));
/// # });
/// ```
pub trait Lock: Send + Sync + fmt::Debug {
    /// The lock path.
    fn path(&self) -> &LockPath;

    /// The recipe.
    fn recipe(&self) -> Recipe;

    /// Waits until the lock is held.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future at any await point leaves no lock node behind (it is deleted in the
    /// background).
    fn acquire(&self) -> LockFuture<'_, LockGuard>;

    /// Takes the lock if it is free now; never queues. `None`: someone else holds it (or is ahead in the queue).
    ///
    /// # Cancel safety
    /// As [`acquire`](Lock::acquire).
    fn try_acquire(&self) -> LockFuture<'_, Option<LockGuard>>;

    /// Waits at most `timeout`. `None`: the time ran out; no node of ours is left behind when it returns.
    ///
    /// # Cancel safety
    /// As [`acquire`](Lock::acquire).
    fn acquire_timeout(&self, timeout: Duration) -> LockFuture<'_, Option<LockGuard>>;

    /// Not part of the API (the multi-lock's first tries): as [`try_acquire`](Lock::try_acquire), but makes the node
    /// at once, without looking at the queue first, so that a set of free locks costs one round trip. The default is
    /// `try_acquire`.
    #[doc(hidden)]
    fn __try_acquire_eagerly(&self) -> LockFuture<'_, Option<LockGuard>> {
        self.try_acquire()
    }

    /// This lock with a fixed owner, for the owned recipes (reentrant, read, write: holds of one owner nest); the same
    /// lock for the others, which have no owner.
    fn with_owner(&self, owner: Owner) -> Arc<dyn Lock>;
}

/// Declares a recipe type over `Plain` or `Owned`, with the shared acquire methods, inherent and for [`Lock`]; an
/// owned recipe also gets `with_owner`.
macro_rules! recipe_type {
    ($(#[$attr:meta])* $ty:ident: Owned, $recipe:expr) => {
        recipe_type!($(#[$attr])* $ty: Owned = $recipe);
        impl $ty {
            /// This lock with a fixed owner (e.g. an [`OwnerToken`](crate::OwnerToken) for work that moves between
            /// tasks).
            pub fn with_owner(&self, owner: Owner) -> Self {
                $ty { inner: self.inner.with_owner(owner) }
            }
        }
    };
    ($(#[$attr:meta])* $ty:ident: Plain, $recipe:expr) => {
        recipe_type!($(#[$attr])* $ty: Plain = $recipe);
    };
    ($(#[$attr:meta])* $ty:ident: $inner:ident = $recipe:expr) => {
        $(#[$attr])*
        #[derive(Debug, Clone)]
        pub struct $ty {
            inner: $inner,
        }

        impl $ty {
            pub(crate) fn new(inner: $inner) -> Self {
                $ty { inner }
            }

            fn get(&self, p: Patience) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
                self.inner.get($recipe, p)
            }

            /// The lock path.
            pub fn path(&self) -> &LockPath {
                self.inner.path()
            }

            /// Waits until the lock is held.
            ///
            /// # Notable errors
            /// [`Error::SessionExpired`](crate::Error::SessionExpired) when the session ends while waiting;
            /// [`Error::RetriesExhausted`](crate::Error::RetriesExhausted) when the node kept vanishing;
            /// [`Error::Closed`](crate::Error::Closed).
            ///
            /// # Cancel safety
            /// Cancel safe: dropping the future at any await point leaves no lock node behind (it is deleted in
            /// the background, including a node whose create reply had not arrived yet).
            pub fn acquire(&self) -> impl Future<Output = Result<LockGuard>> + Send + '_ {
                // Not an `async fn`: one would wrap the acquire in one more layer, made and moved in at its first poll.
                forever(self.get(Patience::Forever))
            }

            /// Takes the lock if it is free now; never queues. `None`: someone else holds it or is ahead.
            ///
            /// # Notable errors
            /// [`Error::ConnectionLoss`](crate::Error::ConnectionLoss) when the client stayed disconnected (or an etcd
            /// member overloaded) for the try's bound (5 s): a try waits that long for the connection, then cannot
            /// tell whether the lock is free.
            ///
            /// # Cancel safety
            /// As [`acquire`](Self::acquire).
            pub fn try_acquire(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
                self.get(Patience::TryOnce)
            }

            /// Waits at most `timeout` (zero: as [`try_acquire`](Self::try_acquire)). `None`: the time ran out;
            /// our node has been deleted by the time it returns.
            ///
            /// # Cancel safety
            /// As [`acquire`](Self::acquire).
            pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
                self.get(Patience::from_timeout(timeout)).await
            }
        }

        impl Lock for $ty {
            fn path(&self) -> &LockPath {
                self.inner.path()
            }
            fn recipe(&self) -> Recipe {
                $recipe
            }
            fn acquire(&self) -> LockFuture<'_, LockGuard> {
                Box::pin(<$ty>::acquire(self))
            }
            fn try_acquire(&self) -> LockFuture<'_, Option<LockGuard>> {
                Box::pin(<$ty>::try_acquire(self))
            }
            fn acquire_timeout(&self, timeout: Duration) -> LockFuture<'_, Option<LockGuard>> {
                Box::pin(<$ty>::acquire_timeout(self, timeout))
            }
            fn __try_acquire_eagerly(&self) -> LockFuture<'_, Option<LockGuard>> {
                Box::pin(self.get(Patience::TryEagerly))
            }
            fn with_owner(&self, owner: Owner) -> Arc<dyn Lock> {
                Arc::new(<$ty>::new(self.inner.with_owner(owner)))
            }
        }
    };
}

recipe_type!(
/// The exclusive recipe: one fixed ephemeral node `P/lock`.
///
/// Simple and cheap when uncontended (one create, one delete), but **unfair** (whoever creates first after a
/// release wins) and with a **herd effect**: every waiter watches the one node, so each release wakes all of them
/// and all of them race to create it again. Prefer [`FairLock`] when more than a few clients contend. Not
/// re-entrant: a second acquire by the same task waits for itself (use a timeout, or [`ReentrantLock`]).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::Locks;
/// let locks = Locks::new(recipes_mem::MemCluster::new().client());
/// let lock = locks.exclusive("/cron/nightly").unwrap();
/// let guard = lock.acquire().await.unwrap();
/// assert!(lock.try_acquire().await.unwrap().is_none());
/// guard.release().await.unwrap();
/// # });
/// ```
ExclusiveLock: Plain, Recipe::Exclusive
);

recipe_type!(
/// The fair recipe: ephemeral-sequential nodes `P/L-<id>-<seq>`, granted in FIFO order (guaranteed).
///
/// Each waiter watches only its immediate predecessor, so a release wakes exactly one waiter. Not re-entrant.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::Locks;
/// let locks = Locks::new(recipes_mem::MemCluster::new().client());
/// let guard = locks.fair("/orders/42").unwrap().acquire().await.unwrap();
/// assert!(guard.node().starts_with("/orders/42/L-"));
/// # drop(guard);
/// # });
/// ```
FairLock: Plain, Recipe::Fair
);

recipe_type!(
/// The reentrant recipe: the fair lock with per-owner hold counts.
///
/// The owner is the current tokio task, else the current thread, unless fixed with
/// [`with_owner`](ReentrantLock::with_owner) (see [`Owner`] for the id-reuse rule). Holds of the same owner nest;
/// the node is deleted when the owner's last guard goes. A different owner, even in the same process, queues its
/// own node and waits like any other client. Every handle on one path made from one [`Locks`](crate::Locks) shares the counts.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::{Locks, OwnerToken};
/// let locks = Locks::new(recipes_mem::MemCluster::new().client());
/// let lock = locks.reentrant("/accounts/7").unwrap().with_owner(OwnerToken::new().into());
/// let outer = lock.acquire().await.unwrap();
/// let inner = lock.acquire().await.unwrap();
/// assert_eq!(inner.hold_count(), 2);
/// assert_eq!(inner.node(), outer.node());
/// inner.release().await.unwrap();
/// outer.release().await.unwrap();
/// # });
/// ```
ReentrantLock: Owned, Recipe::Reentrant
);

impl ReentrantLock {
    /// How many holds `owner` has now.
    pub fn hold_count(&self, owner: Owner) -> u32 {
        self.inner.holds.count(Side::Exclusive, &owner)
    }

    /// Test hook (feature `test-util`), not part of the API: sets the hold count of `owner`'s existing hold.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub fn __set_hold_count(&self, owner: Owner, count: u32) {
        self.inner.holds.force_count(Side::Exclusive, &owner, count);
    }
}

/// The read/write recipe: readers `P/R-<id>-<seq>` share, writers `P/W-<id>-<seq>` exclude everyone; FIFO with
/// respect to writers.
///
/// A reader waits only for the nearest writer queued ahead of it, never for one behind it; a writer waits for its
/// immediate predecessor. Both sides are re-entrant per owner. An owner holding the write side may take the read
/// side (downgrade) and then release the write side; the write node then stays until the read side is released
/// too, so no writer queued meanwhile can slip in beside the downgraded reader. An owner holding the read side that
/// asks for the write side gets [`Error::UpgradeRefused`](crate::Error::UpgradeRefused) at once (waiting would deadlock).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::Locks;
/// let locks = Locks::new(recipes_mem::MemCluster::new().client());
/// let rw = locks.read_write("/catalog").unwrap();
/// let w = rw.write().acquire().await.unwrap();
/// let r = rw.read().acquire().await.unwrap(); // downgrade
/// w.release().await.unwrap();
/// assert!(matches!(rw.write().acquire().await, Err(recipes_core::Error::UpgradeRefused(_))));
/// r.release().await.unwrap();
/// # });
/// ```
///
/// With [cohorts](crate::LocksBuilder::cohorts), the readers of one process share one node, and its writers pass
/// theirs among themselves (decision 0062):
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::Locks;
/// let locks = Locks::builder(recipes_mem::MemCluster::new().client()).cohorts(8).build();
/// let read = locks.read_write("/catalog").unwrap().read();
/// let first = read.acquire().await.unwrap();
/// // Another task (another owner) of this process joins the node the cohort holds.
/// let second = tokio::spawn({
///     let read = read.clone();
///     async move { read.acquire().await.unwrap() }
/// })
/// .await
/// .unwrap();
/// assert_eq!(second.node(), first.node());
/// assert!(second.fencing_token() > first.fencing_token());
/// # drop((first, second));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    ctx: Arc<Ctx>,
    holds: Arc<Holds>,
    /// The read side's cohort and the write side's, when cohorts are on.
    cohorts: Option<(Arc<Cohort>, Arc<Cohort>)>,
}

impl ReadWriteLock {
    pub(crate) fn new(ctx: Arc<Ctx>, holds: Arc<Holds>, cohorts: Option<(Arc<Cohort>, Arc<Cohort>)>) -> Self {
        ReadWriteLock { ctx, holds, cohorts }
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        self.holds.path()
    }

    /// The read side (owner: the current task or thread at each acquire).
    pub fn read(&self) -> ReadLock {
        let cohort = self.cohorts.as_ref().map(|(read, _)| read.clone());
        ReadLock::new(Owned::new(self.ctx.clone(), self.holds.clone()).in_cohort(cohort))
    }

    /// The write side (owner: the current task or thread at each acquire).
    pub fn write(&self) -> WriteLock {
        let cohort = self.cohorts.as_ref().map(|(_, write)| write.clone());
        WriteLock::new(Owned::new(self.ctx.clone(), self.holds.clone()).in_cohort(cohort))
    }
}

recipe_type!(
/// The read side of a [`ReadWriteLock`].
ReadLock: Owned, Recipe::Read
);

recipe_type!(
/// The write side of a [`ReadWriteLock`].
WriteLock: Owned, Recipe::Write
);
