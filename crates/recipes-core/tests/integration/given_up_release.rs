//! A release that gives up leaves its node to its drop's background delete (released_names.rs). Found by review
//! (helper-60): when the release's last delete was sent and its reply lost (an orphan that lands later), that
//! background delete read the fixed name without a `sync`, found our node on a server that had not applied the
//! orphan yet, and deleted the name once the next holder had made it again: two holders. A delete that may have
//! been sent makes the drop's delete one after a lost reply (a `sync` first).

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::backend::*;
use recipes_core::{Backend, Locks, Result};
use recipes_mem::{MemClient, MemCluster};
use tokio::sync::watch;

/// Deletes lose their connection before they are sent while `fake` counts down; then the next delete is sent and its
/// connection breaks while it is in flight (an orphan, landing 100 ms later); the get after that is held 600 ms after
/// its reply.
#[derive(Debug)]
struct Orphaning {
    client: Arc<MemClient>,
    inner: Arc<dyn Backend>,
    fake: AtomicU32,
    orphan: AtomicBool,
    slow_get: AtomicBool,
}

#[async_trait]
impl Backend for Orphaning {
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
        let r = self.inner.get(s, p).await;
        if self.slow_get.swap(false, Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
        r
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
        if self
            .fake
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(recipes_core::Error::ConnectionLoss);
        }
        if self.orphan.swap(false, Ordering::SeqCst) {
            let cluster = self.client.cluster().clone();
            cluster.set_latency(Duration::from_millis(100));
            let (inner, p2) = (self.inner.clone(), p.to_owned());
            let sent = tokio::spawn(async move { inner.delete(s, &p2).await });
            tokio::task::yield_now().await; // the delete is sent
            self.client.disconnect_for(Duration::from_millis(5));
            cluster.set_latency(Duration::from_millis(1));
            self.slow_get.store(true, Ordering::SeqCst);
            return sent.await.unwrap();
        }
        self.inner.delete(s, p).await
    }
    fn child_order(&self) -> ChildOrder {
        self.inner.child_order()
    }
    fn transactions(&self) -> Option<&dyn Transactions> {
        self.inner.transactions()
    }
    fn send_now(&self) -> Option<&dyn SendNow> {
        self.inner.send_now()
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

#[tokio::test(start_paused = true)]
async fn a_given_up_release_does_not_delete_the_next_holders_node() {
    let cluster = MemCluster::new(); // ZooKeeper's: no creation checks, the fixed name deleted by name
    let path = "/given-up/fixed";
    let client = cluster.client();
    let backend = Arc::new(Orphaning {
        client: client.clone(),
        inner: client,
        fake: AtomicU32::new(0),
        orphan: AtomicBool::new(false),
        slow_get: AtomicBool::new(false),
    });
    let a = Locks::new(backend.clone());
    let guard = a.exclusive(path).unwrap().acquire().await.unwrap();
    let node = guard.node().to_owned();
    // B waits for the lock.
    let b = Locks::new(cluster.client());
    let waiting = b.exclusive(path).unwrap();
    let b_task = tokio::spawn(async move { waiting.acquire().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!b_task.is_finished());
    // 19 tries lose their connection before the delete is sent; the 20th's delete is sent and its reply lost.
    backend.fake.store(19, Ordering::SeqCst);
    backend.orphan.store(true, Ordering::SeqCst);
    let released = guard.release().await;
    assert!(
        matches!(released, Err(recipes_core::Error::RetriesExhausted { .. })),
        "{released:?}"
    );
    // The orphan lands: B holds.
    let b_guard = b_task.await.unwrap();
    let b_czxid = b_guard.fencing_token() >> 32;
    assert_eq!(b_guard.node(), node);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = cluster.stat(&node).map(|s| s.czxid);
    assert_eq!(
        now.map(|c| c as u128),
        Some(b_czxid),
        "B's node {node} was deleted by A's background delete while B holds"
    );
    let c = Locks::new(cluster.client());
    let c_guard = c.exclusive(path).unwrap().try_acquire().await.unwrap();
    assert!(c_guard.is_none(), "C holds beside B");
    drop(b_guard);
}
