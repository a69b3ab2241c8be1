//! Reentrancy edge cases that need a backend (the in-memory one).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use recipes_core::{Error, Locks, Owner, OwnerToken};
use recipes_mem::MemCluster;

#[tokio::test]
async fn hold_count_overflow_is_an_error_not_a_wrap() {
    let locks = Locks::new(MemCluster::new().client());
    let owner: Owner = OwnerToken::new().into();
    let lock = locks.reentrant("/overflow").unwrap().with_owner(owner);
    let g = lock.acquire().await.unwrap();
    lock.__set_hold_count(owner, u32::MAX);
    let r = lock.acquire().await;
    assert!(matches!(r, Err(Error::CountOverflow(_))), "{r:?}");
    assert_eq!(lock.hold_count(owner), u32::MAX);
    lock.__set_hold_count(owner, 1);
    g.release().await.unwrap();
    assert_eq!(lock.hold_count(owner), 0);
}

#[tokio::test]
async fn handles_on_one_path_share_counts() {
    let locks = Locks::new(MemCluster::new().client());
    let owner: Owner = OwnerToken::new().into();
    let a = locks.reentrant("/shared").unwrap().with_owner(owner);
    let b = locks.reentrant("/shared").unwrap().with_owner(owner);
    let g1 = a.acquire().await.unwrap();
    let g2 = b.acquire().await.unwrap();
    assert_eq!(g2.hold_count(), 2);
    assert_eq!(g1.node(), g2.node());
    drop(g2);
    drop(g1);
}

/// ZooKeeper's sequence counter wraps from 2147483647 to -2147483648: a waiter queued after the wrap must not be
/// let in beside the holder queued before it, and FIFO order holds across the wrap.
#[tokio::test(start_paused = true)]
async fn sequence_wrap_keeps_exclusion_and_fifo() {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    let cluster = MemCluster::new();
    let admin = cluster.client();
    recipes_core::backend::BackendExt::current(&*admin)
        .create("/wrap", b"", recipes_core::backend::CreateMode::Persistent)
        .await
        .unwrap();
    cluster.set_next_sequence("/wrap", i32::MAX - 1).unwrap();
    let holder = Locks::new(cluster.client());
    let g = holder.fair("/wrap").unwrap().acquire().await.unwrap();
    assert!(g.node().ends_with("2147483646"));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let locks = Locks::new(cluster.client());
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = locks.fair("/wrap").unwrap().acquire().await.unwrap();
            order
                .lock()
                .unwrap()
                .push((i, g.node().rsplit('-').next().map(str::to_owned)));
            tokio::time::sleep(Duration::from_millis(10)).await;
            g.release().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The waiters were made at 2147483647, -2147483648 and -2147483647: none may hold beside the holder.
    let names = cluster.children("/wrap");
    assert!(names.iter().any(|n| n.ends_with("-2147483648")), "{names:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        order.lock().unwrap().is_empty(),
        "a waiter got in beside the holder: {:?}",
        order.lock().unwrap()
    );
    g.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let got: Vec<usize> = order.lock().unwrap().iter().map(|(i, _)| *i).collect();
    assert_eq!(got, vec![0, 1, 2], "FIFO across the wrap");
}
