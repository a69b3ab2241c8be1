//! The contract's watches: when their events arrive, and what they see of what happened before they were polled.

use std::task::Poll;

use recipes_core::backend::{BackendExt, CreateMode, NodeEvent};
use recipes_core::Error;

use super::kept_containers;
use crate::harness::{Harness, TestClient};
use crate::util::{bounded, eventually, skip};

/// A lock path's parents made for a test named `name`, and two clients: one to change nodes, one to watch them. The
/// path keeps a child of the first client's ([`kept_containers`]): the checks empty it and make a node in it
/// again, and delete it at their end.
async fn two_clients(h: &dyn Harness, name: &str) -> (String, TestClient, TestClient) {
    let path = h.path(name);
    let (a, b) = (h.client().await, h.client().await);
    kept_containers(a.locks.backend().current(), &path).await;
    (path, a, b)
}

/// A watch event reaches its session before the reply to a later read that sees the change.
pub async fn watch_event_arrives_before_later_reply(h: &dyn Harness) {
    let (path, a, b) = two_clients(h, "event-order").await;
    let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
    let node = format!("{path}/n");
    on_a.create(&node, b"", CreateMode::Ephemeral).await.unwrap();
    let (_, mut watch) = on_b.watch_deletion(&node).await.unwrap().expect("exists");
    on_a.delete(&node).await.unwrap();
    // Read until B sees the deletion; the event must be there by then.
    eventually(h, "B sees the deletion", || async {
        matches!(on_b.get(&node).await, Ok(None))
    })
    .await;
    let ready = std::future::poll_fn(|cx| Poll::Ready(watch.as_mut().poll(cx))).await;
    assert!(
        matches!(ready, Poll::Ready(Ok(()))),
        "the deletion event must arrive before the reply that shows the node gone: {ready:?}"
    );
    on_a.delete(&format!("{path}/keep")).await.unwrap();
}

/// A watch counts from the read that returned it, not from its first poll: a deletion (even one followed by a new
/// node of the same name) or a change of data made in between is reported at the first poll. Found by review of the
/// etcd backend's watches, which start at the store's current revision when first polled and read what happened
/// since the read (an etcd watch that starts in the past is served up to 100 ms late).
pub async fn a_change_before_the_watch_is_polled_is_seen(h: &dyn Harness) {
    let (path, a, b) = two_clients(h, "before-poll").await;
    let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
    let node = format!("{path}/n");
    for renewed in [false, true] {
        on_a.create(&node, b"1", CreateMode::Ephemeral).await.unwrap();
        let (_, watch) = on_b.watch_deletion(&node).await.unwrap().expect("exists");
        on_a.delete(&node).await.unwrap();
        if renewed {
            // A new node of the name: still the deletion of the one watched.
            on_a.create(&node, b"2", CreateMode::Ephemeral).await.unwrap();
        }
        let fired = bounded(h, "a deletion made before the first poll", watch).await;
        assert!(fired.is_ok(), "renewed {renewed}: {fired:?}");
        if renewed {
            on_a.delete(&node).await.unwrap();
        }
    }
    on_a.create(&node, b"1", CreateMode::Ephemeral).await.unwrap();
    let (data, watch) = on_b.get_and_watch(&node).await.unwrap().expect("exists");
    assert_eq!(data, b"1".to_vec());
    on_a.set_data(&node, b"2").await.unwrap();
    let fired = bounded(h, "a change made before the first poll", watch).await;
    assert!(fired.is_ok(), "{fired:?}");
    on_a.delete(&node).await.unwrap();
    on_a.delete(&format!("{path}/keep")).await.unwrap();
}

/// A deletion watch reports the deletion of the node it was armed on when a change of its data came first and a node
/// of the same name stands there again by the time the watch looks. ZooKeeper consumes an exists watch at the change
/// of data (the ZooKeeper backend arms it again on that event): the watch must tell the new node by its creation id,
/// not by its name. Found by review (helper-103): the exclusive recipe's holder, its `P/lock` deleted by an operator
/// and made again by the next contender, never learnt it had lost the lock, and two held it.
pub async fn a_deletion_after_a_change_is_seen_through_a_new_node(h: &dyn Harness) {
    made_again_is_reported_deleted(h, "renewed-after-change", Before::DataChange).await;
}

/// A deletion watch reports the deletion of its node when the node was deleted and made again while the watching
/// client's connection was cut: ZooKeeper's re-registration of the client's watches after the reconnection
/// (`setWatches`) reports a node that stands there with a newer change as a change of data, not as a deletion. The
/// path the review found (helper-103): the exclusive recipe's holder, briefly cut off while an operator deleted its
/// `P/lock` and the next contender made it again, never learnt that it had lost the lock.
pub async fn a_node_made_again_while_cut_off_is_reported_deleted(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return skip(h, "a_node_made_again_while_cut_off_is_reported_deleted", "disconnects");
    }
    made_again_is_reported_deleted(h, "renewed-while-cut", Before::CutOff).await;
}

