//! Bugs found by the model checker's deeper runs, each replayed here as a precise schedule on the in-memory backend
//! (virtual time, request latency, the container reaper), so that they stay found.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_core::{Locks, Recipe};
use recipes_mem::MemCluster;

/// The container reaper deletes a parent between two creates of `ensure_parents` (found by a two-fault run: a long
/// partition emptied the path, time ran between the creates). The acquire must retry, not fail with `NoNode`.
#[tokio::test(start_paused = true)]
async fn parent_reaped_between_the_creates_of_the_parents_is_retried() {
    for recipe in [Recipe::Fair, Recipe::Exclusive] {
        let cluster = MemCluster::new();
        cluster.set_container_reap_delay(Duration::from_secs(1));
        let admin = cluster.client();
        let on = admin.current();
        on.create("/p", b"", CreateMode::Container).await.unwrap();
        on.create("/p/q", b"", CreateMode::Container).await.unwrap();
        on.create("/p/q/x", b"", CreateMode::Ephemeral).await.unwrap();
        on.delete("/p/q/x").await.unwrap(); // t = 0: /p/q is empty
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !cluster.exists("/p/q"),
            "t = 1 s: /p/q reaped, and /p is empty from now"
        );
        assert!(cluster.exists("/p"));
        // Each request takes 100 ms each way: the lock's create and list fail at 1.7 s, `/p` is found at 1.9 s, and the
        // reaper deletes `/p` (due at 2 s) before `/p/q` is created at 2.1 s.
        tokio::time::sleep(Duration::from_millis(600)).await;
        cluster.set_latency(Duration::from_millis(100));
        let locks = Locks::new(cluster.client());
        let g = locks.lock("/p/q", recipe).unwrap().acquire().await;
        let g = g.unwrap_or_else(|e| panic!("{recipe}: {e}"));
        g.release().await.unwrap();
    }
}

/// A release of the exclusive node whose delete reply is lost while the next holder makes `P/lock` before the retry
/// (found by an adversarial review): the retry, after its sync, reads the next holder's node under our name. Our own
/// delete released the lock: the release reports success (not "lost before the release"), and the next holder's
/// node is left alone.
#[tokio::test(start_paused = true)]
async fn exclusive_release_whose_delete_reply_is_lost_succeeds() {
    let cluster = MemCluster::new();
    cluster.set_latency(Duration::from_millis(5));
    let a = cluster.client();
    let la = Locks::new(a.clone());
    let lb = Locks::new(cluster.client());
    let ga = la.exclusive("/r/x").unwrap().acquire().await.unwrap();
    let lock_b = lb.exclusive("/r/x").unwrap();
    let waiter = tokio::spawn(async move { lock_b.acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    let release = tokio::spawn(ga.release());
    // Let the release read P/lock (ours) and send its delete.
    tokio::time::sleep(Duration::from_millis(11)).await;
    // The connection breaks with the delete in flight: it lands as an orphan, its reply is lost.
    a.disconnect_for(Duration::from_millis(300));
    let gb = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("B acquires once A's delete lands")
        .unwrap()
        .unwrap();
    assert!(gb.is_valid());
    let r = release.await.unwrap();
    assert!(
        r.is_ok(),
        "A's own delete released the lock, yet its release reports {r:?}"
    );
    assert_eq!(la.metrics().lost, 0, "a clean release counted as a loss");
    assert!(gb.is_valid(), "the retried release touched the next holder's node");
    assert_eq!(cluster.ephemerals().len(), 1);
}
