//! A guard dropped after the runtime it was acquired on is gone (or no longer driven), and an acquire cancelled on a
//! runtime that ends right after: the ZooKeeper backend keeps the session alive on its own runtime, so the node must
//! be deleted there too, or nobody deletes it while the process lives (an orphan that blocks the path). Found by an
//! adversarial review; the deletions now run on the backend's runtime (`Backend::runtime`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::{BlockingLock, Locks};
use recipes_zk::{ZkBackend, ZkOptions};

use recipes_conformance::util::{multi_thread_runtime, thread_of, SessionRuntimes};
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

/// The name of the thread a task spawned on `backend`'s session runtime runs on.
fn session_thread(backend: &std::sync::Arc<ZkBackend>) -> String {
    use recipes_core::Backend;
    thread_of(
        &backend
            .runtime()
            .expect("a ZooKeeper session runs on a runtime it names"),
    )
}

/// Where a session runs (`SessionRuntime`, decisions 0094 and 0095): on the caller's multi-thread runtime by default
/// or when asked to, on the backend's own when asked to, and on the backend's own from a current-thread runtime all the
/// same.
#[test]
fn a_session_runs_where_its_options_say() {
    use recipes_core::backend::SessionRuntime;
    let Some(servers) = servers() else { return };
    let runtimes = SessionRuntimes::default();
    for (case, rt, choice, thread) in runtimes.cases("recipes-zk", SessionRuntime::Caller) {
        let mut options = ZkOptions::new(servers.clone());
        if let Some(choice) = choice {
            options = options.session_runtime(choice);
        }
        let backend = rt.block_on(ZkBackend::connect(options)).unwrap();
        assert_eq!(session_thread(&backend), thread, "{case}");
        let locks = Locks::new(backend);
        rt.block_on(async {
            let guard = locks.fair(unique("where")).unwrap().acquire().await.unwrap();
            guard.release().await.unwrap();
            locks.close().await;
        });
    }
    let backend = ZkBackend::connect_blocking(ZkOptions::new(servers)).unwrap();
    assert_eq!(session_thread(&backend), "recipes-zk", "connect_blocking");
    Locks::new(backend).close_blocking().unwrap();
}