/// A data watch of a client whose connection was cut reports, after the reconnection, the node as it is then, not
/// the first change made meanwhile: ZooKeeper drops a connection's watches with the connection, and the client sets
/// them again on its reconnection (`setWatches`), each answered from the node as it stands. A node changed then
/// deleted while the watcher was cut off is reported deleted; a node deleted then made again under its name is
/// reported changed (a recipe must not take that for the node it watched). The in-memory backend models this, so
/// that the model checker meets what a real reconnection reports (helper-103 found it replaying the changes in order).
pub async fn a_watch_set_before_a_cut_reports_the_node_as_it_is_then(h: &dyn Harness) {
    let name = "a_watch_set_before_a_cut_reports_the_node_as_it_is_then";
    if !h.capabilities().disconnect || !h.capabilities().watches_rebuilt {
        return skip(
            h,
            name,
            "disconnects, and watches set again from the nodes at a reconnection",
        );
    }
    for made_again in [false, true] {
        // A path of its own each time.
        let (path, a, b) = two_clients(h, &format!("rebuilt-watch-{made_again}")).await;
        let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
        let node = format!("{path}/n");
        on_a.create(&node, b"1", CreateMode::Ephemeral).await.unwrap();
        let (_, watch) = on_b.get_and_watch(&node).await.unwrap().expect("exists");
        b.faults.disconnect_for(b.faults.session_timeout() / 5).await;
        if made_again {
            on_a.delete(&node).await.unwrap();
            on_a.create(&node, b"2", CreateMode::Ephemeral).await.unwrap();
        } else {
            on_a.set_data(&node, b"2").await.unwrap();
            on_a.delete(&node).await.unwrap();
        }
        let fired = bounded(h, "a watch set again at a reconnection", watch).await;
        let expected = if made_again {
            NodeEvent::DataChanged
        } else {
            NodeEvent::Deleted
        };
        assert!(
            matches!(fired, Ok(e) if e == expected),
            "made again {made_again}: {fired:?}, not {expected:?}"
        );
        if made_again {
            on_a.delete(&node).await.unwrap();
        }
        on_a.delete(&format!("{path}/keep")).await.unwrap();
    }
}

/// What comes before the deletion of a watched node and the new node of its name.
enum Before {
    /// A change of its data (before the watch's first poll).
    DataChange,
    /// The watching client's connection cut, well within its session (it reconnects to the same session, its watch
    /// registered again).
    CutOff,
}

/// One client watches a node for its deletion; the other, after `before`, deletes it and makes a node of the name
/// again: the watch reports the deletion.
async fn made_again_is_reported_deleted(h: &dyn Harness, name: &str, before: Before) {
    let (path, a, b) = two_clients(h, name).await;
    let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
    let node = format!("{path}/lock");
    on_a.create(&node, b"1", CreateMode::Ephemeral).await.unwrap();
    let (_, watch) = on_b.watch_deletion(&node).await.unwrap().expect("exists");
    match before {
        Before::DataChange => on_a.set_data(&node, b"2").await.unwrap(),
        Before::CutOff => b.faults.disconnect_for(b.faults.session_timeout() / 5).await,
    }
    on_a.delete(&node).await.unwrap();
    on_a.create(&node, b"3", CreateMode::Ephemeral).await.unwrap();
    let fired = bounded(
        h,
        "the deletion of a node watched, a node of its name made again",
        watch,
    )
    .await;
    assert!(fired.is_ok(), "{name}: {fired:?}");
    on_a.delete(&node).await.unwrap();
    on_a.delete(&format!("{path}/keep")).await.unwrap();
}

/// A one-shot watch still armed when its client closes the session ends with `Closed`, not `SessionExpired`: the
/// application ended the session, as ZooKeeper's client tells its watchers with its closing event. Found by an audit of
/// the in-memory server against the contract (helper-141): its watches ended as by an expiry.
pub async fn a_watch_armed_at_a_close_ends_closed(h: &dyn Harness) {
    let path = h.path("watch-at-close");
    let maker = h.client().await;
    let on = maker.locks.backend().current();
    let keep = kept_containers(on, &path).await;
    let node = format!("{path}/n");
    on.create(&node, b"", CreateMode::Ephemeral).await.unwrap();
    let closing = h.client().await;
    let b = closing.locks.backend().clone();
    let (_, deleted) = b
        .current()
        .watch_deletion(&node)
        .await
        .unwrap()
        .expect("the node is there");
    let (_, changed) = b
        .current()
        .get_and_watch(&node)
        .await
        .unwrap()
        .expect("the node is there");
    b.close().await;
    let deleted = bounded(h, "the deletion watch armed at the close", deleted).await;
    assert!(
        matches!(deleted, Err(Error::Closed)),
        "a deletion watch armed at the close: {deleted:?}"
    );
    let changed = bounded(h, "the watch of the node armed at the close", changed).await;
    assert!(
        matches!(changed, Err(Error::Closed)),
        "a watch of the node armed at the close: {changed:?}"
    );
    on.delete(&node).await.unwrap();
    on.delete(&keep).await.unwrap();
}

