//! The etcd backend beyond the contract (issue 27's first part): what it refuses, and how its keys sit on etcd.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use recipes_core::backend::{BackendExt, ChildOrder, CreateMode};
use recipes_core::{Backend, Error};
use recipes_etcd::{EtcdBackend, EtcdOptions};

/// A sequential create makes the name as given, and children are listed in creation order (decision 0068); an
/// ephemeral key is attached to the session's lease and its create revision is its czxid; a container
/// without data makes nothing (no hierarchy), one with data a persistent key; the keys go with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_on_etcd_are_the_sessions() {
    let Some(endpoints) = endpoints() else { return };
    let b = EtcdBackend::connect(EtcdOptions::new(&endpoints)).await.unwrap();
    let on = b.current();
    let p = recipes_conformance::zk::unique_path("etcd-backend", "keys");
    on.create(&p, b"", CreateMode::Container).await.unwrap();
    assert!(on.get(&p).await.unwrap().is_none(), "a container made a key");
    // Sequential: the name as given, and the listing in creation order (not by name).
    let z = on
        .create(&format!("{p}/z-"), b"", CreateMode::EphemeralSequential)
        .await
        .unwrap();
    let a = on
        .create(&format!("{p}/a-"), b"", CreateMode::EphemeralSequential)
        .await
        .unwrap();
    assert_eq!(
        (z.path.as_str(), a.path.as_str()),
        (format!("{p}/z-").as_str(), format!("{p}/a-").as_str())
    );
    assert!(a.czxid > z.czxid);
    assert_eq!(on.children(&p).await.unwrap(), ["z-", "a-"]);
    assert_eq!(b.child_order(), ChildOrder::Creation);
    assert!(matches!(
        on.create(&format!("{p}/z-"), b"", CreateMode::EphemeralSequential)
            .await,
        Err(Error::NodeExists(_))
    ));
    on.delete(&z.path).await.unwrap();
    on.delete(&a.path).await.unwrap();
    // A container with data (a semaphore's count) is a persistent key.
    let counted = format!("{p}/sem");
    on.create(&counted, b"3", CreateMode::Container).await.unwrap();
    let (count, stat) = on.get(&counted).await.unwrap().unwrap();
    assert_eq!((count.as_slice(), stat.ephemeral_owner), (b"3".as_slice(), 0));
    on.delete(&counted).await.unwrap();
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
    let Some(endpoints) = endpoints() else { return };
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

/// The members' endpoints, or `None` (skipped) outside CI.
fn endpoints() -> Option<String> {
    std::env::var("ETCD_ENDPOINTS").ok().or_else(|| {
        recipes_conformance::etcd::server()
            .map_err(|why| eprintln!("SKIPPED: {why}"))
            .ok()
    })
}

/// Runs `etcdctl` (Debian's etcd-client, installed by scripts/etcd) against `endpoints`, which must succeed.
fn etcdctl(endpoints: &str, args: &[&str]) {
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(endpoints)
        .args(args)
        .output()
        .expect("etcdctl (Debian's etcd-client, installed by scripts/etcd)");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn connect(endpoints: &str) -> EtcdBackend {
    EtcdBackend::connect(EtcdOptions::new(endpoints).session_timeout(std::time::Duration::from_secs(4)))
        .await
        .unwrap()
}

/// Found by review (helper-39): a deletion watch first polled after its session ended waited for the key instead of
/// failing with the session's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_polled_after_its_session_ended_fails() {
    let Some(endpoints) = endpoints() else { return };
    let p = recipes_conformance::zk::unique_path("etcd-backend", "watch-after-end");
    let (b, other) = (connect(&endpoints).await, connect(&endpoints).await);
    other.current().create(&p, b"", CreateMode::Ephemeral).await.unwrap();
    let old = b.session_status().id;
    let (_, watch) = b.current().watch_deletion(&p).await.unwrap().unwrap();
    b.revoke_session_for_test().await.unwrap();
    recipes_conformance::util::until_session_ended(&b, old).await;
    let r = tokio::time::timeout(std::time::Duration::from_secs(3), watch).await;
    assert_eq!(r.expect("the watch ended"), Err(Error::SessionExpired));
    other.close().await;
    b.close().await;
}

