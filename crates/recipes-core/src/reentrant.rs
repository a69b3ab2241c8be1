//! The generic reentrancy layer, in the manner of lock_api's `ReentrantMutex` over a raw mutex: per-owner hold counts
//! over a node that some inner acquire makes, shared by every handle on one path.
//!
//! The layer does not know how a node is made or released: [`Reentrancy::acquire`] takes the inner (first-hold)
//! acquire as a closure, and a node is released when the last [`Hold`] on it (and every other reference) goes.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;

use crate::error::{Error, LostReason, Result};
use crate::mutants::{is_active, Mutant};
use crate::owner::Owner;
use crate::path::LockPath;
use crate::patience::Patience;

/// A held node that may be lost: re-entering it is refused once it is.
pub(crate) trait Revocable: Send + Sync {
    /// Why the node cannot be trusted now, or `None` while it can.
    fn lost_now(&self) -> Option<LostReason>;
}

/// Which side of an owned lock a hold is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The reentrant mutex, or the write side.
    Exclusive,
    /// The read side.
    Shared,
}

#[derive(Debug)]
enum Slot<N> {
    /// The owner's first acquire is in flight; others of the same owner wait for it.
    Pending(watch::Receiver<()>),
    Held {
        count: u32,
        node: Arc<N>,
    },
}

#[derive(Debug)]
struct Slots<N> {
    exclusive: HashMap<Owner, Slot<N>>,
    shared: HashMap<Owner, Slot<N>>,
}

impl<N> Slots<N> {
    fn side(&mut self, side: Side) -> &mut HashMap<Owner, Slot<N>> {
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

/// The per-path hold counts of a reentrant lock or a read/write lock, shared by every handle on that path made from
/// one [`Locks`](crate::Locks) value.
///
/// # Contract
/// - At most one owner has an `exclusive` slot held at a time (the distributed lock guarantees it); any number
///   may hold `shared` slots.
/// - A `Held` slot's count equals the number of live [`Hold`]s counted against it.
/// - A node is released when the last reference to it goes: a downgraded read hold shares the write node, which
///   therefore stays until both sides are released.
#[derive(Debug)]
pub(crate) struct Reentrancy<N> {
    path: LockPath,
    slots: Mutex<Slots<N>>,
}

/// One counted hold of an owner on one side; counted as released when dropped.
#[derive(Debug)]
pub(crate) struct Hold<N: Revocable> {
    holds: Arc<Reentrancy<N>>,
    side: Side,
    owner: Owner,
    node: Arc<N>,
}

impl<N: Revocable> Hold<N> {
    /// The node this hold counts on.
    pub fn node(&self) -> &Arc<N> {
        &self.node
    }

    /// The owner of the hold.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// How many holds the owner has on this side.
    pub fn count(&self) -> u32 {
        self.holds.count(self.side, &self.owner)
    }
}

impl<N: Revocable> Drop for Hold<N> {
    fn drop(&mut self) {
        let mut slots = self.holds.slots();
        let map = slots.side(self.side);
        if let Some(Slot::Held { count, node }) = map.get_mut(&self.owner) {
            if Arc::ptr_eq(node, &self.node) {
                *count -= 1;
                if *count == 0 {
                    map.remove(&self.owner);
                }
            }
        }
    }
}

/// The owner's slot while its first acquire is in flight: removed (waking the owner's other tasks) when dropped.
struct PendingSlot<'a, N> {
    holds: &'a Reentrancy<N>,
    side: Side,
    owner: Owner,
    _wake: watch::Sender<()>,
}

impl<N> Drop for PendingSlot<'_, N> {
    fn drop(&mut self) {
        let mut slots = self.holds.slots.lock();
        if matches!(slots.side(self.side).get(&self.owner), Some(Slot::Pending(_))) {
            slots.side(self.side).remove(&self.owner);
        }
        // Dropping the sender wakes every waiter of the same owner.
    }
}

/// What the slots say an acquire does.
enum Entry<N: Revocable> {
    /// Re-entered (or downgraded): done.
    Held(Hold<N>),
    /// The owner's first acquire is in flight on another task: wait for it, then look again.
    WaitFor(watch::Receiver<()>),
    /// The first hold: run the inner acquire.
    First(watch::Sender<()>),
}

impl<N: Revocable> Reentrancy<N> {
    pub fn new(path: LockPath) -> Self {
        Reentrancy {
            path,
            slots: Mutex::new(Slots {
                exclusive: HashMap::new(),
                shared: HashMap::new(),
            }),
        }
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        &self.path
    }

