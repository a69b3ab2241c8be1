//! Closes of a session, as ZooKeeper and its client (zookeeper-client) make them: the requests sent before a close are
//! applied before it, and a close over a cut connection reaches the server only when the connection comes back (the
//! contract's `requests_sent_before_a_close_are_applied_first`, `a_close_over_a_cut_connection_leaves_the_nodes_to_the_
//! expiry` and `a_close_over_a_short_cut_reaches_the_server_when_it_reconnects` check the same on the real servers).
//! The cases here are the in-memory backend's own, found by review (helper-122).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_core::{Backend, Error};
use recipes_mem::MemCluster;

/// A cluster with a persistent `/p`, a client of a four-second session, and then `latency` on every request.
async fn a_parent_then_latency(latency: Duration) -> (MemCluster, std::sync::Arc<recipes_mem::MemClient>) {
    let cluster = MemCluster::new();
    let a = cluster.client_with_timeout(Duration::from_secs(4));
    a.current().create("/p", b"", CreateMode::Persistent).await.unwrap();
    cluster.set_latency(latency);
    (cluster, a)
}

/// A second close, or the drop of the client, after a close over a cut connection sends nothing more: the node stays
/// until the server expires the session. Before, either deleted it at once.
#[tokio::test(start_paused = true)]
async fn a_second_close_or_the_drop_after_a_close_over_a_cut_sends_nothing() {
    for drop_it in [false, true] {
        let cluster = MemCluster::new();
        let a = cluster.client_with_timeout(Duration::from_secs(4));
        a.current().create("/n", b"", CreateMode::Ephemeral).await.unwrap();
        let cut = tokio::time::Instant::now();
        a.disconnect_for(Duration::from_secs(60));
        a.close().await;
        assert!(
            cluster.exists("/n"),
            "the node stays after a close over a cut connection"
        );
        if drop_it {
            drop(a);
        } else {
            a.close().await;
        }
        assert!(
            cluster.exists("/n"),
            "a second close or the drop (drop: {drop_it}) deleted the node at once"
        );
        for _ in 0..100 {
            if !cluster.exists("/n") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!cluster.exists("/n"), "the server expires the session");
        assert!(cut.elapsed() >= Duration::from_secs(4), "{:?}", cut.elapsed());
    }
}

/// A create in flight at a close, its reply lost (the connection breaks as it is applied): the client was connected
/// when it closed, reconnects at once and sends its close, so the node goes with the close. Before, the lost reply
/// turned it into a close over a cut connection, and the node stayed a whole session timeout.
#[tokio::test(start_paused = true)]
async fn a_reply_lost_during_a_close_does_not_make_it_a_close_over_a_cut() {
    let (cluster, a) = a_parent_then_latency(Duration::from_millis(50)).await;
    a.lose_next_create_replies(1);
    let on = a.clone();
    let create = tokio::spawn(async move { on.current().create("/p/n", b"", CreateMode::Ephemeral).await });
    tokio::task::yield_now().await;
    a.close_now();
    assert_eq!(
        create.await.unwrap().map(drop),
        Err(Error::ConnectionLoss),
        "the reply is lost"
    );
    assert!(!cluster.exists("/p/n"), "the node went with the close");
}

/// A write sent behind a request that a broken connection left in flight, then a close: both are applied before the
/// close (the one left in flight may land or not: here it lands). Before, the write was failed with `Closed`. And a
/// reply to lose (`lose_next_create_replies`) is aimed at a reply still on its way: the create left in flight has none,
/// and applying it at the close must neither use the loss up nor break the connection, failing the write behind it
/// (found by review, helper-123).
#[tokio::test(start_paused = true)]
async fn a_write_behind_a_request_left_in_flight_is_applied_before_the_close() {
    for lose_a_reply in [false, true] {
        let (cluster, a) = a_parent_then_latency(Duration::from_millis(100)).await;
        // Persistent, to see it land; ephemeral, for a reply to lose to be aimed at it.
        let mode = if lose_a_reply {
            CreateMode::Ephemeral
        } else {
            CreateMode::Persistent
        };
        let on = a.clone();
        let left = tokio::spawn(async move { on.current().create("/p/o", b"", mode).await });
        tokio::task::yield_now().await;
        a.disconnect_for(Duration::from_millis(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let on = a.clone();
        let write = tokio::spawn(async move { on.current().set_data("/p", b"let go").await });
        tokio::task::yield_now().await;
        if lose_a_reply {
            a.lose_next_create_replies(1);
        }
        a.close_now();
        assert_eq!(
            left.await.unwrap().map(drop),
            Err(Error::ConnectionLoss),
            "its reply went with the connection"
        );
        assert_eq!(
            write.await.unwrap(),
            Ok(()),
            "the write is answered before the close ({lose_a_reply})"
        );
        cluster.set_latency(Duration::ZERO);
        let b = cluster.client();
        assert_eq!(
            b.current().get("/p").await.unwrap().map(|(d, _)| d),
            Some(b"let go".to_vec())
        );
        assert_eq!(cluster.exists("/p/o"), !lose_a_reply, "landed, and ephemeral or not");
    }
}
