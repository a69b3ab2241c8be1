//! Every scenario, written once. Each takes the backend's [`Harness`] and panics on a violation.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::{BackendExt, BlockingLock, Error, Lock, LockGuard, LostReason, Owner, OwnerToken, Recipe};
use tokio::task::JoinSet;

use crate::harness::Harness;
pub use crate::safety::*;
use crate::util::{
    assert_increasing, assert_pending, bounded, eventually, hold_exclusive, skip, wait_children, Occupancy,
};

/// Calls the macro `$m` with `@expand` arguments and the name of every scenario.
#[doc(hidden)]
#[macro_export]
macro_rules! __for_each_scenario {
    ($m:path; $($args:tt)*) => {
        $m!($($args)* {scenarios}
            exclusive_mutual_exclusion fair_mutual_exclusion reentrant_mutual_exclusion write_mutual_exclusion
            read_write_mutual_exclusion every_recipe_by_name_excludes fair_fifo_order write_fifo_order
            readers_share writer_excludes_readers write_waits_for_all_readers reader_waits_for_earlier_writer
            reader_never_waits_on_later_writer readers_wake_together_after_writer reentrant_counts_per_task
            reentrant_counts_per_thread reentrant_counts_per_token reentrant_other_task_contends
            reentrant_same_owner_concurrent_acquires write_reentrant read_reentrant downgrade_write_to_read
            upgrade_refused try_acquire_on_held_fair try_acquire_on_held_exclusive try_acquire_free_every_recipe
            try_read_beside_reader_but_not_writer timeout_leaves_no_node_fair timeout_leaves_no_node_exclusive
            timeout_leaves_no_node_read dropped_acquire_leaves_no_node dropped_acquire_at_every_point
            cancelled_middle_waiter_chain_repairs release_after_node_deleted_is_error
            stale_exclusive_release_spares_new_holder session_expiry_fires_lost session_expiry_waiter_takes_over
            node_deleted_fires_lost waiting_acquire_fails_on_session_expiry acquire_after_expiry_uses_new_session
            lost_create_reply_no_orphan_fair lost_create_reply_no_orphan_exclusive
            lost_create_replies_while_queued_no_deadlock fencing_tokens_increase_fair
            fencing_tokens_increase_exclusive fencing_writer_above_earlier_readers fair_wakes_one_waiter_per_release
            exclusive_wakes_every_waiter many_paths_at_once bad_paths_rejected release_on_drop_frees_lock
            guard_moves_between_tasks deep_path_created_and_emptied suspended_within_timeout_keeps_lock
            disconnect_past_timeout_loses_lock delayed_watch_delivery_keeps_exclusion unknown_children_ignored
            blocking_api_refused_inside_runtime timed_acquire_while_disconnected_ends_on_time
            lease_valid_while_held lease_lost_before_another_client_acquires
            fencing_tokens_increase_over_1000_handoffs guarded_operation_under_the_lease
            waiter_node_deleted_never_holds_without_node thousand_abandoned_acquires_leave_no_node
            history_checked_mixed_contention cancelled_release_leaves_no_node
            expired_exclusive_release_spares_next_holder exclusive_lost_sees_a_replaced_node
            reentry_after_loss_is_refused wrapped_sequences_keep_exclusion_in_every_layout
            mixed_recipes_and_layouts_refused mixed_recipes_racing_never_hold_together huge_timeout_is_no_deadline
        );
    };
}

const HOLD: Duration = Duration::from_millis(5);