    fn slots(&self) -> MutexGuard<'_, Slots<N>> {
        self.slots.lock()
    }

    /// How many holds `owner` has on `side`.
    pub fn count(&self, side: Side, owner: &Owner) -> u32 {
        match self.slots().side(side).get(owner) {
            Some(Slot::Held { count, .. }) => *count,
            _ => 0,
        }
    }

    /// A hold may be re-entered (or downgraded) only while its node is valid: after a loss, another client may
    /// hold the lock, and a new hold would be a second holder.
    fn check_not_lost(&self, node: &N) -> Result<()> {
        match node.lost_now() {
            Some(reason) if !is_active(Mutant::ReentryIgnoresLoss) => Err(Error::LockLost {
                path: self.path.to_string(),
                reason,
            }),
            _ => Ok(()),
        }
    }

    fn hold(self: &Arc<Self>, side: Side, owner: Owner, node: Arc<N>) -> Hold<N> {
        Hold {
            holds: self.clone(),
            side,
            owner,
            node,
        }
    }

    /// Re-enters an existing hold, downgrades from a write hold, waits for the owner's acquire in flight, or claims
    /// the first hold.
    fn enter(self: &Arc<Self>, side: Side, owner: Owner) -> Result<Entry<N>> {
        let mut slots = self.slots();
        if let Some(rx) = slots.pending(&owner) {
            return Ok(Entry::WaitFor(rx));
        }
        if let Some(Slot::Held { count, node }) = slots.side(side).get_mut(&owner) {
            self.check_not_lost(node)?;
            *count = count
                .checked_add(1)
                .ok_or_else(|| Error::CountOverflow(self.path.to_string()))?;
            let node = node.clone();
            return Ok(Entry::Held(self.hold(side, owner, node)));
        }
        match side {
            Side::Exclusive if slots.shared.contains_key(&owner) => {
                return Err(Error::UpgradeRefused(self.path.to_string()));
            }
            Side::Shared => {
                if let Some(Slot::Held { node, .. }) = slots.exclusive.get(&owner) {
                    self.check_not_lost(node)?;
                    // Downgrade: the write node backs the read hold. A new read node would sort behind any writer
                    // already queued, which would then hold beside us.
                    let node = node.clone();
                    let slot = Slot::Held {
                        count: 1,
                        node: node.clone(),
                    };
                    slots.shared.insert(owner, slot);
                    return Ok(Entry::Held(self.hold(side, owner, node)));
                }
            }
            Side::Exclusive => {}
        }
        let (tx, rx) = watch::channel(());
        slots.side(side).insert(owner, Slot::Pending(rx));
        Ok(Entry::First(tx))
    }

    /// Acquires `side` for `owner`: re-enters an existing hold, downgrades from a write hold, or runs `first` (the
    /// inner acquire) for the owner's first hold. Other tasks of the same owner wait for a first hold in flight, so
    /// one owner never queues two nodes.
    ///
    /// # Cancel safety
    /// Cancel safe when `first` is: dropping the future removes the owner's pending slot.
    pub async fn acquire<F, Fut>(
        self: &Arc<Self>,
        side: Side,
        owner: Owner,
        patience: Patience,
        first: F,
    ) -> Result<Option<Hold<N>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<N>>>,
    {
        let wake = loop {
            let mut rx = match self.enter(side, owner)? {
                Entry::Held(h) => return Ok(Some(h)),
                Entry::First(tx) => break tx,
                Entry::WaitFor(rx) => rx,
            };
            match patience {
                Patience::TryOnce | Patience::TryEagerly => return Ok(None),
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
            holds: &**self,
            side,
            owner,
            _wake: wake,
        };
        let Some(node) = first().await? else {
            return Ok(None);
        };
        let node = Arc::new(node);
        let slot = Slot::Held {
            count: 1,
            node: node.clone(),
        };
        self.slots().side(side).insert(owner, slot);
        drop(pending);
        Ok(Some(self.hold(side, owner, node)))
    }

    /// Test hook: sets the hold count of an existing hold (to test overflow without 2³² acquires).
    #[cfg(feature = "test-util")]
    pub fn force_count(&self, side: Side, owner: &Owner, value: u32) {
        if let Some(Slot::Held { count, .. }) = self.slots().side(side).get_mut(owner) {
            *count = value;
        }
    }
}
