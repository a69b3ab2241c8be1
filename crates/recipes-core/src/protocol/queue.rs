//! The protocol of a queue (fair, reentrant, read, write, the native semaphore, a peer semaphore's leases): one
//! sequential node per contender, in any layout.

use uuid::Uuid;

use super::order::{ahead_of, blockers, contenders_and_foreign, foreign_in, wrapped, Contender};
use super::{Protocol, Refusal, Verdict, Wait, MARK_FROM_QUEUE_LEN};
use crate::backend::{ChildOrder, SessionId};
use crate::layout::{Family, Layout, NodeKind};
use crate::mutants::{is_active, Mutant};

/// The refusal for a contender of family `own` beside `children`, when one of them is a lock node of another family.
pub(super) fn foreign_refusal<S: AsRef<str>>(own: Family, order: ChildOrder, children: &[S]) -> Option<Refusal> {
    refusal(foreign_in(own, order, children), None)
}

/// The refusal for a listing with this first `foreign` lock node (another family's) and this first `wrapped`
/// contender (a peer layout's sequence past the wrap): the foreign node first.
fn refusal(foreign: Option<(String, Family)>, wrapped: Option<String>) -> Option<Refusal> {
    let foreign = foreign.filter(|_| !is_active(Mutant::NoForeignCheck));
    foreign
        .map(|(node, family)| Refusal::Foreign { node, family })
        .or_else(|| wrapped.map(|node| Refusal::Wrapped { node }))
}

/// A queue's claim: a node of `kind` in `layout`, on `weight` of `permits` permits (1 of 1 for a lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    layout: Layout,
    kind: NodeKind,
    weight: u32,
    permits: u32,
    /// Curator's `LeaderLatch` names: `_c_<uuid>-latch-` (an election's candidates, in the Curator layout).
    latch: bool,
    /// How the backend orders the children (by the sequence in their names, or by creation in its listings).
    order: ChildOrder,
}

impl Queue {
    /// A lock's node of `kind` (one permit of one).
    pub fn lock(layout: Layout, kind: NodeKind) -> Self {
        Queue {
            layout,
            kind,
            weight: 1,
            permits: 1,
            latch: false,
            order: ChildOrder::Sequence,
        }
    }

    /// A candidate of Curator's `LeaderLatch`: a lock's node in the Curator layout, named `_c_<uuid>-latch-<seq>`.
    pub fn latch() -> Self {
        Queue {
            latch: true,
            ..Queue::lock(Layout::Curator, NodeKind::Lock)
        }
    }

    /// A semaphore's claim on `weight` of its `permits`.
    pub fn permits(layout: Layout, weight: u32, permits: u32) -> Self {
        Queue {
            layout,
            kind: NodeKind::Permit,
            weight,
            permits,
            latch: false,
            order: ChildOrder::Sequence,
        }
    }

    /// The same claim on a backend that orders children by `order` (by default [`ChildOrder::Sequence`]).
    ///
    /// With [`ChildOrder::Creation`] the node is named without a sequence, its place is its place in the listing, and
    /// no wait is in line: the waiter lists again after every wake-up (etcd orders no watch event against another
    /// watch's, so "our node's deletion is seen before the blocker's" cannot be relied on; decision 0068). So no node
    /// marks itself `first`, and no release hands over within the process.
    pub fn ordered_by(self, order: ChildOrder) -> Self {
        Queue { order, ..self }
    }

    /// Whether this queue's waiters may wait in line (no list after a wake-up), and so its holders mark themselves and
    /// hand over: the native layout, on a backend that writes the order into the names.
    fn in_line_here(&self) -> bool {
        self.layout == Layout::Native && self.order == ChildOrder::Sequence
    }

    /// Whether this node's waiters wait in line and may trust its mark: a native lock's or writer's (a reader's mark
    /// would not say that nothing is ahead of it: readers hold beside each other).
    fn may_mark(&self) -> bool {
        self.in_line_here() && matches!(self.kind, NodeKind::Lock | NodeKind::Write)
    }

