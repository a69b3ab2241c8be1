//! The contract's tree watches (ZooKeeper's persistent recursive watch): what they report, in which order beside the
//! session's replies, and how they end at a cut. The in-memory backend models them in ZooKeeper's order, so that a
//! view of a queue built on one meets in the model checker what it meets on a real server (decision 0084).

use std::task::Poll;

use futures::StreamExt;
use recipes_core::backend::{BackendExt, CreateMode, SessionState, TreeChange, TreeEvent, TreeWatch};
use recipes_core::Error;

use super::kept_containers;
use crate::harness::{Harness, TestClient};
use crate::util::{bounded, eventually, skip};

/// A lock path made for a test named `name`, and two clients (one changes nodes, one watches them), or `None` when
/// the backend has no tree watches. The path keeps a child of the first client's (`keep`), made before any watch, so
/// that the server never reaps it between two steps of a check (found by review, helper-109: `scripts/zk` reaps
/// containers every second).
async fn two_clients(h: &dyn Harness, name: &str) -> Option<(String, TestClient, TestClient)> {
    let path = h.path(name);
    let (a, b) = (h.client().await, h.client().await);
    if b.locks.backend().tree_watches().is_none() {
        skip(h, name, "tree watches");
        return None;
    }
    let on_a = a.locks.backend().current();
    kept_containers(on_a, &path).await;
    Some((path, a, b))
}

/// The watch of `c` on `path`.
async fn watch(c: &TestClient, path: &str) -> Result<TreeWatch, Error> {
    let backend = c.locks.backend();
    let trees = backend.tree_watches().expect("checked by two_clients");
    trees.watch_tree(backend.session_status().id, path).await
}

/// The next event, within the harness's patience.
async fn next(h: &dyn Harness, events: &mut TreeWatch) -> Option<Result<TreeEvent, Error>> {
    bounded(h, "a tree watch's next event", events.next()).await
}

/// The event now, without a wait: `None` when none is ready.
async fn ready_now(events: &mut TreeWatch) -> Option<Option<Result<TreeEvent, Error>>> {
    match std::future::poll_fn(|cx| Poll::Ready(events.poll_next_unpin(cx))).await {
        Poll::Ready(e) => Some(e),
        Poll::Pending => None,
    }
}

fn event(path: &str, change: TreeChange) -> TreeEvent {
    TreeEvent {
        path: path.to_owned(),
        change,
    }
}

/// A tree watch reports every create, change of data and delete of its node and of the nodes below it, by either
/// session, in the order the server applied them; nothing of a node beside it. A path that is not one is refused.
pub async fn a_tree_watch_reports_every_change_below_it_in_order(h: &dyn Harness) {
    let Some((path, a, b)) = two_clients(h, "a_tree_watch_reports_every_change_below_it_in_order").await else {
        return;
    };
    let bad = watch(&b, "no-slash").await;
    assert!(matches!(bad, Err(Error::Refused(_))), "{:?}", bad.map(|_| ()));
    let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
    let root = format!("{path}/q");
    let beside = format!("{path}/qq");
    on_a.create(&root, b"", CreateMode::Persistent).await.unwrap();
    let mut events = watch(&b, &root).await.unwrap();
    let (n, inner) = (format!("{root}/n"), format!("{root}/n/m"));
    on_a.create(&n, b"1", CreateMode::Persistent).await.unwrap();
    on_a.set_data(&n, b"2").await.unwrap();
    on_b.create(&inner, b"", CreateMode::Ephemeral).await.unwrap();
    on_a.create(&beside, b"", CreateMode::Ephemeral).await.unwrap();
    on_a.delete(&inner).await.unwrap();
    on_a.delete(&n).await.unwrap();
    on_b.set_data(&root, b"3").await.unwrap();
    on_a.delete(&beside).await.unwrap();
    on_a.delete(&root).await.unwrap();
    let expected = [
        event(&n, TreeChange::Created),
        event(&n, TreeChange::DataChanged),
        event(&inner, TreeChange::Created),
        event(&inner, TreeChange::Deleted),
        event(&n, TreeChange::Deleted),
        event(&root, TreeChange::DataChanged),
        event(&root, TreeChange::Deleted),
    ];
    for (i, want) in expected.iter().enumerate() {
        let got = next(h, &mut events).await;
        assert!(
            matches!(&got, Some(Ok(e)) if e == want),
            "event {i}: {got:?}, not {want:?}"
        );
    }
    // Still armed on a path that is gone: a node made there again is reported.
    on_a.create(&root, b"", CreateMode::Ephemeral).await.unwrap();
    let got = next(h, &mut events).await;
    assert!(
        matches!(&got, Some(Ok(e)) if *e == event(&root, TreeChange::Created)),
        "{got:?}"
    );
    on_a.delete(&root).await.unwrap();
    on_a.delete(&format!("{path}/keep")).await.unwrap();
}