/// Found by review (helper-39): a compaction that hid a delete and re-create of the watched key left the deletion
/// watch waiting for a key that was a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_hidden_by_a_compaction_is_seen() {
    let Some(endpoints) = endpoints() else { return };
    let p = recipes_conformance::zk::unique_path("etcd-backend", "compacted");
    let (b, other) = (connect(&endpoints).await, connect(&endpoints).await);
    other.current().create(&p, b"", CreateMode::Ephemeral).await.unwrap();
    let (_, watch) = b.current().watch_deletion(&p).await.unwrap().unwrap();
    other.current().delete(&p).await.unwrap();
    let again = other.current().create(&p, b"", CreateMode::Ephemeral).await.unwrap();
    etcdctl(&endpoints, &["compact", &again.czxid.to_string()]);
    let r = tokio::time::timeout(std::time::Duration::from_secs(5), watch).await;
    assert_eq!(r.expect("the watch fired"), Ok(()));
    other.close().await;
    b.close().await;
}

/// Found by review (helper-39): reads of a session whose lease etcd revoked answered (the node gone, the children
/// empty) until the keep-alive noticed; they fail as the session's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_revoked_session_fail() {
    let Some(endpoints) = endpoints() else { return };
    let p = recipes_conformance::zk::unique_path("etcd-backend", "revoked-reads");
    let b = connect(&endpoints).await;
    let id = b.session_status().id;
    b.current().create(&p, b"x", CreateMode::Ephemeral).await.unwrap();
    b.revoke_session_for_test().await.unwrap();
    let on = b.on(id);
    assert_eq!(on.get(&p).await, Err(Error::SessionExpired));
    assert_eq!(on.sync(&p).await, Err(Error::SessionExpired));
    assert!(matches!(on.watch_deletion(&p).await, Err(Error::SessionExpired)));
    assert_eq!(
        on.children(recipes_core::backend::parent_path(&p)).await,
        Err(Error::SessionExpired)
    );
    b.close().await;
}

