//! Layer 3: the recipes, the [`Lock`] trait they share, and the [`Locks`] entry point.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::driver::{self, Ctx, Patience, Target};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::layout::{Layout, NodeKind};
use crate::metrics::{Counters, Metrics};
use crate::owner::Owner;
use crate::path::LockPath;
use crate::reentrant::{OwnedCore, Side};

/// A lock recipe, for frameworks that choose the recipe per resource at run time (e.g. from configuration).
///
/// ```
/// use recipes_core::Recipe;
/// assert_eq!("fair".parse::<Recipe>().unwrap(), Recipe::Fair);
/// assert!("fiar".parse::<Recipe>().is_err());
/// assert_eq!(Recipe::Write.to_string(), "write");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recipe {
    /// One fixed ephemeral node; unfair; every waiter wakes on each release (herd). See [`ExclusiveLock`].
    Exclusive,
    /// Sequential nodes, FIFO, each waiter watches only its predecessor. See [`FairLock`].
    Fair,
    /// As fair, and re-entrant per owner. See [`ReentrantLock`].
    Reentrant,
    /// The read side of a read/write lock. See [`ReadLock`].
    Read,
    /// The write side of a read/write lock. See [`WriteLock`].
    Write,
}

impl Recipe {
    /// Every recipe.
    pub const ALL: [Recipe; 5] = [
        Recipe::Exclusive,
        Recipe::Fair,
        Recipe::Reentrant,
        Recipe::Read,
        Recipe::Write,
    ];

    /// The recipe's name, as parsed by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            Recipe::Exclusive => "exclusive",
            Recipe::Fair => "fair",
            Recipe::Reentrant => "reentrant",
            Recipe::Read => "read",
            Recipe::Write => "write",
        }
    }
}

impl fmt::Display for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Recipe {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        Recipe::ALL
            .into_iter()
            .find(|r| r.name() == lower)
            .ok_or_else(|| Error::UnknownRecipe(s.to_owned()))
    }
}

/// What every recipe offers, object safe so frameworks can hold `Arc<dyn Lock>` chosen at run time.
///
/// Each concrete recipe type has inherent methods of the same names, so the trait need not be imported to use
/// them.
#[async_trait]
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
    async fn acquire(&self) -> Result<LockGuard>;

    /// Takes the lock if it is free now; never queues. `None`: someone else holds it (or is ahead in the queue).
    ///
    /// # Cancel safety
    /// As [`acquire`](Lock::acquire).
    async fn try_acquire(&self) -> Result<Option<LockGuard>>;

    /// Waits at most `timeout`. `None`: the time ran out; no node of ours is left behind when it returns.
    ///
    /// # Cancel safety
    /// As [`acquire`](Lock::acquire).
    async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>>;
}

fn patience(timeout: Duration) -> Patience {
    if timeout.is_zero() {
        Patience::TryOnce
    } else {
        // A timeout too long to express as an instant (`Duration::MAX`) is no deadline at all.
        Instant::now()
            .checked_add(timeout)
            .map_or(Patience::Forever, Patience::Until)
    }
}

fn forever(g: Option<LockGuard>) -> Result<LockGuard> {
    g.ok_or_else(|| Error::Backend("internal: an acquire without deadline gave up".into()))
}

