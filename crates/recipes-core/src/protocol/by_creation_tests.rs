//! The protocols on a backend that orders children by creation (etcd's order, decision 0068): names without a
//! sequence, the queue in the order of the listing, no wait in line.

use super::*;
use crate::layout::NodeKind;
use uuid::Uuid;

/// A native name as a creation-ordered backend makes it: the prefix alone.
fn made(kind: NodeKind, n: u128) -> String {
    Layout::Native.prefix(kind, Uuid::from_u128(n))
}

#[test]
fn the_listing_is_the_queue_and_no_one_waits_in_line() {
    let (a, b, c) = (
        made(NodeKind::Lock, 3),
        made(NodeKind::Lock, 1),
        made(NodeKind::Lock, 2),
    );
    // Listed in creation order: a, b, c (whatever their names say).
    let listing = vec![a.clone(), b.clone(), c.clone()];
    let q = Queue::lock(Layout::Native, NodeKind::Lock).ordered_by(ChildOrder::Creation);
    assert_eq!(q.judge(&listing, &a), Verdict::Acquired);
    for (ours, on) in [(&b, &a), (&c, &b)] {
        match q.judge(&listing, ours) {
            Verdict::Wait(w) => {
                assert_eq!(&w.on, on);
                assert!(!w.in_line && !w.blocker_first && !w.change_means_held, "{w:?}");
            }
            v => panic!("expected a wait on {on}, got {v:?}"),
        }
    }
    assert_eq!(q.judge(&listing, &made(NodeKind::Lock, 9)), Verdict::Missing);
    assert!(
        !q.hands_over(),
        "no handoff within the process: its waiters do not wait in line"
    );
    let long: Vec<String> = (0..200).map(|n| made(NodeKind::Lock, n)).collect();
    assert!(!q.marks_when_held(&long), "no mark: nobody waits in line for it");
}

#[test]
fn readers_and_writers_follow_the_listing() {
    let (w1, r1, r2, w2) = (
        made(NodeKind::Write, 4),
        made(NodeKind::Read, 3),
        made(NodeKind::Read, 2),
        made(NodeKind::Write, 1),
    );
    let listing = vec![r1.clone(), w1.clone(), r2.clone(), w2.clone()];
    let read = Queue::lock(Layout::Native, NodeKind::Read).ordered_by(ChildOrder::Creation);
    let write = Queue::lock(Layout::Native, NodeKind::Write).ordered_by(ChildOrder::Creation);
    assert_eq!(read.judge(&listing, &r1), Verdict::Acquired);
    assert!(matches!(write.judge(&listing, &w1), Verdict::Wait(w) if w.on == r1));
    assert!(matches!(read.judge(&listing, &r2), Verdict::Wait(w) if w.on == w1));
    assert!(matches!(write.judge(&listing, &w2), Verdict::Wait(w) if w.on == r2));
}

#[test]
fn a_semaphore_counts_its_window_in_the_listing() {
    let s = |n| Layout::Native.weighted_prefix(NodeKind::Permit, Uuid::from_u128(n), 1);
    let heavy = Layout::Native.weighted_prefix(NodeKind::Permit, Uuid::from_u128(7), 2);
    let listing = vec![s(5), heavy.clone(), s(1)];
    let one = Queue::permits(Layout::Native, 1, 3).ordered_by(ChildOrder::Creation);
    let two = Queue::permits(Layout::Native, 2, 3).ordered_by(ChildOrder::Creation);
    assert_eq!(two.judge(&listing, &heavy), Verdict::Acquired);
    // Three permits claimed ahead of it and its own: it waits, watching its window (both nodes ahead).
    match one.judge(&listing, &s(1)) {
        Verdict::Wait(w) => assert_eq!((w.on.as_str(), w.also.as_slice()), (heavy.as_str(), &[s(5)][..])),
        v => panic!("{v:?}"),
    }
    assert_eq!(one.judge(&[heavy.clone(), s(1)], &s(1)), Verdict::Acquired);
}

