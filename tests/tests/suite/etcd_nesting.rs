//! Lock paths nested under the exclusive node's name on etcd's flat keys (found by review, helper-42): on ZooKeeper
//! `P/lock` is then a container that the exclusive recipe at `P` waits for; on etcd it is no key, or a persistent key
//! that nothing reaps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use recipes_core::{Backend, Error, Locks};
use recipes_etcd::{EtcdBackend, EtcdOptions};

fn endpoints() -> Option<String> {
    match recipes_conformance::etcd::server() {
        Ok(e) => Some(e),
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

async fn locks(endpoints: &str) -> (Arc<EtcdBackend>, Locks) {
    let options = EtcdOptions::new(endpoints).session_timeout(Duration::from_secs(4));
    let b = Arc::new(EtcdBackend::connect(options).await.unwrap());
    (b.clone(), Locks::new(b))
}

/// The exclusive node `P/lock` beside a lock held at `P/lock` (keys under it): held, released (an ephemeral key has no
/// children on ZooKeeper, so the keys under it do not keep it), and taken again; nothing left. Before the fix the
/// release failed with `NotEmpty` and the key stayed on a live session, held for nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exclusive_node_beside_a_nested_lock_is_released() {
    let Some(endpoints) = endpoints() else { return };
    let parent = recipes_conformance::zk::unique_path("etcd-nesting", "exclusive");
    let nested = format!("{parent}/lock");
    let ((a, la), (b, lb), (c, lc)) = (
        locks(&endpoints).await,
        locks(&endpoints).await,
        locks(&endpoints).await,
    );
    let inner = la.fair(&nested).unwrap().acquire().await.unwrap();
    let g = lb.exclusive(&parent).unwrap().acquire().await.unwrap();
    g.release()
        .await
        .expect("the exclusive node is released beside the nested lock");
    let again = lc.exclusive(&parent).unwrap().try_acquire().await.unwrap();
    assert!(again.is_some(), "the exclusive lock is free again");
    again.unwrap().release().await.unwrap();
    inner.release().await.unwrap();
    let left = c.keys_with_leases(&format!("{parent}/")).await.unwrap();
    assert!(left.is_empty(), "keys left: {left:?}");
    for x in [a, b, c] {
        x.close().await;
    }
}

/// A drained semaphore nested at `P/lock` leaves its count there (a persistent key: etcd has no container): the
/// exclusive lock at `P` refuses with a typed error, at once, instead of waiting forever for a deletion that never
/// comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_key_at_the_exclusive_nodes_name_is_refused() {
    let Some(endpoints) = endpoints() else { return };
    let parent = recipes_conformance::zk::unique_path("etcd-nesting", "semaphore");
    let ((a, la), (b, lb)) = (locks(&endpoints).await, locks(&endpoints).await);
    let nested = format!("{parent}/lock");
    la.semaphore(&nested, 2)
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let lock = lb.exclusive(&parent).unwrap();
    for r in [
        tokio::time::timeout(Duration::from_secs(10), lock.acquire())
            .await
            .map(|r| r.map(drop)),
        tokio::time::timeout(Duration::from_secs(10), lock.try_acquire())
            .await
            .map(|r| r.map(drop)),
    ] {
        match r {
            Ok(Err(Error::ForeignLock { node, found, .. })) => {
                assert_eq!(node, "lock");
                assert!(found.contains("persistent"), "{found}");
            }
            other => panic!("expected ForeignLock at once, got {other:?}"),
        }
    }
    a.close().await;
    b.close().await;
}
