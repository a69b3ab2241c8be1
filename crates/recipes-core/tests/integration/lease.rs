//! Leases and guarded operations on the in-memory backend, under tokio's paused clock (exact edges).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::{CreateMode, Created, DeletionWatch, Lease, NodeWatch, SessionId, SessionStatus, Stat};
use recipes_core::{Backend, GuardedError, LeaseMargin, Locks, LostReason, Result};
use recipes_mem::MemCluster;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(10);

/// `guard.lost()`, bounded (virtual time): a test never waits forever.
async fn lost(g: &recipes_core::LockGuard) -> LostReason {
    tokio::time::timeout(Duration::from_secs(600), g.lost())
        .await
        .expect("lost() did not resolve within 600 s of virtual time")
}

fn setup(margin: f64) -> (MemCluster, Arc<recipes_mem::MemClient>, Locks) {
    let cluster = MemCluster::new();
    let client = cluster.client_with_timeout(TIMEOUT);
    let locks = Locks::builder(client.clone())
        .lease_margin(LeaseMargin::new(margin).unwrap())
        .build();
    (cluster, client, locks)
}

#[tokio::test(start_paused = true)]
async fn valid_until_is_answered_send_plus_timeout_less_margin() {
    for margin in [0.0, 0.2, 0.5] {
        let (_c, _client, locks) = setup(margin);
        let t0 = Instant::now();
        let g = locks.fair("/lease/edge").unwrap().acquire().await.unwrap();
        assert_eq!(
            g.valid_until(),
            Some(t0 + TIMEOUT.mul_f64(1.0 - margin)),
            "margin {margin}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn lease_edges_on_the_clock() {
    let (_c, client, locks) = setup(0.2);
    let g = locks.fair("/lease/edges").unwrap().acquire().await.unwrap();
    // Cut the connection: no more heartbeats, the lease stops moving.
    client.disconnect_for(Duration::from_secs(9)); // shorter than the session timeout
    let until = g.valid_until().unwrap();
    tokio::time::sleep_until(until - Duration::from_millis(1)).await;
    assert!(g.is_valid());
    assert!(g.is_valid_for(Duration::from_micros(999)));
    assert!(!g.is_valid_for(Duration::from_millis(1)));
    tokio::time::sleep_until(until).await;
    assert!(!g.is_valid(), "valid at the very end of the lease");
    assert_eq!(
        g.valid_until(),
        Some(until),
        "an unanswered period does not move the lease"
    );
}

#[tokio::test(start_paused = true)]
async fn idle_session_heartbeats_keep_the_lease_fresh() {
    let (_c, _client, locks) = setup(0.2);
    let g = locks.fair("/lease/idle").unwrap().acquire().await.unwrap();
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(g.is_valid());
        // Heartbeats are at most a quarter timeout apart: at least 8 s − 2.5 s of lease always remain.
        assert!(g.is_valid_for(Duration::from_millis(5_499)));
    }
}

#[tokio::test(start_paused = true)]
async fn lost_fires_lease_expired_while_disconnected_and_the_lock_may_come_back() {
    let (cluster, client, locks) = setup(0.2);
    let other = Locks::new(cluster.client());
    let g = locks.fair("/lease/lost").unwrap().acquire().await.unwrap();
    client.disconnect_for(Duration::from_secs(9));
    let until = g.valid_until().unwrap();
    assert_eq!(lost(&g).await, LostReason::LeaseExpired);
    assert_eq!(Instant::now(), until, "lost() fires exactly when the lease runs out");
    // The connection comes back within the session timeout: the session and the lock survived, and the lease is
    // valid again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(g.is_valid());
    assert!(other
        .fair("/lease/lost")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    g.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn lease_runs_out_before_anyone_else_can_acquire() {
    let (cluster, client, locks) = setup(0.2);
    let other = Locks::new(cluster.client());
    let g = locks.fair("/lease/order").unwrap().acquire().await.unwrap();
    let lock = other.fair("/lease/order").unwrap();
    let waiter = tokio::spawn(async move {
        let g = lock.acquire().await.unwrap();
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    client.disconnect_for(Duration::from_secs(30)); // past the session timeout
    assert_eq!(lost(&g).await, LostReason::LeaseExpired);
    let lost_at = Instant::now();
    assert!(!g.is_valid());
    let (acquired_at, g2) = waiter.await.unwrap();
    assert!(
        lost_at < acquired_at,
        "lost at {lost_at:?}, other acquired at {acquired_at:?}"
    );
    assert!(g2.fencing_token() > g.fencing_token());
    // Later the client learns that its session expired.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(lost(&g).await, LostReason::SessionExpired);
    assert_eq!(g.valid_until(), None);
    g2.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn guarded_operation_committed_skipped_rolled_back() {
    let (_c, client, locks) = setup(0.2);
    let g = locks.fair("/lease/guarded").unwrap().acquire().await.unwrap();
    let rollbacks = AtomicU32::new(0);

    // Committed: the lease holds throughout.
    let r = g
        .guarded(
            || async { Ok::<_, String>(1) },
            |_| async {
                rollbacks.fetch_add(1, Ordering::SeqCst);
            },
        )
        .await;
    assert_eq!(r, Ok(1));

    // Rolled back: the lease runs out while the operation runs.
    let c2 = client.clone();
    let r = g
        .guarded(
            || async move {
                c2.disconnect_for(Duration::from_secs(9));
                tokio::time::sleep(Duration::from_secs(8)).await;
                Ok::<_, String>(2)
            },
            |v| {
                assert_eq!(v, 2, "rollback gets the operation's result");
                async {
                    rollbacks.fetch_add(1, Ordering::SeqCst);
                }
            },
        )
        .await;
    assert_eq!(r, Err(GuardedError::RolledBack));
    assert_eq!(rollbacks.load(Ordering::SeqCst), 1);

    // Not run: the lease is gone before.
    let ran = AtomicU32::new(0);
    let r = g
        .guarded(
            || async {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(3)
            },
            |_| async {},
        )
        .await;
    assert_eq!(r, Err(GuardedError::NotRun));
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the operation must not run without a valid lease"
    );

    // The operation's own failure is reported, and nothing is rolled back by us.
    tokio::time::sleep(Duration::from_secs(2)).await; // reconnected
    let r = g
        .guarded(
            || async { Err::<u32, _>("boom".to_string()) },
            |_| async {
                rollbacks.fetch_add(1, Ordering::SeqCst);
            },
        )
        .await;
    assert_eq!(r, Err(GuardedError::Failed("boom".into())));
    assert_eq!(rollbacks.load(Ordering::SeqCst), 1);
    g.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn guarded_steps_prepare_commit_rollback() {
    let (_c, client, locks) = setup(0.2);
    let g = locks.fair("/lease/steps").unwrap().acquire().await.unwrap();
    // A "store" with a saved pre-operation state.
    let store = std::sync::Mutex::new(100i64);
    let store = &store;

    let r = g
        .guarded_steps(
            || async {
                let before = *store.lock().unwrap();
                *store.lock().unwrap() -= 30;
                Ok::<_, String>(before)
            },
            |_before| async { Ok(*store.lock().unwrap()) },
            |before| async move { *store.lock().unwrap() = before },
        )
        .await;
    assert_eq!(r, Ok(70));

    let c2 = client.clone();
    let r: Result<i64, _> = g
        .guarded_steps(
            || async {
                let before = *store.lock().unwrap();
                *store.lock().unwrap() -= 50;
                c2.disconnect_for(Duration::from_secs(9));
                tokio::time::sleep(Duration::from_secs(8)).await;
                Ok::<_, String>(before)
            },
            |_| async { panic!("commit must not run after the lease ran out") },
            |before| async move { *store.lock().unwrap() = before },
        )
        .await;
    assert_eq!(r, Err(GuardedError::RolledBack));
    assert_eq!(*store.lock().unwrap(), 70, "rolled back to the saved state");

    let r: Result<i64, _> = g
        .guarded_steps(
            || async { panic!("prepare must not run without a valid lease") },
            |p: i64| async move { Ok::<_, String>(p) },
            |_| async {},
        )
        .await;
    assert_eq!(r, Err(GuardedError::NotRun));
    tokio::time::sleep(Duration::from_secs(2)).await;
    g.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn every_lost_reason() {
    let (cluster, client, locks) = setup(0.2);
    let admin = cluster.client();
    // Node deleted by someone else.
    let g = locks.fair("/lease/reasons").unwrap().acquire().await.unwrap();
    recipes_core::backend::BackendExt::current(&*admin)
        .delete(g.node())
        .await
        .unwrap();
    assert_eq!(lost(&g).await, LostReason::NodeDeleted);
    drop(g);
    // Session expired.
    let g = locks.fair("/lease/reasons").unwrap().acquire().await.unwrap();
    client.expire_session();
    assert_eq!(lost(&g).await, LostReason::SessionExpired);
    assert!(!g.is_valid());
    drop(g);
    // Lease elapsed.
    let g = locks.fair("/lease/reasons").unwrap().acquire().await.unwrap();
    client.disconnect_for(Duration::from_secs(9));
    assert_eq!(lost(&g).await, LostReason::LeaseExpired);
    assert!(LostReason::LeaseExpired.to_string().contains("lease"));
}

/// The in-memory client, whose lease the test can make assume a shorter session timeout without telling anyone (as a
/// reconnection to a server that grants less may, before the backend wakes the session's watchers).
#[derive(Debug)]
struct Shrinking {
    inner: Arc<recipes_mem::MemClient>,
    timeout: std::sync::Mutex<Option<Duration>>,
}

#[async_trait::async_trait]
impl Backend for Shrinking {
    async fn create(&self, s: SessionId, path: &str, data: &[u8], mode: CreateMode) -> Result<Created> {
        self.inner.create(s, path, data, mode).await
    }
    async fn children(&self, s: SessionId, path: &str) -> Result<Vec<String>> {
        self.inner.children(s, path).await
    }
    async fn get(&self, s: SessionId, path: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        self.inner.get(s, path).await
    }
    async fn sync(&self, s: SessionId, path: &str) -> Result<()> {
        self.inner.sync(s, path).await
    }
    async fn watch_deletion(&self, s: SessionId, path: &str) -> Result<Option<(Stat, DeletionWatch)>> {
        self.inner.watch_deletion(s, path).await
    }
    async fn get_and_watch(&self, s: SessionId, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
        self.inner.get_and_watch(s, path).await
    }
    async fn set_data(&self, s: SessionId, path: &str, data: &[u8]) -> Result<()> {
        self.inner.set_data(s, path, data).await
    }
    fn set_data_unacked(&self, s: SessionId, path: &str, data: &[u8], version: Option<i32>) {
        self.inner.set_data_unacked(s, path, data, version)
    }
    async fn delete(&self, s: SessionId, path: &str) -> Result<()> {
        self.inner.delete(s, path).await
    }
    fn session(&self) -> tokio::sync::watch::Receiver<SessionStatus> {
        self.inner.session()
    }
    async fn close(&self) {
        self.inner.close().await
    }
    fn lease(&self) -> Lease {
        let mut lease = self.inner.lease();
        if let Some(t) = *self.timeout.lock().unwrap() {
            lease.session_timeout = t;
        }
        lease
    }
}

/// `lost()` notices a lease that moved back even when nothing wakes it: it reads the lease again at least every
/// eighth of the session timeout, instead of sleeping until the end of the lease it last read.
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test(start_paused = true)]
async fn lost_notices_a_lease_that_moves_back_unannounced() {
    for mutant in [false, true] {
        recipes_core::mutants::set(recipes_core::mutants::Mutant::LostSleepsToLeaseEnd, mutant);
        let cluster = MemCluster::new();
        let backend = Arc::new(Shrinking {
            inner: cluster.client_with_timeout(TIMEOUT),
            timeout: std::sync::Mutex::new(None),
        });
        let locks = Locks::new(backend.clone());
        let g = locks.fair("/lease/moves-back").unwrap().acquire().await.unwrap();
        let watching = tokio::spawn(async move {
            let r = lost(&g).await;
            (r, Instant::now())
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Every answer the lease rests on is now older than the timeout it assumes.
        *backend.timeout.lock().unwrap() = Some(Duration::ZERO);
        let shrunk = Instant::now();
        let (reason, at) = watching.await.unwrap();
        assert_eq!(reason, LostReason::LeaseExpired);
        let noticed = at.duration_since(shrunk);
        if mutant {
            assert!(noticed > TIMEOUT / 2, "the old rule noticed after {noticed:?}");
        } else {
            assert!(noticed <= TIMEOUT / 8, "noticed {noticed:?} after the lease moved back");
        }
    }
    recipes_core::mutants::set(recipes_core::mutants::Mutant::LostSleepsToLeaseEnd, false);
}