    /// The verdict for our node, claiming `weight`, behind the contenders `ahead` (in queue order), judged from a
    /// `short` listing or a long one (see [`Wait::scout`]).
    fn verdict(&self, ahead: &[Contender], weight: u32, short: bool) -> Verdict {
        let window = blockers(self.layout, self.kind, ahead, weight, self.permits);
        let Some((on, also)) = window.split_last() else {
            return Verdict::Acquired;
        };
        let in_line = self.in_line_here() && self.kind != NodeKind::Permit;
        let blocker_first = in_line && ahead[0].name == on.name;
        // A reader is no scout: readers ahead of a writer go one by one, and each would send every waiter behind the
        // writer to list (found by review, helper-89), while the writer's own deletion is what they wait for.
        let scout = if in_line && !blocker_first && short && !is_active(Mutant::NoScout) {
            let at = ahead.iter().position(|c| c.name == on.name);
            let ahead_of_blocker = at.and_then(|i| i.checked_sub(1)).map(|i| &ahead[i]);
            ahead_of_blocker
                .filter(|c| c.kind != NodeKind::Read)
                .map(|c| c.name.clone())
        } else {
            None
        };
        Verdict::Wait(Wait {
            on: on.name.clone(),
            also: also.iter().map(|c| c.name.clone()).collect(),
            in_line,
            blocker_first,
            change_means_held: in_line && on.kind != NodeKind::Read,
            scout,
        })
    }

    /// [`Protocol::judge`] of any listing, the general way: every name parsed, the contenders ahead of ours sorted.
    pub(super) fn judge_listing(&self, children: &[String], ours: &str) -> Verdict {
        // Only the contenders ahead of ours are sorted (see `ahead_of`): a waiter near the front of a long queue
        // lists it all again after a wake-up.
        let listing = ahead_of(self.layout, self.order, self.family(), children, ours);
        if let Some(r) = refusal(listing.foreign, listing.wrapped) {
            return Verdict::Refuse(r);
        }
        let Some(weight) = listing.ours else {
            return Verdict::Missing;
        };
        self.verdict(&listing.ahead, weight, !self.long(children))
    }

    /// Whether a listing holds more than [`MARK_FROM_QUEUE_LEN`] contenders of the layout, counted only as far as the
    /// threshold: a long queue's names are not all parsed again.
    fn long<S: AsRef<str>>(&self, children: &[S]) -> bool {
        children.len() > MARK_FROM_QUEUE_LEN
            && children
                .iter()
                .filter(|c| self.layout.parse(c.as_ref()).is_some())
                .nth(MARK_FROM_QUEUE_LEN)
                .is_some()
    }

    /// A listing's contenders, and the refusal, if any, beside them: a lock node of another family, or (peer
    /// layouts) a wrapped sequence.
    fn parse<S: AsRef<str>>(&self, children: &[S]) -> (Vec<Contender>, Option<Refusal>) {
        let (cs, foreign) = contenders_and_foreign(self.layout, self.order, Some(self.family()), children);
        let refusal = refusal(foreign, wrapped(self.layout, &cs).map(|c| c.name.clone()));
        (cs, refusal)
    }
}

impl Protocol for Queue {
    fn family(&self) -> Family {
        if self.latch {
            return Family::CuratorLatch;
        }
        self.layout.family(self.kind)
    }

