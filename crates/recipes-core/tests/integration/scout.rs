//! The scout (docs/algorithm.md, optimisation 3): a waiter whose blocker is not first in a short listing watches the
//! node just ahead of its blocker too, and lists again as soon as that node goes, while its blocker may still hold.
//! The blocker's deletion then needs no list: the handoff costs what the raw protocol's does. On the in-memory backend
//! with request latency and virtual time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::mutants::{self, Mutant};
use recipes_core::{LockGuard, Locks};
use recipes_mem::MemCluster;

const LATENCY: Duration = Duration::from_millis(10);
const PATH: &str = "/scout/resource";

/// Three sessions: the first holds, the second waits on it, the third behind the second (its blocker) with the first
/// as its scout. The first releases; once the second holds and everything has settled, the second releases. Returns
/// the names listed from the second's release to the third's hold, and the time that took.
async fn handoff_behind_two() -> (u64, Duration) {
    let cluster = MemCluster::new();
    cluster.set_latency(LATENCY);
    let sessions: Vec<Locks> = (0..3).map(|_| Locks::new(cluster.client())).collect();
    let first = sessions[0].fair(PATH).unwrap().acquire().await.unwrap();
    let mut waiters = Vec::new();
    for (i, locks) in sessions[1..].iter().enumerate() {
        let lock = locks.fair(PATH).unwrap();
        waiters.push(tokio::spawn(async move { lock.acquire().await.unwrap() }));
        for _ in 0..100 {
            if cluster.children(PATH).len() == i + 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(cluster.children(PATH).len(), i + 2, "waiter {i} queued");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.release().await.unwrap();
    let third = waiters.pop().unwrap();
    let second: LockGuard = tokio::time::timeout(Duration::from_secs(10), waiters.pop().unwrap())
        .await
        .expect("the second holds")
        .unwrap();
    // The third's scout went with the first's release: its list is done while the second holds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (listed, at) = (cluster.listed_names(), tokio::time::Instant::now());
    second.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("the third holds")
        .unwrap();
    let (listed, took) = (cluster.listed_names() - listed, at.elapsed());
    g.release().await.unwrap();
    assert!(cluster.children(PATH).is_empty(), "nothing left");
    (listed, took)
}

/// The third holds on its blocker's deletion with no list: the delete's round trip and its event, two latencies
/// (its list went while the blocker held).
#[tokio::test(start_paused = true)]
async fn a_waiter_behind_two_holds_on_its_blockers_deletion_without_a_list() {
    let (listed, took) = handoff_behind_two().await;
    assert_eq!(listed, 0, "names listed between the blocker's release and the hold");
    assert!(took < LATENCY * 3, "the hold came {took:?} after the blocker's release");
}

/// Without the scout (`Mutant::NoScout`), the third lists the queue after its blocker's deletion, on the handoff's
/// critical path: one name listed (its own), and a round trip more.
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test(start_paused = true)]
async fn without_the_scout_the_hold_waits_for_a_list() {
    mutants::set(Mutant::NoScout, true);
    let (listed, took) = handoff_behind_two().await;
    mutants::set(Mutant::NoScout, false);
    assert_eq!(listed, 1, "names listed between the blocker's release and the hold");
    assert!(
        took >= LATENCY * 3,
        "the hold came {took:?} after the blocker's release"
    );
}

/// The sensitivity check of the scenario `cancelled_scout_and_blocker_never_let_a_waiter_in_beside_the_holder`: with
/// the scout's deletion taken for "nothing ahead of the blocker" (`Mutant::ScoutMeansFirst`), a waiter whose scout and
/// then blocker are cancelled holds beside the first holder.
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test(start_paused = true)]
async fn a_scouts_deletion_alone_lets_two_hold() {
    mutants::set(Mutant::ScoutMeansFirst, true);
    let cluster = MemCluster::new();
    cluster.set_latency(LATENCY);
    let sessions: Vec<Locks> = (0..4).map(|_| Locks::new(cluster.client())).collect();
    let first = sessions[0].fair(PATH).unwrap().acquire().await.unwrap();
    let mut queued = Vec::new();
    for (i, locks) in sessions[1..].iter().enumerate() {
        let lock = locks.fair(PATH).unwrap();
        queued.push(tokio::spawn(async move { lock.acquire().await }));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(cluster.children(PATH).len(), i + 2, "waiter {i} queued");
    }
    let waiter = queued.pop().unwrap();
    for cancelled in queued {
        cancelled.abort();
        let _ = cancelled.await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let beside = tokio::time::timeout(Duration::from_secs(1), waiter).await;
    mutants::set(Mutant::ScoutMeansFirst, false);
    let g = beside
        .expect("the waiter holds beside the first holder")
        .unwrap()
        .unwrap();
    assert_eq!(cluster.children(PATH).len(), 2, "two nodes hold");
    g.release().await.unwrap();
    first.release().await.unwrap();
}
