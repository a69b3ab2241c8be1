//! A guard dropped after the runtime it was acquired on is gone (or no longer driven), and an acquire cancelled on a
//! runtime that ends right after: the ZooKeeper backend keeps the session alive on its own runtime, so the node must
//! be deleted there too, or nobody deletes it while the process lives (an orphan that blocks the path). Found by an
//! adversarial review; the deletions now run on the backend's runtime (`Backend::runtime`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::{BlockingLock, Locks};
use recipes_zk::{ZkBackend, ZkOptions};

use recipes_conformance::zk::server_or_skip as servers;

fn unique(name: &str) -> String {
    recipes_conformance::zk::unique_path("runtime-gone", name)
}

/// The holder's process stays up (its `Locks` and session too); it only dropped the runtime it acquired on, then the
/// guard. Another client must be able to take the lock within a few seconds.
fn check(name: &str, drop_runtime: bool) {
    let Some(servers) = servers() else { return };
    let path = unique(name);
    let holder = Locks::new(ZkBackend::connect_blocking(ZkOptions::new(servers.clone())).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let guard = rt.block_on(async { holder.fair(&path).unwrap().acquire().await.unwrap() });
    let node = guard.node().to_owned();
    if drop_runtime {
        drop(rt);
        drop(guard);
    } else {
        // The runtime lives on but nobody drives it (a current-thread runtime between two block_on calls).
        drop(guard);
        std::mem::forget(rt);
    }
    assert!(
        another_client_gets(&servers, &path),
        "the guard was dropped 8 s ago, yet its node {node} still holds the lock (session alive, nobody will delete it)"
    );
    holder.close_blocking().unwrap();
}

/// Whether a new client takes the lock at `path` within 8 s.
fn another_client_gets(servers: &str, path: &str) -> bool {
    let other = Locks::new(ZkBackend::connect_blocking(ZkOptions::new(servers)).unwrap());
    let got = other
        .fair(path)
        .unwrap()
        .acquire_timeout_blocking(Duration::from_secs(8))
        .unwrap()
        .is_some();
    other.close_blocking().unwrap();
    got
}

#[test]
fn guard_dropped_after_its_runtime_was_dropped_releases_the_lock() {
    check("dropped-rt", true);
}

#[test]
fn guard_dropped_while_its_runtime_is_not_driven_releases_the_lock() {
    check("idle-rt", false);
}

/// An acquire cancelled from outside (`tokio::time::timeout` around it, as the docs allow: "dropping an acquire
/// future at any await point leaves no node behind") on a runtime that ends right after: its cleanup was spawned on
/// that runtime and never runs. The waiter's node stays for as long as the session lives, and once the holder
/// releases, it is first in line: nobody gets the lock again.
#[test]
fn acquire_cancelled_on_a_runtime_that_then_ends_leaves_no_node() {
    let Some(servers) = servers() else { return };
    let path = unique("cancelled-waiter");
    let holder = Locks::new(ZkBackend::connect_blocking(ZkOptions::new(servers.clone())).unwrap());
    let held = holder.fair(&path).unwrap().acquire_blocking().unwrap();
    let waiter = Locks::new(ZkBackend::connect_blocking(ZkOptions::new(servers.clone())).unwrap());
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let lock = waiter.fair(&path).unwrap();
        let r = rt.block_on(async { tokio::time::timeout(Duration::from_millis(500), lock.acquire()).await });
        assert!(r.is_err(), "the holder holds: the waiter times out");
        // The runtime ends with the one-off call (a sync program's helper), before its spawned cleanup ran.
    }
    held.release().unwrap();
    assert!(
        another_client_gets(&servers, &path),
        "the cancelled waiter's node was left behind and now holds the lock for good"
    );
    waiter.close_blocking().unwrap();
    holder.close_blocking().unwrap();
}
