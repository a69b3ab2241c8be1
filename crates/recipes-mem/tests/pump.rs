//! The automatic mode's pump outlives the runtimes it ran on. Found by review (helper-59): a client dropped while its
//! runtime shut down emptied a container, which woke the pump onto that closing runtime; tokio dropped the task before
//! its first poll, the pump's running flag stayed set, and no later request on any runtime was ever applied.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_mem::MemCluster;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_pump_woken_during_a_shutdown_does_not_stall_the_cluster() {
    let cluster = MemCluster::new();
    let a = cluster.client();
    let first = runtime();
    first.block_on(async {
        a.current().create("/c", b"", CreateMode::Container).await.unwrap();
        let b = cluster.client();
        b.current().create("/c/e", b"", CreateMode::Ephemeral).await.unwrap();
        // The task owns b and never ends: the runtime's shutdown drops it, and b's drop closes its session, which
        // empties the container (a reap comes due: the pump is woken, on the closing runtime).
        tokio::spawn(async move {
            let _b = b;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
    });
    drop(first);
    assert!(!cluster.exists("/c/e"), "b's session was closed at the shutdown");
    cluster.set_latency(Duration::from_millis(1));
    runtime().block_on(async {
        let answered = tokio::time::timeout(Duration::from_secs(2), a.current().children("/")).await;
        assert!(
            answered.is_ok(),
            "a request with latency on a later runtime was never applied (no pump)"
        );
    });
}
