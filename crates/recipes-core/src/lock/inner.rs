//! What a recipe type holds: `Plain` (a path for the driver, or its cohort) or `Owned` (the path's hold counts and an
//! owner), each with the one `get` every acquire goes through.

use std::sync::Arc;

use crate::cohort::Cohort;
use crate::driver::{self, Ctx};
use crate::error::Result;
use crate::guard::{LockGuard, Member};
use crate::owner::Owner;
use crate::path::LockPath;
use crate::patience::Patience;
use crate::recipe::Recipe;
use crate::reentrant::{Reentrancy, Side};

/// The hold counts of one owned lock path.
pub(crate) type Holds = Reentrancy<Member>;

/// What a plain (not owned) recipe needs: the driver's context and the path, and the path's cohort when the tasks
/// of this process share their place in line.
#[derive(Debug, Clone)]
pub(crate) struct Plain {
    ctx: Arc<Ctx>,
    path: LockPath,
    cohort: Option<Arc<Cohort>>,
}

impl Plain {
    pub fn new(ctx: Arc<Ctx>, path: LockPath) -> Self {
        Plain {
            ctx,
            path,
            cohort: None,
        }
    }

    /// The fair lock of a cohort: its acquires go through the cohort.
    pub fn in_cohort(ctx: Arc<Ctx>, cohort: Arc<Cohort>) -> Self {
        Plain {
            ctx,
            path: cohort.path().clone(),
            cohort: Some(cohort),
        }
    }

    pub(super) fn path(&self) -> &LockPath {
        &self.path
    }

    pub(super) async fn get(&self, recipe: Recipe, p: Patience) -> Result<Option<LockGuard>> {
        if let Some(cohort) = &self.cohort {
            return cohort.acquire(&self.ctx, p).await;
        }
        let held = driver::acquire(&self.ctx, &self.path, recipe, p).await?;
        Ok(held.map(LockGuard::plain))
    }

    /// A plain recipe has no owner: the same lock.
    pub(super) fn with_owner(&self, _owner: Owner) -> Self {
        self.clone()
    }
}

/// An owned recipe's handle: the path's hold counts, and the owner it acquires for (`None`: the current task or
/// thread at each acquire).
#[derive(Debug, Clone)]
pub(crate) struct Owned {
    ctx: Arc<Ctx>,
    pub(super) holds: Arc<Holds>,
    owner: Option<Owner>,
    /// The cohort of this side of the path, when the owners of this process share their place in line.
    cohort: Option<Arc<Cohort>>,
}

impl Owned {
    pub fn new(ctx: Arc<Ctx>, holds: Arc<Holds>) -> Self {
        Owned {
            ctx,
            holds,
            owner: None,
            cohort: None,
        }
    }

    /// An owner's first hold goes through `cohort` (one side of a read/write lock).
    pub fn in_cohort(self, cohort: Option<Arc<Cohort>>) -> Self {
        Owned { cohort, ..self }
    }

    pub(super) fn path(&self) -> &LockPath {
        self.holds.path()
    }

    pub(super) async fn get(&self, recipe: Recipe, p: Patience) -> Result<Option<LockGuard>> {
        let side = if recipe == Recipe::Read {
            Side::Shared
        } else {
            Side::Exclusive
        };
        let owner = self.owner.unwrap_or_else(Owner::current);
        let (ctx, path, cohort) = (&self.ctx, self.holds.path(), &self.cohort);
        let first = || async move {
            Ok(match cohort {
                // Boxed: the cohort's future beside the driver's would make every owned acquire carry both.
                Some(c) => Box::pin(c.enter(ctx, p)).await?.map(Member::in_cohort),
                None => driver::acquire(ctx, path, recipe, p).await?.map(Member::alone),
            })
        };
        let hold = self.holds.acquire(side, owner, p, first).await?;
        Ok(hold.map(LockGuard::counted))
    }

    pub(super) fn with_owner(&self, owner: Owner) -> Self {
        Owned {
            owner: Some(owner),
            ..self.clone()
        }
    }
}
