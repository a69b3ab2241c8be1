//! Table tests of the order and the decision.

use super::*;
use crate::layout::NodeKind;
use uuid::Uuid;

fn name(kind: NodeKind, seq: i32) -> String {
    // A fixed id per (kind, seq) so names are distinct and sort differently from their sequence.
    let id = Uuid::from_u128(u128::MAX - (seq as u32 as u128) * 7919);
    format!("{}{:010}", Layout::Native.prefix(kind, id), seq)
}

fn queue(spec: &str) -> Vec<String> {
    spec.split_whitespace()
        .map(|t| {
            let (k, s) = t.split_at(1);
            let kind = match k {
                "L" => NodeKind::Lock,
                "R" => NodeKind::Read,
                "W" => NodeKind::Write,
                _ => unreachable!(),
            };
            name(kind, s.parse().unwrap())
        })
        .collect()
}

/// (queue in arbitrary order, our token, expected: "acq" | "miss" | token waited on)
const TABLE: &[(&str, &str, &str)] = &[
    ("L1", "L1", "acq"),
    ("L2 L1", "L2", "L1"),
    ("L3 L1 L2", "L3", "L2"),
    ("L1 L2 L3", "L1", "acq"),
    ("L1 L3", "L2", "miss"),
    // ordered by sequence, not by name: a large sequence sorts after a small one whatever the id
    ("L10 L9", "L10", "L9"),
    ("L1000000000 L999999999", "L1000000000", "L999999999"),
    // across the counter's wrap, creation order: the node made before the wrap stays ahead
    ("L2147483647 L-2147483648", "L2147483647", "acq"),
    ("L2147483647 L-2147483648", "L-2147483648", "L2147483647"),
    ("L-2147483647 L2147483646 L-2147483648", "L-2147483647", "L-2147483648"),
    // readers
    ("R1 R2 R3", "R3", "acq"),
    ("W1 R2", "R2", "W1"),
    ("R1 W2 R3", "R3", "W2"),
    ("R1 W2 R3", "R1", "acq"),
    ("W1 R2 W3 R4", "R4", "W3"),
    ("W1 R2 W3 R4", "R2", "W1"),
    ("R1 W2 R3 R4", "R4", "W2"),
    ("L1 R2", "R2", "L1"),
    // writers wait on the immediate predecessor, reader or writer
    ("R1 R2 W3", "W3", "R2"),
    ("W1 W2", "W2", "W1"),
    ("W1 R2 W3", "W3", "R2"),
    ("W1", "W1", "acq"),
];

#[test]
fn decision_table() {
    for (q, ours, want) in TABLE {
        let names = queue(q);
        let ours_name = queue(ours).remove(0);
        let kind = Layout::Native.parse(&ours_name).unwrap().kind;
        let got = decide(Layout::Native, kind, &contenders(Layout::Native, &names), &ours_name, 1);
        let want = match *want {
            "acq" => Decision::Acquired,
            "miss" => Decision::Missing,
            w => Decision::Wait { on: queue(w).remove(0) },
        };
        assert_eq!(got, want, "queue {q}, ours {ours}");
    }
}

#[test]
fn reader_never_waits_on_a_later_writer() {
    let names = queue("R1 W2 W3 R4");
    let c = contenders(Layout::Native, &names);
    assert_eq!(
        decide(Layout::Native, NodeKind::Read, &c, &names[0], 1),
        Decision::Acquired
    );
}

#[test]
fn unknown_children_are_ignored() {
    let mut names = queue("L2 L3");
    names.push("lock".into());
    names.push("garbage-0000000001".into());
    let c = contenders(Layout::Native, &names);
    assert_eq!(c.len(), 2);
    assert_eq!(
        decide(Layout::Native, NodeKind::Lock, &c, &names[0], 1),
        Decision::Acquired
    );
}

fn order(layout: Layout, names: &[&str]) -> Vec<String> {
    contenders(layout, names).into_iter().map(|c| c.name).collect()
}

