//! The verdict on one listing of the lock path: everything the driver decides between two requests.

use super::{blocker, contenders, foreign, permit_window, would_wait, would_wait_permits, wrapped, Contender};
use crate::layout::{Family, Layout, NodeKind};
use crate::mutants::{is_active, Mutant};

/// A waiter that comes to hold the lock marks itself `first` only when at least this many contenders were ahead of
/// it: in a short queue the node behind it lists again more cheaply (a read) than the mark costs (a write). Marking is
/// only an optimisation: without a mark the node behind lists again.
pub const MARK_FROM_QUEUE_LEN: usize = 16;

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
    /// Further child names whose deletion also wakes the waiter (a semaphore's window: see
    /// [`permit_window`](super::permit_window)); empty for the locks.
    pub also: Vec<String>,
    /// Wait in line without listing again after the deletion (the native layout; see the driver's `wait_in_line`).
    /// Otherwise list again on every wake-up, as the peers of the Curator and kazoo layouts do.
    pub in_line: bool,
    /// Nothing is ahead of the blocker: its deletion means we hold (only when `in_line`).
    pub blocker_first: bool,
    /// Once we hold the lock, mark our node `first` for the node behind us (only when `in_line`, never for readers,
    /// and only behind at least [`MARK_FROM_QUEUE_LEN`] contenders).
    pub mark: bool,
    /// A change of the blocker's data means that it held the lock (only when `in_line`, and never when the blocker is
    /// a reader, which holds beside the readers ahead of it). The data of a native node that is not a reader's is
    /// written only once it holds: its own `first` mark, or a request to let go, which
    /// [`Locks::revoke_node`](crate::Locks::revoke_node) writes only to a holder. So its deletion after such a change
    /// means we hold, even when the node is gone before the new data could be read back.
    pub change_means_held: bool,
}

/// What a queued contender does next, judged from one listing of the lock path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
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

/// The refusal for a contender of family `own` beside `children`, when one of them is a lock node of another family.
fn foreign_refusal<S: AsRef<str>>(own: Family, children: &[S]) -> Option<Refusal> {
    if is_active(Mutant::NoForeignCheck) {
        return None;
    }
    foreign(own, children).map(|(node, family)| Refusal::Foreign { node, family })
}

/// The refusal, if any, for a queued contender of `layout` beside `children` (parsed into `cs`).
fn queue_refusal<S: AsRef<str>>(layout: Layout, children: &[S], cs: &[Contender]) -> Option<Refusal> {
    family_refusal(layout, layout.queue_family(), children, cs)
}

/// The refusal, if any, for a contender of `family` in `layout` beside `children` (parsed into `cs`).
fn family_refusal<S: AsRef<str>>(layout: Layout, family: Family, children: &[S], cs: &[Contender]) -> Option<Refusal> {
    foreign_refusal(family, children).or_else(|| wrapped(layout, cs).map(|c| Refusal::Wrapped { node: c.name.clone() }))
}

/// The exclusive recipe's verdict on the children listed after it made `P/lock`: hold, unless it must refuse.
pub fn judge_exclusive<S: AsRef<str>>(children: &[S]) -> Option<Refusal> {
    foreign_refusal(Family::Exclusive, children)
}

/// Before a `try_acquire` makes its node: `Ok(true)` when a new node of `kind` would wait (so the try gives up with no
/// write), `Ok(false)` when it would hold, `Err` when it must refuse.
pub fn judge_newcomer<S: AsRef<str>>(layout: Layout, kind: NodeKind, children: &[S]) -> Result<bool, Refusal> {
    let cs = contenders(layout, children);
    match queue_refusal(layout, children, &cs) {
        Some(r) => Err(r),
        None => Ok(would_wait(kind, &cs)),
    }
}

/// Before a `try_acquire` of `weight` of a semaphore's `permits` makes its node: as [`judge_newcomer`].
pub fn judge_newcomer_permits<S: AsRef<str>>(
    layout: Layout,
    children: &[S],
    weight: u32,
    permits: u32,
) -> Result<bool, Refusal> {
    let cs = contenders(layout, children);
    match family_refusal(layout, layout.family(NodeKind::Permit), children, &cs) {
        Some(r) => Err(r),
        None => Ok(would_wait_permits(NodeKind::Permit, &cs, weight, permits)),
    }
}