/// Implements the shared acquire methods, inherent and for [`Lock`], on a type with
/// `async fn get(&self, Patience) -> Result<Option<LockGuard>>`.
macro_rules! lock_methods {
    ($ty:ty, $recipe:expr) => {
        impl $ty {
            /// The lock path.
            pub fn path(&self) -> &LockPath {
                self.lock_path()
            }

            /// Waits until the lock is held.
            ///
            /// # Notable errors
            /// [`Error::SessionExpired`] when the session ends while waiting; [`Error::RetriesExhausted`] when
            /// the node kept vanishing; [`Error::Closed`].
            ///
            /// # Cancel safety
            /// Cancel safe: dropping the future at any await point leaves no lock node behind (it is deleted in
            /// the background, including a node whose create reply had not arrived yet).
            pub async fn acquire(&self) -> Result<LockGuard> {
                forever(self.get(Patience::Forever).await?)
            }

            /// Takes the lock if it is free now; never queues. `None`: someone else holds it or is ahead.
            ///
            /// # Cancel safety
            /// As [`acquire`](Self::acquire).
            pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
                self.get(Patience::TryOnce).await
            }

            /// Waits at most `timeout` (zero: as [`try_acquire`](Self::try_acquire)). `None`: the time ran out;
            /// our node has been deleted by the time it returns.
            ///
            /// # Cancel safety
            /// As [`acquire`](Self::acquire).
            pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
                self.get(patience(timeout)).await
            }
        }

        #[async_trait]
        impl Lock for $ty {
            fn path(&self) -> &LockPath {
                self.lock_path()
            }
            fn recipe(&self) -> Recipe {
                $recipe
            }
            async fn acquire(&self) -> Result<LockGuard> {
                <$ty>::acquire(self).await
            }
            async fn try_acquire(&self) -> Result<Option<LockGuard>> {
                <$ty>::try_acquire(self).await
            }
            async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
                <$ty>::acquire_timeout(self, timeout).await
            }
        }
    };
}

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
#[derive(Debug, Clone)]
pub struct ExclusiveLock {
    ctx: Arc<Ctx>,
    path: LockPath,
}

impl ExclusiveLock {
    fn lock_path(&self) -> &LockPath {
        &self.path
    }
    async fn get(&self, p: Patience) -> Result<Option<LockGuard>> {
        Ok(
            driver::acquire(&self.ctx, &self.path, Target::Exclusive, "exclusive", p)
                .await?
                .map(LockGuard::plain),
        )
    }
}
lock_methods!(ExclusiveLock, Recipe::Exclusive);

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
#[derive(Debug, Clone)]
pub struct FairLock {
    ctx: Arc<Ctx>,
    path: LockPath,
}

impl FairLock {
    fn lock_path(&self) -> &LockPath {
        &self.path
    }
    async fn get(&self, p: Patience) -> Result<Option<LockGuard>> {
        Ok(
            driver::acquire(&self.ctx, &self.path, Target::Queue(NodeKind::Lock), "fair", p)
                .await?
                .map(LockGuard::plain),
        )
    }
}
lock_methods!(FairLock, Recipe::Fair);

/// The reentrant recipe: the fair lock with per-owner hold counts.
///
/// The owner is the current tokio task, else the current thread, unless fixed with
/// [`with_owner`](ReentrantLock::with_owner) (see [`Owner`] for the id-reuse rule). Holds of the same owner nest;
/// the node is deleted when the owner's last guard goes. A different owner, even in the same process, queues its
/// own node and waits like any other client. Every handle on one path made from one [`Locks`] shares the counts.
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
#[derive(Debug, Clone)]
pub struct ReentrantLock {
    core: Arc<OwnedCore>,
    owner: Option<Owner>,
}

impl ReentrantLock {
    fn lock_path(&self) -> &LockPath {
        &self.core.path
    }
    async fn get(&self, p: Patience) -> Result<Option<LockGuard>> {
        let owner = self.owner.unwrap_or_else(Owner::current);
        self.core.acquire(Side::Exclusive, owner, p).await
    }

    /// This lock with a fixed owner (e.g. an [`OwnerToken`](crate::OwnerToken) for work that moves between tasks).
    pub fn with_owner(&self, owner: Owner) -> Self {
        ReentrantLock {
            core: self.core.clone(),
            owner: Some(owner),
        }
    }

    /// How many holds `owner` has now.
    pub fn hold_count(&self, owner: Owner) -> u32 {
        self.core.count(Side::Exclusive, &owner)
    }

    #[doc(hidden)]
    /// Test hook, not part of the API: sets the hold count of `owner`'s existing hold.
    pub fn __set_hold_count(&self, owner: Owner, count: u32) {
        self.core.force_count(Side::Exclusive, &owner, count);
    }
}
lock_methods!(ReentrantLock, Recipe::Reentrant);

