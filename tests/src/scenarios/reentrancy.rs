//! Re-entry: holds counted per task, per thread (blocking API) or per explicit token, one node for all of an
//! owner's holds, and other owners contending like any client.

use recipes_core::{BlockingLock, Owner, OwnerToken};

use super::granted_then_released;
use crate::harness::Harness;
use crate::util::{assert_pending, bounded, wait_children};

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
    granted_then_released(h, "other client after release", other.acquire()).await;
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
    granted_then_released(h, "writer", wwait).await;
    wait_children(h, &path, 0).await;
}
