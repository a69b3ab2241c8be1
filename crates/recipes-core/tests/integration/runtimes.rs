//! A runtime dropped with acquires and guards still alive on it, on the in-memory backend (which has no runtime of its
//! own: the library's background work runs on the caller's).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use recipes_mem::MemCluster;

use crate::support::{children_on, one_worker, sessions_on};

/// The in-memory backend has no runtime of its own: the background deletes of abandoned acquires and dropped guards
/// run on the caller's runtime. A runtime dropped with five acquires waiting and a guard held on it still deletes
/// their nodes, sent as the cleanups are dropped unfinished, while their session lives on (on ZooKeeper they run on the
/// connection's own runtime). Before, the six nodes stayed until the session ended, and the next waiter, on another
/// runtime, waited behind them for ever.
#[test]
fn a_runtime_dropped_with_acquires_and_guards_on_it_leaves_no_node() {
    use std::time::Duration;
    let runtime = one_worker;
    let (b, a) = (runtime(), runtime());
    let cluster = MemCluster::new();
    let [holders, shared] = sessions_on(&b, &cluster);
    let children = |path: &'static str, n: usize| children_on(&b, &cluster, path, n);
    let holder = b.block_on(holders.fair("/runtimes/queue").unwrap().acquire()).unwrap();
    for i in 0..5 {
        let lock = shared.fair("/runtimes/queue").unwrap();
        a.spawn(async move { lock.acquire().await });
        assert!(children("/runtimes/queue", i + 2), "waiter {i} queued");
    }
    let lock = shared.fair("/runtimes/held").unwrap();
    a.spawn(async move {
        let _guard = lock.acquire().await;
        std::future::pending::<()>().await;
    });
    assert!(children("/runtimes/held", 1), "the guard held on runtime A");
    drop(a);
    assert!(
        children("/runtimes/queue", 1),
        "the abandoned waiters' nodes are deleted"
    );
    assert!(children("/runtimes/held", 0), "the dropped guard's node is deleted");
    b.block_on(holder.release()).unwrap();
    let next = b.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(10),
            holders.fair("/runtimes/held").unwrap().acquire(),
        )
        .await
    });
    let guard = next.expect("the lock the dropped guard held is free").unwrap();
    // Kept while the nodes are counted (found by review, helper-119: dropped at once, its own node went in the
    // background, racing the count).
    let left: Vec<String> = cluster.ephemerals().into_iter().map(|(p, _)| p).collect();
    assert_eq!(left, [guard.node().to_owned()], "only the new holder's node is left");
    b.block_on(guard.release()).unwrap();
}

/// The same for the nodes whose name is not their attempt's alone: the exclusive recipe's fixed `lock`, and the etcd
/// layout's key named by its session. Their delete is sent at the drop too, bound to the node's creation id, so that
/// it can never delete a node of that name made by a later attempt. Before, a guard of either (or a waiter of the
/// etcd layout), dropped with its runtime, left its node while the session lived, and every other session waited
/// behind it for ever.
#[test]
fn a_runtime_dropped_with_guards_of_fixed_names_on_it_leaves_no_node() {
    use std::time::Duration;

    use recipes_core::backend::ChildOrder;
    use recipes_core::{Layout, Locks, Recipe};

    for (layout, recipe) in [(Layout::Native, Recipe::Exclusive), (Layout::Etcd, Recipe::Fair)] {
        let (b, a) = (one_worker(), one_worker());
        let cluster = MemCluster::new().ordered_by(match layout {
            Layout::Etcd => ChildOrder::Creation,
            _ => ChildOrder::Sequence,
        });
        let [shared, waiting, other] =
            b.block_on(async { std::array::from_fn(|_| Locks::builder(cluster.client()).layout(layout).build()) });
        let lock = shared.lock("/runtimes/fixed", recipe).unwrap();
        a.spawn(async move {
            let _guard = lock.acquire().await;
            std::future::pending::<()>().await;
        });
        assert!(
            children_on(&b, &cluster, "/runtimes/fixed", 1),
            "{layout:?}: the guard held on runtime A"
        );
        if layout == Layout::Etcd {
            // A waiter queues with a key of its own (the exclusive recipe's waits with none).
            let lock = waiting.lock("/runtimes/fixed", recipe).unwrap();
            a.spawn(async move { lock.acquire().await });
            assert!(
                children_on(&b, &cluster, "/runtimes/fixed", 2),
                "the waiter queued on runtime A"
            );
        }
        drop(a);
        assert!(
            children_on(&b, &cluster, "/runtimes/fixed", 0),
            "{layout:?}: the dropped guard's node, and the abandoned waiter's, are deleted"
        );
        let next = b.block_on(async {
            let lock = other.lock("/runtimes/fixed", recipe).unwrap();
            tokio::time::timeout(Duration::from_secs(10), lock.acquire()).await
        });
        let guard = next.expect("the lock the dropped guard held is free").unwrap();
        b.block_on(guard.release()).unwrap();
    }
}

/// The last resort over a cut connection (helper-124 found it refused at the drop; decision 0090): a guard's delete
/// dropped with its runtime while its session's connection is cut is held by the client, as zookeeper-client holds it,
/// and sent when the connection comes back, so the lock passes on while the session lives on (on ZooKeeper the same
/// goes on on the connection's own runtime). The reconnection is the cluster pump's, which the next call into the
/// cluster starts again when the runtime it ran on is gone.
#[test]
fn a_delete_dropped_while_cut_off_is_sent_when_the_connection_is_back() {
    use std::time::Duration;

    use recipes_core::backend::SessionState;
    use recipes_core::{Backend, Locks};

    let (b, a) = (one_worker(), one_worker());
    let cluster = MemCluster::new();
    let (holding, other) = b.block_on(async { (cluster.client(), cluster.client()) });
    let (holder, next) = (Locks::new(holding.clone()), Locks::new(other));
    let guard = a.block_on(holder.fair("/runtimes/cut").unwrap().acquire()).unwrap();
    let session = holding.session_id();
    holding.disconnect_for(Duration::from_millis(200));
    {
        let _in_a = a.enter();
        drop(guard);
    }
    drop(a);
    assert_eq!(
        cluster.children("/runtimes/cut").len(),
        1,
        "held while the connection is cut"
    );
    let free = b.block_on(async {
        let lock = next.fair("/runtimes/cut").unwrap();
        tokio::time::timeout(Duration::from_secs(10), lock.acquire()).await
    });
    let guard = free.expect("the lock passes on once the connection is back").unwrap();
    let status = holding.session_status();
    assert_eq!(
        (status.id, status.state),
        (session, SessionState::Connected),
        "the session lives on"
    );
    b.block_on(guard.release()).unwrap();
    b.block_on(holder.close());
}