/// The read/write recipe: readers `P/R-<id>-<seq>` share, writers `P/W-<id>-<seq>` exclude everyone; FIFO with
/// respect to writers.
///
/// A reader waits only for the nearest writer queued ahead of it, never for one behind it; a writer waits for its
/// immediate predecessor. Both sides are re-entrant per owner. An owner holding the write side may take the read
/// side (downgrade) and then release the write side; the write node then stays until the read side is released
/// too, so no writer queued meanwhile can slip in beside the downgraded reader. An owner holding the read side that
/// asks for the write side gets [`Error::UpgradeRefused`] at once (waiting would deadlock).
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
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    core: Arc<OwnedCore>,
}

impl ReadWriteLock {
    /// The lock path.
    pub fn path(&self) -> &LockPath {
        &self.core.path
    }

    /// The read side (owner: the current task or thread at each acquire).
    pub fn read(&self) -> ReadLock {
        ReadLock {
            core: self.core.clone(),
            owner: None,
        }
    }

    /// The write side (owner: the current task or thread at each acquire).
    pub fn write(&self) -> WriteLock {
        WriteLock {
            core: self.core.clone(),
            owner: None,
        }
    }
}

/// The read side of a [`ReadWriteLock`].
#[derive(Debug, Clone)]
pub struct ReadLock {
    core: Arc<OwnedCore>,
    owner: Option<Owner>,
}

impl ReadLock {
    fn lock_path(&self) -> &LockPath {
        &self.core.path
    }
    async fn get(&self, p: Patience) -> Result<Option<LockGuard>> {
        let owner = self.owner.unwrap_or_else(Owner::current);
        self.core.acquire(Side::Shared, owner, p).await
    }

    /// This side with a fixed owner.
    pub fn with_owner(&self, owner: Owner) -> Self {
        ReadLock {
            core: self.core.clone(),
            owner: Some(owner),
        }
    }
}
lock_methods!(ReadLock, Recipe::Read);

/// The write side of a [`ReadWriteLock`].
#[derive(Debug, Clone)]
pub struct WriteLock {
    core: Arc<OwnedCore>,
    owner: Option<Owner>,
}

impl WriteLock {
    fn lock_path(&self) -> &LockPath {
        &self.core.path
    }
    async fn get(&self, p: Patience) -> Result<Option<LockGuard>> {
        let owner = self.owner.unwrap_or_else(Owner::current);
        self.core.acquire(Side::Exclusive, owner, p).await
    }

    /// This side with a fixed owner.
    pub fn with_owner(&self, owner: Owner) -> Self {
        WriteLock {
            core: self.core.clone(),
            owner: Some(owner),
        }
    }
}
lock_methods!(WriteLock, Recipe::Write);

type Registry = Mutex<HashMap<(LockPath, bool), Weak<OwnedCore>>>;

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
/// assert!(LeaseMargin::new(1.0).is_err());
/// assert!(LeaseMargin::new(f64::NAN).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct LeaseMargin(f64);