/// A tree watch's event reaches its session before the reply to a later request that sees the change, as a one-shot
/// watch's does: a listing that shows a new node finds its event ready. And a one-shot watch of the session on a node
/// below fires beside it.
pub async fn a_tree_watch_event_arrives_before_a_later_reply(h: &dyn Harness) {
    let Some((path, a, b)) = two_clients(h, "a_tree_watch_event_arrives_before_a_later_reply").await else {
        return;
    };
    let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
    let mut events = watch(&b, &path).await.unwrap();
    for i in 0..5 {
        let node = format!("{path}/n{i}");
        on_a.create(&node, b"", CreateMode::Ephemeral).await.unwrap();
        let name = format!("n{i}");
        eventually(h, "B lists the new node", || async {
            on_b.children(&path).await.is_ok_and(|c| c.contains(&name))
        })
        .await;
        let got = ready_now(&mut events).await;
        assert!(
            matches!(&got, Some(Some(Ok(e))) if *e == event(&node, TreeChange::Created)),
            "the create's event must arrive before the reply that lists the node: {got:?}"
        );
        let (_, mut one_shot) = on_b.get_and_watch(&node).await.unwrap().expect("exists");
        on_a.delete(&node).await.unwrap();
        eventually(h, "B sees the deletion", || async {
            matches!(on_b.get(&node).await, Ok(None))
        })
        .await;
        let got = ready_now(&mut events).await;
        assert!(
            matches!(&got, Some(Some(Ok(e))) if *e == event(&node, TreeChange::Deleted)),
            "the delete's event must arrive before the reply that shows the node gone: {got:?}"
        );
        let fired = std::future::poll_fn(|cx| Poll::Ready(one_shot.as_mut().poll(cx))).await;
        assert!(
            matches!(fired, Poll::Ready(Ok(_))),
            "the one-shot watch below: {fired:?}"
        );
    }
    on_a.delete(&format!("{path}/keep")).await.unwrap();
}

/// A cut of the watching session's connection ends its tree watch with `ConnectionLoss`: ZooKeeper loses a persistent
/// watch's events across a reconnection (ZOOKEEPER-4698), so no event of a change made during the cut may follow as
/// if the stream were whole. A watch set after the reconnection reports changes again.
pub async fn a_tree_watch_ends_at_a_cut(h: &dyn Harness) {
    let name = "a_tree_watch_ends_at_a_cut";
    if !h.capabilities().disconnect {
        return skip(h, name, "disconnects");
    }
    let Some((path, a, b)) = two_clients(h, name).await else {
        return;
    };
    let on_a = a.locks.backend().current();
    let mut events = watch(&b, &path).await.unwrap();
    let before = format!("{path}/before");
    on_a.create(&before, b"", CreateMode::Ephemeral).await.unwrap();
    let got = next(h, &mut events).await;
    assert!(
        matches!(&got, Some(Ok(e)) if *e == event(&before, TreeChange::Created)),
        "{got:?}"
    );
    let during = format!("{path}/during");
    b.faults.disconnect_for(b.faults.session_timeout() / 5).await;
    on_a.create(&during, b"", CreateMode::Ephemeral).await.unwrap();
    // The create may have reached B just before its connection closed: an event before the error is true.
    let mut got = next(h, &mut events).await;
    if matches!(&got, Some(Ok(e)) if *e == event(&during, TreeChange::Created)) {
        got = next(h, &mut events).await;
    }
    assert!(matches!(got, Some(Err(Error::ConnectionLoss))), "{got:?}");
    let end = next(h, &mut events).await;
    assert!(end.is_none(), "nothing after the end: {end:?}");
    // A new watch, once connected again, reports what comes after it.
    let on_b = b.locks.backend().current();
    // Connected as the backend reports it (a watch armed before that would end at the report).
    eventually(h, "B connected again", || async {
        b.locks.backend().session_status().state == SessionState::Connected && on_b.get(&path).await.is_ok()
    })
    .await;
    let mut again = watch(&b, &path).await.unwrap();
    on_a.delete(&during).await.unwrap();
    let got = next(h, &mut again).await;
    assert!(
        matches!(&got, Some(Ok(e)) if *e == event(&during, TreeChange::Deleted)),
        "{got:?}"
    );
    on_a.delete(&before).await.unwrap();
    on_a.delete(&format!("{path}/keep")).await.unwrap();
}

