//! The generic reentrancy layer: per-owner hold counts over lock nodes, shared by every handle on one path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::driver::{self, Ctx, HeldNode, Patience, Target};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::layout::NodeKind;
use crate::mutants::{is_active, Mutant};
use crate::owner::Owner;
use crate::path::LockPath;

/// Which side of an owned lock a hold is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The reentrant mutex, or the write side.
    Exclusive,
    /// The read side.
    Shared,
}

#[derive(Debug)]
enum Slot {
    /// The owner's first acquire is in flight; others of the same owner wait for it.
    Pending(watch::Receiver<()>),
    Held {
        count: u32,
        node: Arc<HeldNode>,
    },
}

#[derive(Debug, Default)]
struct Slots {
    exclusive: HashMap<Owner, Slot>,
    shared: HashMap<Owner, Slot>,
}

impl Slots {
    fn side(&mut self, side: Side) -> &mut HashMap<Owner, Slot> {
        match side {
            Side::Exclusive => &mut self.exclusive,
            Side::Shared => &mut self.shared,
        }
    }

    fn pending(&self, owner: &Owner) -> Option<watch::Receiver<()>> {
        [&self.exclusive, &self.shared]
            .into_iter()
            .find_map(|m| match m.get(owner) {
                Some(Slot::Pending(rx)) => Some(rx.clone()),
                _ => None,
            })
    }
}

/// The per-path state of a reentrant lock or a read/write lock, shared by every handle on that path made from one
/// [`Locks`](crate::Locks) value.
///
/// # Contract
/// - At most one owner has an `exclusive` slot held at a time (the distributed lock guarantees it); any number
///   may hold `shared` slots.
/// - A `Held` slot's count equals the number of live guards counted against it.
/// - A node is deleted when the last reference to it goes: a downgraded read hold shares the write node, which
///   therefore stays until both sides are released.
#[derive(Debug)]
pub(crate) struct OwnedCore {
    pub ctx: Arc<Ctx>,
    pub path: LockPath,
    /// Whether this is a read/write lock (else a reentrant mutex).
    pub read_write: bool,
    slots: Mutex<Slots>,
}

struct PendingSlot<'a> {
    core: &'a OwnedCore,
    side: Side,
    owner: Owner,
    _wake: watch::Sender<()>,
}

impl Drop for PendingSlot<'_> {
    fn drop(&mut self) {
        let mut slots = self.core.lock();
        if matches!(slots.side(self.side).get(&self.owner), Some(Slot::Pending(_))) {
            slots.side(self.side).remove(&self.owner);
        }
        // Dropping the sender wakes every waiter of the same owner.
    }
}

impl OwnedCore {
    pub fn new(ctx: Arc<Ctx>, path: LockPath, read_write: bool) -> Self {
        OwnedCore {
            ctx,
            path,
            read_write,
            slots: Mutex::new(Slots::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn target(&self, side: Side) -> (Target, &'static str) {
        match (self.read_write, side) {
            (false, _) => (Target::Queue(NodeKind::Lock), "reentrant"),
            (true, Side::Exclusive) => (Target::Queue(NodeKind::Write), "write"),
            (true, Side::Shared) => (Target::Queue(NodeKind::Read), "read"),
        }
    }

    /// How many holds `owner` has on `side`.
    pub fn count(&self, side: Side, owner: &Owner) -> u32 {
        match self.lock().side(side).get(owner) {
            Some(Slot::Held { count, .. }) => *count,
            _ => 0,
        }
    }

    /// A hold may be re-entered (or downgraded) only while its lock is valid: after a loss, another client may
    /// hold the lock, and a new hold would be a second holder.
    fn check_not_lost(&self, node: &HeldNode) -> Result<()> {
        match node.lost_now() {
            Some(reason) if !is_active(Mutant::ReentryIgnoresLoss) => Err(Error::LockLost {
                path: self.path.to_string(),
                reason,
            }),
            _ => Ok(()),
        }
    }

    fn overflow(&self) -> Error {
        Error::CountOverflow(self.path.to_string())
    }

    /// Acquires `side` for `owner`: re-enters an existing hold, downgrades from a write hold, or queues a node.
    pub async fn acquire(self: &Arc<Self>, side: Side, owner: Owner, patience: Patience) -> Result<Option<LockGuard>> {
        let wake = loop {
            let waiting_for = {
                let mut slots = self.lock();
                if let Some(rx) = slots.pending(&owner) {
                    rx
                } else {
                    if let Some(Slot::Held { count, node }) = slots.side(side).get_mut(&owner) {
                        self.check_not_lost(node)?;
                        *count = count.checked_add(1).ok_or_else(|| self.overflow())?;
                        return Ok(Some(LockGuard::counted(node.clone(), self.clone(), side, owner)));
                    }
                    match side {
                        Side::Exclusive if self.read_write && slots.shared.contains_key(&owner) => {
                            return Err(Error::UpgradeRefused(self.path.to_string()));
                        }
                        Side::Shared => {
                            if let Some(Slot::Held { node, .. }) = slots.exclusive.get(&owner) {
                                self.check_not_lost(node)?;
                                // Downgrade: the write node backs the read hold. A new read node would sort behind
                                // any writer already queued, which would then hold beside us.
                                let node = node.clone();
                                slots.shared.insert(
                                    owner,
                                    Slot::Held {
                                        count: 1,
                                        node: node.clone(),
                                    },
                                );
                                return Ok(Some(LockGuard::counted(node, self.clone(), side, owner)));
                            }
                        }
                        Side::Exclusive => {}
                    }
                    let (tx, rx) = watch::channel(());
                    slots.side(side).insert(owner, Slot::Pending(rx));
                    break tx;
                }
            };
            // Another task of the same owner is acquiring: wait for it, then look again.
            let mut rx = waiting_for;
            match patience {
                Patience::TryOnce => return Ok(None),
                Patience::Until(d) => {
                    if tokio::time::timeout_at(d, rx.changed()).await.is_err() {
                        return Ok(None);
                    }
                }
                Patience::Forever => {
                    let _ = rx.changed().await;
                }
            }
        };
        let pending = PendingSlot {
            core: self,
            side,
            owner,
            _wake: wake,
        };
        let (target, recipe) = self.target(side);
        let node = match driver::acquire(&self.ctx, &self.path, target, recipe, patience).await? {
            Some(n) => Arc::new(n),
            None => return Ok(None),
        };
        self.lock().side(side).insert(
            owner,
            Slot::Held {
                count: 1,
                node: node.clone(),
            },
        );
        drop(pending);
        Ok(Some(LockGuard::counted(node, self.clone(), side, owner)))
    }

    /// Counts one hold of `owner` on `side` as released.
    pub fn unhold(&self, side: Side, owner: &Owner, node: &Arc<HeldNode>) {
        let mut slots = self.lock();
        let map = slots.side(side);
        if let Some(Slot::Held { count, node: n }) = map.get_mut(owner) {
            if Arc::ptr_eq(n, node) {
                *count -= 1;
                if *count == 0 {
                    map.remove(owner);
                }
            }
        }
    }

    /// Test hook: sets the hold count of an existing hold (to test overflow without 2³² acquires).
    pub fn force_count(&self, side: Side, owner: &Owner, value: u32) {
        if let Some(Slot::Held { count, .. }) = self.lock().side(side).get_mut(owner) {
            *count = value;
        }
    }
}
