//! Bugs found by the model checker's deeper runs, each replayed here as a precise schedule on the in-memory backend
//! (virtual time, request latency, the container reaper), so that they stay found.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::{BackendExt, CreateMode, Locks, Recipe};
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
