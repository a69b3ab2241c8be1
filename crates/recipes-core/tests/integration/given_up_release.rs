//! A release that gives up leaves its node to its drop's background delete (released_names.rs). Found by review
//! (helper-60): when the release's last delete was sent and its reply lost (an orphan that lands later), that
//! background delete read the fixed name without a `sync`, found our node on a server that had not applied the
//! orphan yet, and deleted the name once the next holder had made it again: two holders. A delete that may have
//! been sent makes the drop's delete one after a lost reply (a `sync` first).

#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::Locks;
use recipes_mem::MemCluster;

use crate::support::SlowGet;

#[tokio::test(start_paused = true)]
async fn a_given_up_release_does_not_delete_the_next_holders_node() {
    let cluster = MemCluster::new(); // ZooKeeper's: no creation checks, the fixed name deleted by name
    let path = "/given-up/fixed";
    let backend = Arc::new(SlowGet::new(cluster.client()));
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
    backend.lost_deletes.store(19, Ordering::SeqCst);
    backend.orphan_deletes.store(1, Ordering::SeqCst);
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
