//! Resources named in configuration: a recipe, or read/write with the side chosen at each call site.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::lock::{Lock, ReadWriteLock};
use crate::path::LockPath;
use crate::recipe::Recipe;

/// What a framework's configuration names for a resource: one recipe, or `read/write`, whose call sites each choose
/// a side ([`Access`]).
///
/// ```
/// use recipes_core::{LockKind, Recipe};
/// assert_eq!("read/write".parse::<LockKind>().unwrap(), LockKind::ReadWrite);
/// assert_eq!("rw".parse::<LockKind>().unwrap(), LockKind::ReadWrite);
/// assert_eq!("fair".parse::<LockKind>().unwrap(), LockKind::Recipe(Recipe::Fair));
/// assert!("fiar".parse::<LockKind>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// One recipe, whatever the call site asks.
    Recipe(Recipe),
    /// A read/write lock: shared access takes the read side, exclusive access the write side.
    ReadWrite,
}

impl LockKind {
    /// The names accepted for [`LockKind::ReadWrite`].
    pub const READ_WRITE_NAMES: [&'static str; 4] = ["read/write", "read-write", "readwrite", "rw"];
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockKind::Recipe(r) => r.fmt(f),
            LockKind::ReadWrite => f.write_str("read/write"),
        }
    }
}

impl FromStr for LockKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        if Self::READ_WRITE_NAMES.contains(&lower.as_str()) {
            return Ok(LockKind::ReadWrite);
        }
        s.parse().map(LockKind::Recipe).map_err(|_| {
            Error::UnknownRecipe(format!(
                "{s} (a resource takes exclusive, fair, reentrant, read, write or read/write)"
            ))
        })
    }
}

/// What a call site needs of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Alone: the write side of a read/write resource.
    Exclusive,
    /// Beside other shared holders: the read side of a read/write resource.
    Shared,
}

/// A resource's lock, chosen at run time from its [`LockKind`], whose call sites each choose the [`Access`] they
/// need. Cheap to clone.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::{Access, Locks};
/// let locks = Locks::new(recipes_mem::MemCluster::new().client());
/// let catalog = locks.resource("/catalog", "read/write".parse().unwrap()).unwrap();
/// let a = catalog.lock(Access::Shared).acquire().await.unwrap();
/// let b = catalog.lock(Access::Shared).try_acquire().await.unwrap(); // readers share
/// assert!(b.is_some());
/// # drop((a, b));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct Resource {
    path: LockPath,
    kind: LockKind,
    inner: Inner,
}

#[derive(Debug, Clone)]
enum Inner {
    One(Arc<dyn Lock>),
    ReadWrite(ReadWriteLock),
}

impl Resource {
    pub(crate) fn one(lock: Arc<dyn Lock>) -> Self {
        Resource {
            path: lock.path().clone(),
            kind: LockKind::Recipe(lock.recipe()),
            inner: Inner::One(lock),
        }
    }

    pub(crate) fn read_write(lock: ReadWriteLock) -> Self {
        Resource {
            path: lock.path().clone(),
            kind: LockKind::ReadWrite,
            inner: Inner::ReadWrite(lock),
        }
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        &self.path
    }

    /// What the configuration named.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The lock a call site takes for `access`: the read or write side of a read/write resource, the one lock of any
    /// other (where shared access is as exclusive as the recipe is).
    pub fn lock(&self, access: Access) -> Arc<dyn Lock> {
        match (&self.inner, access) {
            (Inner::One(lock), _) => lock.clone(),
            (Inner::ReadWrite(rw), Access::Shared) => Arc::new(rw.read()),
            (Inner::ReadWrite(rw), Access::Exclusive) => Arc::new(rw.write()),
        }
    }
}
