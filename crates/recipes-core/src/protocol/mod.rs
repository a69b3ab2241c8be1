//! Layer 2, the pure half: what a recipe's node is called, which children count and in what order, and the verdict
//! on one listing of the lock path (hold, wait on which node, refuse). No I/O.
//!
//! A [`Protocol`] is all the engine (the driver) asks of a recipe in a layout, in the manner of Curator's
//! `LockInternalsDriver`: the loop around it only sends requests and follows the verdict. Two protocols cover every
//! recipe today: [`Fixed`] (the exclusive recipe's one node) and [`Queue`] (a sequential node per contender: the
//! fair, reentrant, read and write locks, and the semaphores' claims, a lock being a semaphore of one permit).
//! [`contenders`] and [`decide`] are the order and the decision they share. The peers' semaphores, whose leases are
//! counted under a mutex rather than queued, are [`PeerSemaphore`]'s.
//!
//! The layouts live here and only here: [`layout`] (how the native, Curator and kazoo nodes are named, parsed and
//! ordered) is re-exported at the crate's root as `recipes_core::layout`.

pub mod layout;
mod order;
mod peer;
mod queue;

use std::fmt;

use uuid::Uuid;

use crate::backend::{ChildOrder, SessionId};
use crate::layout::{Family, Layout, EXCLUSIVE_NODE};
use crate::recipe::Recipe;

pub use order::{contenders, contenders_in, decide, foreign, foreign_in, permit_window, wrapped, Contender, Decision};
pub use peer::PeerSemaphore;
pub(crate) use queue::made_by;
pub use queue::Queue;

/// A waiter that comes to hold the lock marks itself `first` only when a listing it judged held more than this many
/// contenders; the node behind a waiter of a short queue watches a scout and lists again instead. Marking is only an
/// optimisation: without a mark the node behind lists again. 32: since the mark goes in the release's transaction
/// and the node behind watches its blocker's deletion alone, a mark costs the server about what the scout's watch
/// and list cost at 32 contenders, more at 8, and takes a list of the whole queue off a drain's path
/// (docs/decisions/0093-marking-from-32-contenders.md; 64 before, 16 first). The whole listing counts, not only the
/// names ahead: the list the node behind would make holds the names behind us
/// (docs/decisions/0060-marking-by-the-length-of-the-listing.md).
pub const MARK_FROM_QUEUE_LEN: usize = 32;

/// How a recipe's contender, in one layout, names its node and judges the lock path: everything the engine decides
/// between two requests.
///
/// # Contract
/// - Pure: no I/O, and the same answer for the same arguments.
/// - [`judge`](Protocol::judge) and [`newcomer`](Protocol::newcomer) refuse beside a lock node of a
///   [`family`](Protocol::family) other than the protocol's own: two recipes that ignored each other's nodes could
///   both hold.
/// - Of two contenders that each judge a listing made after their own create, at most one holds (for a queue: the
///   one whose claim fits in the permits ahead of it, in the order every peer of the layout agrees on).
pub trait Protocol: Send + Sync + fmt::Debug {
    /// The family of the nodes this protocol makes.
    fn family(&self) -> Family;

    /// The node's fixed name (the exclusive recipe's `lock`), or `None` for a sequential node named by
    /// [`prefix`](Protocol::prefix).
    fn fixed_name(&self) -> Option<&'static str>;

    /// The name prefix of a sequential node of the attempt `attempt` on session `session` (the server appends the
    /// sequence, where it orders by sequence).
    fn prefix(&self, attempt: Uuid, session: SessionId) -> String;

    /// Whether the node is named by its session rather than its attempt (etcd's own lock: `<lease id in hex>`): its
    /// name then says nothing of the attempt, another task of the session may hold a node of that name, and the
    /// engine checks the node's data before it deletes or adopts it, as for the fixed node.
    fn session_named(&self) -> bool {
        false
    }

    /// Whether the node's name is not the attempt's alone (the fixed node, or a session-named key): the engine then
    /// checks a node of that name by its data or creation id before it deletes or adopts it.
    fn name_is_shared(&self) -> bool {
        self.fixed_name().is_some() || self.session_named()
    }

    /// Whether the child `name` is the node an acquire with this attempt id made (found again after a lost reply).
    fn made_by(&self, name: &str, attempt: Uuid) -> bool;

