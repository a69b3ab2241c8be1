//! Leader election: one leader at a time, terms that increase, observers that see who leads, resignation, loss on
//! session expiry, bad candidates refused, and every layout.

use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_core::{Candidate, Error, Layout, Locks, LostReason, NodeKind};
use tokio::task::JoinSet;

use crate::harness::Harness;
use crate::util::{assert_increasing, assert_pending, bounded, path_kept_at_sequence, skip, wait_children, Occupancy};

/// Three candidates on three sessions take turns: never two leaders at once, terms strictly increasing in the order
/// of the terms, and an observer on a fourth session reads the leader's id and term while it leads.
pub async fn election_one_leader_at_a_time(h: &dyn Harness) {
    let path = h.path("election-one-leader");
    let observer = h.client().await;
    let occ = Occupancy::new();
    let mut set = JoinSet::new();
    for i in 0..3 {
        let c = h.client().await;
        let election = c.locks.election(&path).unwrap();
        let watcher = observer.locks.election(&path).unwrap();
        let occ = occ.clone();
        set.spawn(async move {
            let me = election.candidate(format!("candidate-{i}")).unwrap();
            for _ in 0..5 {
                let leading = me.leadership().await.expect("leadership");
                occ.enter_exclusive(leading.term());
                assert!(leading.is_valid());
                let seen = watcher.leader().await.expect("leader").expect("someone leads");
                assert_eq!((seen.id.as_str(), seen.term), (me.id(), leading.term()));
                tokio::time::sleep(Duration::from_millis(2)).await;
                occ.exit_exclusive();
                leading.resign().await.expect("resign");
            }
            drop(c);
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("candidate task");
    }
    assert_eq!(occ.violations(), 0, "two leaders at once");
    assert_eq!(occ.entries(), 15);
    assert_increasing(&occ.tokens());
    wait_children(h, &path, 0).await;
    assert_eq!(observer.locks.election(&path).unwrap().leader().await.unwrap(), None);
}

/// A resignation lets the next candidate lead at once, with a higher term; the candidates are listed in order, each
/// with its id and data.
pub async fn election_resign_lets_the_next_lead(h: &dyn Harness) {
    let path = h.path("election-resign");
    let (a, b) = (h.client().await, h.client().await);
    let ea = a.locks.election(&path).unwrap();
    let first = ea.candidate("a").unwrap().with_data(b"10.0.0.1:80".to_vec()).unwrap();
    let leading = first.leadership().await.unwrap();
    let second = b.locks.election(&path).unwrap().candidate("b").unwrap();
    let mut waiting = Box::pin(second.leadership());
    assert_pending(h, "the second candidate waits", &mut waiting).await;
    let standing = ea.candidates().await.unwrap();
    let ids: Vec<_> = standing.iter().map(|l| (l.id.as_str(), l.data.as_slice())).collect();
    assert_eq!(ids, vec![("a", b"10.0.0.1:80".as_slice()), ("b", b"".as_slice())]);
    assert_eq!(standing[0].term, leading.term());
    assert!(
        second.try_leadership().await.unwrap().is_none(),
        "a try while another leads"
    );
    let term = leading.term();
    leading.resign().await.unwrap();
    let next = bounded(h, "the second candidate leads", waiting).await.unwrap();
    assert!(next.term() > term);
    assert_eq!(ea.leader().await.unwrap().map(|l| l.id), Some("b".to_owned()));
    drop(next);
    wait_children(h, &path, 0).await;
}

/// When the leader's session expires, it learns it from `lost()` and `is_valid()`, the next candidate leads with a
/// higher term, the old leader's resignation reports the loss, and it may stand again, behind the new leader.
pub async fn election_leader_lost_on_session_expiry(h: &dyn Harness) {
    let path = h.path("election-expiry");
    let (a, b) = (h.client().await, h.client().await);
    let ca = a.locks.election(&path).unwrap().candidate("a").unwrap();
    let cb = b.locks.election(&path).unwrap().candidate("b").unwrap();
    let old = ca.leadership().await.unwrap();
    let mut waiting = Box::pin(cb.leadership());
    assert_pending(h, "b waits", &mut waiting).await;
    a.faults.expire_session().await;
    assert_eq!(bounded(h, "lost", old.lost()).await, LostReason::SessionExpired);
    assert!(!old.is_valid());
    let new = bounded(h, "b leads", waiting).await.unwrap();
    assert!(new.term() > old.term());
    assert!(
        old.resign().await.is_err(),
        "a lost leadership's resignation reports the loss"
    );
    let mut again = Box::pin(ca.leadership());
    assert_pending(h, "a stands again, behind b", &mut again).await;
    new.resign().await.unwrap();
    let back = bounded(h, "a leads again", again).await.unwrap();
    assert_eq!(back.id(), "a");
    back.resign().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Bad candidates are refused with a typed error, before any node is made.
pub async fn election_bad_candidates_refused(h: &dyn Harness) {
    let path = h.path("election-bad");
    let a = h.client().await;
    let election = a.locks.election(&path).unwrap();
    for id in [
        "".to_owned(),
        "two\nlines".to_owned(),
        "x".repeat(Candidate::MAX_ID_LEN + 1),
    ] {
        assert!(
            matches!(election.candidate(id.clone()), Err(Error::InvalidArgument(_))),
            "id {id:?}"
        );
    }
    let big = vec![0u8; Candidate::MAX_DATA_LEN + 1];
    assert!(matches!(
        election.candidate("ok").unwrap().with_data(big),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(a.locks.election("no-slash"), Err(Error::InvalidPath { .. })));
    assert_eq!(election.leader().await.unwrap(), None);
    assert!(h.children(&path).await.is_empty());
}

/// In every layout, a leader is seen with its id and term, and the next one leads after it.
pub async fn election_in_every_layout(h: &dyn Harness) {
    for layout in super::queue_layouts_here(&h.client().await.locks) {
        let path = h.path(&format!("election-{layout}"));
        let (a, b) = (h.client().await, h.client().await);
        let la = Locks::builder(a.locks.backend().clone()).layout(layout).build();
        let lb = Locks::builder(b.locks.backend().clone()).layout(layout).build();
        let first = la.election(&path).unwrap().candidate("first").unwrap();
        let second = lb.election(&path).unwrap().candidate("second").unwrap();
        let leading = first.leadership().await.unwrap();
        let mut waiting = Box::pin(second.leadership());
        assert_pending(h, "the second waits", &mut waiting).await;
        let seen = lb.election(&path).unwrap().leader().await.unwrap().expect("a leader");
        assert_eq!((seen.id.as_str(), seen.term), ("first", leading.term()), "{layout}");
        let term = leading.term();
        leading.resign().await.unwrap();
        let next = bounded(h, "the second leads", waiting).await.unwrap();
        assert!(next.term() > term, "{layout}");
        next.resign().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// In a peer layout, an observer that finds a node whose sequence has wrapped names no leader: the layout orders it
/// ahead of the holder (as its peers do), so the first node is not the leader (found by review: it was reported).
pub async fn election_observer_refuses_a_wrapped_peer_queue(h: &dyn Harness) {
    if !h.capabilities().set_sequence {
        return skip(
            h,
            "election_observer_refuses_a_wrapped_peer_queue",
            "settable sequences",
        );
    }
    let (a, b) = (h.client().await, h.client().await);
    for layout in [Layout::Curator, Layout::Kazoo] {
        let path = h.path(&format!("election-wrap-{layout}"));
        let la = Locks::builder(a.locks.backend().clone()).layout(layout).build();
        let on = b.locks.backend().current();
        // The path kept from being reaped by a child that is no lock node, its counter set just below the wrap.
        let keep = path_kept_at_sequence(h, on, &path, i32::MAX).await;
        let leading = la
            .election(&path)
            .unwrap()
            .candidate("holder")
            .unwrap()
            .leadership()
            .await
            .unwrap();
        // A peer's candidate next: its sequence wraps, and the layout sorts it first.
        let name = layout.prefix(NodeKind::Lock, uuid::Uuid::new_v4());
        let peer = on
            .create(&format!("{path}/{name}"), b"peer-1", CreateMode::EphemeralSequential)
            .await
            .unwrap();
        let seen = la.election(&path).unwrap().leader().await;
        assert!(matches!(seen, Err(Error::SequenceWrapped { .. })), "{layout}: {seen:?}");
        on.delete(&peer.path).await.unwrap();
        let seen = la.election(&path).unwrap().leader().await.unwrap().map(|l| l.id);
        assert_eq!(seen.as_deref(), Some("holder"), "{layout}");
        leading.resign().await.unwrap();
        on.delete(&keep).await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// A leader cut off from the servers past its session timeout (a long GC pause, a partition) learns that it lost
/// (its lease: `lost()`, `is_valid()`) before the next candidate leads, the next one's term is higher, and once back
/// it learns of the expiry and may stand again, behind the new leader.
pub async fn election_cut_off_leader_knows_before_the_next_leads(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return skip(h, "election_cut_off_leader_knows_before_the_next_leads", "disconnects");
    }
    let path = h.path("election-cut-off");
    let (a, b) = (h.client().await, h.client().await);
    let ca = a.locks.election(&path).unwrap().candidate("a").unwrap();
    let cb = b.locks.election(&path).unwrap().candidate("b").unwrap();
    let old = ca.leadership().await.unwrap();
    let next = tokio::spawn(async move {
        let l = cb.leadership().await.unwrap();
        (tokio::time::Instant::now(), l)
    });
    wait_children(h, &path, 2).await;
    a.faults.disconnect_for(a.faults.session_timeout() * 2).await;
    assert_eq!(
        bounded(h, "the old leader's lease", old.lost()).await,
        LostReason::LeaseExpired
    );
    let knew_at = tokio::time::Instant::now();
    assert!(!old.is_valid());
    let (led_at, new) = bounded(h, "b leads", next).await.unwrap();
    assert!(led_at >= knew_at, "b led before the cut-off leader knew it had lost");
    assert!(new.term() > old.term());
    crate::util::eventually(h, "a learns that its session expired", || async {
        tokio::time::timeout(h.tick(), old.lost()).await == Ok(LostReason::SessionExpired)
    })
    .await;
    drop(old);
    let mut again = Box::pin(ca.leadership());
    assert_pending(h, "a stands again, behind b", &mut again).await;
    new.resign().await.unwrap();
    bounded(h, "a leads again", again)
        .await
        .unwrap()
        .resign()
        .await
        .unwrap();
    wait_children(h, &path, 0).await;
}

/// An observer whose connection broke while the leader changed never reports the old leader once it has reported the
/// new one, and reports the new one once it is back.
pub async fn election_observer_after_reconnect_never_goes_back(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return skip(h, "election_observer_after_reconnect_never_goes_back", "disconnects");
    }
    let path = h.path("election-observer-reconnect");
    let (a, b, o) = (h.client().await, h.client().await, h.client().await);
    let first = a
        .locks
        .election(&path)
        .unwrap()
        .candidate("a")
        .unwrap()
        .leadership()
        .await
        .unwrap();
    let observer = o.locks.election(&path).unwrap();
    assert_eq!(observer.leader().await.unwrap().map(|l| l.id), Some("a".to_owned()));
    o.faults.disconnect_for(o.faults.session_timeout() / 4).await;
    let cb = b.locks.election(&path).unwrap().candidate("b").unwrap();
    let next = tokio::spawn(async move { cb.leadership().await.unwrap() });
    wait_children(h, &path, 2).await;
    let old_term = first.term();
    first.resign().await.unwrap();
    let new = bounded(h, "b leads", next).await.unwrap();
    let mut last = old_term;
    let mut seen_b = false;
    // Reads after the first that names b: each must name b again (a read that went back would name a).
    let mut after_b = 0;
    let until = tokio::time::Instant::now() + h.patience();
    while tokio::time::Instant::now() < until && after_b < 10 {
        match observer.leader().await {
            Ok(Some(l)) => {
                assert!(l.term >= last, "the observer went back from term {last} to {}", l.term);
                assert!(!seen_b || l.id == "b", "the observer went back to {} after b", l.id);
                last = l.term;
                if l.id == "b" {
                    after_b += usize::from(seen_b);
                    seen_b = true;
                    tokio::time::sleep(h.tick()).await;
                }
            }
            Ok(None) => panic!("nobody leads while b does"),
            Err(Error::ConnectionLoss) => tokio::time::sleep(h.tick()).await,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(seen_b, "the observer never reported the new leader");
    assert_eq!(last, new.term());
    new.resign().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// An election held as Curator's `LeaderLatch` (`latch()`, Curator layout): candidates' nodes are named
/// `_c_<uuid>-latch-<seq>`, one leads at a time, the next leads after a resignation with a higher term, and `latch()`
/// is refused in the other layouts.
pub async fn election_as_curator_leader_latch(h: &dyn Harness) {
    let path = h.path("election-latch");
    let (a, b) = (h.client().await, h.client().await);
    let curator = |c: &crate::harness::TestClient| {
        Locks::builder(c.locks.backend().clone())
            .layout(Layout::Curator)
            .build()
    };
    let (la, lb) = (curator(&a), curator(&b));
    let first = la.election(&path).unwrap().latch().unwrap().candidate("first").unwrap();
    let second = lb
        .election(&path)
        .unwrap()
        .latch()
        .unwrap()
        .candidate("second")
        .unwrap();
    let leading = first.leadership().await.unwrap();
    let mut waiting = Box::pin(second.leadership());
    assert_pending(h, "the second waits", &mut waiting).await;
    let names = h.children(&path).await;
    assert_eq!(names.len(), 2);
    assert!(
        names.iter().all(|n| n.starts_with("_c_") && n.contains("-latch-")),
        "{names:?}"
    );
    let seen = lb
        .election(&path)
        .unwrap()
        .latch()
        .unwrap()
        .leader()
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("first", leading.term()));
    // Read as a `LeaderSelector`'s election, the latch's nodes are another family's: no leader is named.
    let seen = lb.election(&path).unwrap().leader().await;
    assert!(matches!(seen, Err(Error::ForeignLock { .. })), "{seen:?}");
    let term = leading.term();
    // The path keeps a node of its own from here, not a candidate's (Curator's families ignore a name without their
    // marker): the reaper must not take the path between the last candidate's resignation and the peer's create below.
    let on = b.locks.backend().current();
    let keep = crate::contract::kept_containers(on, &path).await;
    leading.resign().await.unwrap();
    let next = bounded(h, "the second leads", waiting).await.unwrap();
    assert!(next.term() > term);
    next.resign().await.unwrap();
    wait_children(h, &path, 1).await;
    for layout in [Layout::Native, Layout::Kazoo] {
        let other = Locks::builder(a.locks.backend().clone()).layout(layout).build();
        assert!(
            matches!(other.election(&path).unwrap().latch(), Err(Error::InvalidArgument(_))),
            "{layout}"
        );
    }
    // Curator orders a latch's nodes and a mutex's differently (each by the text after its own marker): a latch
    // beside a `LeaderSelector`'s node, or the other way round, would let both lead (found by review). Each refuses.
    for (peer_marker, latch) in [("lock-", true), ("latch-", false)] {
        let peer = on
            .create(
                &format!("{path}/_c_{}-{peer_marker}", uuid::Uuid::new_v4().hyphenated()),
                b"peer",
                CreateMode::EphemeralSequential,
            )
            .await
            .unwrap();
        let mut election = la.election(&path).unwrap();
        if latch {
            election = election.latch().unwrap();
        }
        let r = election.candidate("mixed").unwrap().try_leadership().await;
        assert!(
            matches!(r, Err(Error::ForeignLock { .. })),
            "a {} candidate beside a {peer_marker} node: {r:?}",
            if latch { "latch" } else { "LeaderSelector" }
        );
        // An observer of the other flavour names no leader either.
        let seen = election.leader().await;
        assert!(matches!(seen, Err(Error::ForeignLock { .. })), "{seen:?}");
        on.delete(&peer.path).await.unwrap();
    }
    on.delete(&keep).await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A persistent node named like a queue node is a contender to the lock (a candidate behind it waits): the observer
/// names it as the head, never the candidate that waits behind it (found by review: it was passed over).
pub async fn election_observer_names_the_head_the_lock_waits_on(h: &dyn Harness) {
    let path = h.path("election-persistent-head");
    let (a, admin) = (h.client().await, h.client().await);
    let on = admin.locks.backend().current();
    crate::contract::containers(on, &path).await;
    let nested = format!("{path}/L-0123456789abcdef0123456789abcdef-0000000000");
    on.create(&nested, b"", CreateMode::Persistent).await.unwrap();
    let cand = a.locks.election(&path).unwrap().candidate("a").unwrap();
    let mut waiting = Box::pin(cand.leadership());
    assert_pending(h, "the candidate waits behind the persistent node", &mut waiting).await;
    let seen = a.locks.election(&path).unwrap().leader().await;
    drop(waiting);
    on.delete(&nested).await.unwrap();
    wait_children(h, &path, 0).await;
    let head = seen.unwrap().expect("the persistent node heads the queue");
    assert_eq!(
        (head.id.as_str(), head.node.as_str()),
        ("", "L-0123456789abcdef0123456789abcdef-0000000000")
    );
}

/// A lock path nested in the election's, under the exclusive recipe's name `lock`: the candidates stand beside it (it
/// is no lock node), and so does the observer (found by review: it refused it as an exclusive lock's node).
pub async fn election_observer_stands_beside_a_nested_lock_path(h: &dyn Harness) {
    let (parent, nested) = (h.path("election-nested"), h.path("election-nested/lock"));
    let (a, b) = (h.client().await, h.client().await);
    let inner = a.locks.fair(&nested).unwrap().acquire().await.unwrap();
    let cand = b.locks.election(&parent).unwrap().candidate("b").unwrap();
    let leading = bounded(h, "the candidate leads beside a nested path", cand.leadership())
        .await
        .unwrap();
    let seen = b
        .locks
        .election(&parent)
        .unwrap()
        .leader()
        .await
        .map(|l| l.map(|l| l.id));
    leading.resign().await.unwrap();
    inner.release().await.unwrap();
    assert!(
        matches!(&seen, Ok(Some(id)) if id == "b"),
        "leader() beside a nested path: {seen:?}"
    );
    wait_children(h, &nested, 0).await;
}