/// Found by review (helper-40): a lease revoked while the keep-alive stream was down was taken for a suspension (etcd
/// answers a reopened keep-alive of a lease it no longer knows with a TTL of 0) until our clock ran the lease out;
/// the session's end is seen as soon as the stream is open again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_revoked_while_cut_off_ends_the_session_on_reconnection() {
    let Some(endpoints) = endpoints() else { return };
    let upstream: std::net::SocketAddr = endpoints
        .split(',')
        .next()
        .unwrap()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let proxy = recipes_conformance::proxy::Proxy::start_raw(upstream).await.unwrap();
    let ttl = std::time::Duration::from_secs(6);
    let b = EtcdBackend::connect(EtcdOptions::new(&format!("http://{}", proxy.addr())).session_timeout(ttl))
        .await
        .unwrap();
    let old = b.session_status().id;
    proxy.cut_for(std::time::Duration::from_millis(500));
    etcdctl(&endpoints, &["lease", "revoke", &format!("{old:x}")]);
    let t0 = std::time::Instant::now();
    while b.session_status().id == old {
        assert!(
            t0.elapsed() < ttl / 2,
            "the revoked session was still taken for a suspension after {:?}",
            t0.elapsed()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    b.close().await;
}

/// An operator who deletes a session's sequence key (docs/operations.md) ends the session: its next request fails
/// with the session's end, its lease is revoked (its keys go, though etcd still kept the lease alive), and a new
/// session follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_sequence_key_ends_the_session() {
    let Some(endpoints) = endpoints() else { return };
    let b = connect(&endpoints).await;
    let old = b.session_status().id;
    let p = recipes_conformance::zk::unique_path("etcd-backend", "sequence-key");
    let node = format!("{p}/n");
    b.current().create(&node, b"", CreateMode::Ephemeral).await.unwrap();
    etcdctl(&endpoints, &["del", &format!("/__recipes/sessions/{old:016x}")]);
    assert!(matches!(b.on(old).get(&node).await, Err(Error::SessionExpired)));
    recipes_conformance::util::until_session_ended(&b, old).await;
    let t0 = std::time::Instant::now();
    loop {
        let st = b.session_status();
        let left = b.keys_with_leases(&format!("{p}/")).await.unwrap();
        if st.id != old && st.state == recipes_core::backend::SessionState::Connected && left.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{st:?}, keys {left:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    b.close().await;
}

/// Found by the etcd campaign: with one endpoint of several refusing connections, a third of the connects failed at
/// once (etcd-client's channel keeps choosing the dead endpoint), and requests that met it suspended the session.
/// A request that was never sent is now sent again: every connect and every request here succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_among_live_ones_is_passed_over() {
    let Some(endpoints) = endpoints() else { return };
    // A port nobody listens on (bound, then closed), first among the live ones.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let both = format!("http://{dead},{endpoints}");
    for i in 0..10 {
        let b = EtcdBackend::connect(
            EtcdOptions::new(&both)
                .session_timeout(std::time::Duration::from_secs(4))
                .connect_timeout(std::time::Duration::from_secs(5)),
        )
        .await
        .unwrap_or_else(|e| panic!("connect {i} with a dead endpoint first: {e}"));
        let path = format!("/dead-endpoint-{}-{i}", std::process::id());
        for _ in 0..5 {
            b.current()
                .create(&path, b"", CreateMode::Ephemeral)
                .await
                .unwrap_or_else(|e| panic!("connect {i}: a create: {e}"));
            b.current().delete(&path).await.unwrap();
        }
        assert_eq!(b.session_status().state, recipes_core::backend::SessionState::Connected);
        b.close().await;
    }
}

/// Where a session runs (`SessionRuntime`, decision 0094), as on ZooKeeper: on the backend's own runtime by default,
/// on the caller's multi-thread runtime when asked to (and on the backend's own from a current-thread runtime all the
/// same).
#[test]
fn a_session_runs_where_its_options_say() {
    use recipes_conformance::util::{thread_of, SessionRuntimes};
    let Some(endpoints) = endpoints() else { return };
    let runtimes = SessionRuntimes::default();
    for (case, rt, choice, thread) in runtimes.cases("recipes-etcd", recipes_core::backend::SessionRuntime::Own) {
        let mut options = EtcdOptions::new(&endpoints);
        if let Some(choice) = choice {
            options = options.session_runtime(choice);
        }
        let b = rt.block_on(EtcdBackend::connect(options)).unwrap();
        assert_eq!(thread_of(&b.runtime().unwrap()), thread, "{case}");
        rt.block_on(async {
            let p = recipes_conformance::zk::unique_path("etcd-backend", "where");
            b.current().create(&p, b"", CreateMode::Ephemeral).await.unwrap();
            b.close().await;
        });
    }
}

/// A session on the caller's runtime (`SessionRuntime::Caller`) whose runtime is dropped before the backend is closed
/// is closed with it: a wait of that session on another runtime ends instead of retrying its watch for ever on the
/// connection that went with the runtime (found by review, helper-154), and the lock it held is freed at its TTL.
#[test]
fn a_session_whose_runtime_is_dropped_is_closed_and_its_waits_end() {
    use recipes_conformance::util::multi_thread_runtime;
    use recipes_core::backend::SessionRuntime;
    use recipes_core::Locks;
    use std::time::Duration;
    let Some(endpoints) = endpoints() else { return };
    let (app, elsewhere) = (multi_thread_runtime(), multi_thread_runtime());
    let path = recipes_conformance::zk::unique_path("etcd-backend", "runtime-dropped");
    let other = elsewhere.block_on(async {
        let b = EtcdBackend::connect(EtcdOptions::new(&endpoints)).await.unwrap();
        Locks::new(std::sync::Arc::new(b))
    });
    let held = elsewhere.block_on(async { other.fair(&path).unwrap().acquire().await.unwrap() });
    let options = EtcdOptions::new(&endpoints)
        .session_timeout(Duration::from_secs(2))
        .session_runtime(SessionRuntime::Caller);
    let b = app.block_on(EtcdBackend::connect(options)).unwrap();
    let waiter = Locks::new(std::sync::Arc::new(b));
    let lock = waiter.fair(&path).unwrap();
    let waiting = elsewhere.spawn(async move { lock.acquire().await.map(|_| ()) });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!waiting.is_finished(), "the lock is held by another session");
    drop(app);
    let waited = elsewhere
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), waiting).await })
        .expect("the wait did not end within 10 s")
        .expect("the wait panicked");
    assert!(waited.is_err(), "the wait of a closed session acquired: {waited:?}");
    elsewhere.block_on(async {
        held.release().await.unwrap();
        let again = other
            .fair(&path)
            .unwrap()
            .acquire_timeout(Duration::from_secs(8))
            .await
            .unwrap();
        assert!(again.is_some(), "the closed session's node kept the lock past its TTL");
        again.unwrap().release().await.unwrap();
        other.close().await;
    });
    drop(waiter);
}
