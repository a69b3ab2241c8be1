//! The queue protocol's verdicts, against a reference and in every layout.

use super::super::Fixed;
use super::*;
use uuid::Uuid;

type Next = Verdict;

fn owned<S: AsRef<str>>(q: &[S]) -> Vec<String> {
    q.iter().map(|s| s.as_ref().to_owned()).collect()
}

fn judge<S: AsRef<str>>(layout: Layout, kind: NodeKind, q: &[S], ours: &str) -> Verdict {
    Queue::lock(layout, kind).judge(&owned(q), ours)
}

fn judge_newcomer<S: AsRef<str>>(layout: Layout, kind: NodeKind, q: &[S]) -> Result<bool, Refusal> {
    Queue::lock(layout, kind).newcomer(&owned(q))
}

fn judge_exclusive<S: AsRef<str>>(q: &[S]) -> Option<Refusal> {
    match Fixed::default().judge(&owned(q), "lock") {
        Verdict::Refuse(r) => Some(r),
        _ => None,
    }
}

fn node(layout: Layout, kind: NodeKind, seq: u32) -> String {
    let id = Uuid::from_u128(u128::from(seq) + 1);
    format!("{}{seq:010}", layout.prefix(kind, id))
}

fn wait(on: &str, in_line: bool, blocker_first: bool) -> Next {
    scouted(on, in_line, blocker_first, None)
}

/// A wait with the scout named.
fn scouted(on: &str, in_line: bool, blocker_first: bool, scout: Option<&str>) -> Next {
    Next::Wait(Wait {
        on: on.to_owned(),
        also: Vec::new(),
        in_line,
        blocker_first,
        change_means_held: in_line && !on.starts_with("R-"),
        scout: scout.map(str::to_owned),
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
            wait(&a, native, native),
            "{layout}"
        );
        assert_eq!(
            judge(layout, NodeKind::Lock, &q, &c),
            scouted(&b, native, false, native.then_some(a.as_str())),
            "{layout}"
        );
        let gone = node(layout, NodeKind::Lock, 9);
        assert_eq!(judge(layout, NodeKind::Lock, &q, &gone), Next::Missing, "{layout}");
    }
}

/// `judge` as first written: every contender parsed, sorted and copied.
fn judge_reference(q: &Queue, children: &[String], ours: &str) -> Verdict {
    let (cs, refusal) = q.parse(children);
    if let Some(r) = refusal {
        return Verdict::Refuse(r);
    }
    let Some(position) = cs.iter().position(|c| c.name == ours) else {
        return Verdict::Missing;
    };
    q.verdict(&cs[..position], cs[position].weight, !q.long(children))
}

proptest::proptest! {
    /// Judging only the contenders ahead gives the verdict of judging them all: for every layout and kind, on
    /// queues of mixed kinds and weights, across the sequence wrap, with names of no family and of other
    /// families, for a node of the queue and one that is not in it.
    #[test]
    fn judging_the_names_ahead_agrees_with_judging_all(
        picks in proptest::collection::vec((0usize..40, 0u32..12, 1u32..4), 1..14),
        layout in 0usize..3,
        kind in 0usize..4,
        permits in 1u32..4,
        ours in 0usize..16,
        wrap in proptest::bool::ANY,
    ) {
        let layout = Layout::ALL[layout];
        let kind = [NodeKind::Lock, NodeKind::Read, NodeKind::Write, NodeKind::Permit][kind];
        let names: Vec<String> = picks
            .iter()
            .enumerate()
            .map(|(i, (pick, seq, weight))| {
                // Near the top of the counter or past its wrap, when `wrap`; sequences repeat (a Curator
                // downgraded reader shares its writer's), so that ties are broken by kind and name.
                let seq = if wrap && seq % 2 == 0 { i32::MAX - *seq as i32 } else if wrap { i32::MIN + *seq as i32 } else { *seq as i32 };
                let id = Uuid::from_u128(i as u128 + 1);
                // Mostly contenders of the queue's own family, now and then a name of none or of another.
                let node_kind = match (kind, pick) {
                    (_, 38) => return format!("config-{i}"),
                    (_, 39) => return format!("{}{seq:010}", Layout::ALL[(i + 1) % 3].prefix(NodeKind::Lock, id)),
                    (NodeKind::Permit, _) => NodeKind::Permit,
                    (_, 0..=12) => NodeKind::Lock,
                    (_, 13..=25) => NodeKind::Read,
                    _ => NodeKind::Write,
                };
                let node_kind = if node_kind == NodeKind::Lock && kind != NodeKind::Lock { NodeKind::Write } else { node_kind };
                format!("{}{seq:010}", layout.weighted_prefix(node_kind, id, *weight))
            })
            .collect();
        let ours = names.get(ours).cloned().unwrap_or_else(|| "L-missing".to_owned());
        let q = if kind == NodeKind::Permit { Queue::permits(layout, 1, permits) } else { Queue::lock(layout, kind) };
        proptest::prop_assert_eq!(q.judge(&names, &ours), judge_reference(&q, &names, &ours), "{:?}", names);
    }
}