/// A watch of a node's deletion alone (`GoneWatches`, decision 0092: ZooKeeper's child watch on a lock node) lets a
/// change of the node's data pass, and fires at its deletion; beside a data watch, a release's transaction (the mark
/// and the delete in one write) fires both, the data watch with the change, this one with the deletion, and both
/// events are there before the reply to a later read that finds the node gone. No node, no watch.
pub async fn a_gone_watch_fires_at_the_deletion_alone(h: &dyn Harness) {
    let name = "a_gone_watch_fires_at_the_deletion_alone";
    let (path, a, b) = two_clients(h, "gone-watch").await;
    let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
    if b.locks.backend().gone_watches().is_none() {
        on_a.delete(&format!("{path}/keep")).await.unwrap();
        return skip(h, name, "watches of a deletion alone");
    }
    let node = format!("{path}/n");
    assert!(on_b.watch_gone(&node).await.unwrap().is_none(), "no node, no watch");
    on_a.create(&node, b"made", CreateMode::Ephemeral).await.unwrap();
    let mut gone = on_b.watch_gone(&node).await.unwrap().expect("the node is there");
    let (_, changed) = on_b.get_and_watch(&node).await.unwrap().expect("the node is there");
    on_a.set_data(&node, b"asked").await.unwrap();
    assert_eq!(
        bounded(h, "the data watch", changed).await.unwrap(),
        NodeEvent::DataChanged
    );
    // The change's event came before this reply: had the watch of the deletion fired on it, it would be ready now.
    let (data, changed) = on_b
        .get_and_watch(&node)
        .await
        .unwrap()
        .expect("the node is still there");
    assert_eq!(data, b"asked");
    let ready = std::future::poll_fn(|cx| Poll::Ready(gone.as_mut().poll(cx))).await;
    assert!(ready.is_pending(), "a change of data does not fire it: {ready:?}");
    on_a.set_data_and_delete(&node, b"first")
        .await
        .expect("the backend has transactions")
        .unwrap();
    assert_eq!(
        bounded(h, "the data watch", changed).await.unwrap(),
        NodeEvent::DataChanged
    );
    assert!(
        on_b.get(&node).await.unwrap().is_none(),
        "read after the change's event: gone"
    );
    let ready = std::future::poll_fn(|cx| Poll::Ready(gone.as_mut().poll(cx))).await;
    assert!(
        matches!(ready, Poll::Ready(Ok(NodeEvent::Deleted))),
        "the deletion's event must arrive before the reply that shows the node gone: {ready:?}"
    );
    on_a.delete(&format!("{path}/keep")).await.unwrap();
}

/// A watch of a node's deletion alone set before a cut is set again at the reconnection, as ZooKeeper's client sets
/// its child watches again (`setWatches`, which compares the child list's `pzxid`): a change of data meanwhile leaves
/// it set (it fires at the later deletion), a release's transaction meanwhile reports the deletion, and a node of the
/// name deleted and made again meanwhile reports a change (look again). Found by review, helper-149, whose check this
/// is.
pub async fn a_gone_watch_is_set_again_at_a_reconnection(h: &dyn Harness) {
    let name = "a_gone_watch_is_set_again_at_a_reconnection";
    if !h.capabilities().disconnect || !h.capabilities().watches_rebuilt {
        return skip(h, name, "disconnects");
    }
    for case in 0..3 {
        let (path, a, b) = two_clients(h, &format!("gone-cut-{case}")).await;
        let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
        if b.locks.backend().gone_watches().is_none() {
            on_a.delete(&format!("{path}/keep")).await.unwrap();
            return skip(h, name, "watches of a deletion alone");
        }
        let node = format!("{path}/n");
        on_a.create(&node, b"1", CreateMode::Ephemeral).await.unwrap();
        let mut gone = on_b.watch_gone(&node).await.unwrap().expect("exists");
        b.faults.disconnect_for(b.faults.session_timeout() / 5).await;
        match case {
            0 => on_a.set_data(&node, b"2").await.unwrap(),
            1 => on_a.set_data_and_delete(&node, b"2").await.unwrap().unwrap(),
            _ => {
                on_a.delete(&node).await.unwrap();
                on_a.create(&node, b"3", CreateMode::Ephemeral).await.unwrap();
            }
        }
        if case == 0 {
            // A later reply of b's session, after its reconnection (bounded: 50 tries, 100 ms apart).
            for _ in 0..50 {
                if on_b.get(&node).await.is_ok() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            let ready = std::future::poll_fn(|cx| Poll::Ready(gone.as_mut().poll(cx))).await;
            assert!(ready.is_pending(), "case {case}: {ready:?}");
            on_a.delete(&node).await.unwrap();
            let fired = bounded(h, "gone watch", gone).await;
            assert!(matches!(fired, Ok(NodeEvent::Deleted)), "case {case}: {fired:?}");
        } else {
            let fired = bounded(h, "gone watch set again", gone).await;
            let expected = if case == 1 {
                NodeEvent::Deleted
            } else {
                NodeEvent::DataChanged
            };
            assert!(matches!(fired, Ok(e) if e == expected), "case {case}: {fired:?}");
            if case == 2 {
                on_a.delete(&node).await.unwrap();
            }
        }
        on_a.delete(&format!("{path}/keep")).await.unwrap();
    }
}
