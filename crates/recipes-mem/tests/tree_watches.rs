//! A tree watch (ZooKeeper's persistent recursive watch), stepped in the controlled mode: its events travel in the
//! session's one stream of replies and events, one delivery each, so that the model checker can order them against
//! everything else; the ones on their way when the connection breaks are lost with it (ZOOKEEPER-4698), and the watch
//! ends; nothing of it, or of a watch request applied after the break, is left to notify. The conformance suite
//! checks the same on the real server (`a_tree_watch_*`).

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::task::Poll;
use std::time::Duration;

use futures::StreamExt;
use recipes_core::backend::{BackendExt, CreateMode, TreeChange, TreeEvent, TreeWatch};
use recipes_core::{Backend, Error};
use recipes_mem::{MemClient, MemCluster, NetEvent};

/// What the watch has yielded, without waiting.
async fn now(w: &mut TreeWatch) -> Poll<Option<recipes_core::Result<TreeEvent>>> {
    std::future::poll_fn(|cx| Poll::Ready(w.poll_next_unpin(cx))).await
}

async fn tree(c: &MemClient, path: &str) -> TreeWatch {
    c.tree_watches()
        .expect("ZooKeeper's order")
        .watch_tree(c.session_id(), path)
        .await
        .unwrap()
}

fn created(path: &str) -> TreeEvent {
    TreeEvent {
        path: path.to_owned(),
        change: TreeChange::Created,
    }
}

#[tokio::test(start_paused = true)]
async fn a_tree_event_comes_in_order_with_the_replies() {
    let cluster = MemCluster::new();
    let (a, b) = (cluster.client(), cluster.client());
    a.current().create("/q", b"", CreateMode::Persistent).await.unwrap();
    let mut events = tree(&b, "/q").await;
    let ctl = cluster.controlled();
    let (sa, sb) = (a.session_id(), b.session_id());
    let a2 = a.clone();
    let create = tokio::spawn(async move {
        a2.current()
            .create("/q/n", b"", CreateMode::Ephemeral)
            .await
            .map(|_| ())
    });
    tokio::task::yield_now().await;
    // A read of B's sent before the create is applied; the create applied; then B's read: its reply shows the node.
    let b2 = b.clone();
    let list = tokio::spawn(async move { b2.current().children("/q").await });
    tokio::task::yield_now().await;
    let access = ctl.access(NetEvent::Apply(sa));
    assert!(
        access.notifies.contains(&sb),
        "a create under B's tree notifies B: {access:?}"
    );
    assert!(ctl.fire(NetEvent::Apply(sa)));
    assert!(ctl.fire(NetEvent::Apply(sb)));
    // The event first, then the reply: one delivery each.
    assert!(ctl.fire(NetEvent::Deliver(sb)));
    assert!(matches!(now(&mut events).await, Poll::Ready(Some(Ok(e))) if e == created("/q/n")));
    assert!(!list.is_finished());
    assert!(ctl.fire(NetEvent::Deliver(sb)));
    assert_eq!(list.await.unwrap().unwrap(), ["n"]);
    assert!(ctl.fire(NetEvent::Deliver(sa)));
    create.await.unwrap().unwrap();
    assert!(now(&mut events).await.is_pending());
}