#[test]
fn wrapped_sequences_order_per_layout() {
    // Creation order across the wrap: 2147483646, 2147483647, -2147483648, -2147483647.
    let seqs = ["2147483646", "2147483647", "-2147483648", "-2147483647"];
    let names = |layout: Layout| -> Vec<String> {
        let p = layout.prefix(NodeKind::Lock, Uuid::from_u128(1));
        seqs.iter().map(|s| format!("{p}{s}")).collect()
    };
    let sorted = |layout: Layout| {
        let n = names(layout);
        let refs: Vec<&str> = n.iter().map(String::as_str).collect();
        let got = order(layout, &refs);
        got.iter()
            .map(|g| n.iter().position(|x| x == g).unwrap())
            .collect::<Vec<_>>()
    };
    // Native: creation order, so the holder made before the wrap stays first.
    assert_eq!(sorted(Layout::Native), vec![0, 1, 2, 3]);
    // Curator and kazoo: text order, as they sort ("-2147483647" < "-2147483648" < "2147483646" < ...): a node
    // made after the wrap jumps ahead. Reproduced exactly so that all processes on a path agree; documented.
    assert_eq!(sorted(Layout::Curator), vec![3, 2, 0, 1]);
    assert_eq!(sorted(Layout::Kazoo), vec![3, 2, 0, 1]);
    // Near zero (-2, -1, 0, 1) the native order is plain numeric, which is creation order.
    let p = Layout::Native.prefix(NodeKind::Lock, Uuid::from_u128(1));
    let n: Vec<String> = ["-000000002", "-000000001", "0000000000", "0000000001"]
        .iter()
        .map(|s| format!("{p}{s}"))
        .collect();
    let refs: Vec<&str> = n.iter().map(String::as_str).collect();
    assert_eq!(order(Layout::Native, &refs), n);
    // kazoo itself does not count "-000000001" (nine digits after the sign), but the kazoo layout must find its
    // own node there (else it would leave it behind and create another, and another).
    let k = Layout::Kazoo.prefix(NodeKind::Lock, Uuid::from_u128(1));
    assert_eq!(contenders(Layout::Kazoo, &[format!("{k}-000000001")]).len(), 1);
}

#[test]
fn curator_readers_watch_the_first_writer() {
    let id = |i: u128| Uuid::from_u128(i);
    let c = Layout::Curator;
    let w1 = format!("{}0000000001", c.prefix(NodeKind::Write, id(1)));
    let w2 = format!("{}0000000002", c.prefix(NodeKind::Write, id(2)));
    let r3 = format!("{}0000000003", c.prefix(NodeKind::Read, id(3)));
    let cs = contenders(c, &[&w2, &r3, &w1]);
    assert_eq!(
        decide(c, NodeKind::Read, &cs, &r3, 1),
        Decision::Wait { on: w1.clone() }
    );
    assert_eq!(
        decide(c, NodeKind::Write, &cs, &w2, 1),
        Decision::Wait { on: w1.clone() }
    );
    let n = Layout::Native;
    let w1 = format!("{}0000000001", n.prefix(NodeKind::Write, id(1)));
    let w2 = format!("{}0000000002", n.prefix(NodeKind::Write, id(2)));
    let r3 = format!("{}0000000003", n.prefix(NodeKind::Read, id(3)));
    let cs = contenders(n, &[&w2, &r3, &w1]);
    assert_eq!(decide(n, NodeKind::Read, &cs, &r3, 1), Decision::Wait { on: w2 });
}

#[test]
fn would_wait_table() {
    let c = |q: &str| queue(q);
    let would_wait = |kind, q: &Vec<String>| Queue::lock(Layout::Native, kind).newcomer(q).unwrap();
    assert!(!would_wait(NodeKind::Lock, &c("")));
    assert!(would_wait(NodeKind::Lock, &c("R1")));
    assert!(!would_wait(NodeKind::Read, &c("R1 R2")));
    assert!(would_wait(NodeKind::Read, &c("R1 W2")));
    assert!(would_wait(NodeKind::Write, &c("R1")));
}

