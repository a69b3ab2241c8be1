//! Lock paths nested under the exclusive node's name on etcd's flat keys (found by review, helper-42): on ZooKeeper
//! `P/lock` is then a container that the exclusive recipe at `P` waits for; on etcd it is no key, or a persistent key
//! that nothing reaps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode};
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

/// More than 4 MiB of keys nested under a lock path (a listing on etcd reads every key under the path's prefix, at any
/// depth, and keeps the direct children): the fair lock is taken and released as on any path, and leaves nothing.
/// Before the fix (found by review, helper-100) the reply of the create and its listing went over the client's 4 MiB,
/// was taken for a lost one, every listing failed alike, and the acquire ended in `RetriesExhausted` with one key left
/// per attempt on its live session, ahead of every later contender. 48 keys with names of 100 KB (etcd limits a
/// request, not a key) make the 4.8 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_4_mib_of_keys_nested_under_the_path_leave_nothing() {
    let Some(endpoints) = endpoints() else { return };
    let parent = recipes_conformance::zk::unique_path("etcd-nesting", "large");
    let (a, la) = locks(&endpoints).await;
    let on = a.on(a.session_status().id);
    let nested: Vec<String> = (0..48)
        .map(|i| format!("{parent}/nested/{i}-{}", "k".repeat(100_000)))
        .collect();
    // On the session's lease: gone with it whatever the test's outcome (found by review, helper-101: persistent keys
    // stayed on the shared server after a failed run).
    for key in &nested {
        on.create(key, b"", CreateMode::Ephemeral).await.unwrap();
    }
    let g = la
        .fair(&parent)
        .unwrap()
        .acquire_timeout(Duration::from_secs(20))
        .await
        .expect("the lock is taken beside 4.8 MB of nested keys");
    assert!(g.is_some(), "the lock is free");
    g.unwrap().release().await.unwrap();
    let left: Vec<String> = a
        .keys_with_leases(&format!("{parent}/"))
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| !k[parent.len() + 1..].contains('/'))
        .collect();
    for key in &nested {
        on.delete(key).await.unwrap();
    }
    a.close().await;
    assert!(left.is_empty(), "keys left: {left:?}");
}
