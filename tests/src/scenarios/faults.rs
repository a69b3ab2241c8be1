//! Injected faults: lost create replies, nodes deleted by someone else, disconnections shorter and longer than the
//! session timeout, delayed watch delivery. Scenarios needing a fault the backend cannot inject are skipped there.

use std::time::Duration;

use recipes_core::backend::BackendExt;
use recipes_core::{Error, LockGuard, LostReason, Recipe};

use super::{contend_exclusive, granted_then_released};
use crate::harness::{Harness, TestClient};
use crate::util::{assert_pending, bounded, eventually, skip, wait_children};

/// Releasing a lock whose node someone else deleted reports NotHeld and deletes nothing else.
pub async fn release_after_node_deleted_is_error(h: &dyn Harness) {
    let path = h.path("release-deleted");
    let (a, admin, b) = (h.client().await, h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    admin.locks.backend().current().delete(g.node()).await.unwrap();
    let gb = bounded(h, "b after deletion", b.locks.fair(&path).unwrap().acquire())
        .await
        .unwrap();
    let r = g.release().await;
    assert!(matches!(r, Err(Error::NotHeld { .. })), "{r:?}");
    assert_eq!(
        h.children(&path).await.len(),
        1,
        "b's node must survive a's stale release"
    );
    gb.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Exclusive: a stale holder's release never deletes the fixed node now owned by someone else.
pub async fn stale_exclusive_release_spares_new_holder(h: &dyn Harness) {
    let path = h.path("stale-exclusive");
    let (a, admin, b) = (h.client().await, h.client().await, h.client().await);
    let g = a.locks.exclusive(&path).unwrap().acquire().await.unwrap();
    admin.locks.backend().current().delete(g.node()).await.unwrap();
    let gb = bounded(h, "b", b.locks.exclusive(&path).unwrap().acquire())
        .await
        .unwrap();
    assert!(matches!(g.release().await, Err(Error::NotHeld { .. })));
    assert!(
        a.locks.exclusive(&path).unwrap().try_acquire().await.unwrap().is_none(),
        "b's lock was deleted"
    );
    assert_eq!(h.children(&path).await, vec!["lock".to_string()]);
    gb.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Deleting the holder's node (by someone else) resolves lost() with NodeDeleted.
pub async fn node_deleted_fires_lost(h: &dyn Harness) {
    let path = h.path("deleted-lost");
    let (a, admin) = (h.client().await, h.client().await);
    for recipe in [Recipe::Fair, Recipe::Exclusive, Recipe::Write] {
        let g = a.locks.lock(&path, recipe).unwrap().acquire().await.unwrap();
        let mut lost = Box::pin(g.lost());
        assert_pending(h, "lost before deletion", &mut lost).await;
        admin.locks.backend().current().delete(g.node()).await.unwrap();
        assert_eq!(bounded(h, "lost", lost).await, LostReason::NodeDeleted, "{recipe}");
        drop(g);
        wait_children(h, &path, 0).await;
    }
}

/// A waiter whose node is deleted by someone else, just before the holder releases, never holds the lock without a
/// node: it notices and queues again.
pub async fn waiter_node_deleted_never_holds_without_node(h: &dyn Harness) {
    let path = h.path("waiter-node-deleted");
    let (a, b, admin) = (h.client().await, h.client().await, h.client().await);
    for recipe in [Recipe::Fair, Recipe::Write, Recipe::Read] {
        let holder = if recipe == Recipe::Read {
            Recipe::Write
        } else {
            Recipe::Fair
        };
        let g = a.locks.lock(&path, holder).unwrap().acquire().await.unwrap();
        let lb = b.locks.lock(&path, recipe).unwrap();
        let waiter = tokio::spawn(async move { lb.acquire().await.unwrap() });
        wait_children(h, &path, 2).await;
        delete_waiter_then_release(h, &admin, &path, g, waiter, &recipe.to_string(), Change::None).await;
    }
}

/// A waiter in line whose connection is cut while its own node and then the holder's are deleted (an operator's
/// delete, then the release) never holds without its node, whatever order the events of its re-registered watches
/// come in after the reconnection (ZooKeeper reports them in the order of the re-registration, not of the changes):
/// after a change of its session's state during the wait, a waiter lists again instead of holding on the deletion.
pub async fn waiter_disconnected_while_its_node_goes_never_holds_without_it(h: &dyn Harness) {
    let path = h.path("waiter-disconnected-node-deleted");
    let (a, b, admin) = (h.client().await, h.client().await, h.client().await);
    let cut = b.faults.session_timeout() / 4;
    for round in 0..3 {
        let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
        let lb = b.locks.fair(&path).unwrap();
        let waiter = tokio::spawn(async move { lb.acquire().await.unwrap() });
        wait_children(h, &path, 2).await;
        tokio::time::sleep(h.tick() * 2).await;
        let b_node = waiter_node(h, &path, &g).await;
        b.faults.disconnect_for(cut).await;
        let on = admin.locks.backend().current();
        on.delete(&format!("{path}/{b_node}")).await.unwrap();
        g.release().await.unwrap();
        let case = format!("round {round}, after its reconnection");
        holds_with_a_new_node(h, &path, waiter, &b_node, &case).await;
    }
}

/// A waiter whose blocker, not first, is cancelled lists again and waits on with the watch on its own node it armed
/// first (no new registration). A deletion of its node while it waits that second time is still seen before the
/// holder's release: it never holds without its node.
pub async fn kept_own_watch_still_guards_the_waiter(h: &dyn Harness) {
    let path = h.path("kept-own-watch");
    let (a, b, c, admin) = (h.client().await, h.client().await, h.client().await, h.client().await);
    let (g, waiter) = behind_a_cancelled_waiter(h, &path, (&a, &b, &c)).await;
    delete_waiter_then_release(h, &admin, &path, g, waiter, "after a relist", Change::None).await;
}

/// A waiter whose node someone changes, then deletes, just before the holder releases (each step right after the
/// other) never holds without its node: a change of a waiting node's data makes it look at the queue again. The
/// waiter first lists again (a cancelled waiter ahead), so that it waits with the watch on its node kept from its
/// first wait.
pub async fn changed_then_deleted_waiter_never_holds_without_node(h: &dyn Harness) {
    let path = h.path("changed-then-deleted");
    let (a, b, c, admin) = (h.client().await, h.client().await, h.client().await, h.client().await);
    for round in 0..3 {
        let (g, waiter) = behind_a_cancelled_waiter(h, &path, (&a, &b, &c)).await;
        let case = format!("round {round}");
        delete_waiter_then_release(h, &admin, &path, g, waiter, &case, Change::First).await;
    }
}

/// A waiter whose node an operator changes (its own-node watch fires: it lists again) still comes to hold when a task
/// of its own session releases the lock ahead of it (the in-process handoff), as the only holder, and nothing is left.
pub async fn changed_waiter_still_takes_a_same_session_handoff(h: &dyn Harness) {
    let path = h.path("changed-waiter-handoff");
    let (a, admin) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let lw = a.locks.fair(&path).unwrap();
    let waiter = tokio::spawn(async move { lw.acquire().await.unwrap() });
    wait_children(h, &path, 2).await;
    tokio::time::sleep(h.tick() * 2).await;
    let w_node = waiter_node(h, &path, &g).await;
    let on = admin.locks.backend().current();
    on.set_data(&format!("{path}/{w_node}"), b"changed by an operator")
        .await
        .unwrap();
    tokio::time::sleep(h.tick() * 2).await;
    g.release().await.unwrap();
    let gw = bounded(h, "the waiter", waiter).await.unwrap();
    assert!(gw.is_valid(), "the waiter holds a valid lock");
    assert_eq!(h.children(&path).await, vec![w_node], "only the waiter's node is left");
    gw.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// The name of the one node on `path` other than `g`'s: the waiter's.
async fn waiter_node(h: &dyn Harness, path: &str, g: &LockGuard) -> String {
    let held_name = g.node().rsplit('/').next().unwrap().to_owned();
    h.children(path)
        .await
        .into_iter()
        .find(|c| *c != held_name)
        .expect("the waiter's node")
}

/// `a` holds a fair lock on `path`; `c` queues behind it and is cancelled once `b` queued behind `c`, so that `b` lists
/// again and waits on `a` with the watch on its own node kept from its first wait. Returns `a`'s guard and `b`'s acquire.
async fn behind_a_cancelled_waiter(
    h: &dyn Harness,
    path: &str,
    (a, b, c): (&TestClient, &TestClient, &TestClient),
) -> (LockGuard, tokio::task::JoinHandle<LockGuard>) {
    let g = a.locks.fair(path).unwrap().acquire().await.unwrap();
    let lc = c.locks.fair(path).unwrap();
    let cancelled = tokio::spawn(async move { lc.acquire().await });
    wait_children(h, path, 2).await;
    let lb = b.locks.fair(path).unwrap();
    let waiter = tokio::spawn(async move { lb.acquire().await.unwrap() });
    wait_children(h, path, 3).await;
    cancelled.abort();
    let _ = cancelled.await;
    wait_children(h, path, 2).await;
    (g, waiter)
}

/// Whether an operator changes the waiter's node before deleting it (see `delete_waiter_then_release`).
#[derive(PartialEq)]
enum Change {
    None,
    First,
}

/// The end of the scenarios on a waiter's deleted node: with `g` held and one waiter queued behind it (`waiter`, the
/// only other node on `path`), deletes the waiter's node (changing its data first, with `Change::First`) and releases
/// `g` at once, each step right after the other. The waiter must see its own node gone first: it queues again and
/// holds with a new node, the only one on the path.
async fn delete_waiter_then_release(
    h: &dyn Harness,
    admin: &TestClient,
    path: &str,
    g: LockGuard,
    waiter: tokio::task::JoinHandle<LockGuard>,
    case: &str,
    change: Change,
) {
    tokio::time::sleep(h.tick() * 2).await;
    let b_node = waiter_node(h, path, &g).await;
    let on = admin.locks.backend().current();
    let b_path = format!("{path}/{b_node}");
    if change == Change::First {
        on.set_data(&b_path, b"changed by an operator").await.unwrap();
    }
    on.delete(&b_path).await.unwrap();
    g.release().await.unwrap();
    holds_with_a_new_node(h, path, waiter, &b_node, case).await;
}

/// The waiter whose node `b_node` was deleted holds, and with a new node, the only one on `path`; then lets go.
async fn holds_with_a_new_node(
    h: &dyn Harness,
    path: &str,
    waiter: tokio::task::JoinHandle<LockGuard>,
    b_node: &str,
    case: &str,
) {
    let gb = bounded(h, "the waiter after re-queueing", waiter).await.unwrap();
    let name = gb.node().rsplit('/').next().unwrap().to_owned();
    assert_ne!(
        name, b_node,
        "{case}: the waiter claimed the lock with its deleted node"
    );
    assert_eq!(
        h.children(path).await,
        vec![name],
        "{case}: the waiter holds without its node"
    );
    gb.release().await.unwrap();
    wait_children(h, path, 0).await;
}

/// A holder that came to hold after waiting in line (its node's watch from the wait kept until its end, also after a
/// relist) learns of its node's deletion from `lost()`, also when a first `lost()` was dropped midway.
pub async fn holder_after_waiting_sees_its_node_deleted(h: &dyn Harness) {
    let path = h.path("waited-then-deleted");
    let (a, b, c, admin) = (h.client().await, h.client().await, h.client().await, h.client().await);
    for (relist, drop_first) in [(false, false), (true, false), (true, true)] {
        let (g, waiter) = if relist {
            behind_a_cancelled_waiter(h, &path, (&a, &b, &c)).await
        } else {
            let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
            let lb = b.locks.fair(&path).unwrap();
            let waiter = tokio::spawn(async move { lb.acquire().await.unwrap() });
            wait_children(h, &path, 2).await;
            (g, waiter)
        };
        tokio::time::sleep(h.tick() * 2).await;
        g.release().await.unwrap();
        let gb = bounded(h, "b", waiter).await.unwrap();
        // A first lost() dropped before anything happened takes the kept watch with it; the next arms its own.
        if drop_first {
            let mut first = Box::pin(gb.lost());
            assert_pending(h, "lost before deletion", &mut first).await;
        }
        let mut lost = Box::pin(gb.lost());
        assert_pending(h, "lost before deletion", &mut lost).await;
        admin.locks.backend().current().delete(gb.node()).await.unwrap();
        assert_eq!(
            bounded(h, "lost", lost).await,
            LostReason::NodeDeleted,
            "relist: {relist}, drop_first: {drop_first}"
        );
        assert!(!gb.is_valid(), "relist: {relist}: a deleted node is not valid");
        let r = gb.release().await;
        assert!(matches!(r, Err(Error::NotHeld { .. })), "relist: {relist}: {r:?}");
        wait_children(h, &path, 0).await;
    }
}

async fn lost_create_reply_no_orphan(h: &dyn Harness, recipe: Recipe) {
    if !h.capabilities().lose_create_reply {
        return skip(
            h,
            &format!("lost_create_reply_no_orphan_{recipe}"),
            "lost create replies",
        );
    }
    let path = h.path(&format!("lost-reply-{recipe}"));
    let a = h.client().await;
    a.faults.lose_next_create_replies(1).await;
    let lock = a.locks.lock(&path, recipe).unwrap();
    let g = bounded(h, "acquire through a lost reply", lock.acquire())
        .await
        .unwrap();
    assert_eq!(
        h.children(&path).await.len(),
        1,
        "{recipe}: a retried create left an orphan"
    );
    assert_eq!(a.locks.metrics().create_recoveries, 1, "{recipe}");
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A fair acquire whose create reply is lost finds its node again: no orphan, no deadlock.
pub async fn lost_create_reply_no_orphan_fair(h: &dyn Harness) {
    lost_create_reply_no_orphan(h, Recipe::Fair).await;
}

/// An exclusive acquire whose create reply is lost recognises its node: no self-deadlock, no orphan.
pub async fn lost_create_reply_no_orphan_exclusive(h: &dyn Harness) {
    lost_create_reply_no_orphan(h, Recipe::Exclusive).await;
}

/// Lost create replies while queued behind a holder leave exactly one node, and the lock passes on.
pub async fn lost_create_replies_while_queued_no_deadlock(h: &dyn Harness) {
    if !h.capabilities().lose_create_reply {
        return skip(h, "lost_create_replies_while_queued_no_deadlock", "lost create replies");
    }
    let path = h.path("lost-reply-queued");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    b.faults.lose_next_create_replies(2).await;
    let lb = b.locks.fair(&path).unwrap();
    let wb = tokio::spawn(async move { lb.acquire().await.unwrap() });
    wait_children(h, &path, 2).await;
    tokio::time::sleep(h.tick() * 3).await;
    assert_eq!(h.children(&path).await.len(), 2, "orphan from a lost reply");
    g.release().await.unwrap();
    let gb = bounded(h, "b after a", wb).await.unwrap();
    gb.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A disconnection shorter than the session timeout keeps the lock, and lost() stays pending.
pub async fn suspended_within_timeout_keeps_lock(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return skip(h, "suspended_within_timeout_keeps_lock", "disconnects");
    }
    let path = h.path("suspended-kept");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let timeout = a.faults.session_timeout();
    let mut lost = Box::pin(g.lost());
    a.faults.disconnect_for(timeout / 3).await;
    assert_pending(h, "lost while suspended", &mut lost).await;
    tokio::time::sleep(timeout / 2).await;
    assert_pending(h, "lost after reconnect", &mut lost).await;
    assert!(b.locks.fair(&path).unwrap().try_acquire().await.unwrap().is_none());
    drop(lost);
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A disconnection past the session timeout loses the lock: another client gets it, lost() reports expiry.
pub async fn disconnect_past_timeout_loses_lock(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return skip(h, "disconnect_past_timeout_loses_lock", "disconnects");
    }
    let path = h.path("suspended-lost");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let timeout = a.faults.session_timeout();
    a.faults.disconnect_for(timeout * 2).await;
    // First the lease runs out (the client cannot know yet that the server expired its session), before b takes over.
    // Watched from the start: a backend that ends a session on its own clock (etcd's) reports that end soon after.
    let lock_b = b.locks.fair(&path).unwrap();
    let ((gb, b_held_at), (first, a_knew_at)) = tokio::join!(
        async {
            let gb = bounded(h, "b takes over", lock_b.acquire()).await;
            (gb, tokio::time::Instant::now())
        },
        async {
            let reason = bounded(h, "a's lease", g.lost()).await;
            (reason, tokio::time::Instant::now())
        }
    );
    let gb = gb.unwrap();
    assert_eq!(first, LostReason::LeaseExpired);
    assert!(a_knew_at <= b_held_at, "a knew of its loss only after b held");
    assert!(!g.is_valid());
    // ...then, once the connection is back, the client learns of the expiry.
    eventually(h, "a learns that its session expired", || async {
        tokio::time::timeout(h.tick(), g.lost()).await == Ok(LostReason::SessionExpired)
    })
    .await;
    assert_eq!(g.valid_until(), None);
    assert!(gb.fencing_token() > g.fencing_token());
    gb.release().await.unwrap();
    drop(g);
    wait_children(h, &path, 0).await;
}

/// While the client is cut off from the server, a timed acquire ends on time (before the connection is back), a try
/// waits for the connection (the cut is shorter than a try's 5 s bound; `zk_faults` bounds a try against a server
/// that is down) and answers from the queue, and no node is left once the connection is back.
pub async fn timed_acquire_while_disconnected_ends_on_time(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return skip(h, "timed_acquire_while_disconnected_ends_on_time", "disconnects");
    }
    let path = h.path("disconnected-timeout");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let timeout = b.faults.session_timeout();
    b.faults.disconnect_for(timeout / 2).await;
    let cut_end = tokio::time::Instant::now() + timeout / 2;
    let lock = b.locks.fair(&path).unwrap();
    let t0 = tokio::time::Instant::now();
    let r = lock.acquire_timeout(timeout / 8).await;
    assert!(matches!(r, Ok(None)), "{r:?}");
    // Its deadline, and the cleanup's grace (0.5 s) at most: well before the connection is back (a timed acquire that
    // waited for the reconnection would end after it; the bound of `timeout / 8 + 2 s` this had was past the cut's
    // end on ZooKeeper and etcd, so it could not tell).
    assert!(
        tokio::time::Instant::now() < cut_end,
        "timed acquire waited for the reconnection: {:?}",
        t0.elapsed()
    );
    // A try waits (briefly) for the connection, then answers from the queue: the lock is held.
    let t1 = tokio::time::Instant::now();
    let r = lock.try_acquire().await;
    assert!(matches!(r, Ok(None)), "{r:?}");
    assert!(t1.elapsed() < Duration::from_secs(6), "try overran: {:?}", t1.elapsed());
    // Once reconnected, nothing of b's is left and b can queue normally.
    wait_children(h, &path, 1).await;
    g.release().await.unwrap();
    granted_then_released(h, "acquire after reconnect", lock.acquire()).await;
    wait_children(h, &path, 0).await;
    // A try's own bound (5 s), where a cut longer than it fits within the session (the in-memory harness's 10 s):
    // it gives up with `ConnectionLoss` (it cannot tell whether the lock is free) before the connection is back, and
    // its requests, landing after it gave up, leave nothing.
    if timeout >= Duration::from_secs(8) {
        let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
        b.faults.disconnect_for(timeout * 3 / 4).await;
        let cut_end = tokio::time::Instant::now() + timeout * 3 / 4;
        let t2 = tokio::time::Instant::now();
        let r = lock.try_acquire().await;
        assert!(matches!(r, Err(Error::ConnectionLoss)), "{r:?}");
        assert!(
            t2.elapsed() < Duration::from_secs(6) && tokio::time::Instant::now() < cut_end,
            "a try waited past its bound: {:?}",
            t2.elapsed()
        );
        wait_children(h, &path, 1).await;
        g.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// Delayed watch delivery does not break exclusion or progress.
pub async fn delayed_watch_delivery_keeps_exclusion(h: &dyn Harness) {
    if !h.capabilities().watch_delay {
        return skip(h, "delayed_watch_delivery_keeps_exclusion", "watch delays");
    }
    h.set_watch_delay(Duration::from_millis(30));
    contend_exclusive(h, Recipe::Fair, 4, 3).await;
    contend_exclusive(h, Recipe::Exclusive, 4, 3).await;
    h.set_watch_delay(Duration::ZERO);
}
