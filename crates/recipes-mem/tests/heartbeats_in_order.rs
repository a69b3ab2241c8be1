//! The in-memory server answers one session's requests in order, heartbeats included, as ZooKeeper does: a heartbeat
//! sent after a request still waiting for its reply is not answered before it, so it does not move the lease. (A
//! deep model-checker run found the in-memory backend kinder than ZooKeeper here: with an operator's deletion and a
//! delayed reply, `lost()` stayed unresolved past the lease ZooKeeper would have given.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::backend::BackendExt;
use recipes_core::Backend;
use recipes_mem::MemCluster;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_request_waiting_for_its_reply_holds_the_lease_back() {
    let cluster = MemCluster::new();
    let client = cluster.client_with_timeout(Duration::from_secs(4)); // heartbeats every second
    client.current().get("/").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let idle = client.lease().answered_send.unwrap();
    assert!(
        Instant::now() - idle <= Duration::from_secs(1),
        "heartbeats keep an idle session's lease fresh"
    );

    // A request whose reply takes 3 s: the heartbeats sent meanwhile wait behind it.
    cluster.set_latency(Duration::from_millis(1_500));
    let sent = Instant::now();
    let c = client.clone();
    let slow = tokio::spawn(async move { c.current().get("/").await });
    tokio::time::sleep(Duration::from_millis(2_900)).await;
    let lease = client.lease().answered_send.unwrap();
    assert!(
        lease < sent,
        "a heartbeat sent after the waiting request was answered first: {:?}",
        lease - sent
    );
    slow.await.unwrap().unwrap();
    // Answered: the session's lease moves again.
    cluster.set_latency(Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(client.lease().answered_send.unwrap() > sent);
}
