//! Requests made while the connection is cut, held by the client and sent when it comes back, as zookeeper-client holds
//! them (the contract's `a_request_made_while_cut_off_waits_for_the_reconnection` checks the same on the real servers;
//! decision 0090). The cases here are the in-memory backend's own, found by review (helper-145).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::FutureExt;
use recipes_core::backend::{BackendExt, ChildOrder, CreateMode, SessionState};
use recipes_core::{Backend, Error};
use recipes_mem::MemCluster;

/// A close made during a short cut: the requests held before it go out at the reconnection, ahead of the close, as
/// zookeeper-client sends them ahead of its `closeSession`. A container made so stays (until the reaper's next pass,
/// its child gone); an ephemeral node goes with the close.
#[tokio::test(start_paused = true)]
async fn requests_held_at_a_close_go_ahead_of_it() {
    let cluster = MemCluster::new();
    let a = cluster.client_with_timeout(Duration::from_secs(4));
    let on = a.current();
    a.disconnect_for(Duration::from_secs(1));
    let container = on.create("/c", b"", CreateMode::Container);
    let node = on.create("/c/n", b"", CreateMode::Ephemeral);
    let (mut container, mut node) = (Box::pin(container), Box::pin(node));
    assert!(container.as_mut().now_or_never().is_none() && node.as_mut().now_or_never().is_none());
    a.close().await;
    assert_eq!(a.session_status().state, SessionState::Closed);
    assert!(!cluster.exists("/c"), "nothing is sent before the connection is back");
    assert_eq!(
        container.await.map(|c| c.path),
        Ok("/c".to_owned()),
        "sent at the reconnection"
    );
    assert_eq!(node.await.map(|c| c.path), Ok("/c/n".to_owned()));
    assert!(cluster.exists("/c"), "the container stays until the reaper's next pass");
    assert!(!cluster.exists("/c/n"), "the ephemeral node goes with the close");
}

/// A close made during a cut longer than the session: the server expires the session first, and the held requests fail
/// with `SessionExpired` when the client learns of it (zookeeper-client's error), never run.
#[tokio::test(start_paused = true)]
async fn requests_held_past_the_expiry_fail_expired_even_after_a_close() {
    for close in [false, true] {
        let cluster = MemCluster::new();
        let a = cluster.client_with_timeout(Duration::from_secs(4));
        let sid = a.session_id();
        let on = a.on(sid);
        a.disconnect_for(Duration::from_secs(10));
        let held = on.create("/n", b"", CreateMode::Persistent);
        let mut held = Box::pin(held);
        assert!(held.as_mut().now_or_never().is_none());
        if close {
            a.close().await;
        }
        assert_eq!(held.await.map(drop), Err(Error::SessionExpired), "close: {close}");
        assert!(!cluster.exists("/n"), "close: {close}");
    }
}

/// A crash drops what the client held: the requests fail with `ConnectionLoss` at once, and never run.
#[tokio::test(start_paused = true)]
async fn requests_held_at_a_crash_fail_and_never_run() {
    let cluster = MemCluster::new();
    let a = cluster.client_with_timeout(Duration::from_secs(4));
    let on = a.current();
    a.disconnect_for(Duration::from_secs(1));
    let mut held = Box::pin(on.create("/n", b"", CreateMode::Persistent));
    assert!(held.as_mut().now_or_never().is_none());
    a.crash();
    assert_eq!(
        held.now_or_never().map(|r| r.map(drop)),
        Some(Err(Error::ConnectionLoss))
    );
    assert_eq!(
        on.create("/m", b"", CreateMode::Persistent).await.map(drop),
        Err(Error::ConnectionLoss),
        "a crashed client holds nothing"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!cluster.exists("/n") && !cluster.exists("/m"));
}

/// Held requests go out in the order they were made, behind nothing made later: a create, a set of its data and a
/// delete made during the cut, then a read made after the reconnection, see each other in that order.
#[tokio::test(start_paused = true)]
async fn held_requests_go_out_in_order_ahead_of_later_ones() {
    let cluster = MemCluster::new();
    let a = cluster.client_with_timeout(Duration::from_secs(4));
    let on = a.current();
    a.disconnect_for(Duration::from_secs(1));
    let created = on.create("/n", b"one", CreateMode::Persistent);
    let set = on.set_data("/n", b"two");
    let deleted = on.delete("/n");
    let (created, set, deleted) = futures::join!(created, set, deleted);
    assert_eq!((created.map(drop), set, deleted), (Ok(()), Ok(()), Ok(())));
    assert_eq!(on.get("/n").await, Ok(None));
}

/// On the cluster that stands for etcd, a request made during a cut is refused at once, as etcd's client refuses it.
#[tokio::test(start_paused = true)]
async fn the_cluster_standing_for_etcd_refuses_them() {
    let cluster = MemCluster::new().ordered_by(ChildOrder::Creation);
    let a = cluster.client_with_timeout(Duration::from_secs(4));
    a.disconnect_for(Duration::from_secs(1));
    let refused = a.current().create("/n", b"", CreateMode::Persistent).now_or_never();
    assert_eq!(refused.map(|r| r.map(drop)), Some(Err(Error::ConnectionLoss)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!cluster.exists("/n"));
}