    /// The count the lock path stores (a native semaphore's permits, made with the path and checked against it), or
    /// `None`.
    fn stored_count(&self) -> Option<u32> {
        None
    }

    /// Before a try makes its node: `Ok(true)` when a new node would wait (the try gives up without a write),
    /// `Ok(false)` when it would hold, `Err` when it must refuse.
    fn newcomer(&self, children: &[String]) -> Result<bool, Refusal>;

    /// What our node `ours` does next, judged from the children of the lock path listed after it was made.
    fn judge(&self, children: &[String], ours: &str) -> Verdict;

    /// Whether a release of a held node may hand the lock to tasks of this process waiting in line on it.
    fn hands_over(&self) -> bool;

    /// Whether our node, once it holds, marks itself `first` for the node behind it (see the driver's
    /// `wait_in_line`), given a listing judged on the way: only a node whose waiters wait in line (a native lock's or
    /// writer's), and only when the listing held more than [`MARK_FROM_QUEUE_LEN`] contenders, so that the list the
    /// node behind would make otherwise costs more than the mark's write.
    fn marks_when_held(&self, children: &[String]) -> bool {
        let _ = children;
        false
    }

    /// Whether our node, having come to hold through its blocker's mark (a change of the blocker's data, then its
    /// deletion) in the wait in line `wait`, marks itself `first` where the mark costs no write of its own (it goes in
    /// the release's transaction: decision 0064): when something was ahead of its blocker in its listing. The node
    /// behind ours, which listed after ours was made, then likely saw more ahead of ours too: without the mark, it
    /// would list the whole queue again (decision 0073). Only a node whose waiters wait in line; never when the
    /// blocker was first, as it always is for two clients taking turns (such a node may still mark after a long
    /// listing: `marks_when_held`). The driver asks after a wait that ended on the blocker's mark, or in a handoff
    /// within the process from a holder whose release marks (decision 0075); not after a handoff from one that does
    /// not.
    fn passes_mark_on(&self, wait: &Wait) -> bool {
        let _ = wait;
        false
    }
}

/// The protocol of `recipe` in `layout`, claiming `weight` of `permits` permits (1 of 1 for a lock), on a backend that
/// orders children by `order`.
pub(crate) fn of(layout: Layout, order: ChildOrder, recipe: Recipe, weight: u32, permits: u32) -> AnyProtocol {
    match recipe.node_kind() {
        None => AnyProtocol::Fixed(Fixed::new(order)),
        Some(crate::layout::NodeKind::Permit) => {
            AnyProtocol::Queue(Queue::permits(layout, weight, permits).ordered_by(order))
        }
        Some(kind) => AnyProtocol::Queue(Queue::lock(layout, kind).ordered_by(order)),
    }
}

/// Whether `layout` can be kept on a backend that orders children by `order`: the peer layouts (Curator, kazoo) name
/// their nodes with ZooKeeper's sequence, which a backend ordering by creation (etcd) cannot make.
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the layout and the order.
pub(crate) fn layout_fits(layout: Layout, order: ChildOrder) -> crate::Result<()> {
    if order == ChildOrder::Sequence && layout == Layout::Etcd {
        return Err(crate::Error::InvalidArgument(
            "the etcd layout is etcd's own lock's (Go's concurrency.Mutex): its order is etcd's create revision, and \
             this backend orders children by sequence (ZooKeeper): use the native layout, or Curator's or kazoo's"
                .to_owned(),
        ));
    }
    if order == ChildOrder::Creation && !matches!(layout, Layout::Native | Layout::Etcd) {
        return Err(crate::Error::InvalidArgument(format!(
            "the {layout} layout names its nodes with ZooKeeper's sequence numbers, which this backend does not make \
             (it orders a path's children by creation, as etcd does): use the native layout, or the etcd layout"
        )));
    }
    Ok(())
}

/// One of the two protocols, kept by value (an acquire asks for it on every step; no allocation per acquire).
#[derive(Debug, Clone, Copy)]
pub(crate) enum AnyProtocol {
    Fixed(Fixed),
    Queue(Queue),
}

impl std::ops::Deref for AnyProtocol {
    type Target = dyn Protocol;

    fn deref(&self) -> &Self::Target {
        match self {
            AnyProtocol::Fixed(f) => f,
            AnyProtocol::Queue(q) => q,
        }
    }
}

