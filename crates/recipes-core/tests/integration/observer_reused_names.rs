//! The election's observer where names are made again (the etcd layout: one key per session).

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::backend::*;
use recipes_core::{Backend, Layout, Locks, Result};
use recipes_mem::MemCluster;
use tokio::sync::watch;

/// Delegates to `inner`; a `get` sleeps first while `slow` is set.
#[derive(Debug)]
struct SlowGet {
    inner: Arc<dyn Backend>,
    slow: Arc<AtomicBool>,
}

#[async_trait]
impl Backend for SlowGet {
    async fn create(&self, s: SessionId, p: &str, d: &[u8], m: CreateMode) -> Result<Created> {
        self.inner.create(s, p, d, m).await
    }
    async fn create_and_list(&self, s: SessionId, p: &str, d: &[u8], m: CreateMode) -> CreateAndList {
        self.inner.create_and_list(s, p, d, m).await
    }
    async fn children(&self, s: SessionId, p: &str) -> Result<Vec<String>> {
        self.inner.children(s, p).await
    }
    async fn get(&self, s: SessionId, p: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        if self.slow.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
        self.inner.get(s, p).await
    }
    async fn sync(&self, s: SessionId, p: &str) -> Result<()> {
        self.inner.sync(s, p).await
    }
    async fn watch_deletion(&self, s: SessionId, p: &str) -> Result<Option<(Stat, DeletionWatch)>> {
        self.inner.watch_deletion(s, p).await
    }
    async fn get_and_watch(&self, s: SessionId, p: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
        self.inner.get_and_watch(s, p).await
    }
    async fn set_data(&self, s: SessionId, p: &str, d: &[u8]) -> Result<()> {
        self.inner.set_data(s, p, d).await
    }
    fn set_data_unacked(&self, s: SessionId, p: &str, d: &[u8], v: Option<i32>) {
        self.inner.set_data_unacked(s, p, d, v)
    }
    async fn delete(&self, s: SessionId, p: &str) -> Result<()> {
        self.inner.delete(s, p).await
    }
    fn child_order(&self) -> ChildOrder {
        self.inner.child_order()
    }
    fn session(&self) -> watch::Receiver<SessionStatus> {
        self.inner.session()
    }
    fn session_status(&self) -> SessionStatus {
        self.inner.session_status()
    }
    async fn close(&self) {
        self.inner.close().await
    }
    fn lease(&self) -> Lease {
        self.inner.lease()
    }
    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.inner.runtime()
    }
}

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
    let slow = Arc::new(AtomicBool::new(false));
    let lo = etcd(Arc::new(SlowGet {
        inner: cluster.client(),
        slow: slow.clone(),
    }));
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