impl LeaseMargin {
    /// A margin in `[0, 1)`.
    ///
    /// # Notable errors
    /// [`Error::InvalidArgument`] outside that range (or NaN).
    pub fn new(margin: f64) -> Result<Self> {
        if (0.0..1.0).contains(&margin) {
            Ok(LeaseMargin(margin))
        } else {
            Err(Error::InvalidArgument(format!(
                "lease margin {margin} must be at least 0 and less than 1"
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

/// The entry point: hands out locks on one backend session.
///
/// Cheap to clone; clones share the session, the counters and the per-path reentrancy state. Make one per
/// process (per backend session) and hand out locks from it.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::{Locks, Recipe};
/// let locks = Locks::new(recipes_mem::MemCluster::new().client());
/// // chosen at run time, e.g. from configuration:
/// let lock = locks.lock("/inventory/sku-1", "write".parse::<Recipe>().unwrap()).unwrap();
/// let guard = lock.acquire().await.unwrap();
/// assert!(guard.fencing_token() > 0);
/// # drop(guard);
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct Locks {
    ctx: Arc<Ctx>,
    registry: Arc<Registry>,
}

/// Builds a [`Locks`] with non-default settings.
#[derive(Debug)]
pub struct LocksBuilder {
    backend: Arc<dyn Backend>,
    layout: Layout,
    max_attempts: u32,
    lease_margin: LeaseMargin,
}

impl LocksBuilder {
    /// The lease margin (default [`LeaseMargin::default`], 0.2).
    pub fn lease_margin(mut self, margin: LeaseMargin) -> Self {
        self.lease_margin = margin;
        self
    }

    /// The node layout (default [`Layout::Native`]).
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// How many creates one acquire may make before giving up with [`Error::RetriesExhausted`], when replies are
    /// lost, the parent vanishes or our node is deleted under us (default 10, at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// The `Locks`.
    pub fn build(self) -> Locks {
        Locks {
            ctx: Arc::new(Ctx {
                backend: self.backend,
                layout: self.layout,
                counters: Counters::default(),
                max_attempts: self.max_attempts,
                lease_margin: self.lease_margin.get(),
            }),
            registry: Arc::default(),
        }
    }
}

impl Locks {
    /// Locks on `backend` with default settings.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Locks::builder(backend).build()
    }

    /// A builder for non-default settings.
    pub fn builder(backend: Arc<dyn Backend>) -> LocksBuilder {
        LocksBuilder {
            backend,
            layout: Layout::Native,
            max_attempts: 10,
            lease_margin: LeaseMargin::default(),
        }
    }

    /// The backend session.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.ctx.backend
    }

    /// The node layout.
    pub fn layout(&self) -> Layout {
        self.ctx.layout
    }

    /// The lease margin.
    pub fn lease_margin(&self) -> LeaseMargin {
        LeaseMargin(self.ctx.lease_margin)
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> Metrics {
        self.ctx.counters.snapshot()
    }

    /// An [`ExclusiveLock`] at `path`.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`]; [`Error::InvalidArgument`] with a layout other than native.
    pub fn exclusive(&self, path: impl AsRef<str>) -> Result<ExclusiveLock> {
        let path = LockPath::new(path)?;
        if self.ctx.layout != Layout::Native {
            return Err(Error::InvalidArgument(format!(
                "the exclusive recipe has no {} layout (its peers have no such lock): use fair, or the native layout",
                self.ctx.layout
            )));
        }
        Ok(ExclusiveLock {
            ctx: self.ctx.clone(),
            path,
        })
    }

    /// A [`FairLock`] at `path`.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`].
    pub fn fair(&self, path: impl AsRef<str>) -> Result<FairLock> {
        Ok(FairLock {
            ctx: self.ctx.clone(),
            path: LockPath::new(path)?,
        })
    }

    /// A [`ReentrantLock`] at `path`; every handle on one path shares its hold counts.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`].
    pub fn reentrant(&self, path: impl AsRef<str>) -> Result<ReentrantLock> {
        Ok(ReentrantLock {
            core: self.core(LockPath::new(path)?, false),
            owner: None,
        })
    }

    /// A [`ReadWriteLock`] at `path`; every handle on one path shares its hold counts.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`].
    pub fn read_write(&self, path: impl AsRef<str>) -> Result<ReadWriteLock> {
        Ok(ReadWriteLock {
            core: self.core(LockPath::new(path)?, true),
        })
    }

    /// The lock for `recipe` at `path`, for recipes chosen at run time.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`].
    pub fn lock(&self, path: impl AsRef<str>, recipe: Recipe) -> Result<Arc<dyn Lock>> {
        Ok(match recipe {
            Recipe::Exclusive => Arc::new(self.exclusive(path)?),
            Recipe::Fair => Arc::new(self.fair(path)?),
            Recipe::Reentrant => Arc::new(self.reentrant(path)?),
            Recipe::Read => Arc::new(self.read_write(path)?.read()),
            Recipe::Write => Arc::new(self.read_write(path)?.write()),
        })
    }

    fn core(&self, path: LockPath, read_write: bool) -> Arc<OwnedCore> {
        let mut reg = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (path, read_write);
        if let Some(core) = reg.get(&key).and_then(Weak::upgrade) {
            return core;
        }
        if reg.len() >= 64 {
            reg.retain(|_, w| w.strong_count() > 0);
        }
        let core = Arc::new(OwnedCore::new(self.ctx.clone(), key.0.clone(), read_write));
        reg.insert(key, Arc::downgrade(&core));
        core
    }
}
