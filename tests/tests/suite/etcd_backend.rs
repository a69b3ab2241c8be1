//! The etcd backend beyond the contract (issue 27's first part): what it refuses, and how its keys sit on etcd.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_core::{Backend, Error};
use recipes_etcd::{EtcdBackend, EtcdOptions};

/// A sequential create is refused with a typed error (a queue on etcd is ordered by create revision, decision
/// 0065); an ephemeral key is attached to the session's lease and its create revision is its czxid; a container
/// makes nothing (no hierarchy); the keys go with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_on_etcd_are_the_sessions() {
    let Some(endpoints) = std::env::var("ETCD_ENDPOINTS").ok().or_else(|| {
        recipes_conformance::etcd::server()
            .map_err(|why| eprintln!("SKIPPED: {why}"))
            .ok()
    }) else {
        return;
    };
    let b = EtcdBackend::connect(EtcdOptions::new(&endpoints)).await.unwrap();
    let on = b.current();
    let p = recipes_conformance::zk::unique_path("etcd-backend", "keys");
    on.create(&p, b"", CreateMode::Container).await.unwrap();
    assert!(on.get(&p).await.unwrap().is_none(), "a container made a key");
    assert!(matches!(
        on.create(&format!("{p}/L-"), b"", CreateMode::EphemeralSequential)
            .await,
        Err(Error::InvalidArgument(_))
    ));
    let made = on.create(&format!("{p}/a"), b"x", CreateMode::Ephemeral).await.unwrap();
    let (data, stat) = on.get(&made.path).await.unwrap().unwrap();
    assert_eq!(
        (data.as_slice(), stat.czxid, stat.ephemeral_owner),
        (b"x".as_slice(), made.czxid, b.session_status().id)
    );
    let later = on.create(&format!("{p}/b"), b"", CreateMode::Ephemeral).await.unwrap();
    assert!(later.czxid > made.czxid, "create revisions go up");
    assert_eq!(b.keys_with_leases(&format!("{p}/")).await.unwrap().len(), 2);
    b.close().await;
    let observer = EtcdBackend::connect(EtcdOptions::new(&endpoints)).await.unwrap();
    assert!(
        observer.keys_with_leases(&format!("{p}/")).await.unwrap().is_empty(),
        "keys outlived their session"
    );
    observer.close().await;
}

/// A session outlives the client's per-request timeout: its keep-alive stream and a watch, both longer than it,
/// stay up (the session is never reported suspended) and the watch still fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_outlive_the_request_timeout() {
    let Some(endpoints) = std::env::var("ETCD_ENDPOINTS").ok().or_else(|| {
        recipes_conformance::etcd::server()
            .map_err(|why| eprintln!("SKIPPED: {why}"))
            .ok()
    }) else {
        return;
    };
    let patience = std::time::Duration::from_secs(1);
    let b = EtcdBackend::connect(EtcdOptions::new(&endpoints).connect_timeout(patience))
        .await
        .unwrap();
    let mut status = b.session();
    let on = b.current();
    let p = recipes_conformance::zk::unique_path("etcd-backend", "streams");
    let node = format!("{p}/n");
    on.create(&node, b"", CreateMode::Ephemeral).await.unwrap();
    let (_, watch) = on.watch_deletion(&node).await.unwrap().unwrap();
    let changed = tokio::time::timeout(patience * 4, status.changed()).await;
    assert!(
        changed.is_err(),
        "the session changed while idle: {:?}",
        *status.borrow()
    );
    on.delete(&node).await.unwrap();
    tokio::time::timeout(patience * 4, watch)
        .await
        .expect("the watch fires")
        .unwrap();
    b.close().await;
}
