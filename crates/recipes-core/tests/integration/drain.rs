//! What a drain of a long queue costs in lists, on the in-memory backend: the names the waiters read after their
//! wake-ups, counted by the cluster (`MemCluster::listed_names`), not timed. A waiter lists the queue again only when
//! it cannot know that its blocker held: the blocker was not first in its list and did not mark itself `first`
//! (docs/algorithm.md, optimisation 2; decisions 59 and 60).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::Locks;
use recipes_mem::MemCluster;
use tokio::task::JoinSet;

/// 300 waiters queued one by one, so that the first 64 listed a short queue, then drained. A holder marks itself
/// once it has judged a listing of more than 64 contenders, so the waiters near the front mark every other time
/// (after their own list of the whole queue), and from the 64th on every time: about 32 lists of the whole queue in
/// all. With the names ahead as the rule (decision 59) the first 63 never marked, and each of their successors
/// listed the whole queue (about 63 × 270 names); with no mark at all, every waiter would.
#[tokio::test(start_paused = true)]
async fn a_drain_lists_the_whole_queue_only_behind_every_other_early_waiter() {
    const WAITERS: usize = 300;
    let path = "/drain/queue";
    let cluster = MemCluster::new();
    let sessions: Vec<Locks> = (0..4).map(|_| Locks::new(cluster.client())).collect();
    let holder = sessions[0].fair(path).unwrap().acquire().await.unwrap();
    let mut waiters = JoinSet::new();
    for i in 0..WAITERS {
        // Consecutive waiters on different sessions: each handoff goes through the watch, not a same-session pass.
        let lock = sessions[i % sessions.len()].fair(path).unwrap();
        waiters.spawn(async move { lock.acquire().await.unwrap().release().await.unwrap() });
        for _ in 0..1000 {
            if cluster.children(path).len() == i + 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(cluster.children(path).len(), i + 2, "waiter {i} queued");
    }
    // Every waiter has listed once and waits in line.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = cluster.listed_names();
    holder.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(600), async {
        while let Some(r) = waiters.join_next().await {
            r.unwrap();
        }
    })
    .await
    .expect("the queue drains");
    let listed = cluster.listed_names() - before;
    // About 32 lists of at most 300 names; the old rule's 63 lists would read about 17,000.
    assert!(listed <= 40 * WAITERS as u64, "the drain listed {listed} names");
    assert!(cluster.children(path).is_empty());
}

/// A waiter in line whose connection was cut during its wait lists the queue again on its blocker's deletion instead
/// of holding at once, though the blocker was first in its list: after a reconnection, ZooKeeper reports the
/// re-registered watches' changes in the order of the re-registration, so its own node's deletion may come after the
/// blocker's (docs/algorithm.md, optimisation 3). With the old rule switched back on, it holds without listing.
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test(start_paused = true)]
async fn a_waiter_lists_again_after_a_disconnection_during_its_wait() {
    use recipes_core::mutants::{self, Mutant};
    for old_rule in [false, true] {
        mutants::set(Mutant::TrustAcrossReconnection, old_rule);
        let cluster = MemCluster::new();
        cluster.set_latency(Duration::from_millis(1));
        let (a, b) = (cluster.client(), cluster.client());
        let b_client = b.clone();
        let (la, lb) = (Locks::new(a), Locks::new(b));
        let holder = la.fair("/cut").unwrap().acquire().await.unwrap();
        let fair = lb.fair("/cut").unwrap();
        let waiter = tokio::spawn(async move { fair.acquire().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = cluster.listed_names();
        b_client.disconnect_for(Duration::from_millis(500));
        tokio::time::sleep(Duration::from_millis(50)).await;
        holder.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("the waiter holds after its reconnection")
            .unwrap()
            .unwrap();
        let listed = cluster.listed_names() - before;
        assert_eq!(
            listed > 0,
            !old_rule,
            "old rule {old_rule}: the waiter listed {listed} names"
        );
        g.release().await.unwrap();
    }
    mutants::set(Mutant::TrustAcrossReconnection, false);
}
