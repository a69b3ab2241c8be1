//! What a recipe type holds: `Plain` (a path for the driver, or its cohort) or `Owned` (the path's hold counts and an
//! owner), each with the one `get` every acquire goes through.

use std::future::Future;
use std::sync::Arc;

use futures::future::{Either, FutureExt};

use crate::cohort::{Cohort, CohortHold};
use crate::driver::{self, Ctx, HeldNode};
use crate::error::{LostReason, Result};
use crate::guard::LockGuard;
use crate::owner::Owner;
use crate::path::LockPath;
use crate::patience::Patience;
use crate::recipe::Recipe;
use crate::reentrant::{Reentrancy, Revocable, Side};

/// The hold counts of one owned lock path.
pub(crate) type Holds = Reentrancy<Member>;

/// One owner's node in an owned recipe (reentrant, read/write): a node of its own, or its hold of a cohort's node.
/// Its holds and downgraded side share it; when the last goes, so does the cohort hold (passing the node on).
#[derive(Debug)]
pub(crate) enum Member {
    Alone(Arc<HeldNode>),
    Cohort(CohortHold),
}

impl Member {
    fn alone(node: HeldNode) -> Self {
        Member::Alone(Arc::new(node))
    }

    /// The node the owner's holds count on.
    pub fn node(&self) -> &Arc<HeldNode> {
        match self {
            Member::Alone(n) => n,
            Member::Cohort(c) => c.node(),
        }
    }

    /// The owner's hold of its cohort's node, if any.
    pub fn cohort(&self) -> Option<&CohortHold> {
        match self {
            Member::Alone(_) => None,
            Member::Cohort(c) => Some(c),
        }
    }
}

impl Revocable for Member {
    fn lost_now(&self) -> Option<LostReason> {
        self.node().lost_now()
    }
}

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

    /// Not an `async fn`: one would wrap the driver's future in one more layer, made and moved in at its first poll.
    pub(super) fn get(
        &self,
        recipe: Recipe,
        p: Patience,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        match &self.cohort {
            Some(cohort) => Either::Left(cohort.acquire(&self.ctx, p)),
            None => Either::Right(
                driver::acquire(&self.ctx, &self.path, recipe, p).map(|held| Ok(held?.map(LockGuard::plain))),
            ),
        }
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
                Some(c) => Box::pin(c.enter(ctx, p)).await?.map(Member::Cohort),
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
