//! "Testing your application" (docs/guide.md), whole: an application's job that works under a lock and writes to a
//! store fenced by the lock's token, tested on the in-memory backend under tokio's paused clock, with each fault and
//! the `LostReason` it produces. Copy it into your own tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use recipes_core::backend::BackendExt;
use recipes_core::{Locks, LostReason};
use recipes_mem::MemCluster;

/// One write: the token it carried, and who wrote.
type Write = (u128, &'static str);

/// The application's store: it keeps the highest fencing token it has seen and refuses writes below it.
#[derive(Default, Clone)]
struct Store(Arc<Mutex<(u128, Vec<Write>)>>);

impl Store {
    fn write(&self, token: u128, what: &'static str) -> bool {
        let mut s = self.0.lock().unwrap();
        if token < s.0 {
            return false;
        }
        s.0 = token;
        s.1.push((token, what));
        true
    }
}

/// The application's job: take the lock, work in steps while the lock holds, stop on a loss. Returns why it stopped
/// early, if it did.
async fn job(locks: &Locks, store: &Store, name: &'static str, steps: u32) -> Option<LostReason> {
    let guard = locks.fair("/jobs/nightly").unwrap().acquire().await.unwrap();
    for _ in 0..steps {
        tokio::select! {
            reason = guard.lost() => return Some(reason),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        if !store.write(guard.fencing_token(), name) {
            return None; // fenced out: someone newer holds the lock
        }
    }
    guard.release().await.ok();
    None
}

#[tokio::test(start_paused = true)]
async fn two_workers_never_interleave() {
    let cluster = MemCluster::new();
    let store = Store::default();
    let (a, b) = (Locks::new(cluster.client()), Locks::new(cluster.client()));
    let (ra, rb) = tokio::join!(job(&a, &store, "a", 5), job(&b, &store, "b", 5));
    assert_eq!((ra, rb), (None, None));
    let writes = store.0.lock().unwrap().1.clone();
    // One worker's five writes, then the other's: never interleaved.
    let switches = writes.windows(2).filter(|w| w[0].1 != w[1].1).count();
    assert_eq!((writes.len(), switches), (10, 1), "{writes:?}");
}

#[tokio::test(start_paused = true)]
async fn an_expired_session_stops_the_job_and_the_other_worker_takes_over() {
    let cluster = MemCluster::new();
    let store = Store::default();
    let client = cluster.client();
    let (a, b) = (Locks::new(client.clone()), Locks::new(cluster.client()));
    let first = tokio::spawn({
        let store = store.clone();
        async move { job(&a, &store, "a", 50).await }
    });
    tokio::time::sleep(Duration::from_millis(250)).await;
    client.expire_session(); // as Curator's KillSession: the server drops the session and its nodes
    assert_eq!(first.await.unwrap(), Some(LostReason::SessionExpired));
    assert_eq!(job(&b, &store, "b", 2).await, None);
}

#[tokio::test(start_paused = true)]
async fn a_partition_longer_than_the_session_ends_the_lease_before_anyone_else_holds() {
    let cluster = MemCluster::new();
    let client = cluster.client_with_timeout(Duration::from_secs(2));
    let a = Locks::new(client.clone());
    let guard = a.fair("/jobs/nightly").unwrap().acquire().await.unwrap();
    client.disconnect_for(Duration::from_secs(10)); // nothing passes; the server expires the session after 2 s
                                                    // The lease ends first (0.8 of the timeout after the last answer): the application stops trusting the lock
                                                    // before the server can let anyone else in.
    assert_eq!(guard.lost().await, LostReason::LeaseExpired);
    assert!(!guard.is_valid());
    let b = Locks::new(cluster.client());
    let other = b.fair("/jobs/nightly").unwrap().acquire().await.unwrap();
    assert!(other.fencing_token() > guard.fencing_token());
}

#[tokio::test(start_paused = true)]
async fn an_operator_deleting_the_node_is_reported() {
    let cluster = MemCluster::new();
    let a = Locks::new(cluster.client());
    let operator = cluster.client();
    let guard = a.fair("/jobs/nightly").unwrap().acquire().await.unwrap();
    operator.current().delete(guard.node()).await.unwrap();
    assert_eq!(guard.lost().await, LostReason::NodeDeleted);
}

#[tokio::test(start_paused = true)]
async fn a_crashed_holder_lets_the_next_in_after_its_session_timeout() {
    let cluster = MemCluster::new();
    let client = cluster.client_with_timeout(Duration::from_secs(4));
    let a = Locks::new(client.clone());
    let held = a.fair("/jobs/nightly").unwrap().acquire().await.unwrap();
    std::mem::forget(held); // the process dies holding it: no release
    client.crash();
    let b = Locks::new(cluster.client());
    let t0 = tokio::time::Instant::now();
    let g = b.fair("/jobs/nightly").unwrap().acquire().await.unwrap();
    // Virtual time: the wait is the session timeout, measured without waiting for it.
    assert!(t0.elapsed() >= Duration::from_secs(4), "{:?}", t0.elapsed());
    g.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_holder_closed_while_cut_off_lets_the_next_in_at_its_sessions_expiry() {
    let cluster = MemCluster::new();
    let client = cluster.client_with_timeout(Duration::from_secs(4));
    let a = Locks::new(client.clone());
    let held = a.fair("/jobs/nightly").unwrap().acquire().await.unwrap();
    let cut = tokio::time::Instant::now();
    client.disconnect_for(Duration::from_secs(60));
    a.close().await; // the cut outlasts the session: the close never reaches the server
    assert_eq!(held.lost().await, LostReason::SessionExpired);
    let b = Locks::new(cluster.client());
    let g = b.fair("/jobs/nightly").unwrap().acquire().await.unwrap();
    assert!(cut.elapsed() >= Duration::from_secs(4), "{:?}", cut.elapsed());
    g.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn lost_create_replies_leave_no_node_behind() {
    let cluster = MemCluster::new();
    let client = cluster.client();
    client.lose_next_create_replies(2); // created on the server, the reply lost twice
    let a = Locks::new(client.clone());
    let g = a.fair("/jobs/nightly").unwrap().acquire().await.unwrap();
    g.release().await.unwrap();
    assert!(cluster.ephemerals().is_empty(), "{:?}", cluster.ephemerals());
    assert!(a.metrics().create_recoveries >= 1);
}
