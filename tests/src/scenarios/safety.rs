//! Scenarios for the ways two holders once got in: a release after expiry, a lost signal watching someone else's
//! node, a re-entry after the loss, wrapped sequences in peer layouts, mixed recipes and layouts on one path. Each is
//! the regression of an attack that found a bug; re-exported by [`scenarios`](crate::scenarios) like every theme.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_core::{Error, Layout, Lock, LockGuard, Locks, LostReason, OwnerToken, Recipe};
use tokio::task::JoinSet;

use crate::harness::{Harness, TestClient};
use crate::util::{bounded, eventually, path_kept_at_sequence, skip, wait_children, Occupancy};

fn locks_with(locks: &Locks, layout: Layout) -> Locks {
    Locks::builder(locks.backend().clone()).layout(layout).build()
}

/// Exclusive: a holder whose session expired releases (awaited, or on drop) without touching the node the next
/// holder made under the same name; no third client gets in beside the second.
pub async fn expired_exclusive_release_spares_next_holder(h: &dyn Harness) {
    let path = h.path("expired-exclusive");
    let a = h.client().await;
    let b = h.client().await;
    let c = h.client().await;
    for on_drop in [false, true] {
        let ga = a.locks.exclusive(&path).unwrap().acquire().await.unwrap();
        let lock_b = b.locks.exclusive(&path).unwrap();
        let waiting = tokio::spawn(async move { lock_b.acquire().await });
        a.faults.expire_session().await;
        let gb = bounded(h, "b takes over", waiting).await.unwrap().unwrap();
        if on_drop {
            drop(ga);
            tokio::time::sleep(h.tick() * 4).await;
        } else {
            assert!(matches!(ga.release().await, Err(Error::SessionExpired)));
        }
        assert!(gb.is_valid(), "the next holder's lease is intact");
        assert_eq!(
            h.children(&path).await,
            vec!["lock".to_string()],
            "the next holder's node is intact"
        );
        let third = c.locks.exclusive(&path).unwrap().try_acquire().await.unwrap();
        assert!(third.is_none(), "a third client got in beside the second");
        gb.release().await.unwrap();
    }
    wait_children(h, &path, 0).await;
}