#[tokio::test(start_paused = true)]
async fn a_cut_loses_the_events_on_their_way_and_ends_the_watch() {
    let cluster = MemCluster::new();
    let (a, b) = (cluster.client(), cluster.client());
    a.current().create("/q", b"", CreateMode::Persistent).await.unwrap();
    let mut events = tree(&b, "/q").await;
    let ctl = cluster.controlled();
    let sb = b.session_id();
    ctl.operator_set_data("/q", b"1").unwrap();
    // On its way: the cut loses it, and the watch ends with the connection.
    assert_eq!(ctl.events(), [NetEvent::Deliver(sb)]);
    assert_eq!(cluster.watches(), 1);
    // A second watch, sent before the cut and applied after it (an orphan): it sets nothing.
    let b2 = b.clone();
    let orphan = tokio::spawn(async move {
        b2.tree_watches()
            .expect("ZooKeeper's order")
            .watch_tree(sb, "/q")
            .await
            .map(|_| ())
    });
    tokio::task::yield_now().await;
    b.disconnect_for(Duration::from_millis(10));
    assert!(matches!(orphan.await.unwrap(), Err(Error::ConnectionLoss)));
    assert_eq!(ctl.events(), [NetEvent::ApplyOrphan(sb), NetEvent::DropOrphans(sb)]);
    assert_eq!(
        cluster.watches(),
        0,
        "the server drops a connection's tree watches with it"
    );
    assert!(ctl.fire(NetEvent::ApplyOrphan(sb)));
    assert_eq!(
        cluster.watches(),
        0,
        "a watch request applied after the break sets none"
    );
    assert!(matches!(
        now(&mut events).await,
        Poll::Ready(Some(Err(Error::ConnectionLoss)))
    ));
    assert!(matches!(now(&mut events).await, Poll::Ready(None)));
    tokio::time::advance(Duration::from_millis(20)).await;
    let reconnect = ctl.events();
    assert!(matches!(reconnect.as_slice(), [NetEvent::Timer(_)]), "{reconnect:?}");
    assert!(ctl.fire(reconnect[0]));
    // Nothing of the old watches is left: a change notifies no one, and an orphan applied after the reconnection sets
    // none either.
    let b3 = b.clone();
    let orphan = tokio::spawn(async move {
        b3.tree_watches()
            .expect("ZooKeeper's order")
            .watch_tree(sb, "/q")
            .await
            .map(|_| ())
    });
    tokio::task::yield_now().await;
    b.disconnect_for(Duration::from_millis(10));
    assert!(matches!(orphan.await.unwrap(), Err(Error::ConnectionLoss)));
    tokio::time::advance(Duration::from_millis(20)).await;
    let reconnect = ctl.events();
    assert!(
        matches!(
            reconnect.as_slice(),
            [NetEvent::ApplyOrphan(_), NetEvent::DropOrphans(_), NetEvent::Timer(_)]
        ),
        "{reconnect:?}"
    );
    assert!(ctl.fire(reconnect[2]) && ctl.fire(NetEvent::ApplyOrphan(sb)));
    assert_eq!(cluster.watches(), 0);
    ctl.operator_set_data("/q", b"2").unwrap();
    assert!(ctl.events().is_empty(), "{:?}", ctl.events());
}

/// A one-shot watch of the session on the tree's root replaces the tree watch, as on ZooKeeper 3.8 (ZOOKEEPER-4466):
/// it reports no creation and no change of data any more, only deletions, and does not end. An existence check
/// replaces it even where the root is missing (ZooKeeper sets that watch too); a read of a missing root sets none.
#[tokio::test(start_paused = true)]
async fn a_one_shot_watch_on_the_root_silences_the_tree() {
    let cluster = MemCluster::new();
    let (a, b) = (cluster.client(), cluster.client());
    let on_a = a.current();
    on_a.create("/q", b"", CreateMode::Persistent).await.unwrap();
    let on_b = b.current();
    let mut below = tree(&b, "/q").await;
    let mut missing = tree(&b, "/gone").await;
    let mut read = tree(&b, "/gone2").await;
    assert!(on_b.get_and_watch("/gone2").await.unwrap().is_none());
    assert!(on_b.watch_deletion("/gone").await.unwrap().is_none());
    on_a.create("/q/1", b"", CreateMode::Ephemeral).await.unwrap();
    on_a.create("/gone", b"", CreateMode::Ephemeral).await.unwrap();
    on_a.create("/gone2", b"", CreateMode::Ephemeral).await.unwrap();
    assert!(matches!(now(&mut below).await, Poll::Ready(Some(Ok(e))) if e == created("/q/1")));
    assert!(now(&mut missing).await.is_pending(), "replaced by the existence check");
    assert!(matches!(now(&mut read).await, Poll::Ready(Some(Ok(e))) if e == created("/gone2")));
    let (_, one_shot) = on_b.get_and_watch("/q").await.unwrap().expect("there");
    on_a.create("/q/2", b"", CreateMode::Ephemeral).await.unwrap();
    on_a.set_data("/q", b"1").await.unwrap();
    assert!(one_shot.await.is_ok());
    assert!(now(&mut below).await.is_pending(), "silent, and not ended");
    assert_eq!(cluster.watches(), 3, "three tree watches, two of them silent");
    on_a.delete("/q/2").await.unwrap();
    let deleted = TreeEvent {
        path: "/q/2".into(),
        change: TreeChange::Deleted,
    };
    assert!(
        matches!(now(&mut below).await, Poll::Ready(Some(Ok(e))) if e == deleted),
        "a deletion still reported"
    );
    assert!(now(&mut below).await.is_pending());
}