    fn fixed_name(&self) -> Option<&'static str> {
        None
    }

    fn prefix(&self, attempt: Uuid, session: SessionId) -> String {
        if self.layout == Layout::Etcd {
            return Layout::session_name(session);
        }
        if self.latch {
            return crate::layout::curator_prefix(attempt, crate::layout::CURATOR_LATCH_MARKER);
        }
        self.layout.weighted_prefix(self.kind, attempt, self.weight)
    }

    fn made_by(&self, name: &str, attempt: Uuid) -> bool {
        made_by(self.layout, name, attempt)
    }

    fn session_named(&self) -> bool {
        self.layout == Layout::Etcd
    }

    fn stored_count(&self) -> Option<u32> {
        (self.kind == NodeKind::Permit && self.layout == Layout::Native).then_some(self.permits)
    }

    /// # Contract
    /// Before a `try_acquire` makes its node: `Ok(true)` when a new node would wait (so the try gives up with no
    /// write), `Ok(false)` when it would hold, `Err` when it must refuse.
    fn newcomer(&self, children: &[String]) -> Result<bool, Refusal> {
        let (cs, refusal) = self.parse(children);
        match refusal {
            Some(r) => Err(r),
            None => Ok(!blockers(self.layout, self.kind, &cs, self.weight, self.permits).is_empty()),
        }
    }

    /// # Contract
    /// - Refusals come first: a foreign lock node anywhere on the path, or (peer layouts) a wrapped sequence.
    /// - Otherwise the decision ([`decide`](super::decide)): `Acquired`, `Missing`, or a wait on the blocker (and,
    ///   for a semaphore, the rest of its window: [`permit_window`](super::permit_window)).
    /// - A lock's wait is in line (no list after the wake-up) only in the native layout, whose nodes carry the
    ///   `first` mark; `blocker_first` says that the blocker is the first contender. A semaphore's is never in line:
    ///   which node's deletion lets it in is not known in advance, so it lists again after each wake-up.
    fn judge(&self, children: &[String], ours: &str) -> Verdict {
        // Every uncontended acquire lists its own node alone: with nothing ahead of it, it holds (whatever it claims:
        // an empty window holds), unless it is no contender (a native name without its sequence) or of another
        // family. The same verdict as the general way below, without its copies and sort (`judge_alone_is_judge`).
        if let ([only], Layout::Native) = (children, self.layout) {
            if only == ours {
                if let Some(p) = self.layout.parse(ours) {
                    let contender = p.seq.is_some() || self.order == ChildOrder::Creation;
                    if contender && self.layout.family(p.kind) == self.family() {
                        return Verdict::Acquired;
                    }
                }
            }
        }
        self.judge_listing(children, ours)
    }

    /// # Contract
    /// A native lock's or writer's node marks itself when a listing it judged held more than
    /// [`MARK_FROM_QUEUE_LEN`] contenders (ahead of it or behind it: in a drain, the first waiters listed a short
    /// queue, and the list their successors would make holds everyone who queued after them). Other children do not
    /// count: beside many of them (lock paths nested here), two clients would otherwise mark on every handoff although
    /// each waiter sees its blocker first. A reader never marks (readers hold beside each other, so a reader's mark
    /// would not say that nothing is ahead of it), nor a semaphore's claim, nor the peers' layouts (their waiters list
    /// again on every wake-up).
    fn marks_when_held(&self, children: &[String]) -> bool {
        self.may_mark() && (is_active(Mutant::AlwaysMark) || self.long(children))
    }

    fn passes_mark_on(&self, wait: &Wait) -> bool {
        self.may_mark() && wait.in_line && !wait.blocker_first
    }

    /// A lock's writer (or mutex) of the native layout hands over; a reader does not (other sessions' readers may
    /// hold beside it), nor a semaphore's claim, nor the peers' layouts (their waiters list again anyway).
    fn hands_over(&self) -> bool {
        let kind_hands_over = match self.kind {
            NodeKind::Lock | NodeKind::Write => true,
            NodeKind::Read => is_active(Mutant::ReadersHandOver),
            NodeKind::Permit => false,
        };
        self.in_line_here() && kind_hands_over
    }
}

/// Whether a child name is one an acquire with this attempt id made in `layout`: a queued node carries the id in its
/// name; a kazoo semaphore's lease is named by it alone.
pub(crate) fn made_by(layout: Layout, name: &str, attempt: Uuid) -> bool {
    layout.parse(name).is_some_and(|p| p.attempt == attempt)
        || (layout == Layout::Kazoo && name == attempt.simple().encode_lower(&mut Uuid::encode_buffer()))
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