fn permit(seq: i32, weight: u32) -> String {
    let id = Uuid::from_u128(u128::from(seq as u32) + 11);
    format!(
        "{}{:010}",
        Layout::Native.weighted_prefix(NodeKind::Permit, id, weight),
        seq
    )
}

#[test]
fn permit_names_carry_their_weight() {
    for (seq, weight) in [(1, 1), (7, 2), (-5, 3), (2_147_483_647, 17)] {
        let n = permit(seq, weight);
        let p = Layout::Native.parse(&n).unwrap();
        assert_eq!((p.kind, p.seq, p.weight), (NodeKind::Permit, Some(seq), weight), "{n}");
        assert_eq!(
            crate::layout::Family::of(&n),
            Some(crate::layout::Family::NativeSemaphore)
        );
    }
    // A weight is canonical, above 1, and only on permits.
    let id = "0123456789abcdef0123456789abcdef";
    for bad in [
        format!("S-{id}-1-0000000001"),
        format!("S-{id}-02-0000000001"),
        format!("S-{id}-x-0000000001"),
        format!("L-{id}-2-0000000001"),
    ] {
        assert_eq!(Layout::Native.parse(&bad), None, "{bad}");
    }
}

/// (weights of the queue in order, our index, permits) -> indexes of the window (empty: holds)
#[test]
fn permit_window_table() {
    let table: &[(&[u32], usize, u32, &[usize])] = &[
        (&[1], 0, 1, &[]),
        (&[1, 1], 1, 1, &[0]),
        (&[1, 1, 1], 2, 3, &[]),
        (&[1, 1, 1, 1], 3, 3, &[0, 1, 2]),
        (&[1, 1, 1, 1, 1], 4, 3, &[1, 2, 3]),
        (&[2, 1], 1, 3, &[]),
        (&[2, 2], 1, 3, &[0]),
        (&[1, 1, 1, 2], 3, 3, &[1, 2]),
        (&[3, 1, 1], 2, 3, &[0, 1]),
        (&[1, 3], 1, 3, &[0]),
    ];
    for (weights, ours, permits, want) in table {
        let q: Vec<String> = weights
            .iter()
            .enumerate()
            .map(|(i, w)| permit(i as i32 + 1, *w))
            .collect();
        let cs = contenders(Layout::Native, &q);
        let window = permit_window(&cs[..*ours], cs[*ours].weight, *permits);
        let got: Vec<usize> = window
            .iter()
            .map(|c| cs.iter().position(|x| x.name == c.name).unwrap())
            .collect();
        assert_eq!(&got, want, "weights {weights:?}, ours {ours}, permits {permits}");
    }
}

proptest::proptest! {
    /// The window's promise: the node cannot come to hold unless a node of its window goes first. Every way of
    /// deleting nodes ahead that lets it hold deletes one of the window.
    #[test]
    fn no_node_holds_without_a_deletion_in_its_window(
        weights in proptest::collection::vec(1u32..4, 1..9),
        permits in 1u32..6,
        gone in proptest::collection::vec(proptest::bool::ANY, 8),
    ) {
        let ours = weights.len() - 1;
        proptest::prop_assume!(weights[ours] <= permits);
        let q: Vec<String> = weights.iter().enumerate().map(|(i, w)| permit(i as i32 + 1, *w)).collect();
        let cs = contenders(Layout::Native, &q);
        let window: Vec<String> = permit_window(&cs[..ours], cs[ours].weight, permits).iter().map(|c| c.name.clone()).collect();
        let left: Vec<String> = q.iter().enumerate().filter(|(i, _)| *i == ours || !gone[*i]).map(|(_, n)| n.clone()).collect();
        let holds_after = matches!(decide(Layout::Native, NodeKind::Permit, &contenders(Layout::Native, &left), &q[ours], permits), Decision::Acquired);
        let window_touched = window.iter().any(|w| !left.contains(w));
        proptest::prop_assert!(window.is_empty() || !holds_after || window_touched);
    }
}

