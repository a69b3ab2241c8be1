//! Requests made while the client's connection is cut.

use std::time::Duration;

use recipes_core::backend::{BackendExt, ChildOrder, CreateMode, SessionState};
use recipes_core::Error;
use tokio::time::Instant;

use super::{connected, kept_containers, send_now};
use crate::harness::Harness;
use crate::util::{bounded, eventually, skip};

/// A request made while the client knows its connection is cut: ZooKeeper's client (zookeeper-client) holds it and
/// sends it once it reconnects, so that it lands then, even when its caller has given up on it meanwhile; etcd's client
/// refuses it at once with `ConnectionLoss`, and it never lands. Found by review (helper-141): the in-memory backend
/// refused it on both, so that a create given up on during a cut, then made by the server, never happened there.
pub async fn a_request_made_while_cut_off_waits_for_the_reconnection(h: &dyn Harness) {
    let name = "a_request_made_while_cut_off_waits_for_the_reconnection";
    if !h.capabilities().disconnect {
        return skip(h, name, "disconnects");
    }
    let path = h.path("made-while-cut-off");
    // zookeeper-client's reconnection backs off (0.1, 0.3, 0.7, 1.5, 3.1, 6.3 s…): after a cut of 6 s it is back
    // at about 6.3 – 6.9 s, well within a session of 12.
    let a = h.client_with_timeout(Duration::from_secs(12)).await;
    let b = a.locks.backend().clone();
    let keep = kept_containers(b.current(), &path).await;
    let sid = b.session_status().id;
    let on = b.on(sid);
    // etcd's client sees a cut when its keep-alive stream breaks, within a keep-alive's interval (a quarter of the
    // timeout): the cut outlasts that, and ends well within the lease the last keep-alive gave (found by review,
    // helper-145: three quarters of the timeout left no room on a loaded machine).
    let cut = a.faults.session_timeout() / 2;
    let cut_at = Instant::now();
    a.faults.disconnect_for(cut).await;
    eventually(h, "the client sees the cut", || {
        let state = b.session_status().state;
        async move { state != SessionState::Connected }
    })
    .await;
    let (kept, dropped) = (format!("{path}/kept"), format!("{path}/dropped"));
    // A malformed path is refused before anything is sent or held (ZooKeeper's client checks it first).
    let refused = bounded(h, "a malformed path while cut off", on.get("relative")).await;
    assert!(matches!(refused, Err(Error::Refused(_))), "{refused:?}");
    let made = cut_at.elapsed();
    let given_up = send_now(on.create(&dropped, b"", CreateMode::Ephemeral)).await;
    let waited = send_now(on.create(&kept, b"", CreateMode::Ephemeral)).await;
    drop(given_up);
    let outcome = bounded(h, "a create made while cut off", waited).await;
    let answered = cut_at.elapsed();
    let when = format!("made {made:?} into a cut of {cut:?}, answered {answered:?} into it");
    if b.child_order() == ChildOrder::Sequence {
        assert!(
            outcome.is_ok(),
            "held, then sent at the reconnection: {outcome:?} ({when})"
        );
        assert!(answered >= cut, "answered only once the connection is back ({when})");
        let names = || async { h.children(&path).await };
        eventually(h, "the create given up on lands", || async {
            names().await.contains(&"dropped".to_owned())
        })
        .await;
        on.delete(&dropped).await.unwrap();
        on.delete(&kept).await.unwrap();
    } else if answered >= cut {
        // Seen too late to tell a refusal from a request sent after the cut: nothing to check this time.
        eprintln!(
            "{name} on {}: the client saw the cut too late to check ({when})",
            h.name()
        );
        connected(h, &*b, None).await;
        for node in [&dropped, &kept] {
            let _ = on.delete(node).await;
        }
    } else {
        assert_eq!(
            outcome.map(drop),
            Err(Error::ConnectionLoss),
            "refused at once ({when})"
        );
        connected(h, &*b, None).await;
        // Both creates would have landed by the time the session is connected again.
        assert_eq!(h.children(&path).await, ["keep"], "{when}");
    }
    on.delete(&keep).await.unwrap();
}
