//! Requests of a broken connection ("orphans") still land before any later write of the session, as ZooKeeper's
//! leader commits what the old server forwarded before the session moved. Both tests lower the latency while an
//! orphan is in flight, as the scenarios of the conformance suite do; a review (helper-58) found the automatic mode
//! getting both wrong there: the pump looked only at the write that waited for the orphan, woke at its time for ever
//! and never applied either (a hang, under a paused clock without end); and with no latency left, the write was
//! applied at once, ahead of the orphan.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc;
use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_mem::MemCluster;

/// Runs `scenario` with a paused clock on a thread of its own, bounded in real time: a pump that spins on a past
/// instant never lets the paused clock move, so a timeout inside the runtime would never fire.
fn bounded(scenario: impl std::future::Future<Output = ()> + Send + 'static) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(scenario);
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(30))
        .expect("the scenario did not finish within 30 s (the requests were never applied)");
}

/// An orphan, due at the old latency, and a write of the new connection at a lower one: the write waits for the
/// orphan and then lands behind it.
async fn orphan_then_write(new_latency: Duration) -> (i64, i64) {
    let cluster = MemCluster::new();
    let client = cluster.client();
    client
        .current()
        .create("/p", b"", CreateMode::Persistent)
        .await
        .unwrap();
    cluster.set_latency(Duration::from_millis(100));
    let sender = client.clone();
    let orphan = tokio::spawn(async move { sender.current().create("/p/o", b"", CreateMode::Persistent).await });
    tokio::task::yield_now().await; // the create is sent
    client.disconnect_for(Duration::from_millis(5));
    tokio::time::sleep(Duration::from_millis(10)).await; // reconnected, the create an orphan
    cluster.set_latency(new_latency);
    let written = client
        .current()
        .create("/p/n", b"", CreateMode::Persistent)
        .await
        .unwrap();
    // The orphan's caller saw the connection break; the server applies it all the same.
    assert!(orphan.await.unwrap().is_err());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let orphan_czxid = cluster.stat("/p/o").expect("the orphan landed").czxid;
    (orphan_czxid, written.czxid)
}

#[test]
fn a_write_behind_an_orphan_is_applied_after_it() {
    bounded(async {
        let (orphan, write) = orphan_then_write(Duration::from_millis(1)).await;
        assert!(
            orphan < write,
            "the orphan ({orphan}) must land before the later write ({write})"
        );
    });
}

#[test]
fn a_write_answered_at_once_still_waits_for_an_orphan() {
    bounded(async {
        let (orphan, write) = orphan_then_write(Duration::ZERO).await;
        assert!(
            orphan < write,
            "the orphan ({orphan}) must land before the later write ({write})"
        );
    });
}
