//! The election's observer where names are made again (the etcd layout: one key per session).

#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::ChildOrder;
use recipes_core::{Backend, Layout, Locks};
use recipes_mem::MemCluster;

use crate::support::SlowGet;

fn etcd(c: Arc<dyn Backend>) -> Locks {
    Locks::builder(c).layout(Layout::Etcd).build()
}

/// Found by review (helper-48): the observer lists [A, B], A resigns and stands again (its key made again under its
/// session's name, behind B), B leads; the observer's read of A's name found A's new key and named A the leader.
/// Nodes are now put in the order of their creation where names are made again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_puts_a_name_made_again_in_its_place() {
    let cluster = MemCluster::new().ordered_by(ChildOrder::Creation);
    let (la, lb) = (etcd(cluster.client()), etcd(cluster.client()));
    let slow_get = SlowGet::new(cluster.client());
    let slow = slow_get.before.clone();
    let lo = etcd(Arc::new(slow_get));
    let p = "/observer/reused";
    let a = la.election(p).unwrap().candidate("a").unwrap();
    let b = lb.election(p).unwrap().candidate("b").unwrap();
    let lead_a = a.leadership().await.unwrap();
    let wb = tokio::spawn(async move { b.leadership().await.unwrap() });
    for _ in 0..400 {
        if lo.election(p).unwrap().candidates().await.unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    slow.store(true, Ordering::SeqCst);
    let obs = lo.election(p).unwrap();
    let seen = tokio::spawn(async move { obs.leader().await.unwrap().unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await; // listed [A, B]; its reads delayed
    lead_a.resign().await.unwrap();
    let lead_b = wb.await.unwrap();
    let a2 = la.election(p).unwrap().candidate("a").unwrap();
    let wa2 = tokio::spawn(async move { a2.leadership().await.map(|l| l.term()) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let seen = seen.await.unwrap();
    slow.store(false, Ordering::SeqCst);
    assert_eq!((seen.id.as_str(), seen.term), ("b", lead_b.term()), "the leader named");
    let now = lo.election(p).unwrap().candidates().await.unwrap();
    let ids: Vec<&str> = now.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["b", "a"], "in the order they will lead");
    let b_term = lead_b.term();
    lead_b.resign().await.unwrap();
    let term = tokio::time::timeout(Duration::from_secs(10), wa2)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(term > b_term);
}
