//! A release where names are made again (the etcd layout: one key per session and path): the release reads its key,
//! then deletes it; between the two an operator deletes the key and a task of the same session makes it again. The
//! release must leave that task's key alone (found by review, helper-49: it deleted it, and another session held
//! while that task's guard still read valid).

#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::{BackendExt, ChildOrder};
use recipes_core::{Layout, Locks};
use recipes_mem::MemCluster;

use crate::support::{wait_children, SlowGet, DELAY};

/// The scenario: whether the mate's key survived the first task's release (and the lock then excluded another
/// session). On the current thread, so that a mutant switched on for the test's thread is on for every task.
async fn a_release_beside_a_key_made_again() -> bool {
    let cluster = MemCluster::new().ordered_by(ChildOrder::Creation);
    let path = "/released-names/etcd-layout";
    let slow = SlowGet::new(cluster.client());
    let (after, before_delete) = (slow.after.clone(), slow.before_delete.clone());
    let backend: Arc<dyn recipes_core::Backend> = Arc::new(slow);
    // Two `Locks` on the one backend (one session), each with turns of its own: the mate waits for the first task's
    // key to go, not for its turn.
    let s = Locks::builder(backend.clone()).layout(Layout::Etcd).build();
    let s2 = Locks::builder(backend).layout(Layout::Etcd).build();
    let other = Locks::builder(cluster.client()).layout(Layout::Etcd).build();
    let first = s.fair(path).unwrap().acquire().await.unwrap();
    let key = first.node().to_owned();
    let second = s2.fair(path).unwrap();
    let mate = tokio::spawn(async move { second.acquire().await.unwrap() });
    // The mate waits for the key to go (it is its name too).
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!mate.is_finished(), "the mate waits behind the first task");
    // The release's read of its key (if it reads) is answered, then held back, and its delete is held back before it
    // is sent; meanwhile an operator deletes the key and the mate makes it again.
    after.store(1, Ordering::SeqCst);
    before_delete.store(1, Ordering::SeqCst);
    let release = tokio::spawn(async move { first.release().await });
    tokio::time::sleep(DELAY / 4).await;
    cluster.client().current().delete(&key).await.unwrap();
    let mates_guard = tokio::time::timeout(Duration::from_secs(5), mate)
        .await
        .expect("the mate holds once the key is gone")
        .unwrap();
    assert_eq!(mates_guard.node(), key, "the mate's key has the same name");
    let made_again = cluster.stat(&key).expect("the mate's key").czxid;
    let _ = tokio::time::timeout(Duration::from_secs(5), release).await.unwrap();
    if cluster.stat(&key).map(|s| s.czxid) != Some(made_again) {
        return false;
    }
    wait_children(&cluster, path, 1).await;
    assert!(
        other.fair(path).unwrap().try_acquire().await.unwrap().is_none(),
        "another session held beside the mate"
    );
    assert!(mates_guard.is_valid());
    mates_guard.release().await.unwrap();
    wait_children(&cluster, path, 0).await;
    true
}

#[tokio::test]
async fn a_release_spares_the_key_a_session_mate_made_again() {
    assert!(
        a_release_beside_a_key_made_again().await,
        "the first task's release deleted its mate's key"
    );
}

/// The release as it was (`Mutant::ReleaseByNameAlone`: read, then delete by name) deletes the mate's key: the test
/// above can fail.
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test]
async fn a_release_by_name_alone_deletes_the_key_a_session_mate_made_again() {
    use recipes_core::mutants::{self, Mutant};
    mutants::set(Mutant::ReleaseByNameAlone, true);
    let survived = a_release_beside_a_key_made_again().await;
    mutants::set(Mutant::ReleaseByNameAlone, false);
    assert!(!survived, "the mutant's release spared the mate's key");
}

/// A release whose delete never reaches the server (its connection lost before each send, more times than the
/// release retries) returns its error, and leaves the node to a delete in the background, which goes on once the
/// connection holds: the node does not stay behind on the live session (found by review, helper-57: the release
/// marked the node released whatever the outcome, so nothing deleted it until the session ended).
#[tokio::test(start_paused = true)]
async fn a_release_that_gives_up_leaves_its_node_to_a_background_delete() {
    let cluster = MemCluster::new();
    let path = "/released-names/given-up";
    let slow = SlowGet::new(cluster.client());
    let lost_deletes = slow.lost_deletes.clone();
    let locks = Locks::new(Arc::new(slow));
    let guard = locks.exclusive(path).unwrap().acquire().await.unwrap();
    let node = guard.node().to_owned();
    // More than the release's 20 tries, fewer than its tries and the background's together.
    lost_deletes.store(25, Ordering::SeqCst);
    let released = guard.release().await;
    assert!(
        matches!(released, Err(recipes_core::Error::RetriesExhausted { .. })),
        "{released:?}"
    );
    for _ in 0..200 {
        if cluster.stat(&node).is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cluster.stat(&node).is_none(), "{node} left behind on a live session");
    let other = Locks::new(cluster.client());
    assert!(other.exclusive(path).unwrap().try_acquire().await.unwrap().is_some());
}