#[test]
fn marks_only_after_a_long_listing_and_never_as_a_reader() {
    let l = Layout::Native;
    let q: Vec<String> = (0..=MARK_FROM_QUEUE_LEN as u32)
        .map(|i| node(l, NodeKind::Write, i))
        .collect();
    let writer = Queue::lock(l, NodeKind::Write);
    // More than MARK_FROM_QUEUE_LEN names, wherever ours is among them: the node behind a waiter that was second
    // in such a list would list them all again.
    assert!(writer.marks_when_held(&q));
    assert!(Queue::lock(l, NodeKind::Lock).marks_when_held(&q));
    assert_eq!(judge(l, NodeKind::Write, &q, &q[1]), wait(&q[0], true, true));
    assert!(!writer.marks_when_held(&q[..MARK_FROM_QUEUE_LEN]));
    // Children that are not contenders (lock paths nested here) do not count.
    let mut beside: Vec<String> = q[..MARK_FROM_QUEUE_LEN].to_vec();
    beside.extend((0..100).map(|i| format!("jobs-{i}")));
    assert!(!writer.marks_when_held(&beside));
    assert!(!Queue::lock(l, NodeKind::Read).marks_when_held(&q));
    assert!(!Queue::permits(l, 1, 3).marks_when_held(&q));
    for peer in [Layout::Curator, Layout::Kazoo] {
        let q: Vec<String> = (0..=MARK_FROM_QUEUE_LEN as u32)
            .map(|i| node(peer, NodeKind::Lock, i))
            .collect();
        assert!(!Queue::lock(peer, NodeKind::Lock).marks_when_held(&q), "{peer}");
    }
}

/// The scout is the contender just ahead of the blocker, named only in line, behind a blocker that is not first, after
/// a short listing (a long one would have every waiter list it again: its holders mark instead), and never a reader
/// (readers ahead of a writer go one by one); a reader's blocker is the nearest writer ahead, and its scout the
/// contender just ahead of that writer.
#[test]
fn a_scout_only_behind_a_blocker_not_first_in_a_short_listing() {
    let l = Layout::Native;
    let q: Vec<String> = (0..=MARK_FROM_QUEUE_LEN as u32)
        .map(|i| node(l, NodeKind::Write, i))
        .collect();
    let short = &q[..MARK_FROM_QUEUE_LEN];
    assert_eq!(
        judge(l, NodeKind::Write, short, &short[3]),
        scouted(&short[2], true, false, Some(&short[1]))
    );
    assert_eq!(judge(l, NodeKind::Write, short, &short[1]), wait(&short[0], true, true));
    assert_eq!(judge(l, NodeKind::Write, &q, &q[3]), wait(&q[2], true, false));
    // Readers ahead of a writer are no scouts; the writer is.
    let rw: Vec<String> = (0..5)
        .map(|i| node(l, if i == 2 { NodeKind::Write } else { NodeKind::Read }, i))
        .collect();
    assert_eq!(judge(l, NodeKind::Read, &rw, &rw[4]), wait(&rw[2], true, false));
    assert_eq!(
        judge(l, NodeKind::Write, &rw, &rw[4]),
        scouted(&rw[3], true, false, Some(&rw[2]))
    );
    let ww: Vec<String> = (0..4)
        .map(|i| node(l, if i == 3 { NodeKind::Read } else { NodeKind::Write }, i))
        .collect();
    assert_eq!(
        judge(l, NodeKind::Read, &ww, &ww[3]),
        scouted(&ww[2], true, false, Some(&ww[1]))
    );
    for peer in [Layout::Curator, Layout::Kazoo] {
        let q: Vec<String> = (0..4).map(|i| node(peer, NodeKind::Lock, i)).collect();
        assert_eq!(
            judge(peer, NodeKind::Lock, &q, &q[3]),
            wait(&q[2], false, false),
            "{peer}"
        );
    }
}