/// Exclusive: once the holder's node is deleted and another client made `P/lock` again, `lost()` (awaited only
/// then) reports the loss at once instead of watching the other client's node; the guard is then invalid, and its
/// release deletes nothing.
pub async fn exclusive_lost_sees_a_replaced_node(h: &dyn Harness) {
    let path = h.path("replaced-exclusive");
    let a = h.client().await;
    let b = h.client().await;
    let admin = h.client().await;
    let ga = a.locks.exclusive(&path).unwrap().acquire().await.unwrap();
    admin.locks.backend().current().delete(ga.node()).await.unwrap();
    let gb = bounded(h, "b acquires", b.locks.exclusive(&path).unwrap().acquire())
        .await
        .unwrap();
    assert_eq!(bounded(h, "a's lost()", ga.lost()).await, LostReason::NodeDeleted);
    assert!(!ga.is_valid(), "a guard whose loss was seen is not valid");
    assert!(matches!(ga.release().await, Err(Error::NotHeld { .. })));
    assert!(gb.is_valid());
    assert_eq!(h.children(&path).await, vec!["lock".to_string()]);
    gb.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Reentrant and read/write: an owner whose lock was lost (session expired, another client took it) cannot
/// re-enter it or take its read side: `LockLost`, and the hold count does not change.
pub async fn reentry_after_loss_is_refused(h: &dyn Harness) {
    let path = h.path("reentry-after-loss");
    let a = h.client().await;
    let b = h.client().await;
    let token = OwnerToken::new();
    let lock = a.locks.reentrant(&path).unwrap().with_owner(token.into());
    let held = lock.acquire().await.unwrap();
    a.faults.expire_session().await;
    let gb = bounded(h, "b takes over", b.locks.reentrant(&path).unwrap().acquire())
        .await
        .unwrap();
    assert!(matches!(
        lock.acquire().await,
        Err(Error::LockLost {
            reason: LostReason::SessionExpired,
            ..
        })
    ));
    assert_eq!(lock.hold_count(token.into()), 1, "the count must not change");
    drop(held);
    gb.release().await.unwrap();

    let rw_path = h.path("downgrade-after-loss");
    let rw = a.locks.read_write(&rw_path).unwrap();
    let w = rw.write().with_owner(token.into()).acquire().await.unwrap();
    a.faults.expire_session().await;
    let gb = bounded(h, "b writes", b.locks.read_write(&rw_path).unwrap().write().acquire())
        .await
        .unwrap();
    assert!(matches!(
        rw.read().with_owner(token.into()).acquire().await,
        Err(Error::LockLost { .. })
    ));
    drop(w);
    gb.release().await.unwrap();
    wait_children(h, &path, 0).await;
    wait_children(h, &rw_path, 0).await;
}

/// After ZooKeeper's sequence counter wraps (including -999999999 … -1, written with nine digits): the native layout
/// keeps exclusion and leaves no node; the peer layouts, whose peers order such sequences wrongly, refuse with
/// `SequenceWrapped` and leave no node either (never an orphan, never two holders).
pub async fn wrapped_sequences_keep_exclusion_in_every_layout(h: &dyn Harness) {
    if !h.capabilities().set_sequence {
        return skip(
            h,
            "wrapped_sequences_keep_exclusion_in_every_layout",
            "settable sequences",
        );
    }
    let a = h.client().await;
    let b = h.client().await;
    for layout in Layout::ALL {
        for start in [i32::MAX - 1, -1_000_000_001, -999_999_999, -3] {
            let path = h.path(&format!("wrap-{layout}-{start}"));
            let (la, lb) = (locks_with(&a.locks, layout), locks_with(&b.locks, layout));
            // The path, kept from being reaped by a child that is no lock node, with its counter set.
            let on = a.locks.backend().current();
            let keep = path_kept_at_sequence(h, on, &path, start).await;
            let occ = Occupancy::new();
            let mut set = JoinSet::new();
            for locks in [la.clone(), lb.clone()] {
                let (occ, path) = (occ.clone(), path.clone());
                set.spawn(async move {
                    let mut held = 0;
                    for _ in 0..3 {
                        match locks.fair(&path).unwrap().acquire().await {
                            Ok(g) => {
                                occ.enter_exclusive(g.fencing_token());
                                tokio::time::sleep(Duration::from_millis(5)).await;
                                occ.exit_exclusive();
                                g.release().await.unwrap();
                                held += 1;
                            }
                            Err(Error::SequenceWrapped { layout: l, .. }) => assert_ne!(l, Layout::Native),
                            Err(e) => panic!("{layout}: {e}"),
                        }
                    }
                    held
                });
            }
            let mut held = 0;
            while let Some(r) = set.join_next().await {
                held += r.unwrap();
            }
            assert_eq!(occ.violations(), 0, "{layout} {start}: two holders");
            if layout == Layout::Native {
                assert_eq!(held, 6, "native: every acquire holds across the wrap");
            }
            assert_eq!(
                h.children(&path).await,
                vec!["keep".to_string()],
                "{layout} {start}: a node was left"
            );
            on.delete(&keep).await.unwrap();
            wait_children(h, &path, 0).await;
        }
    }
}

/// Recipes and layouts that would not see each other's nodes refuse to hold beside them (`ForeignLock`, naming the
/// node), leave no node of their own, and leave the holder alone.
pub async fn mixed_recipes_and_layouts_refused(h: &dyn Harness) {
    let path = h.path("mixed");
    let a = h.client().await;
    let b = h.client().await;
    let foreign = |r: Result<_, Error>, node: &str| match r {
        Err(Error::ForeignLock { node: n, .. }) => assert!(n.starts_with(node), "names {n}, expected {node}…"),
        other => panic!("expected ForeignLock naming {node}, got {other:?}"),
    };
    // An exclusive holder: every queued recipe, of every layout, refuses.
    let ga = a.locks.exclusive(&path).unwrap().acquire().await.unwrap();
    for recipe in [Recipe::Fair, Recipe::Reentrant, Recipe::Read, Recipe::Write] {
        let lock = b.locks.lock(&path, recipe).unwrap();
        foreign(lock.acquire().await.map(|_| ()), "lock");
        foreign(lock.try_acquire().await.map(|_| ()), "lock");
    }
    for &layout in super::peer_layouts(&b.locks) {
        foreign(
            locks_with(&b.locks, layout)
                .fair(&path)
                .unwrap()
                .acquire()
                .await
                .map(|_| ()),
            "lock",
        );
    }
    assert_eq!(h.children(&path).await, vec!["lock".to_string()]);
    assert!(ga.is_valid());
    ga.release().await.unwrap();

    // A fair (native) holder: the exclusive recipe and the peer layouts refuse.
    let gb = b.locks.fair(&path).unwrap().acquire().await.unwrap();
    let held = gb.node().rsplit('/').next().unwrap().to_owned();
    foreign(a.locks.exclusive(&path).unwrap().acquire().await.map(|_| ()), "L-");
    foreign(a.locks.exclusive(&path).unwrap().try_acquire().await.map(|_| ()), "L-");
    for &layout in super::peer_layouts(&a.locks) {
        foreign(
            locks_with(&a.locks, layout)
                .fair(&path)
                .unwrap()
                .acquire()
                .await
                .map(|_| ()),
            "L-",
        );
        foreign(
            locks_with(&a.locks, layout)
                .read_write(&path)
                .unwrap()
                .read()
                .acquire()
                .await
                .map(|_| ()),
            "L-",
        );
    }
    assert_eq!(h.children(&path).await, vec![held]);
    gb.release().await.unwrap();
    if super::peer_layouts(&a.locks).is_empty() {
        // A backend that orders children by creation refuses the peer layouts outright, with a typed error.
        for layout in [Layout::Curator, Layout::Kazoo] {
            match locks_with(&a.locks, layout).fair(&path) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains("native layout"), "{m}"),
                other => panic!("expected the {layout} layout refused, got {:?}", other.map(|_| ())),
            }
        }
        wait_children(h, &path, 0).await;
        return;
    }

    // A Curator-layout holder: native and kazoo refuse.
    let gc = locks_with(&a.locks, Layout::Curator)
        .fair(&path)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    foreign(b.locks.fair(&path).unwrap().acquire().await.map(|_| ()), "_c_");
    foreign(
        locks_with(&b.locks, Layout::Kazoo)
            .fair(&path)
            .unwrap()
            .acquire()
            .await
            .map(|_| ()),
        "_c_",
    );
    foreign(b.locks.exclusive(&path).unwrap().acquire().await.map(|_| ()), "_c_");
    gc.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Clients of different recipes and layouts racing on one path: never two holders (each side lists after its own
/// create, so at least one of two racing contenders sees the other and refuses); no node left behind.
///
/// Someone must hold, or the test proves nothing. Refused clients that retried in step could all keep refusing each
/// other: on a loaded machine (scripts/test's, with the model checker beside it), where a node lives for two slow
/// round trips, every one of the 48 attempts met another client's node (found in the sixteenth session). A refused
/// client waits a time of its own before it tries again, and goes on past its 12 rounds, up to a bound, while nobody
/// has held yet.
pub async fn mixed_recipes_racing_never_hold_together(h: &dyn Harness) {
    let path = h.path("mixed-race");
    let occ = Occupancy::new();
    let anyone_held = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut set = JoinSet::new();
    let kinds: [(Recipe, Layout); 4] = [
        (Recipe::Exclusive, Layout::Native),
        (Recipe::Fair, Layout::Native),
        (Recipe::Write, Layout::Curator),
        (Recipe::Fair, Layout::Kazoo),
    ];
    let here = super::layouts_here(&h.client().await.locks);
    for (i, (recipe, layout)) in kinds.into_iter().enumerate().filter(|(_, (_, l))| here.contains(l)) {
        let c = h.client().await;
        let locks = locks_with(&c.locks, layout);
        let lock: Arc<dyn Lock> = locks.lock(&path, recipe).unwrap();
        let occ = occ.clone();
        let anyone_held = anyone_held.clone();
        let patience = h.patience();
        set.spawn(async move {
            let mut held = 0u32;
            // Bounded: 12 rounds, then up to 200 more while nobody has held.
            for round in 0..212u64 {
                if round >= 12 && anyone_held.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                if (round as usize + i) % 3 == 0 {
                    tokio::task::yield_now().await;
                }
                match lock.acquire_timeout(patience).await {
                    Ok(Some(g)) => {
                        occ.enter_exclusive(g.fencing_token());
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        occ.exit_exclusive();
                        g.release().await.unwrap();
                        held += 1;
                        anyone_held.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok(None) => panic!("timed out"),
                    // A pause of this client's own (2 to 12 ms, by client and round), so that refused clients do not
                    // retry in step.
                    Err(Error::ForeignLock { .. }) => {
                        let pause = 2 + (i as u64 * 7 + round * 13) % 11;
                        tokio::time::sleep(Duration::from_millis(pause)).await
                    }
                    Err(e) => panic!("{recipe} {layout}: {e}"),
                }
            }
            drop(c);
            held
        });
    }
    let mut held = 0;
    while let Some(r) = set.join_next().await {
        held += r.unwrap();
    }
    assert_eq!(occ.violations(), 0, "two holders of different recipes or layouts");
    assert!(held > 0, "nobody ever held");
    eventually(h, "no node left", || async { h.children(&path).await.is_empty() }).await;
}

/// A timeout too long to be a deadline (`Duration::MAX`) waits as long as it takes, instead of panicking; on every
/// recipe.
pub async fn huge_timeout_is_no_deadline(h: &dyn Harness) {
    let path = h.path("huge-timeout");
    let a = h.client().await;
    for recipe in Recipe::ALL {
        let lock = a.locks.lock(&path, recipe).unwrap();
        let g = bounded(h, "acquire with Duration::MAX", lock.acquire_timeout(Duration::MAX))
            .await
            .unwrap()
            .expect("a free lock is taken");
        g.release().await.unwrap();
    }
    wait_children(h, &path, 0).await;
}

/// `revoke_node` writes its request only over a lock node, by the node's own stat (ephemeral): a persistent node
/// with a lock node's name (a semaphore nested under such a name keeps its permit count there) is refused and left
/// as it was, and the nested semaphore goes on with its count.
pub async fn revoke_node_writes_only_lock_nodes(h: &dyn Harness) {
    let parent = h.path("revoke-nested");
    let name = "L-0123456789abcdef0123456789abcdef-0000000001";
    let nested = format!("{parent}/{name}");
    let (a, b) = (h.client().await, h.client().await);
    let sem = a.locks.semaphore(&nested, 2).unwrap();
    let held = sem.acquire().await.unwrap();
    match b.locks.revoke_node(&parent, name).await {
        Err(recipes_core::Error::InvalidArgument(m)) => assert!(m.contains(name), "{m}"),
        r => panic!("expected InvalidArgument for a persistent node, got {r:?}"),
    }
    held.release().await.unwrap();
    let again = b.locks.semaphore(&nested, 2).unwrap().acquire().await;
    again
        .expect("the nested semaphore keeps its count")
        .release()
        .await
        .unwrap();
    if !h.capabilities().hierarchy {
        // No container reaps the nested semaphore's count (etcd keeps it as a key of its own, decision 0068): a
        // persistent node of a lock node's name stays in the parent's queue, as on ZooKeeper until the reaper runs.
        // The operator removes it.
        b.locks.backend().current().delete(&nested).await.unwrap();
    }
    // A holder's node is still asked, beside a nested path named as the exclusive recipe's node: that one is no
    // participant, and `revoke` asks the real holder only.
    let beside = format!("{parent}/lock");
    let inner = a.locks.fair(&beside).unwrap().acquire().await.unwrap();
    let g = a.locks.fair(&parent).unwrap().acquire().await.unwrap();
    let own = g.node().rsplit('/').next().unwrap().to_owned();
    let who = b.locks.participants(&parent).await.unwrap();
    let holders: Vec<&str> = who.holders().map(|p| p.node.as_str()).collect();
    assert_eq!(holders, [own.as_str()], "{who:?}");
    // (In a flat key space the nested path is no key of its own, and no child of `parent`.)
    assert!(
        !h.capabilities().hierarchy || who.other_children.contains(&"lock".to_owned()),
        "{who:?}"
    );
    assert_eq!(b.locks.revoke(&parent).await.unwrap(), vec![own.clone()]);
    match b.locks.revoke_node(&parent, "lock").await {
        Err(recipes_core::Error::InvalidArgument(m)) => assert!(m.contains("not a lock node"), "{m}"),
        // A flat key space has no node there: nothing to ask.
        Ok(false) if !h.capabilities().hierarchy => {}
        r => panic!("expected InvalidArgument for the nested path, got {r:?}"),
    }
    assert!(b.locks.revoke_node(&parent, &own).await.unwrap());
    g.release().await.unwrap();
    inner.release().await.unwrap();
    wait_children(h, &nested, 0).await;
    wait_children(h, &beside, 0).await;
}

/// A persistent node with a native lock node's name (a lock path nested in ours, such as a peer semaphore that
/// stores its count in its data) never tells a waiter behind it that it held: its data changes, it goes, and the
/// waiter still waits for the real holder ahead of it. (A waiter trusts a change of its blocker's data as a sign
/// that the blocker held only when that data was first read as a lock node's of this library; without that check
/// two held here.)
pub async fn a_node_named_like_a_lock_node_never_says_it_held(h: &dyn Harness) {
    let path = h.path("named-like-a-lock-node");
    let (a, c, admin) = (h.client().await, h.client().await, h.client().await);
    let ga = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let held = ga.node().rsplit('/').next().unwrap().to_owned();
    // Sorts after the holder and before the next node made here.
    let nested = match held.rsplit('-').next().unwrap() {
        // Ordered by creation: made now, it is.
        "" => format!("{path}/L-0123456789abcdef0123456789abcdef-"),
        seq => format!(
            "{path}/L-0123456789abcdef0123456789abcdef-{:010}",
            seq.parse::<u64>().unwrap() + 1
        ),
    };
    let on = admin.locks.backend().current();
    on.create(&nested, b"", CreateMode::Persistent).await.unwrap();
    let lock_c = c.locks.fair(&path).unwrap();
    let waiting = tokio::spawn(async move { lock_c.acquire().await });
    wait_children(h, &path, 3).await;
    let case = "the waiter got in beside the holder when a nested persistent node went";
    written_then_deleted_ahead(h, &on, &nested, b"2", &ga, &waiting, case).await;
    ga.release().await.unwrap();
    let gc = bounded(h, "the waiter behind the holder", waiting)
        .await
        .unwrap()
        .unwrap();
    gc.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Someone else's write over a waiting node's data (an operator's `set`, Curator's `Revoker`), then the node's
/// deletion, never tells the waiter behind it that it held: the waiter reads the new data back, sees neither the
/// `first` mark nor anything this library writes over a holder, and lists again when the node goes, so it waits on
/// for the real holder. (Found by review: a waiter once took any change of its blocker's data for a sign that the
/// blocker held, and got in beside the holder here.) The deleted waiter queues again; every waiter holds in its
/// turn and nothing is left.
pub async fn a_foreign_write_to_a_waiting_node_never_says_it_held(h: &dyn Harness) {
    let path = h.path("foreign-write-waiting");
    let (a, b, c, admin) = (h.client().await, h.client().await, h.client().await, h.client().await);
    for (round, data) in [b"written by an operator".as_slice(), recipes_core::REVOKE_MESSAGE]
        .into_iter()
        .enumerate()
    {
        let (ga, wb, wc) = held_with_two_waiters(h, &path, (&a.locks, &b.locks, &c.locks)).await;
        let who = admin.locks.participants(&path).await.unwrap();
        let b_node = who.waiters().next().expect("two waiters").node.clone();
        let b_path = format!("{path}/{b_node}");
        let on = admin.locks.backend().current();
        let case =
            format!("round {round}: the waiter got in beside the holder when a node written by someone else went");
        written_then_deleted_ahead(h, &on, &b_path, data, &ga, &wc, &case).await;
        each_in_turn_after_the_deletion(h, &path, ga, (wb, wc), &b_node, &format!("round {round}")).await;
    }
}

/// Built for others' writes (`foreign_writes`, decision 81), a request to let go written over a waiting node and the
/// node's deletion sent back to back, so that the waiter behind it reads the node back after it has gone, never let
/// that waiter in beside the holder: it lists again (helper-96's hole, which the default's contract leaves open: with
/// the default settings the waiter comes in here on ZooKeeper). The deleted waiter queues again; every waiter holds in
/// its turn, and nothing is left.
pub async fn foreign_writes_a_write_and_deletion_together_never_let_two_hold(h: &dyn Harness) {
    let path = h.path("foreign-writes-together");
    let (a, b, c, admin) = (h.client().await, h.client().await, h.client().await, h.client().await);
    let built = |x: &TestClient| Locks::builder(x.locks.backend().clone()).foreign_writes(true).build();
    let (la, lb, lc) = (built(&a), built(&b), built(&c));
    let (ga, wb, wc) = held_with_two_waiters(h, &path, (&la, &lb, &lc)).await;
    tokio::time::sleep(h.tick() * 4).await;
    let who = admin.locks.participants(&path).await.unwrap();
    let b_node = who.waiters().next().expect("two waiters").node.clone();
    let b_path = format!("{path}/{b_node}");
    let on = admin.locks.backend().current();
    on.set_data(&b_path, recipes_core::REVOKE_MESSAGE).await.unwrap();
    on.delete(&b_path).await.unwrap();
    tokio::time::sleep(h.tick() * 8).await;
    assert!(ga.is_valid(), "the holder lost the lock");
    assert!(
        !wc.is_finished(),
        "the waiter behind a node written and deleted got in beside the holder"
    );
    each_in_turn_after_the_deletion(h, &path, ga, (wb, wc), &b_node, "written and deleted at once").await;
}

/// The holder `ga` lets go after the first waiter's node (`b_node`) was deleted: the second waiter (`wc`) holds, then
/// the first, queued again under a new node, and nothing is left (`case` names the run in failures).
async fn each_in_turn_after_the_deletion(
    h: &dyn Harness,
    path: &str,
    ga: LockGuard,
    (wb, wc): (Waiting, Waiting),
    b_node: &str,
    case: &str,
) {
    ga.release().await.unwrap();
    let gc = bounded(h, "the waiter behind the deleted node", wc)
        .await
        .unwrap()
        .unwrap();
    assert!(!wb.is_finished(), "{case}: the re-queued waiter holds beside the next");
    gc.release().await.unwrap();
    let gb = bounded(h, "the re-queued waiter", wb).await.unwrap().unwrap();
    assert_ne!(gb.node().rsplit('/').next().unwrap(), b_node, "{case}");
    gb.release().await.unwrap();
    wait_children(h, path, 0).await;
}

type Waiting = tokio::task::JoinHandle<Result<LockGuard, Error>>;

/// A fair lock on `path` held by `a`, then `b` and `c` waiting for it in that order.
async fn held_with_two_waiters(
    h: &dyn Harness,
    path: &str,
    (a, b, c): (&Locks, &Locks, &Locks),
) -> (LockGuard, Waiting, Waiting) {
    let ga = a.fair(path).unwrap().acquire().await.unwrap();
    let lock_b = b.fair(path).unwrap();
    let wb = tokio::spawn(async move { lock_b.acquire().await });
    wait_children(h, path, 2).await;
    let lock_c = c.fair(path).unwrap();
    let wc = tokio::spawn(async move { lock_c.acquire().await });
    wait_children(h, path, 3).await;
    (ga, wb, wc)
}

/// Lets the waiter behind `node` read it and watch it, writes `data` over it, lets the waiter read that back,
/// deletes the node, and checks that `ga` still holds and the waiter still waits (`case` says what went wrong).
async fn written_then_deleted_ahead<T>(
    h: &dyn Harness,
    on: &recipes_core::backend::SessionRef<'_>,
    node: &str,
    data: &[u8],
    ga: &LockGuard,
    waiting: &tokio::task::JoinHandle<T>,
    case: &str,
) {
    tokio::time::sleep(h.tick() * 4).await;
    on.set_data(node, data).await.unwrap();
    tokio::time::sleep(h.tick() * 4).await;
    on.delete(node).await.unwrap();
    tokio::time::sleep(h.tick() * 8).await;
    assert!(ga.is_valid(), "{case}: the holder lost the lock");
    assert!(!waiting.is_finished(), "{case}");
}

/// `revoke_node` refuses a native node that waits: the node behind it takes a change of its data for a sign that it
/// holds, so a request to let go written there would let that node in beside the holder. The waiter is left as it
/// was, and takes the lock in its turn; no node is left.
pub async fn revoke_node_refuses_a_waiting_node(h: &dyn Harness) {
    let path = h.path("revoke-waiting");
    let (a, b, c, admin) = (h.client().await, h.client().await, h.client().await, h.client().await);
    let (ga, wb, wc) = held_with_two_waiters(h, &path, (&a.locks, &b.locks, &c.locks)).await;
    let who = admin.locks.participants(&path).await.unwrap();
    let waiting: Vec<String> = who.waiters().map(|p| p.node.clone()).collect();
    assert_eq!(waiting.len(), 2, "{who:?}");
    for node in &waiting {
        match admin.locks.revoke_node(&path, node).await {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("waits"), "{m}"),
            r => panic!("expected InvalidArgument for a waiting node, got {r:?}"),
        }
    }
    tokio::time::sleep(h.tick() * 4).await;
    assert!(
        !wb.is_finished() && !wc.is_finished(),
        "a waiter got in beside the holder"
    );
    // The holder is still asked.
    let own = ga.node().rsplit('/').next().unwrap().to_owned();
    assert!(admin.locks.revoke_node(&path, &own).await.unwrap());
    ga.release().await.unwrap();
    let gb = bounded(h, "the first waiter", wb).await.unwrap().unwrap();
    assert!(!wc.is_finished());
    gb.release().await.unwrap();
    let gc = bounded(h, "the second waiter", wc).await.unwrap().unwrap();
    gc.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// `revoke_node` does not take a native node for a holder while a live lock node of another layout is on the path:
/// that node's own acquire refuses and deletes it, and a request written there would tell the waiter behind it that
/// it held (found by review: the check once ignored other layouts' nodes, as `decide` does).
pub async fn revoke_node_refuses_a_native_node_beside_another_layouts_holder(h: &dyn Harness) {
    let path = h.path("revoke-beside-kazoo");
    let (k, admin) = (h.client().await, h.client().await);
    let kazoo = locks_with(&k.locks, Layout::Kazoo);
    let held = kazoo.fair(&path).unwrap().acquire().await.unwrap();
    // A native node as a contender makes it before its first listing (then refuses and deletes it).
    let on = admin.locks.backend().current();
    let made = on
        .create(
            &format!("{path}/W-0123456789abcdef0123456789abcdef-"),
            b"",
            CreateMode::EphemeralSequential,
        )
        .await
        .unwrap();
    let name = made.path.rsplit('/').next().unwrap().to_owned();
    match admin.locks.revoke_node(&path, &name).await {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(&name), "{m}"),
        r => panic!("expected InvalidArgument beside another layout's holder, got {r:?}"),
    }
    on.delete(&made.path).await.unwrap();
    held.release().await.unwrap();
    wait_children(h, &path, 0).await;
}