/// What a semaphore's permit node `ours` does next, given the children listed after it was made and the semaphore's
/// `permits`.
///
/// # Contract
/// - Refusals come first, as for the locks: a node of another family (a lock's) anywhere on the path.
/// - It holds when the permits claimed ahead of it and its own are at most `permits`; otherwise it waits for the
///   deletion of any node of its window ([`permit_window`](super::permit_window)), and lists again after each wake-up
///   (never in line: which node's deletion lets it in is not known in advance).
pub fn judge_permit<S: AsRef<str>>(layout: Layout, children: &[S], ours: &str, permits: u32) -> Next {
    let cs = contenders(layout, children);
    if let Some(r) = family_refusal(layout, layout.family(NodeKind::Permit), children, &cs) {
        return Next::Refuse(r);
    }
    let Some(position) = cs.iter().position(|c| c.name == ours) else {
        return Next::Missing;
    };
    let window = permit_window(&cs[..position], cs[position].weight, permits);
    let Some((on, also)) = window.split_last() else {
        return Next::Acquired;
    };
    Next::Wait(Wait {
        on: on.name.clone(),
        also: also.iter().map(|c| c.name.clone()).collect(),
        in_line: false,
        blocker_first: false,
        mark: false,
        change_means_held: false,
    })
}

/// What the queued contender `ours`, of `kind`, does next, given the children of the lock path listed after its
/// node was made.
///
/// # Contract
/// - Refusals come first: a foreign lock node anywhere on the path, or (peer layouts) a wrapped sequence.
/// - Otherwise [`decide`](super::decide): `Acquired`, `Missing`, or a wait on the blocker it names.
/// - A wait is in line (no list after the wake-up) only in the native layout, whose nodes carry the `first` mark;
///   `blocker_first` says that the blocker is the first contender.
pub fn judge<S: AsRef<str>>(layout: Layout, kind: NodeKind, children: &[S], ours: &str) -> Next {
    let cs = contenders(layout, children);
    if let Some(r) = queue_refusal(layout, children, &cs) {
        return Next::Refuse(r);
    }
    let Some(position) = cs.iter().position(|c| c.name == ours) else {
        return Next::Missing;
    };
    let Some(on) = blocker(layout, kind, &cs[..position]) else {
        return Next::Acquired;
    };
    let in_line = layout == Layout::Native;
    let long_queue = position >= MARK_FROM_QUEUE_LEN || is_active(Mutant::AlwaysMark);
    Next::Wait(Wait {
        on: on.name.clone(),
        also: Vec::new(),
        in_line,
        blocker_first: in_line && cs[0].name == on.name,
        mark: in_line && kind != NodeKind::Read && long_queue,
        change_means_held: in_line && on.kind != NodeKind::Read,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn node(layout: Layout, kind: NodeKind, seq: u32) -> String {
        let id = Uuid::from_u128(u128::from(seq) + 1);
        format!("{}{seq:010}", layout.prefix(kind, id))
    }

    fn wait(on: &str, in_line: bool, blocker_first: bool, mark: bool) -> Next {
        Next::Wait(Wait {
            on: on.to_owned(),
            also: Vec::new(),
            in_line,
            blocker_first,
            mark,
            change_means_held: in_line && !on.starts_with("R-"),
        })
    }

    #[test]
    fn native_waits_in_line_and_peers_list_again() {
        for layout in Layout::ALL {
            let a = node(layout, NodeKind::Lock, 1);
            let b = node(layout, NodeKind::Lock, 2);
            let c = node(layout, NodeKind::Lock, 3);
            let native = layout == Layout::Native;
            let q = [&c, &a, &b];
            assert_eq!(judge(layout, NodeKind::Lock, &q, &a), Next::Acquired, "{layout}");
            assert_eq!(
                judge(layout, NodeKind::Lock, &q, &b),
                wait(&a, native, native, false),
                "{layout}"
            );
            assert_eq!(
                judge(layout, NodeKind::Lock, &q, &c),
                wait(&b, native, false, false),
                "{layout}"
            );
            let gone = node(layout, NodeKind::Lock, 9);
            assert_eq!(judge(layout, NodeKind::Lock, &q, &gone), Next::Missing, "{layout}");
        }
    }

    #[test]
    fn marks_only_behind_a_long_queue_and_never_as_a_reader() {
        let l = Layout::Native;
        let mut q: Vec<String> = (0..=MARK_FROM_QUEUE_LEN as u32)
            .map(|i| node(l, NodeKind::Write, i))
            .collect();
        let last = q[MARK_FROM_QUEUE_LEN].clone();
        let before = q[MARK_FROM_QUEUE_LEN - 1].clone();
        assert_eq!(judge(l, NodeKind::Write, &q, &last), wait(&before, true, false, true));
        let short = q[MARK_FROM_QUEUE_LEN - 1].clone();
        let ahead = q[MARK_FROM_QUEUE_LEN - 2].clone();
        assert_eq!(judge(l, NodeKind::Write, &q, &short), wait(&ahead, true, false, false));
        let reader = node(l, NodeKind::Read, 99);
        q.push(reader.clone());
        assert_eq!(judge(l, NodeKind::Read, &q, &reader), wait(&last, true, false, false));
    }

    #[test]
    fn only_a_change_of_a_writers_data_means_it_held() {
        let l = Layout::Native;
        let (r, w, ours) = (
            node(l, NodeKind::Read, 1),
            node(l, NodeKind::Write, 2),
            node(l, NodeKind::Write, 3),
        );
        let behind = |q: &[&String]| match judge(l, NodeKind::Write, q, &ours) {
            Next::Wait(w) => w.change_means_held,
            n => panic!("{n:?}"),
        };
        assert!(!behind(&[&r, &ours]), "a reader holds beside the readers ahead of it");
        assert!(behind(&[&r, &w, &ours]));
        for peer in [Layout::Curator, Layout::Kazoo] {
            let (a, b) = (node(peer, NodeKind::Lock, 1), node(peer, NodeKind::Lock, 2));
            match judge(peer, NodeKind::Lock, &[&a, &b], &b) {
                Next::Wait(w) => assert!(!w.change_means_held, "{peer}: peers list again"),
                n => panic!("{n:?}"),
            }
        }
    }

    #[test]
    fn refusals_come_first() {
        let l = Layout::Native;
        let ours = node(l, NodeKind::Lock, 1);
        let q = [ours.clone(), "lock".to_owned()];
        let foreign = Refusal::Foreign {
            node: "lock".into(),
            family: Family::Exclusive,
        };
        assert_eq!(judge(l, NodeKind::Lock, &q, &ours), Next::Refuse(foreign.clone()));
        assert_eq!(judge_newcomer(l, NodeKind::Lock, &q), Err(foreign));
        assert_eq!(judge_exclusive(&["lock"]), None);
        assert!(matches!(
            judge_exclusive(&["lock", &ours]),
            Some(Refusal::Foreign { .. })
        ));
        let c = Layout::Curator;
        let ours = node(c, NodeKind::Lock, 1);
        let wrapped_name = format!("{}-2147483648", c.prefix(NodeKind::Lock, Uuid::from_u128(7)));
        let q = [ours.clone(), wrapped_name.clone()];
        let want = Refusal::Wrapped { node: wrapped_name };
        assert_eq!(judge(c, NodeKind::Lock, &q, &ours), Next::Refuse(want.clone()));
        assert_eq!(judge_newcomer(c, NodeKind::Lock, &q), Err(want));
    }

    #[test]
    fn newcomer_waits_only_behind_a_blocker() {
        let l = Layout::Native;
        let r = node(l, NodeKind::Read, 1);
        let w = node(l, NodeKind::Write, 2);
        let none: [&str; 0] = [];
        assert_eq!(judge_newcomer(l, NodeKind::Write, &none), Ok(false));
        assert_eq!(judge_newcomer(l, NodeKind::Read, &[&r]), Ok(false));
        assert_eq!(judge_newcomer(l, NodeKind::Write, &[&r]), Ok(true));
        assert_eq!(judge_newcomer(l, NodeKind::Read, &[&r, &w]), Ok(true));
    }
}