async fn contend_exclusive(h: &dyn Harness, recipe: Recipe, clients: usize, rounds: usize) -> Arc<Occupancy> {
    let path = h.path(&format!("mutex-{recipe}"));
    let occ = Occupancy::new();
    let mut set = JoinSet::new();
    for _ in 0..clients {
        let c = h.client().await;
        let lock = c.locks.lock(&path, recipe).unwrap();
        let occ = occ.clone();
        set.spawn(async move {
            for _ in 0..rounds {
                let g = lock.acquire().await.expect("acquire");
                if recipe == Recipe::Reentrant {
                    // Re-enter once inside the critical section.
                    let inner = lock.acquire().await.expect("re-enter");
                    assert_eq!(inner.hold_count(), 2);
                    inner.release().await.expect("release inner");
                }
                hold_exclusive(&occ, g, HOLD).await;
            }
            drop(c);
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("client task");
    }
    assert_eq!(occ.violations(), 0, "{recipe}: two holders at once");
    assert_eq!(occ.entries(), (clients * rounds) as u64);
    wait_children(h, &path, 0).await;
    occ
}

/// Exclusive: many clients, never two holders.
pub async fn exclusive_mutual_exclusion(h: &dyn Harness) {
    contend_exclusive(h, Recipe::Exclusive, 6, 4).await;
}

/// Fair: many clients, never two holders.
pub async fn fair_mutual_exclusion(h: &dyn Harness) {
    contend_exclusive(h, Recipe::Fair, 6, 4).await;
}

/// Reentrant: many clients, each re-entering, never two holders.
pub async fn reentrant_mutual_exclusion(h: &dyn Harness) {
    contend_exclusive(h, Recipe::Reentrant, 6, 4).await;
}

/// Write: many writers, never two holders.
pub async fn write_mutual_exclusion(h: &dyn Harness) {
    contend_exclusive(h, Recipe::Write, 6, 4).await;
}

/// Read/write: readers and writers mixed; a writer never overlaps anyone, readers do overlap.
pub async fn read_write_mutual_exclusion(h: &dyn Harness) {
    let path = h.path("rw-mixed");
    let occ = Occupancy::new();
    let mut set = JoinSet::new();
    for i in 0..8 {
        let c = h.client().await;
        let rw = c.locks.read_write(&path).unwrap();
        let occ = occ.clone();
        set.spawn(async move {
            for round in 0..4 {
                if (i + round) % 3 == 0 {
                    let g = rw.write().acquire().await.expect("write");
                    hold_exclusive(&occ, g, HOLD).await;
                } else {
                    let g = rw.read().acquire().await.expect("read");
                    occ.enter_shared();
                    tokio::time::sleep(HOLD * 2).await;
                    occ.exit_shared();
                    g.release().await.expect("release read");
                }
            }
            drop(c);
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("client task");
    }
    assert_eq!(occ.violations(), 0, "a writer overlapped another holder");
    assert_eq!(occ.entries(), 32);
    assert!(occ.max_shared() >= 2, "readers never shared the lock");
    wait_children(h, &path, 0).await;
}

/// Every recipe chosen by name at run time excludes other clients on the same path.
pub async fn every_recipe_by_name_excludes(h: &dyn Harness) {
    for name in ["exclusive", "fair", "reentrant", "write"] {
        let recipe: Recipe = name.parse().unwrap();
        let path = h.path(&format!("by-name-{name}"));
        let (a, b) = (h.client().await, h.client().await);
        let la = a.locks.lock(&path, recipe).unwrap();
        let lb = b.locks.lock(&path, recipe).unwrap();
        assert_eq!(la.recipe(), recipe);
        let g = la.acquire().await.unwrap();
        assert!(
            lb.try_acquire().await.unwrap().is_none(),
            "{name}: second client got a held lock"
        );
        g.release().await.unwrap();
        let g = bounded(h, "acquire after release", lb.acquire()).await.unwrap();
        g.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

async fn queue_in_order(h: &dyn Harness, path: &str, n: usize, write: bool) -> Vec<usize> {
    let holder = h.client().await;
    let first = if write {
        holder.locks.read_write(path).unwrap().write().acquire().await.unwrap()
    } else {
        holder.locks.fair(path).unwrap().acquire().await.unwrap()
    };
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut set = JoinSet::new();
    for i in 0..n {
        let c = h.client().await;
        let order = order.clone();
        let lock: Arc<dyn Lock> = if write {
            Arc::new(c.locks.read_write(path).unwrap().write())
        } else {
            Arc::new(c.locks.fair(path).unwrap())
        };
        set.spawn(async move {
            let g = lock.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(HOLD).await;
            g.release().await.unwrap();
            drop(c);
        });
        // Each waiter is queued before the next one starts.
        wait_children(h, path, i + 2).await;
    }
    first.release().await.unwrap();
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    let order = order.lock().unwrap().clone();
    order
}

/// Fair: waiters acquire in the order they queued.
pub async fn fair_fifo_order(h: &dyn Harness) {
    let path = h.path("fair-fifo");
    let order = queue_in_order(h, &path, 5, false).await;
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
    wait_children(h, &path, 0).await;
}

/// Write: writers acquire in the order they queued.
pub async fn write_fifo_order(h: &dyn Harness) {
    let path = h.path("write-fifo");
    let order = queue_in_order(h, &path, 5, true).await;
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
    wait_children(h, &path, 0).await;
}

/// Readers of different clients hold the read lock at the same time.
pub async fn readers_share(h: &dyn Harness) {
    let path = h.path("readers-share");
    let mut clients = Vec::new();
    let mut guards = Vec::new();
    for _ in 0..4 {
        let c = h.client().await;
        guards.push(
            bounded(h, "read", c.locks.read_write(&path).unwrap().read().acquire())
                .await
                .unwrap(),
        );
        clients.push(c);
    }
    assert_eq!(h.children(&path).await.len(), 4);
    for g in guards {
        g.release().await.unwrap();
    }
    wait_children(h, &path, 0).await;
}

/// A held write lock keeps readers out until released.
pub async fn writer_excludes_readers(h: &dyn Harness) {
    let path = h.path("writer-excludes");
    let (w, r) = (h.client().await, h.client().await);
    let wg = w.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    let read = r.locks.read_write(&path).unwrap().read();
    assert!(read.try_acquire().await.unwrap().is_none());
    let mut waiting = Box::pin(read.acquire());
    assert_pending(h, "reader behind a writer", &mut waiting).await;
    wg.release().await.unwrap();
    let rg = bounded(h, "reader after writer", waiting).await.unwrap();
    rg.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A writer waits until every earlier reader has released.
pub async fn write_waits_for_all_readers(h: &dyn Harness) {
    let path = h.path("write-waits-readers");
    let (r1, r2, w) = (h.client().await, h.client().await, h.client().await);
    let g1 = r1.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let g2 = r2.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let write = w.locks.read_write(&path).unwrap().write();
    let mut waiting = Box::pin(write.acquire());
    assert_pending(h, "writer behind two readers", &mut waiting).await;
    g1.release().await.unwrap();
    assert_pending(h, "writer behind one reader", &mut waiting).await;
    g2.release().await.unwrap();
    bounded(h, "writer after readers", waiting)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    wait_children(h, &path, 0).await;
}

/// A reader that arrives after a queued writer waits for that writer.
pub async fn reader_waits_for_earlier_writer(h: &dyn Harness) {
    let path = h.path("reader-waits-writer");
    let (r1, w, r2) = (h.client().await, h.client().await, h.client().await);
    let g1 = r1.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let write = w.locks.read_write(&path).unwrap().write();
    let mut wwait = Box::pin(write.acquire());
    assert_pending(h, "writer behind reader", &mut wwait).await;
    let read2 = r2.locks.read_write(&path).unwrap().read();
    assert!(
        read2.try_acquire().await.unwrap().is_none(),
        "a reader jumped a queued writer"
    );
    let mut rwait = Box::pin(read2.acquire());
    assert_pending(h, "reader behind queued writer", &mut rwait).await;
    g1.release().await.unwrap();
    let wg = bounded(h, "writer", wwait).await.unwrap();
    assert_pending(h, "reader behind holding writer", &mut rwait).await;
    wg.release().await.unwrap();
    bounded(h, "second reader", rwait)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    wait_children(h, &path, 0).await;
}

/// A waiting reader is granted when the writer ahead releases, even with a writer queued behind it.
pub async fn reader_never_waits_on_later_writer(h: &dyn Harness) {
    let path = h.path("reader-not-later-writer");
    let (w1, r, w2) = (h.client().await, h.client().await, h.client().await);
    let g1 = w1.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    let read = r.locks.read_write(&path).unwrap().read();
    let mut rwait = Box::pin(read.acquire());
    assert_pending(h, "reader behind writer", &mut rwait).await;
    wait_children(h, &path, 2).await;
    let write2 = w2.locks.read_write(&path).unwrap().write();
    let mut w2wait = Box::pin(write2.acquire());
    assert_pending(h, "second writer", &mut w2wait).await;
    g1.release().await.unwrap();
    let rg = bounded(h, "reader after first writer", rwait).await.unwrap();
    assert_pending(h, "second writer behind the reader", &mut w2wait).await;
    rg.release().await.unwrap();
    bounded(h, "second writer", w2wait)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    wait_children(h, &path, 0).await;
}

/// All readers queued behind a writer are granted together when it releases.
pub async fn readers_wake_together_after_writer(h: &dyn Harness) {
    let path = h.path("readers-together");
    let w = h.client().await;
    let wg = w.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..3 {
        let c = h.client().await;
        let read = c.locks.read_write(&path).unwrap().read();
        readers.push((c, read));
    }
    let waits: Vec<_> = readers.iter().map(|(_, r)| Box::pin(r.acquire())).collect();
    let mut joined = Box::pin(futures::future::join_all(waits));
    assert_pending(h, "readers behind writer", &mut joined).await;
    wg.release().await.unwrap();
    let guards: Vec<LockGuard> = bounded(h, "all readers", joined)
        .await
        .into_iter()
        .map(|g| g.unwrap())
        .collect();
    // All three hold at once: three live guards, three read nodes, and the writer's node gone.
    assert_eq!(guards.len(), 3);
    let children = h.children(&path).await;
    assert_eq!(children.len(), 3, "{children:?}");
    assert!(children.iter().all(|c| c.starts_with("R-")), "{children:?}");
    for g in guards {
        g.release().await.unwrap();
    }
    wait_children(h, &path, 0).await;
}

/// Reentrant: the same task re-enters with a count; the node goes only with the last release.
pub async fn reentrant_counts_per_task(h: &dyn Harness) {
    let path = h.path("reentrant-task");
    let (a, b) = (h.client().await, h.client().await);
    let lock = a.locks.reentrant(&path).unwrap();
    let other = b.locks.reentrant(&path).unwrap();
    let task = tokio::spawn(async move {
        let g1 = lock.acquire().await.unwrap();
        let g2 = lock.acquire().await.unwrap();
        let g3 = lock.acquire().await.unwrap();
        assert_eq!(g3.hold_count(), 3);
        assert_eq!(g1.node(), g3.node());
        assert!(matches!(g1.owner(), Some(Owner::Task(_))));
        g3.release().await.unwrap();
        g2.release().await.unwrap();
        assert_eq!(g1.hold_count(), 1);
        (g1, a)
    });
    let (g1, a) = task.await.unwrap();
    assert_eq!(h.children(&path).await.len(), 1, "one node for all holds");
    assert!(
        other.try_acquire().await.unwrap().is_none(),
        "still held after inner releases"
    );
    g1.release().await.unwrap();
    bounded(h, "other client after release", other.acquire())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    drop(a);
    wait_children(h, &path, 0).await;
}

/// Reentrant (blocking API): holds are counted per thread; another thread contends.
pub async fn reentrant_counts_per_thread(h: &dyn Harness) {
    let path = h.path("reentrant-thread");
    let a = h.client().await;
    let lock = a.locks.reentrant(&path).unwrap();
    let lock2 = lock.clone();
    std::thread::scope(|s| {
        s.spawn(|| {
            let g1 = lock.acquire_blocking().unwrap();
            let g2 = lock.acquire_blocking().unwrap();
            assert_eq!(g2.hold_count(), 2);
            assert_eq!(lock.hold_count(Owner::thread()), 2);
            // Another thread of the same process is another owner: it must not get in.
            let other = std::thread::scope(|s2| s2.spawn(|| lock2.try_acquire_blocking().unwrap().is_none()).join());
            assert!(other.unwrap(), "another thread re-entered a thread-owned lock");
            g2.release().unwrap();
            g1.release().unwrap();
            let again = std::thread::scope(|s2| {
                s2.spawn(|| {
                    let g = lock2.try_acquire_blocking().unwrap();
                    g.map(|g| g.release().is_ok())
                })
                .join()
            });
            assert_eq!(
                again.unwrap(),
                Some(true),
                "released lock was not free for another thread"
            );
        });
    });
    wait_children(h, &path, 0).await;
}

/// Reentrant: an explicit token carries the hold across tasks.
pub async fn reentrant_counts_per_token(h: &dyn Harness) {
    let path = h.path("reentrant-token");
    let a = h.client().await;
    let token = OwnerToken::new();
    let lock = a.locks.reentrant(&path).unwrap().with_owner(token.into());
    let l1 = lock.clone();
    let g1 = tokio::spawn(async move { l1.acquire().await.unwrap() }).await.unwrap();
    let l2 = lock.clone();
    let g2 = tokio::spawn(async move { l2.acquire().await.unwrap() }).await.unwrap();
    assert_eq!(g2.hold_count(), 2);
    assert_eq!(g1.node(), g2.node());
    assert_eq!(g1.owner(), Some(Owner::Token(token)));
    // A task without the token is another owner.
    let plain = a.locks.reentrant(&path).unwrap();
    let other = tokio::spawn(async move { plain.try_acquire().await.unwrap().is_none() })
        .await
        .unwrap();
    assert!(other, "a different task got in beside the token's hold");
    g2.release().await.unwrap();
    g1.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Reentrant: a different task in the same process queues and waits like any client.
pub async fn reentrant_other_task_contends(h: &dyn Harness) {
    let path = h.path("reentrant-other-task");
    let a = h.client().await;
    let lock = a.locks.reentrant(&path).unwrap();
    let l1 = lock.clone();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn(async move {
        let g = l1.acquire().await.unwrap();
        let token = g.fencing_token();
        held_tx.send(token).unwrap();
        let _ = go_rx.await;
        g.release().await.unwrap();
    });
    let first = held_rx.await.unwrap();
    let l2 = lock.clone();
    let mut waiter = tokio::spawn(async move {
        let g = l2.acquire().await.unwrap();
        let t = g.fencing_token();
        g.release().await.unwrap();
        t
    });
    wait_children(h, &path, 2).await;
    assert_pending(h, "second task of the same process", &mut waiter).await;
    go_tx.send(()).unwrap();
    holder.await.unwrap();
    let second = bounded(h, "second task", waiter).await.unwrap();
    assert!(second > first);
    wait_children(h, &path, 0).await;
}

/// Reentrant: two tasks sharing one token that acquire at once make one node and a count of two.
pub async fn reentrant_same_owner_concurrent_acquires(h: &dyn Harness) {
    let path = h.path("reentrant-concurrent-owner");
    let a = h.client().await;
    let lock = a.locks.reentrant(&path).unwrap().with_owner(OwnerToken::new().into());
    let (l1, l2) = (lock.clone(), lock.clone());
    let (g1, g2) = tokio::join!(
        tokio::spawn(async move { l1.acquire().await }),
        tokio::spawn(async move { l2.acquire().await })
    );
    let (g1, g2) = (g1.unwrap().unwrap(), g2.unwrap().unwrap());
    assert_eq!(g1.node(), g2.node());
    assert_eq!(g1.hold_count(), 2);
    assert_eq!(h.children(&path).await.len(), 1);
    g1.release().await.unwrap();
    g2.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Write: the same owner re-enters the write side.
pub async fn write_reentrant(h: &dyn Harness) {
    let path = h.path("write-reentrant");
    let a = h.client().await;
    let w = a
        .locks
        .read_write(&path)
        .unwrap()
        .write()
        .with_owner(OwnerToken::new().into());
    let g1 = w.acquire().await.unwrap();
    let g2 = bounded(h, "re-enter write", w.acquire()).await.unwrap();
    assert_eq!(g2.hold_count(), 2);
    assert_eq!(h.children(&path).await.len(), 1);
    g2.release().await.unwrap();
    g1.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Read: the same owner re-enters the read side, even with a writer queued behind it.
pub async fn read_reentrant(h: &dyn Harness) {
    let path = h.path("read-reentrant");
    let (a, w) = (h.client().await, h.client().await);
    let r = a
        .locks
        .read_write(&path)
        .unwrap()
        .read()
        .with_owner(OwnerToken::new().into());
    let g1 = r.acquire().await.unwrap();
    let write = w.locks.read_write(&path).unwrap().write();
    let mut wwait = Box::pin(write.acquire());
    assert_pending(h, "writer behind reader", &mut wwait).await;
    let g2 = bounded(h, "re-enter read past a queued writer", r.acquire())
        .await
        .unwrap();
    assert_eq!(g2.hold_count(), 2);
    g2.release().await.unwrap();
    assert_pending(h, "writer while one read hold remains", &mut wwait).await;
    g1.release().await.unwrap();
    bounded(h, "writer", wwait).await.unwrap().release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Write to read downgrade: no writer gets in between, and the lock frees when both are released.
pub async fn downgrade_write_to_read(h: &dyn Harness) {
    let path = h.path("downgrade");
    let (a, b) = (h.client().await, h.client().await);
    let rw = a.locks.read_write(&path).unwrap();
    let owner: Owner = OwnerToken::new().into();
    let wg = rw.write().with_owner(owner).acquire().await.unwrap();
    let other_write = b.locks.read_write(&path).unwrap().write();
    let mut wwait = Box::pin(other_write.acquire());
    assert_pending(h, "other writer", &mut wwait).await;
    let rg = bounded(h, "downgrade", rw.read().with_owner(owner).acquire())
        .await
        .unwrap();
    wg.release().await.unwrap();
    assert_pending(h, "other writer while the downgraded reader holds", &mut wwait).await;
    assert!(rg.hold_count() == 1);
    rg.release().await.unwrap();
    bounded(h, "other writer after downgrade ends", wwait)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    wait_children(h, &path, 0).await;
}

/// Read to write upgrade by the same owner is refused at once, without a node or a hang.
pub async fn upgrade_refused(h: &dyn Harness) {
    let path = h.path("upgrade");
    let a = h.client().await;
    let rw = a.locks.read_write(&path).unwrap();
    let owner: Owner = OwnerToken::new().into();
    let rg = rw.read().with_owner(owner).acquire().await.unwrap();
    let r = bounded(h, "upgrade attempt", rw.write().with_owner(owner).acquire()).await;
    assert!(matches!(r, Err(Error::UpgradeRefused(_))), "{r:?}");
    assert!(r.unwrap_err().to_string().contains("upgrad"));
    assert_eq!(h.children(&path).await.len(), 1);
    rg.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// try_acquire on a held fair lock returns nothing and leaves no node.
pub async fn try_acquire_on_held_fair(h: &dyn Harness) {
    let path = h.path("try-fair");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    for _ in 0..3 {
        assert!(b.locks.fair(&path).unwrap().try_acquire().await.unwrap().is_none());
        assert_eq!(h.children(&path).await.len(), 1);
    }
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// try_acquire on a held exclusive lock returns nothing and leaves no node.
pub async fn try_acquire_on_held_exclusive(h: &dyn Harness) {
    let path = h.path("try-exclusive");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.exclusive(&path).unwrap().acquire().await.unwrap();
    assert!(b.locks.exclusive(&path).unwrap().try_acquire().await.unwrap().is_none());
    assert_eq!(h.children(&path).await, vec!["lock".to_string()]);
    g.release().await.unwrap();
    let g = b
        .locks
        .exclusive(&path)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free now");
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// try_acquire on a free lock succeeds, for every recipe.
pub async fn try_acquire_free_every_recipe(h: &dyn Harness) {
    let a = h.client().await;
    for recipe in Recipe::ALL {
        let path = h.path(&format!("try-free-{recipe}"));
        let g = a.locks.lock(&path, recipe).unwrap().try_acquire().await.unwrap();
        let g = g.unwrap_or_else(|| panic!("{recipe}: free lock not acquired"));
        g.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// try_acquire of the read side succeeds beside a reader, fails beside a writer.
pub async fn try_read_beside_reader_but_not_writer(h: &dyn Harness) {
    let path = h.path("try-read");
    let (a, b) = (h.client().await, h.client().await);
    let r1 = a.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let r2 = b
        .locks
        .read_write(&path)
        .unwrap()
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("share");
    let other: Owner = OwnerToken::new().into();
    let write = b.locks.read_write(&path).unwrap().write().with_owner(other);
    assert!(write.try_acquire().await.unwrap().is_none());
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = a.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    assert!(b
        .locks
        .read_write(&path)
        .unwrap()
        .read()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    w.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

async fn timeout_leaves_no_node(h: &dyn Harness, recipe: Recipe, holder_recipe: Recipe) {
    let path = h.path(&format!("timeout-{recipe}"));
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.lock(&path, holder_recipe).unwrap().acquire().await.unwrap();
    let before = h.children(&path).await;
    let lock = b.locks.lock(&path, recipe).unwrap();
    let r = bounded(h, "acquire with timeout", lock.acquire_timeout(h.tick() * 5))
        .await
        .unwrap();
    assert!(r.is_none(), "{recipe}: got a held lock");
    // No settling: the node is gone by the time the call returns.
    assert_eq!(
        h.children(&path).await,
        before,
        "{recipe}: timed-out acquire left a node"
    );
    assert!(b.locks.metrics().cleanups >= u64::from(recipe != Recipe::Exclusive));
    g.release().await.unwrap();
    bounded(h, "acquire after timeout", lock.acquire())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    wait_children(h, &path, 0).await;
}

/// A timed-out fair acquire returns nothing and leaves no node.
pub async fn timeout_leaves_no_node_fair(h: &dyn Harness) {
    timeout_leaves_no_node(h, Recipe::Fair, Recipe::Fair).await;
}

/// A timed-out exclusive acquire returns nothing and leaves no node.
pub async fn timeout_leaves_no_node_exclusive(h: &dyn Harness) {
    timeout_leaves_no_node(h, Recipe::Exclusive, Recipe::Exclusive).await;
}

/// A timed-out read acquire (behind a writer) returns nothing and leaves no node.
pub async fn timeout_leaves_no_node_read(h: &dyn Harness) {
    timeout_leaves_no_node(h, Recipe::Read, Recipe::Write).await;
}

/// Aborting a waiting acquire (its future dropped) leaves no node, for every recipe.
pub async fn dropped_acquire_leaves_no_node(h: &dyn Harness) {
    for (recipe, holder) in [
        (Recipe::Fair, Recipe::Fair),
        (Recipe::Exclusive, Recipe::Exclusive),
        (Recipe::Reentrant, Recipe::Reentrant),
        (Recipe::Read, Recipe::Write),
        (Recipe::Write, Recipe::Read),
    ] {
        let path = h.path(&format!("dropped-{recipe}"));
        let (a, b) = (h.client().await, h.client().await);
        let g = a.locks.lock(&path, holder).unwrap().acquire().await.unwrap();
        let lock = b.locks.lock(&path, recipe).unwrap();
        let task = tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) });
        if recipe != Recipe::Exclusive {
            wait_children(h, &path, 2).await;
        } else {
            tokio::time::sleep(h.tick() * 3).await;
        }
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        wait_children(h, &path, 1).await;
        g.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// Cancelling an acquire at many points, including with a create reply in flight, never leaves a node.
pub async fn dropped_acquire_at_every_point(h: &dyn Harness) {
    let path = h.path("dropped-every-point");
    let step = if h.capabilities().latency {
        h.set_latency(Duration::from_millis(4));
        Duration::from_millis(1)
    } else {
        Duration::from_micros(300)
    };
    let (a, b) = (h.client().await, h.client().await);
    for held in [false, true] {
        let g = if held {
            Some(a.locks.fair(&path).unwrap().acquire().await.unwrap())
        } else {
            None
        };
        let base = usize::from(held);
        for i in 0..24u32 {
            let lock = b.locks.fair(&path).unwrap();
            let task = tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) });
            tokio::time::sleep(step * i).await;
            task.abort();
            let _ = task.await;
            wait_children(h, &path, base).await;
        }
        if let Some(g) = g {
            g.release().await.unwrap();
        }
    }
    h.set_latency(Duration::ZERO);
    wait_children(h, &path, 0).await;
}

/// A waiter cancelled from the middle of the queue: the one behind it re-links and the order holds.
pub async fn cancelled_middle_waiter_chain_repairs(h: &dyn Harness) {
    let path = h.path("middle-cancel");
    let (a, b, c, d) = (h.client().await, h.client().await, h.client().await, h.client().await);
    let ga = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let lb = b.locks.fair(&path).unwrap();
    let mut wb = tokio::spawn(async move { lb.acquire().await.unwrap() });
    wait_children(h, &path, 2).await;
    let lc = c.locks.fair(&path).unwrap();
    let wc = tokio::spawn(async move { lc.acquire().await.unwrap() });
    wait_children(h, &path, 3).await;
    let ld = d.locks.fair(&path).unwrap();
    let mut wd = tokio::spawn(async move { ld.acquire().await.unwrap() });
    wait_children(h, &path, 4).await;
    wc.abort();
    let _ = wc.await;
    wait_children(h, &path, 3).await;
    assert_pending(h, "d behind b", &mut wd).await;
    ga.release().await.unwrap();
    let gb = bounded(h, "b", &mut wb).await.unwrap();
    assert_pending(h, "d behind b holding", &mut wd).await;
    gb.release().await.unwrap();
    bounded(h, "d", wd).await.unwrap().release().await.unwrap();
    wait_children(h, &path, 0).await;
}

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

/// Session expiry resolves lost() with SessionExpired.
pub async fn session_expiry_fires_lost(h: &dyn Harness) {
    let path = h.path("expiry-lost");
    let a = h.client().await;
    for recipe in [Recipe::Fair, Recipe::Exclusive, Recipe::Read] {
        let g = a.locks.lock(&path, recipe).unwrap().acquire().await.unwrap();
        let mut lost = Box::pin(g.lost());
        assert_pending(h, "lost before expiry", &mut lost).await;
        a.faults.expire_session().await;
        assert_eq!(bounded(h, "lost", lost).await, LostReason::SessionExpired);
        let r = g.release().await;
        assert!(r.is_err(), "{recipe}: release after expiry must report the loss");
        wait_children(h, &path, 0).await;
    }
}

/// When the holder's session expires, a waiter takes over with a higher token.
pub async fn session_expiry_waiter_takes_over(h: &dyn Harness) {
    let path = h.path("expiry-takeover");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let lb = b.locks.fair(&path).unwrap();
    let mut wb = tokio::spawn(async move { lb.acquire().await.unwrap() });
    wait_children(h, &path, 2).await;
    assert_pending(h, "waiter", &mut wb).await;
    a.faults.expire_session().await;
    let gb = bounded(h, "waiter takes over", wb).await.unwrap();
    assert!(gb.fencing_token() > g.fencing_token());
    assert_eq!(g.lost().await, LostReason::SessionExpired);
    drop(g);
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

/// A waiting acquire fails with SessionExpired when its own session expires, leaving the holder alone.
pub async fn waiting_acquire_fails_on_session_expiry(h: &dyn Harness) {
    let path = h.path("expiry-waiter");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let lb = b.locks.fair(&path).unwrap();
    let wb = tokio::spawn(async move { lb.acquire().await.map(|g| g.fencing_token()) });
    wait_children(h, &path, 2).await;
    b.faults.expire_session().await;
    let r = bounded(h, "waiter fails", wb).await.unwrap();
    assert_eq!(r, Err(Error::SessionExpired));
    wait_children(h, &path, 1).await;
    assert!(
        bounded(h, "holder not lost", tokio::time::timeout(h.tick() * 3, g.lost()))
            .await
            .is_err()
    );
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// After its session expired, a client acquires again on a new session.
pub async fn acquire_after_expiry_uses_new_session(h: &dyn Harness) {
    let path = h.path("expiry-new-session");
    let a = h.client().await;
    let lock = a.locks.fair(&path).unwrap();
    let g = lock.acquire().await.unwrap();
    let old = g.session_id();
    a.faults.expire_session().await;
    assert_eq!(g.lost().await, LostReason::SessionExpired);
    drop(g);
    let g2 = bounded(h, "acquire on new session", lock.acquire()).await.unwrap();
    assert_ne!(g2.session_id(), old);
    g2.release().await.unwrap();
    wait_children(h, &path, 0).await;
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

async fn tokens_increase(h: &dyn Harness, recipe: Recipe) {
    let occ = contend_exclusive(h, recipe, 3, 5).await;
    let tokens = occ.tokens();
    assert_eq!(tokens.len(), 15);
    assert_increasing(&tokens);
}

/// Fair: fencing tokens strictly increase across successive holders.
pub async fn fencing_tokens_increase_fair(h: &dyn Harness) {
    tokens_increase(h, Recipe::Fair).await;
}

/// Exclusive: fencing tokens strictly increase across successive holders.
pub async fn fencing_tokens_increase_exclusive(h: &dyn Harness) {
    tokens_increase(h, Recipe::Exclusive).await;
}

/// A writer's token is above the tokens of the readers before it.
pub async fn fencing_writer_above_earlier_readers(h: &dyn Harness) {
    let path = h.path("fencing-rw");
    let (r1, r2, w) = (h.client().await, h.client().await, h.client().await);
    let g1 = r1.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let g2 = r2.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let write = w.locks.read_write(&path).unwrap().write();
    let ww = tokio::spawn(async move { write.acquire().await.unwrap() });
    wait_children(h, &path, 3).await;
    let (t1, t2) = (g1.fencing_token(), g2.fencing_token());
    g1.release().await.unwrap();
    g2.release().await.unwrap();
    let gw = bounded(h, "writer", ww).await.unwrap();
    assert!(gw.fencing_token() > t1.max(t2));
    gw.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

async fn wakeups_per_release(h: &dyn Harness, recipe: Recipe, waiters: usize) -> u64 {
    let path = h.path(&format!("wakeups-{recipe}"));
    let holder = h.client().await;
    let g = holder.locks.lock(&path, recipe).unwrap().acquire().await.unwrap();
    let mut clients = Vec::new();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<LockGuard>(waiters);
    for i in 0..waiters {
        let c = h.client().await;
        let lock = c.locks.lock(&path, recipe).unwrap();
        let done = done_tx.clone();
        tokio::spawn(async move {
            if let Ok(g) = lock.acquire().await {
                let _ = done.send(g).await;
            }
        });
        if recipe == Recipe::Exclusive {
            tokio::time::sleep(h.tick() * 2).await;
        } else {
            wait_children(h, &path, i + 2).await;
        }
        clients.push(c);
    }
    tokio::time::sleep(h.tick() * 3).await;
    let before: u64 = clients.iter().map(|c| c.locks.metrics().wakeups).sum();
    g.release().await.unwrap();
    let next = bounded(h, "next holder", done_rx.recv()).await.unwrap();
    tokio::time::sleep(h.tick() * 5).await;
    let after: u64 = clients.iter().map(|c| c.locks.metrics().wakeups).sum();
    // Drain the rest so nothing is left behind.
    next.release().await.unwrap();
    for _ in 1..waiters {
        bounded(h, "later holder", done_rx.recv())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    wait_children(h, &path, 0).await;
    after - before
}

/// Fair: one release wakes exactly one waiter (no herd).
pub async fn fair_wakes_one_waiter_per_release(h: &dyn Harness) {
    assert_eq!(wakeups_per_release(h, Recipe::Fair, 5).await, 1);
}

/// Exclusive: one release wakes every waiter (the documented herd effect).
pub async fn exclusive_wakes_every_waiter(h: &dyn Harness) {
    let woke = wakeups_per_release(h, Recipe::Exclusive, 5).await;
    assert!(woke >= 5, "expected every one of 5 waiters to wake, saw {woke}");
}

/// Many paths locked at once by many clients stay independent and exclusive.
pub async fn many_paths_at_once(h: &dyn Harness) {
    let mut set = JoinSet::new();
    let mut occs = Vec::new();
    for p in 0..12 {
        let path = h.path(&format!("many-{p}"));
        let occ = Occupancy::new();
        occs.push((path.clone(), occ.clone()));
        for _ in 0..3 {
            let c = h.client().await;
            let lock = c
                .locks
                .lock(&path, if p % 2 == 0 { Recipe::Fair } else { Recipe::Exclusive })
                .unwrap();
            let occ = occ.clone();
            set.spawn(async move {
                for _ in 0..3 {
                    let g = lock.acquire().await.unwrap();
                    hold_exclusive(&occ, g, HOLD).await;
                }
                drop(c);
            });
        }
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    for (path, occ) in occs {
        assert_eq!(occ.violations(), 0, "{path}");
        assert_eq!(occ.entries(), 9);
        wait_children(h, &path, 0).await;
    }
}

/// Invalid paths and unknown recipe names are typed errors, for every recipe.
pub async fn bad_paths_rejected(h: &dyn Harness) {
    let a = h.client().await;
    let long = format!("/{}", "x".repeat(2000));
    for bad in [
        "",
        "relative",
        "/",
        "/trailing/",
        "/a//b",
        "/a/./b",
        "/a/../b",
        "/nul\0byte",
        "/zookeeper/x",
        long.as_str(),
    ] {
        for recipe in Recipe::ALL {
            match a.locks.lock(bad, recipe) {
                Err(Error::InvalidPath { .. }) => {}
                other => panic!("{recipe} accepted {bad:?}: {other:?}"),
            }
        }
        assert!(matches!(a.locks.fair(bad), Err(Error::InvalidPath { .. })));
        assert!(matches!(a.locks.read_write(bad), Err(Error::InvalidPath { .. })));
    }
    let e = "mutex".parse::<Recipe>().unwrap_err();
    assert!(matches!(e, Error::UnknownRecipe(_)));
    assert!(e.to_string().contains("mutex"));
}

/// Dropping a guard releases the lock in the background.
pub async fn release_on_drop_frees_lock(h: &dyn Harness) {
    let path = h.path("drop-release");
    let (a, b) = (h.client().await, h.client().await);
    for recipe in [Recipe::Fair, Recipe::Exclusive, Recipe::Reentrant, Recipe::Write] {
        let g = a.locks.lock(&path, recipe).unwrap().acquire().await.unwrap();
        drop(g);
        let gb = bounded(h, "acquire after drop", b.locks.lock(&path, recipe).unwrap().acquire())
            .await
            .unwrap();
        gb.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// A guard moves to another task and is released there.
pub async fn guard_moves_between_tasks(h: &dyn Harness) {
    let path = h.path("guard-moves");
    let a = h.client().await;
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let r = tokio::spawn(async move {
        assert!(g.fencing_token() > 0);
        g.release().await
    })
    .await
    .unwrap();
    assert!(r.is_ok());
    wait_children(h, &path, 0).await;
}

/// A deep lock path is created on demand and its container vanishes after the last release.
pub async fn deep_path_created_and_emptied(h: &dyn Harness) {
    let path = format!("{}/deep/er/still", h.path("deep"));
    let a = h.client().await;
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    assert!(g.node().starts_with(&format!("{path}/L-")));
    assert_eq!(h.children(&path).await.len(), 1);
    g.release().await.unwrap();
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
    let gb = bounded(h, "b takes over", b.locks.fair(&path).unwrap().acquire())
        .await
        .unwrap();
    // First the lease runs out (the client cannot know yet that the server expired its session)...
    assert_eq!(bounded(h, "a's lease", g.lost()).await, LostReason::LeaseExpired);
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

/// Children the layout does not recognise are ignored, and left alone.
pub async fn unknown_children_ignored(h: &dyn Harness) {
    let path = h.path("foreign-children");
    let a = h.client().await;
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let backend = a.locks.backend().clone();
    let foreign = format!("{path}/not-a-lock-0000000001");
    backend
        .current()
        .create(&foreign, b"", recipes_core::CreateMode::Ephemeral)
        .await
        .unwrap();
    g.release().await.unwrap();
    let g = bounded(
        h,
        "acquire beside foreign child",
        a.locks.fair(&path).unwrap().acquire(),
    )
    .await
    .unwrap();
    g.release().await.unwrap();
    assert_eq!(h.children(&path).await, vec!["not-a-lock-0000000001".to_string()]);
    backend.current().delete(&foreign).await.unwrap();
    wait_children(h, &path, 0).await;
}

/// The blocking API refuses to run inside an async runtime instead of stalling it.
pub async fn blocking_api_refused_inside_runtime(h: &dyn Harness) {
    let a = h.client().await;
    let lock = a.locks.fair(h.path("blocking-in-async")).unwrap();
    assert!(matches!(lock.acquire_blocking(), Err(Error::BlockingInAsync)));
    assert!(matches!(lock.try_acquire_blocking(), Err(Error::BlockingInAsync)));
}

/// While the client is cut off from the server, a timed acquire ends on time, a try waits only briefly for the
/// connection, and no node is left once the connection is back.
pub async fn timed_acquire_while_disconnected_ends_on_time(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return skip(h, "timed_acquire_while_disconnected_ends_on_time", "disconnects");
    }
    let path = h.path("disconnected-timeout");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let timeout = b.faults.session_timeout();
    b.faults.disconnect_for(timeout / 2).await;
    let lock = b.locks.fair(&path).unwrap();
    let t0 = tokio::time::Instant::now();
    let r = lock.acquire_timeout(timeout / 8).await;
    assert!(matches!(r, Ok(None)), "{r:?}");
    assert!(
        t0.elapsed() < timeout / 8 + Duration::from_secs(2),
        "timed acquire overran: {:?}",
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
    bounded(h, "acquire after reconnect", lock.acquire())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    wait_children(h, &path, 0).await;
}

/// A held lock's lease is valid, and ends no later than a session timeout from now.
pub async fn lease_valid_while_held(h: &dyn Harness) {
    let path = h.path("lease-valid");
    let a = h.client().await;
    let timeout = a.faults.session_timeout();
    for recipe in [Recipe::Fair, Recipe::Exclusive, Recipe::Read, Recipe::Write] {
        let g = a.locks.lock(&path, recipe).unwrap().acquire().await.unwrap();
        let until = g.valid_until().expect("lease of a live session");
        let now = tokio::time::Instant::now();
        assert!(
            until > now && until <= now + timeout,
            "{recipe}: {until:?} not in (now, now + {timeout:?}]"
        );
        assert!(g.is_valid());
        g.release().await.unwrap();
    }
    wait_children(h, &path, 0).await;
}

/// A holder cut off from the server sees its lease run out (lost() fires) before any other client acquires.
pub async fn lease_lost_before_another_client_acquires(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return skip(h, "lease_lost_before_another_client_acquires", "disconnects");
    }
    let path = h.path("lease-order");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let lock = b.locks.fair(&path).unwrap();
    let waiter = tokio::spawn(async move {
        let g = lock.acquire().await.unwrap();
        (tokio::time::Instant::now(), g)
    });
    wait_children(h, &path, 2).await;
    let timeout = a.faults.session_timeout();
    a.faults.disconnect_for(timeout * 2).await;
    let reason = bounded(h, "lost", g.lost()).await;
    let lost_at = tokio::time::Instant::now();
    assert_eq!(
        reason,
        LostReason::LeaseExpired,
        "the lease must run out before the expiry is known"
    );
    assert!(!g.is_valid());
    let (acquired_at, gb) = bounded(h, "b takes over", waiter).await.unwrap();
    assert!(
        lost_at < acquired_at,
        "a's lost() at {lost_at:?} must precede b's acquire at {acquired_at:?}"
    );
    assert!(gb.fencing_token() > g.fencing_token());
    gb.release().await.unwrap();
    drop(g);
    wait_children(h, &path, 0).await;
}

/// Fencing tokens strictly increase over 1000 handoffs among 4 clients.
pub async fn fencing_tokens_increase_over_1000_handoffs(h: &dyn Harness) {
    let path = h.path("fencing-1000");
    let occ = Occupancy::new();
    let mut set = JoinSet::new();
    for _ in 0..4 {
        let c = h.client().await;
        let lock = c.locks.fair(&path).unwrap();
        let occ = occ.clone();
        set.spawn(async move {
            for _ in 0..250 {
                let g = lock.acquire().await.expect("acquire");
                hold_exclusive(&occ, g, Duration::ZERO).await;
            }
            drop(c);
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("client task");
    }
    assert_eq!(occ.violations(), 0);
    let tokens = occ.tokens();
    assert_eq!(tokens.len(), 1000);
    assert_increasing(&tokens);
    wait_children(h, &path, 0).await;
}

/// A guarded operation runs and commits under a valid lease, and does not run once the session is gone.
pub async fn guarded_operation_under_the_lease(h: &dyn Harness) {
    let path = h.path("guarded");
    let a = h.client().await;
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let token = g.fencing_token();
    let r = g.guarded(|| async { Ok::<_, String>(token) }, |_| async {}).await;
    assert_eq!(r, Ok(token));
    a.faults.expire_session().await;
    let r = g.guarded(|| async { Ok::<_, String>(0) }, |_| async {}).await;
    assert_eq!(r, Err(recipes_core::GuardedError::NotRun));
    drop(g);
    wait_children(h, &path, 0).await;
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
        tokio::time::sleep(h.tick() * 2).await;
        let held_name = g.node().rsplit('/').next().unwrap().to_owned();
        let b_node = h
            .children(&path)
            .await
            .into_iter()
            .find(|c| *c != held_name)
            .expect("b's node");
        // Delete b's node, then release at once: b must see its own node gone first.
        admin
            .locks
            .backend()
            .current()
            .delete(&format!("{path}/{b_node}"))
            .await
            .unwrap();
        g.release().await.unwrap();
        let gb = bounded(h, "b after re-queueing", waiter).await.unwrap();
        let name = gb.node().rsplit('/').next().unwrap().to_owned();
        assert_ne!(name, b_node, "{recipe}: b claimed the lock with its deleted node");
        assert_eq!(
            h.children(&path).await,
            vec![name],
            "{recipe}: b holds without its node"
        );
        gb.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// 1000 acquires of every queued recipe, cancelled or timed out at pseudo-random points: no node is left.
#[allow(clippy::print_stdout)] // the fault campaign's figures (scripts/campaign)
pub async fn thousand_abandoned_acquires_leave_no_node(h: &dyn Harness) {
    let path = h.path("abandoned-1000");
    let (a, b) = (h.client().await, h.client().await);
    if h.capabilities().latency {
        h.set_latency(Duration::from_millis(1)); // so that creates are in flight when cancelled
    }
    let holder = a.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let step = h.tick() / 10;
    let (mut cancelled, mut timed_out) = (0, 0);
    for batch in 0..50 {
        let mut set = JoinSet::new();
        for _ in 0..20 {
            let r = next();
            let recipe = [Recipe::Fair, Recipe::Read, Recipe::Write, Recipe::Reentrant][(r % 4) as usize];
            let lock = b.locks.lock(&path, recipe).unwrap();
            let wait = step * ((r >> 8) % 30) as u32;
            if r & (1 << 40) == 0 {
                cancelled += 1;
                // Cancelled: the acquire future is dropped at some await point.
                let t = tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) });
                set.spawn(async move {
                    tokio::time::sleep(wait).await;
                    t.abort();
                    let _ = t.await;
                });
            } else {
                timed_out += 1;
                set.spawn(async move {
                    let r = lock.acquire_timeout(wait).await;
                    assert!(matches!(r, Ok(None)), "got a held lock: {r:?}");
                });
            }
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
        if batch % 10 == 9 {
            wait_children(h, &path, 1).await;
        }
    }
    h.set_latency(Duration::ZERO);
    wait_children(h, &path, 1).await;
    holder.release().await.unwrap();
    wait_children(h, &path, 0).await;
    println!(
        "CAMPAIGN abandoned ({}): {cancelled} acquires cancelled and {timed_out} timed out at pseudo-random points \
         behind a held lock; lock nodes left: 0",
        h.name()
    );
}

/// Readers and writers of six clients contend; the recorded history passes the checker (exclusion, token order,
/// progress of every client).
pub async fn history_checked_mixed_contention(h: &dyn Harness) {
    use crate::history::{check, Event, Mode};
    let path = h.path("history-mixed");
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let t0 = tokio::time::Instant::now();
    let mut set = JoinSet::new();
    for client in 0..6usize {
        let c = h.client().await;
        let rw = c.locks.read_write(&path).unwrap();
        let events = events.clone();
        set.spawn(async move {
            for round in 0..5 {
                let write = (client + round) % 3 == 0;
                let g = if write {
                    rw.write().acquire().await
                } else {
                    rw.read().acquire().await
                }
                .unwrap();
                let mode = if write { Mode::Exclusive } else { Mode::Shared };
                let at = || (tokio::time::Instant::now() - t0).as_nanos() as u64;
                events.lock().unwrap().push(Event::Acquired {
                    at: at(),
                    client,
                    token: g.fencing_token(),
                    mode,
                });
                tokio::time::sleep(HOLD).await;
                events.lock().unwrap().push(Event::Released { at: at(), client });
                g.release().await.unwrap();
            }
            drop(c);
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    let events = events.lock().unwrap().clone();
    assert_eq!(events.len(), 60);
    let violations = check(&events, &(0..6).collect::<Vec<_>>());
    assert!(violations.is_empty(), "{violations:?}");
    wait_children(h, &path, 0).await;
}

/// A release whose future is dropped midway (a timeout around it, a cancelled task) still frees the lock.
pub async fn cancelled_release_leaves_no_node(h: &dyn Harness) {
    let path = h.path("cancelled-release");
    let (a, b) = (h.client().await, h.client().await);
    if h.capabilities().latency {
        h.set_latency(Duration::from_millis(2)); // so that the delete is in flight when the release is dropped
    }
    for cut in [Duration::ZERO, Duration::from_millis(1), Duration::from_millis(3)] {
        let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
        let _ = tokio::time::timeout(cut, g.release()).await;
        let gb = bounded(
            h,
            "other client after a cancelled release",
            b.locks.fair(&path).unwrap().acquire(),
        )
        .await;
        gb.unwrap().release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
    h.set_latency(Duration::ZERO);
}