/// The exclusive recipe's protocol: one fixed ephemeral node `P/lock`; whoever makes it holds, unless a lock node of
/// another family is on the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fixed {
    /// How the backend orders children (which names are lock nodes: see [`Family::of_in`]).
    order: ChildOrder,
}

impl Fixed {
    /// The exclusive recipe's protocol on a backend that orders children by `order`.
    pub fn new(order: ChildOrder) -> Self {
        Fixed { order }
    }

    /// Whether `layout` has the fixed node: only the native layout (the peers have no such lock).
    pub fn in_layout(layout: Layout) -> bool {
        layout == Layout::Native
    }
}

impl Protocol for Fixed {
    fn family(&self) -> Family {
        Family::Exclusive
    }

    fn fixed_name(&self) -> Option<&'static str> {
        Some(EXCLUSIVE_NODE)
    }

    fn prefix(&self, _attempt: Uuid, _session: SessionId) -> String {
        EXCLUSIVE_NODE.to_owned()
    }

    /// Never by its name alone: the fixed name is every attempt's, so the engine reads the node's data instead.
    fn made_by(&self, _name: &str, _attempt: Uuid) -> bool {
        false
    }

    fn newcomer(&self, children: &[String]) -> Result<bool, Refusal> {
        match queue::foreign_refusal(Family::Exclusive, self.order, children) {
            Some(r) => Err(r),
            None => Ok(children.iter().any(|c| c == EXCLUSIVE_NODE)),
        }
    }

    fn judge(&self, children: &[String], _ours: &str) -> Verdict {
        match queue::foreign_refusal(Family::Exclusive, self.order, children) {
            Some(r) => Verdict::Refuse(r),
            None => Verdict::Acquired,
        }
    }

    fn hands_over(&self) -> bool {
        false
    }
}

/// Why a contender refuses to hold the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A lock node of another recipe family or layout is on the path (see [`foreign`]).
    Foreign {
        /// Its child name.
        node: String,
        /// Its family.
        family: Family,
    },
    /// A peer layout's sequence has wrapped (see [`wrapped`]).
    Wrapped {
        /// The child name of a node with a wrapped sequence.
        node: String,
    },
}

/// How a queued contender waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// The child name to watch.
    pub on: String,
    /// Further child names whose deletion also wakes the waiter (a semaphore's window: see [`permit_window`]); empty
    /// for the locks.
    pub also: Vec<String>,
    /// Wait in line without listing again after the deletion (the native layout; see the driver's `wait_in_line`).
    /// Otherwise list again on every wake-up, as the peers of the Curator and kazoo layouts do.
    pub in_line: bool,
    /// Nothing is ahead of the blocker: its deletion means we hold (only when `in_line`).
    pub blocker_first: bool,
    /// A change of the blocker's data means that it held the lock (only when `in_line`, and never when the blocker is
    /// a reader, which holds beside the readers ahead of it). The data of a native node that is not a reader's is
    /// written only once it holds: its own `first` mark, or a request to let go, which
    /// [`Locks::revoke_node`](crate::Locks::revoke_node) writes only to a holder. So its deletion after such a change
    /// means we hold, even when the node is gone before the new data could be read back.
    pub change_means_held: bool,
    /// The contender just ahead of the blocker, when the wait is in line, the blocker is not first, the listing was
    /// short (at most [`MARK_FROM_QUEUE_LEN`] contenders) and that contender is not a reader (readers ahead of a writer
    /// go one by one): the waiter watches it too, and lists again as soon as it goes, while the blocker may still be
    /// there. That list, off the handoff's critical path, shows whether the
    /// blocker is now first; if it is, the blocker's deletion means we hold, with no list after it (the driver's
    /// `wait_in_line`). A long listing has no scout: every waiter would list the queue, and its holders mark instead.
    pub scout: Option<String>,
}

/// What a contender does next, judged from one listing of the lock path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Refuse the lock (deleting our node).
    Refuse(Refusal),
    /// Our node holds the lock.
    Acquired,
    /// Our node is not in the queue (deleted by someone, or a name the layout does not read): delete it by its path
    /// and queue again.
    Missing,
    /// Wait for the deletion of another node.
    Wait(Wait),
}

#[cfg(test)]
mod by_creation_tests;
#[cfg(test)]
mod tests;