/// A one-shot watch of the watching session on the tree's own node replaces the tree watch (ZOOKEEPER-4466: one watch
/// mode per path and session before ZooKeeper 3.9): nothing below is reported any more, even once the one-shot watch
/// has fired, and the stream does not end. Found by review (helper-109) on ZooKeeper 3.8.0; the in-memory backend does
/// the same, so that a view of a queue that breaks the rule goes deaf in the model checker too.
pub async fn a_one_shot_watch_on_the_tree_root_silences_it(h: &dyn Harness) {
    let Some((path, a, b)) = two_clients(h, "a_one_shot_watch_on_the_tree_root_silences_it").await else {
        return;
    };
    let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
    let root = format!("{path}/r");
    on_a.create(&root, b"", CreateMode::Persistent).await.unwrap();
    let mut events = watch(&b, &root).await.unwrap();
    let (_, one_shot) = on_b.get_and_watch(&root).await.unwrap().expect("exists");
    let (y, z) = (format!("{root}/y"), format!("{root}/z"));
    on_a.create(&y, b"", CreateMode::Ephemeral).await.unwrap();
    on_a.set_data(&root, b"1").await.unwrap();
    let fired = bounded(h, "the one-shot watch on the root", one_shot).await;
    assert!(fired.is_ok(), "{fired:?}");
    on_a.create(&z, b"", CreateMode::Ephemeral).await.unwrap();
    // A reply after both creates: their events, had they been sent, would be in the stream by now.
    eventually(h, "B lists both", || async {
        on_b.children(&root).await.is_ok_and(|c| c.len() == 2)
    })
    .await;
    // ZooKeeper hands the root's own change to every watcher of the root's path, the tree's included; the in-memory
    // backend reports nothing at all. No creation below the root, on either.
    loop {
        match ready_now(&mut events).await {
            None => break,
            Some(Some(Ok(e))) if e.path == root => continue,
            other => panic!("the tree watch reported after a one-shot watch replaced it: {other:?}"),
        }
    }
    // But every deletion below it: ZooKeeper keeps the tree watch in its table of child watches too, where the one-shot
    // watch does not replace it (found by review, helper-114, on ZooKeeper 3.8.0).
    for gone in [&y, &z] {
        on_a.delete(gone).await.unwrap();
        loop {
            match next(h, &mut events).await {
                Some(Ok(e)) if e.path == root => continue,
                Some(Ok(e)) => {
                    assert_eq!(e, event(gone, TreeChange::Deleted));
                    break;
                }
                other => panic!("a silenced tree watch did not report a deletion below it: {other:?}"),
            }
        }
    }
    on_a.delete(&root).await.unwrap();
    on_a.delete(&format!("{path}/keep")).await.unwrap();
}

/// What a silenced tree watch still reports, as ZooKeeper 3.8 does (found by review, helper-115, beside the check
/// above): no change of data below its root (the data table's watch is the one-shot's now), but the deletion below it
/// and its root's own deletion (the table of child watches), with the one-shot watch firing for the root.
pub async fn a_silenced_tree_watch_reports_deletions_only(h: &dyn Harness) {
    let Some((path, a, b)) = two_clients(h, "a_silenced_tree_watch_reports_deletions_only").await else {
        return;
    };
    let (on_a, on_b) = (a.locks.backend().current(), b.locks.backend().current());
    let root = format!("{path}/r");
    let y = format!("{root}/y");
    on_a.create(&root, b"", CreateMode::Persistent).await.unwrap();
    on_a.create(&y, b"", CreateMode::Persistent).await.unwrap();
    let mut events = watch(&b, &root).await.unwrap();
    let (_, one_shot) = on_b.get_and_watch(&root).await.unwrap().expect("exists");
    on_a.set_data(&y, b"1").await.unwrap();
    // A reply after the change: its event, had it been sent, would be in the stream by now.
    let _ = on_b.get(&y).await;
    let got = ready_now(&mut events).await;
    assert!(got.is_none(), "a change of data below a silenced root: {got:?}");
    on_a.delete(&y).await.unwrap();
    assert_eq!(
        next(h, &mut events).await.unwrap().unwrap(),
        event(&y, TreeChange::Deleted)
    );
    on_a.delete(&root).await.unwrap();
    assert_eq!(
        next(h, &mut events).await.unwrap().unwrap(),
        event(&root, TreeChange::Deleted)
    );
    assert!(bounded(h, "the one-shot watch on the root", one_shot).await.is_ok());
    on_a.delete(&format!("{path}/keep")).await.unwrap();
}
