//! A multi-lock's release in one transaction, on the in-memory backend: regressions of its review (helper-24).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::backend::BackendExt;
use recipes_core::{Error, Locks, Recipe};
use recipes_mem::MemCluster;

const LATENCY: Duration = Duration::from_millis(50);

fn cluster() -> MemCluster {
    let c = MemCluster::new();
    c.set_latency(LATENCY);
    c
}

/// A member's node is deleted by someone, then the release transaction's reply is lost (it lands and fails: it
/// deleted nothing). The lost member is reported, the others are released (the release said `Ok`: after a lost
/// reply, each node that was gone counted as deleted by it).
#[tokio::test(start_paused = true)]
async fn a_member_lost_before_a_release_whose_reply_is_lost_is_reported() {
    let c = cluster();
    let a = c.client();
    let locks = Locks::new(a.clone());
    let set = locks
        .multi([("/r/x", Recipe::Fair), ("/r/y", Recipe::Fair), ("/r/z", Recipe::Fair)])
        .unwrap();
    let held = set.acquire().await.unwrap();
    let lost = held.guards()[1].node().to_owned();
    c.client().current().delete(&lost).await.unwrap();
    let release = tokio::spawn(async move { held.release().await });
    tokio::time::sleep(Duration::from_millis(10)).await; // sent, not yet applied
    a.disconnect_for(Duration::from_millis(300));
    match release.await.unwrap() {
        Err(Error::ReleaseFailed { failures }) => {
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert_eq!(failures[0].0, "/r/y");
        }
        r => panic!("the lost member is not reported: {r:?}"),
    }
    assert!(c.ephemerals().is_empty(), "{:?}", c.ephemerals());
}

/// The transaction's reply is lost but it applied (the connection breaks at any point of its round trip): the
/// release succeeds and nothing is left, with fair, write and reentrant members.
#[tokio::test(start_paused = true)]
async fn a_release_whose_reply_is_lost_but_applied_succeeds() {
    let c = cluster();
    let a = c.client();
    let locks = Locks::new(a.clone());
    let set = locks
        .multi([
            ("/l/x", Recipe::Fair),
            ("/l/y", Recipe::Write),
            ("/l/z", Recipe::Reentrant),
        ])
        .unwrap();
    for cut_after in [1u64, 10, 49, 51, 60, 99, 101] {
        let held = set.acquire().await.unwrap();
        let release = tokio::spawn(async move { held.release().await });
        tokio::time::sleep(Duration::from_millis(cut_after)).await;
        a.disconnect_for(Duration::from_millis(300));
        let r = release.await.unwrap();
        assert!(r.is_ok(), "cut after {cut_after} ms: {r:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            c.ephemerals().is_empty(),
            "cut after {cut_after} ms: {:?}",
            c.ephemerals()
        );
    }
}

/// A task of this process waiting in line on a member is handed the lock as that member's delete is sent, as after
/// a release of one lock (the transaction's waiters were told only after its reply, after their watch: no handoff).
#[tokio::test(start_paused = true)]
async fn a_member_with_a_waiter_in_line_is_handed_over() {
    let c = cluster();
    let locks = Locks::new(c.client());
    let set = locks
        .multi([("/h/x", Recipe::Fair), ("/h/y", Recipe::Fair), ("/h/z", Recipe::Fair)])
        .unwrap();
    let held = set.acquire().await.unwrap();
    let lock = locks.fair("/h/x").unwrap();
    let waiting = tokio::spawn(async move {
        let g = lock.acquire().await.unwrap();
        (g, tokio::time::Instant::now())
    });
    tokio::time::sleep(LATENCY * 10).await;
    let t0 = tokio::time::Instant::now();
    let release = tokio::spawn(async move { held.release().await });
    let (g, at) = waiting.await.unwrap();
    release.await.unwrap().unwrap();
    assert!(
        at - t0 < LATENCY,
        "the waiter held {:?} after the release began",
        at - t0
    );
    assert_eq!(locks.metrics().handoffs, 1);
    g.release().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(c.ephemerals().is_empty(), "{:?}", c.ephemerals());
}