/// A lock's node is one permit whatever count the path stores: a report of the participants that sees a semaphore's
/// passing node beside a lock's queue never calls a waiting lock node a holder.
#[test]
fn a_lock_node_ignores_the_paths_permit_count() {
    let q = queue("L5 L6 W8");
    let mut names = q.clone();
    names.push(permit(7, 1));
    let cs = contenders(Layout::Native, &names);
    assert_eq!(
        decide(Layout::Native, NodeKind::Lock, &cs, &q[1], 3),
        Decision::Wait { on: q[0].clone() }
    );
    assert_eq!(
        decide(Layout::Native, NodeKind::Write, &cs, &q[2], 3),
        Decision::Wait { on: names[3].clone() }
    );
    assert_eq!(
        decide(Layout::Native, NodeKind::Lock, &cs, &q[0], 3),
        Decision::Acquired
    );
}

/// The contenders of a listing as first written, one rule after the other: every name the layout reads, sorted by
/// its key, writers before readers at one key, then by name (no sequence here is near the wrap).
fn contenders_reference(layout: Layout, names: &[String]) -> Vec<Contender> {
    let mut out: Vec<Contender> = names
        .iter()
        .filter_map(|n| {
            layout.parse(n).map(|p| Contender {
                name: n.clone(),
                kind: p.kind,
                key: p.key,
                weight: p.weight,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.key, !a.kind.blocks_readers(), &a.name).cmp(&(&b.key, !b.kind.blocks_readers(), &b.name)));
    out
}

proptest::proptest! {
    /// One pass over a listing finds the same contenders, in the same order, and the same first foreign node, as
    /// the first rules do on their own (`contenders_reference`, and [`foreign`]), for every layout and family, on
    /// listings that mix every family's names with names of none.
    #[test]
    fn one_pass_over_a_listing_agrees_with_each_rule(picks in proptest::collection::vec((0usize..14, 0u32..40), 0..12)) {
        let id = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let names: Vec<String> = picks
            .iter()
            .map(|(pick, seq)| match pick {
                0..=2 => format!("{}{seq:010}", Layout::Native.prefix([NodeKind::Lock, NodeKind::Read, NodeKind::Write][*pick], id)),
                3 => format!("{}{seq:010}", Layout::Native.weighted_prefix(NodeKind::Permit, id, 2)),
                4..=6 => format!("{}{seq:010}", Layout::Curator.prefix([NodeKind::Lock, NodeKind::Read, NodeKind::Permit][*pick - 4], id)),
                7 | 8 => format!("{}{seq:010}", Layout::Kazoo.prefix([NodeKind::Lock, NodeKind::Read][*pick - 7], id)),
                9 => crate::layout::EXCLUSIVE_NODE.to_owned(),
                10 => "leases".to_owned(),
                11 => format!("{:032x}", u128::from(*seq)),
                12 => format!("L-{seq}"),
                _ => format!("config-{seq}"),
            })
            .collect();
        for layout in Layout::ALL {
            for own in [
                Family::Exclusive,
                Family::NativeQueue,
                Family::NativeSemaphore,
                Family::CuratorLock,
                Family::CuratorLease,
                Family::CuratorSemaphore,
                Family::Kazoo,
                Family::KazooLease,
            ] {
                for n in &names {
                    let unqueued = matches!(Family::of(n), Some(Family::Exclusive | Family::KazooLease | Family::CuratorSemaphore));
                    proptest::prop_assert!(!unqueued || crate::layout::may_be_unqueued(n), "{}", n);
                }
                let (cs, found) = super::order::contenders_and_foreign(layout, ChildOrder::Sequence, Some(own), &names);
                proptest::prop_assert_eq!(&cs, &contenders_reference(layout, &names));
                proptest::prop_assert_eq!(found, foreign(own, &names));
            }
        }
    }
}