/// Decision 0073: a node that came to hold through its blocker's mark in a wait in line, on a blocker that was not first
/// in its list, passes the mark on (the driver asks only after a wait that did not end in a handoff within the
/// process); not one whose blocker was first (two clients taking turns: the node behind sees ours first), nor a
/// reader, nor the peers' layouts.
#[test]
fn the_mark_is_passed_on_only_behind_a_blocker_that_was_not_first() {
    let l = Layout::Native;
    let q: Vec<String> = (0..4).map(|i| node(l, NodeKind::Lock, i)).collect();
    let lock = Queue::lock(l, NodeKind::Lock);
    let Verdict::Wait(behind_two) = lock.judge(&q, &q[2]) else {
        panic!("the third waits")
    };
    assert!(!behind_two.blocker_first);
    assert!(lock.passes_mark_on(&behind_two));
    let Verdict::Wait(behind_first) = lock.judge(&q, &q[1]) else {
        panic!("the second waits")
    };
    assert!(behind_first.blocker_first);
    assert!(!lock.passes_mark_on(&behind_first));
    // A writer behind a reader behind a writer passes it on; the reader never does.
    let rw: Vec<String> = (0..4)
        .map(|i| node(l, if i == 2 { NodeKind::Read } else { NodeKind::Write }, i))
        .collect();
    let writer = Queue::lock(l, NodeKind::Write);
    let Verdict::Wait(w) = writer.judge(&rw, &rw[3]) else {
        panic!("the writer waits")
    };
    assert!(!w.blocker_first);
    assert!(writer.passes_mark_on(&w));
    let reader = Queue::lock(l, NodeKind::Read);
    let Verdict::Wait(r) = reader.judge(&rw, &rw[2]) else {
        panic!("the reader waits")
    };
    assert!(!r.blocker_first);
    assert!(!reader.passes_mark_on(&r));
    assert!(!Queue::permits(l, 1, 3).passes_mark_on(&behind_two));
    for peer in [Layout::Curator, Layout::Kazoo] {
        let q: Vec<String> = (0..4).map(|i| node(peer, NodeKind::Lock, i)).collect();
        let lock = Queue::lock(peer, NodeKind::Lock);
        let Verdict::Wait(w) = lock.judge(&q, &q[2]) else {
            panic!("{peer}: the third waits")
        };
        assert!(!lock.passes_mark_on(&w), "{peer}");
    }
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

/// A listing of one name (every uncontended acquire lists its own node alone) is judged as any listing: in every
/// layout and order, for every kind, weight and count, with the name ours or not, a contender or not (a native name
/// without its sequence), and of another family.
#[test]
fn judge_alone_is_judge() {
    let id = Uuid::from_u128(7);
    let kinds = [NodeKind::Lock, NodeKind::Read, NodeKind::Write, NodeKind::Permit];
    for layout in [Layout::Native, Layout::Curator, Layout::Kazoo, Layout::Etcd] {
        for order in [ChildOrder::Sequence, ChildOrder::Creation] {
            for kind in kinds {
                for (weight, permits) in [(1, 1), (2, 3), (3, 2)] {
                    let q = match kind {
                        NodeKind::Permit => Queue::permits(layout, weight, permits),
                        _ => Queue::lock(layout, kind),
                    }
                    .ordered_by(order);
                    let mut names = vec!["config".to_owned(), "L-".to_owned(), Layout::session_name(7)];
                    for other in kinds {
                        for named in [Layout::Native, Layout::Curator, Layout::Kazoo] {
                            let prefix = named.weighted_prefix(other, id, weight);
                            names.push(format!("{prefix}0000000042"));
                            names.push(format!("{prefix}-000000042"));
                            names.push(prefix);
                        }
                    }
                    for only in &names {
                        let listing = [only.clone()];
                        for ours in [only.as_str(), "L-missing"] {
                            assert_eq!(
                                q.judge(&listing, ours),
                                q.judge_listing(&listing, ours),
                                "{layout} {order:?} {kind:?} {weight}/{permits}: {only} judged for {ours}"
                            );
                        }
                    }
                }
            }
        }
    }
}
