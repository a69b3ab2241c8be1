//! The entry point: [`Locks`]; its builder and settings are in `settings`. What every handle on one path shares (an owned path's hold
//! counts, the cohorts of a fair or read/write path) is in `registry`.

use std::sync::Arc;

use crate::backend::Backend;
use crate::driver::Ctx;
use crate::election::Election;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::lock::{ExclusiveLock, FairLock, Lock, Owned, Plain, ReadWriteLock, ReentrantLock};
use crate::metrics::Metrics;
use crate::multi::MultiLock;
use crate::path::LockPath;
use crate::recipe::Recipe;
use crate::resource::{LockKind, Resource};
use crate::semaphore::Semaphore;

mod admin;
mod registry;
mod settings;

use registry::{OwnedPath, Registry};
use settings::DEFAULT_MAX_ATTEMPTS;
pub use settings::{LeaseMargin, LocksBuilder, DEFAULT_COHORT_HOLDS};

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
    /// The holds in a row of a cohort's node, when the tasks of the fair and read/write locks share their place in
    /// line.
    cohorts: Option<u32>,
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
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            lease_margin: LeaseMargin::default(),
            metrics_path_label: false,
            cohorts: None,
            foreign_writes: false,
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

    /// Whether a waiter allows for writes of lock-node data by others (see [`LocksBuilder::foreign_writes`]).
    ///
    /// ```
    /// use recipes_core::Locks;
    /// assert!(!Locks::new(recipes_mem::MemCluster::new().client()).foreign_writes()); // off by default
    /// ```
    pub fn foreign_writes(&self) -> bool {
        self.ctx.foreign_writes
    }

    /// Closes the session: every lock it holds is released at once (the server deletes the session's nodes), and
    /// every later acquire fails with [`Error::Closed`]; guards still alive report their lock lost. Call it before the
    /// process exits — also on the early-return paths (`?`) — so that the next holder does not wait for the session
    /// timeout. It waits a bounded time for the server's confirmation ([`Backend::close`]).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::Locks;
    /// let cluster = recipes_mem::MemCluster::new();
    /// let locks = Locks::new(cluster.client());
    /// let other = Locks::new(cluster.client());
    /// let guard = locks.fair("/jobs/report").unwrap().acquire().await.unwrap();
    /// locks.close().await; // e.g. on the way out of main, with `guard` still alive
    /// assert!(!guard.is_valid());
    /// assert!(other.fair("/jobs/report").unwrap().try_acquire().await.unwrap().is_some());
    /// # });
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the session is closed either way; only the wait for the server's confirmation is cut short.
    pub async fn close(&self) {
        self.ctx.backend.close().await;
    }

    /// [`close`](Locks::close), from code that is not async (a plain `fn main`).
    ///
    /// # Notable errors
    /// [`Error::BlockingInAsync`] when called inside an async runtime (use `close` there).
    pub fn close_blocking(&self) -> Result<()> {
        crate::blocking::block_on(self.close())
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> Metrics {
        self.ctx.counters.snapshot()
    }

    /// `path` as a lock path of this `Locks`: a valid path, in a layout the backend can order.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`]; [`Error::InvalidArgument`] for a layout of ZooKeeper's peers (Curator, kazoo) on a
    /// backend that orders children by creation (etcd), which cannot make their sequential names.
    pub(crate) fn lock_path(&self, path: impl AsRef<str>) -> Result<LockPath> {
        let path = self.registry.path(path.as_ref())?;
        crate::protocol::layout_fits(self.ctx.layout, self.ctx.backend.child_order())?;
        Ok(path)
    }

    /// Refuses `what` in the etcd layout, which is Go's `concurrency.Mutex` and `Election` alone (the package has no
    /// read/write lock and no semaphore).
    fn mutex_only(&self, what: &str) -> Result<()> {
        if self.ctx.layout == Layout::Etcd {
            return Err(Error::InvalidArgument(format!(
                "the etcd layout is etcd's own lock (Go's concurrency.Mutex), which has no {what}: use fair or \
                 reentrant, or the native layout"
            )));
        }
        Ok(())
    }

    /// An [`ExclusiveLock`] at `path`.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`]; [`Error::InvalidArgument`] with a layout other than native.
    pub fn exclusive(&self, path: impl AsRef<str>) -> Result<ExclusiveLock> {
        let path = self.lock_path(path)?;
        if !crate::protocol::Fixed::in_layout(self.ctx.layout) {
            return Err(Error::InvalidArgument(format!(
                "the exclusive recipe has no {} layout (its peers have no such lock): use fair, or the native layout",
                self.ctx.layout
            )));
        }
        Ok(ExclusiveLock::new(Plain::new(self.ctx.clone(), path)))
    }

    /// A [`FairLock`] at `path`.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`].
    pub fn fair(&self, path: impl AsRef<str>) -> Result<FairLock> {
        let path = self.lock_path(path)?;
        let plain = match self.cohorts {
            Some(bound) => {
                let cohort = self.registry.cohort(path, Recipe::Fair, bound);
                Plain::in_cohort(self.ctx.clone(), cohort)
            }
            None => Plain::new(self.ctx.clone(), path),
        };
        Ok(FairLock::new(plain))
    }

    /// An [`Election`] at `path`: candidates stand in a fair lock's queue with their id in their node, and the first
    /// leads (see [`Election`] for an example). Never in a cohort, even when cohorts are on: each candidate has a node
    /// of its own, so that observers see every candidate. In the etcd layout a session has one key per path (as Go's
    /// `Election`): a second candidate of the same session waits until the first's key is gone and then stands behind
    /// whoever stood meanwhile, and observers see only the candidate whose key it is.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`].
    pub fn election(&self, path: impl AsRef<str>) -> Result<Election> {
        Ok(Election::new(self.ctx.clone(), self.lock_path(path)?))
    }

    /// The most holds in a row of a cohort's node, when cohorts are on ([`LocksBuilder::cohorts`]).
    ///
    /// ```
    /// use recipes_core::Locks;
    /// let cluster = recipes_mem::MemCluster::new();
    /// assert_eq!(Locks::new(cluster.client()).cohorts(), None); // off by default
    /// assert_eq!(Locks::builder(cluster.client()).cohorts(0).build().cohorts(), Some(1)); // at least 1
    /// ```
    pub fn cohorts(&self) -> Option<u32> {
        self.cohorts
    }

    /// A [`ReentrantLock`] at `path`; every handle on one path shares its hold counts.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`].
    pub fn reentrant(&self, path: impl AsRef<str>) -> Result<ReentrantLock> {
        let holds = self.registry.holds(OwnedPath::Reentrant(self.lock_path(path)?));
        Ok(ReentrantLock::new(Owned::new(self.ctx.clone(), holds)))
    }

    /// A [`ReadWriteLock`] at `path`; every handle on one path shares its hold counts.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`].
    pub fn read_write(&self, path: impl AsRef<str>) -> Result<ReadWriteLock> {
        let path = self.lock_path(path)?;
        self.mutex_only("read/write lock")?;
        let cohorts = self.cohorts.map(|bound| {
            let side = |recipe| self.registry.cohort(path.clone(), recipe, bound);
            (side(Recipe::Read), side(Recipe::Write))
        });
        let holds = self.registry.holds(OwnedPath::ReadWrite(path));
        Ok(ReadWriteLock::new(self.ctx.clone(), holds, cohorts))
    }

    /// A [`Semaphore`] of `permits` permits at `path`. In the Curator layout it is Curator's `InterProcessSemaphoreV2`
    /// (`path/locks`, `path/leases`), in the kazoo layout kazoo's `Semaphore` (`path-__lock__`, leases under `path`),
    /// interoperating with them on the same paths; those layouts grant one permit per lease (no `acquire_many`).
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`]; [`Error::InvalidArgument`] for zero permits.
    pub fn semaphore(&self, path: impl AsRef<str>, permits: u32) -> Result<Semaphore> {
        let path = self.lock_path(path)?;
        self.mutex_only("semaphore")?;
        Semaphore::new(self.ctx.clone(), path, permits)
    }

    /// A [`MultiLock`] over `members` (path and recipe each, in any order): all of them held at once, or none.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`]; [`Error::InvalidArgument`] for no members, a path listed twice, or a semaphore (take
    /// its permit separately).
    pub fn multi<P: AsRef<str>>(&self, members: impl IntoIterator<Item = (P, Recipe)>) -> Result<MultiLock> {
        let locks = members
            .into_iter()
            .map(|(path, recipe)| self.lock(path, recipe))
            .collect::<Result<Vec<_>>>()?;
        MultiLock::new(locks)
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
            Recipe::Semaphore => {
                return Err(Error::InvalidArgument(format!(
                    "a semaphore (at {}) needs its permit count: use Locks::semaphore(path, permits)",
                    path.as_ref()
                )))
            }
        })
    }

    /// The lock of a resource named in configuration: a recipe, or `read/write` with the side chosen at each call
    /// site ([`Resource::lock`]).
    ///
    /// # Notable errors
    /// As [`lock`](Locks::lock) and [`read_write`](Locks::read_write).
    pub fn resource(&self, path: impl AsRef<str>, kind: LockKind) -> Result<Resource> {
        if kind == LockKind::Recipe(Recipe::Read) {
            // Its call sites asking for exclusive access would share it.
            return Err(Error::InvalidArgument(format!(
                "a resource of kind read (at {}) would let call sites that ask for exclusive access in together: \
                 name it read/write",
                path.as_ref()
            )));
        }
        Ok(match kind {
            LockKind::Recipe(r) => Resource::one(self.lock(path, r)?),
            LockKind::ReadWrite => Resource::read_write(self.read_write(path)?),
        })
    }
}
