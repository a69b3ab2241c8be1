//! Same-session handoff (docs/algorithm.md, optimisation 7), on the in-memory backend with request latency and
//! virtual time: a release hands the lock to a task of the same session waiting in line behind it as soon as the
//! delete is sent, so the next task holds while the released node still exists at the server, one round trip
//! earlier than its watch event would tell it. Other sessions, readers, the fixed exclusive node and the peers'
//! layouts get no handoff.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::mutants::{self, Mutant};
use recipes_core::{Layout, LockGuard, Locks, Recipe};
use recipes_mem::MemCluster;
use tokio::time::Instant;

const LATENCY: Duration = Duration::from_millis(50);

/// Task A of `holder` holds `recipe`; task B of `waiter` waits for `second`. A releases: returns whether A's node
/// still existed at the server when B came to hold, B's wait after A's release, and the handoffs counted.
async fn release_to(
    holder: &Locks,
    waiter: &Locks,
    cluster: &MemCluster,
    recipe: Recipe,
    second: Recipe,
) -> (bool, Duration, u64) {
    let path = "/handoff/resource";
    let a = holder.lock(path, recipe).unwrap().acquire().await.unwrap();
    let (a_node, a_token) = (a.node().to_owned(), a.fencing_token());
    let lock = waiter.lock(path, second).unwrap();
    let b = tokio::spawn(async move {
        let g = lock.acquire().await.unwrap();
        (g, Instant::now())
    });
    // B is queued and waiting in line (its create, list and watches have had their round trips).
    tokio::time::sleep(LATENCY * 10).await;
    let released_at = Instant::now();
    let node_gone_at_b = {
        let cluster = cluster.clone();
        let a_node = a_node.clone();
        let release = tokio::spawn(async move { a.release().await.unwrap() });
        let (g, at): (LockGuard, Instant) = b.await.unwrap();
        // A's node, not another of its name (the fixed exclusive node is made again by the next holder).
        let existed = cluster
            .stat(&a_node)
            .is_some_and(|s| u128::from(s.czxid.max(0) as u64) << 32 == a_token);
        release.await.unwrap();
        assert!(g.fencing_token() > 0);
        g.release().await.unwrap();
        (existed, at - released_at)
    };
    let handoffs = waiter.metrics().handoffs;
    (node_gone_at_b.0, node_gone_at_b.1, handoffs)
}

fn cluster() -> MemCluster {
    let c = MemCluster::new();
    c.set_latency(LATENCY);
    c
}

#[tokio::test(start_paused = true)]
async fn a_release_hands_the_lock_to_a_task_of_the_same_session() {
    for (first, second) in [
        (Recipe::Fair, Recipe::Fair),
        (Recipe::Reentrant, Recipe::Reentrant),
        (Recipe::Write, Recipe::Write),
        (Recipe::Write, Recipe::Read),
    ] {
        let c = cluster();
        let locks = Locks::new(c.client());
        let (existed, waited, handoffs) = release_to(&locks, &locks, &c, first, second).await;
        assert!(
            existed,
            "{first} → {second}: the next task held while the released node still existed"
        );
        assert!(waited < LATENCY, "{first} → {second}: waited {waited:?}");
        assert_eq!(handoffs, 1, "{first} → {second}");
        locks.close().await;
    }
}

/// Without the handoff (the waiter ignores it), the next task holds only after the delete was applied and its watch
/// event came back: the test above fails then.
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test(start_paused = true)]
async fn without_the_handoff_the_next_task_waits_a_round_trip() {
    mutants::set(Mutant::NoHandoff, true);
    let c = cluster();
    let locks = Locks::new(c.client());
    let (existed, waited, handoffs) = release_to(&locks, &locks, &c, Recipe::Fair, Recipe::Fair).await;
    mutants::set(Mutant::NoHandoff, false);
    assert!(!existed);
    assert!(waited >= LATENCY, "waited {waited:?}");
    assert_eq!(handoffs, 0);
    locks.close().await;
}

#[tokio::test(start_paused = true)]
async fn no_handoff_across_sessions_from_readers_or_in_the_peers_layouts() {
    // Another session: the watch event, after the delete is applied.
    let c = cluster();
    let (a, b) = (Locks::new(c.client()), Locks::new(c.client()));
    let (existed, _, handoffs) = release_to(&a, &b, &c, Recipe::Fair, Recipe::Fair).await;
    assert!(!existed);
    assert_eq!(handoffs, 0);
    // A reader may hold beside readers ahead of it: it hands nothing over.
    let c = cluster();
    let locks = Locks::new(c.client());
    let (existed, _, handoffs) = release_to(&locks, &locks, &c, Recipe::Read, Recipe::Write).await;
    assert!(!existed);
    assert_eq!(handoffs, 0);
    // The peers' layouts list again after every deletion.
    for layout in [Layout::Curator, Layout::Kazoo] {
        let c = cluster();
        let locks = Locks::builder(c.client()).layout(layout).build();
        let (existed, _, handoffs) = release_to(&locks, &locks, &c, Recipe::Fair, Recipe::Fair).await;
        assert!(!existed, "{layout:?}");
        assert_eq!(handoffs, 0, "{layout:?}");
    }
    // The fixed exclusive node: nobody waits in line on it.
    let c = cluster();
    let locks = Locks::new(c.client());
    let (existed, _, handoffs) = release_to(&locks, &locks, &c, Recipe::Exclusive, Recipe::Exclusive).await;
    assert!(!existed);
    assert_eq!(handoffs, 0);
}

/// A task handed the lock holds a node like any other: an operator's deletion of that node reaches its `lost()`
/// (asked by review, helper-71), and not before.
#[tokio::test(start_paused = true)]
async fn a_handed_holder_hears_of_its_nodes_deletion() {
    let c = cluster();
    let locks = Locks::new(c.client());
    let path = "/handoff/resource";
    let a = locks.fair(path).unwrap().acquire().await.unwrap();
    let lock = locks.fair(path).unwrap();
    let b = tokio::spawn(async move { lock.acquire().await.unwrap() });
    tokio::time::sleep(LATENCY * 10).await;
    let release = tokio::spawn(async move { a.release().await.unwrap() });
    let b = b.await.unwrap();
    release.await.unwrap();
    assert_eq!(locks.metrics().handoffs, 1);
    // Valid until the operator's delete, which comes 10 round trips later: a `lost()` that resolved before it, or
    // a guard built with a wrong node or creation id, fails here (helper-72).
    assert!(b.is_valid(), "a handed holder's lock is valid");
    let operator = c.client();
    let node = b.node().to_owned();
    let asked = Instant::now();
    let delete = tokio::spawn(async move {
        tokio::time::sleep(LATENCY * 10).await;
        recipes_core::backend::BackendExt::current(&*operator)
            .delete(&node)
            .await
            .unwrap();
    });
    let reason = tokio::time::timeout(Duration::from_secs(60), b.lost())
        .await
        .expect("lost() did not resolve within 60 s of virtual time");
    assert_eq!(reason, recipes_core::LostReason::NodeDeleted);
    assert!(
        asked.elapsed() >= LATENCY * 10,
        "lost() resolved {:?} after it was asked, before the delete was sent",
        asked.elapsed()
    );
    delete.await.unwrap();
    assert!(!b.is_valid(), "a lost lock is not valid");
    drop(b);
    locks.close().await;
    assert!(c.children(path).is_empty());
}