/// Waits (at most 10 s) until `backend` has a connected session other than `ended`.
fn reopened(backend: &std::sync::Arc<ZkBackend>, ended: i64) {
    use recipes_core::backend::SessionState;
    use recipes_core::Backend;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = backend.session_status();
        if now.id != ended && now.state == SessionState::Connected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new session within 10 s after the session's runtime ended: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A session on the caller's runtime (the default, decision 0095) ends with it, as an expiry would: a wait of that
/// session on another runtime ends (its watch is never polled after the connection's task is gone, which
/// zookeeper-client answers with a panic, caught), the guard's `lost()` says so, the lock it held is freed by the
/// server at the session timeout, and dropping the guard afterwards neither panics nor leaves anything. Then the
/// backend goes on, with a new session on its own runtime. Found by review (helper-154): before, the wait on the other
/// runtime panicked.
#[test]
fn a_session_whose_runtime_is_dropped_ends_and_the_backend_opens_another() {
    let Some(servers) = servers() else { return };
    let (held, busy) = (unique("dropped-held"), unique("dropped-busy"));
    let other = Locks::new(ZkBackend::connect_blocking(ZkOptions::new(servers.clone())).unwrap());
    let busy_guard = other.fair(&busy).unwrap().acquire_blocking().unwrap();
    let (app, elsewhere) = (multi_thread_runtime(), multi_thread_runtime());
    let options = ZkOptions::new(servers.clone()).session_timeout(Duration::from_secs(2));
    let backend = app.block_on(ZkBackend::connect(options)).unwrap();
    assert_eq!(
        session_thread(&backend),
        "app-worker",
        "the default: the caller's runtime"
    );
    let ended = backend.session_id();
    let holder = Locks::new(backend.clone());
    let guard = app.block_on(async { holder.fair(&held).unwrap().acquire().await.unwrap() });
    let waiter = holder.fair(&busy).unwrap();
    let waiting = elsewhere.spawn(async move { waiter.acquire().await.map(|_| ()) });
    let (tx, lost) = std::sync::mpsc::channel();
    let guard = std::sync::Arc::new(guard);
    let watched = guard.clone();
    elsewhere.spawn(async move {
        let _ = tx.send(watched.lost().await);
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiting.is_finished(), "the lock at {busy} is held by another client");
    // Another client queues for the lock before the runtime goes: when it gets it (the server frees the node at the
    // session timeout), the first holder's guard must already say it is no longer valid (found by review, helper-156,
    // as a check to make: no two holders across the runtime's end).
    let next = {
        let (servers, held, guard) = (servers.clone(), held.clone(), guard.clone());
        std::thread::spawn(move || {
            let next = Locks::new(ZkBackend::connect_blocking(ZkOptions::new(servers)).unwrap());
            let got = next
                .fair(&held)
                .unwrap()
                .acquire_timeout_blocking(Duration::from_secs(10))
                .unwrap();
            let first_still_valid = guard.is_valid();
            let got = got.is_some();
            next.close_blocking().unwrap();
            (got, first_still_valid)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    drop(app);
    let (next_got, first_still_valid) = next.join().expect("the next client's thread");
    assert!(
        next_got,
        "the session's runtime was dropped, yet another client could not take its lock within 10 s"
    );
    assert!(
        !first_still_valid,
        "another client took the lock while the first guard still said it held"
    );
    let reason = lost
        .recv_timeout(Duration::from_secs(10))
        .expect("lost() did not resolve within 10 s");
    let waited = elsewhere
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), waiting).await })
        .expect("the wait did not end within 10 s")
        .expect("the wait panicked");
    assert!(waited.is_err(), "the wait of an ended session acquired: {waited:?}");
    assert!(!guard.is_valid(), "lost ({reason:?}) yet valid");
    drop(guard);
    // The backend goes on: a new session, on its own runtime, that takes the lock the old one waited for.
    reopened(&backend, ended);
    assert_eq!(session_thread(&backend), "recipes-zk", "the new session's runtime");
    busy_guard.release().unwrap();
    let again = holder
        .fair(&busy)
        .unwrap()
        .acquire_timeout_blocking(Duration::from_secs(10))
        .unwrap()
        .expect("the new session takes the lock its ended session waited for, once it is free");
    again.release().unwrap();
    holder.close_blocking().unwrap();
    other.close_blocking().unwrap();
}

/// A sync program that connects through a runtime made only for the connect
/// (`Runtime::new()?.block_on(ZkBackend::connect(..))`) keeps a working backend when that runtime is dropped: the
/// session on it ends, and the backend opens a new one on its own runtime, where its locks then work from the blocking
/// API (decision 0095; with the caller's runtime as the default, decision 0094 had found this a trap).
#[test]
fn a_backend_connected_through_a_runtime_made_for_the_connect_goes_on() {
    let Some(servers) = servers() else { return };
    let rt = multi_thread_runtime();
    let backend = rt.block_on(ZkBackend::connect(ZkOptions::new(servers))).unwrap();
    let ended = backend.session_id();
    drop(rt);
    // At once, as a sync program would: the acquire waits for the new session.
    let locks = Locks::new(backend.clone());
    let guard = locks
        .fair(unique("made-for-the-connect"))
        .unwrap()
        .acquire_timeout_blocking(Duration::from_secs(10))
        .unwrap()
        .expect("a free lock, taken on the backend's new session");
    assert_ne!(backend.session_id(), ended, "the lock was taken on the new session");
    assert_eq!(session_thread(&backend), "recipes-zk");
    guard.release().unwrap();
    locks.close_blocking().unwrap();
}