#[test]
fn names_without_a_sequence_count_only_where_the_order_is_by_creation() {
    let bare = made(NodeKind::Lock, 1);
    let sequenced = format!("{}0000000007", made(NodeKind::Lock, 2));
    // A ZooKeeper listing: the bare name (no create of this library makes one there) is no contender ...
    let cs = contenders(Layout::Native, &[bare.clone(), sequenced.clone()]);
    assert_eq!(
        cs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        [sequenced.as_str()]
    );
    // ... but still a node of the native family, which the exclusive recipe refuses beside.
    assert_eq!(
        crate::layout::Family::of(&bare),
        Some(crate::layout::Family::NativeQueue)
    );
    // By creation: both, in the listing's order (a sequence in a name says nothing there).
    let cs = contenders_in(Layout::Native, ChildOrder::Creation, &[sequenced.clone(), bare.clone()]);
    assert_eq!(
        cs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        [sequenced.as_str(), bare.as_str()]
    );
}

#[test]
fn the_peer_layouts_are_refused_where_the_order_is_by_creation() {
    assert!(layout_fits(Layout::Native, ChildOrder::Creation).is_ok());
    for layout in [Layout::Curator, Layout::Kazoo] {
        assert!(layout_fits(layout, ChildOrder::Sequence).is_ok());
        match layout_fits(layout, ChildOrder::Creation) {
            Err(crate::Error::InvalidArgument(m)) => assert!(m.contains("native layout"), "{m}"),
            r => panic!("{layout}: {r:?}"),
        }
    }
}

#[test]
fn the_etcd_layout_names_by_session_and_follows_the_listing() {
    let q = Queue::lock(Layout::Etcd, NodeKind::Lock).ordered_by(ChildOrder::Creation);
    assert!(q.session_named());
    assert_eq!(q.prefix(Uuid::from_u128(7), 0x694d_7c1a_2b3c_4d5e), "694d7c1a2b3c4d5e");
    assert!(
        !q.made_by("694d7c1a2b3c4d5e", Uuid::from_u128(7)),
        "the name says nothing of the attempt"
    );
    assert_eq!(q.family(), crate::layout::Family::EtcdMutex);
    // Go's keys and ours alike, in the listing's order (by create revision).
    let listing: Vec<String> = ["7587", "694d7c1a2b3c4d5e", "1f"].map(String::from).into();
    assert_eq!(q.judge(&listing, "7587"), Verdict::Acquired);
    assert!(matches!(q.judge(&listing, "1f"), Verdict::Wait(w) if w.on == "694d7c1a2b3c4d5e" && !w.in_line));
    // A native node on the path is another family's: refused, and the native queue refuses beside etcd's keys.
    let native = made(NodeKind::Lock, 1);
    assert!(matches!(
        q.judge(&[native.clone(), "1f".to_owned()], "1f"),
        Verdict::Refuse(_)
    ));
    let nq = Queue::lock(Layout::Native, NodeKind::Lock).ordered_by(ChildOrder::Creation);
    assert!(matches!(
        nq.judge(&["1f".to_owned(), native.clone()], &native),
        Verdict::Refuse(_)
    ));
}

#[test]
fn only_lease_ids_are_etcd_mutex_keys() {
    use crate::layout::Family;
    for name in ["1", "1f", "694d7c1a2b3c4d5e", "7fffffffffffffff"] {
        assert_eq!(
            Family::of_in(name, ChildOrder::Creation),
            Some(Family::EtcdMutex),
            "{name}"
        );
        // On ZooKeeper no such lock can be: the name is no lock node.
        assert_eq!(Family::of(name), None, "{name}");
        assert!(Layout::Etcd.parse(name).is_some(), "{name}");
    }
    // A leading zero, upper case, more than 16 digits, other letters: not Go's `%x` of a lease id.
    for name in ["0", "01f", "1F", "694d7c1a2b3c4d5e0", "lock", "leases", "g1", ""] {
        assert_ne!(
            Family::of_in(name, ChildOrder::Creation),
            Some(Family::EtcdMutex),
            "{name}"
        );
        assert!(Layout::Etcd.parse(name).is_none(), "{name}");
    }
    assert!(layout_fits(Layout::Etcd, ChildOrder::Creation).is_ok());
    assert!(matches!(
        layout_fits(Layout::Etcd, ChildOrder::Sequence),
        Err(crate::Error::InvalidArgument(_))
    ));
    assert_eq!("etcd".parse::<Layout>().unwrap(), Layout::Etcd);
}
