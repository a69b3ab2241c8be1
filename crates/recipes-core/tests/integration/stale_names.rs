//! Names made again, and names made late (found by review, helper-44): a waiter that takes a node made after its own
//! for its blocker gone must do so only where names are made again (the etcd layout's), and must then check its own
//! key. Both cases made a waiter list again in a loop; each test counts the requests of a wait that should only
//! watch.

use std::time::Duration;

use recipes_core::backend::{BackendExt, ChildOrder, CreateMode};
use recipes_core::{Layout, Locks};
use recipes_mem::MemCluster;

use crate::support::wait_children;

/// Requests the cluster applies in `window` while nothing changes on the path: a waiter that watches makes ~0.
async fn requests_in(cluster: &MemCluster, window: Duration) -> u64 {
    let before = cluster.requests();
    tokio::time::sleep(window).await;
    cluster.requests() - before
}

/// ZooKeeper's order, Curator layout: a Curator 5.5 process holding the write lock downgrades (a plain ephemeral
/// `__READ__` node named with its write node's sequence, made *after* a Rust writer queued), then lets the write
/// side go. The Rust writer's blocker is now the downgraded reader, made after the writer's own node: it must watch
/// it, not take it for gone and list again in a loop for as long as the reader holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgraded_reader_made_after_a_waiting_writer_is_watched() {
    let cluster = MemCluster::new();
    let path = "/stale-names/downgrade";
    let curator_side = cluster.client();
    let c = Locks::builder(curator_side.clone()).layout(Layout::Curator).build();
    let y = Locks::builder(cluster.client()).layout(Layout::Curator).build();
    let w = c.read_write(path).unwrap().write().acquire().await.unwrap();
    let seq = w.node().rsplit("__WRIT__").next().unwrap().to_owned();
    let writer = y.read_write(path).unwrap().write();
    let waiting = tokio::spawn(async move { writer.acquire().await.unwrap() });
    wait_children(&cluster, path, 2).await;
    let idle = requests_in(&cluster, Duration::from_millis(300)).await;
    // The downgrade, as Curator 5.5 makes it (see tests/tests/suite/interop.rs), made after the Rust writer's node.
    let read_node = format!("{path}/_c_8c2b6b0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e-__READ__{seq}");
    curator_side
        .current()
        .create(&read_node, b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    w.release().await.unwrap();
    wait_children(&cluster, path, 2).await;
    let spinning = requests_in(&cluster, Duration::from_millis(300)).await;
    eprintln!("requests in 300 ms: waiting on the writer {idle}, on the downgraded reader {spinning}");
    assert!(
        !waiting.is_finished(),
        "the Rust writer must wait for the downgraded reader"
    );
    curator_side.current().delete(&read_node).await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
    assert!(
        spinning < 50,
        "the waiter spun: {spinning} requests in 300 ms (idle: {idle})"
    );
}

/// etcd's order, etcd layout: session S's task A waits behind holder H, session G queues behind A, S's task B waits
/// for A's key (same name). An operator deletes A's waiting key; B makes it again (after G). A reads its name at B's
/// place and would wait on G, made after A's *old* key: it must find its key not its own and queue again, not list in
/// a loop for as long as H and G hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_waiting_key_made_again_sends_its_task_back_to_the_queue() {
    let cluster = MemCluster::new().ordered_by(ChildOrder::Creation);
    let path = "/stale-names/etcd-layout";
    let etcd = |c| Locks::builder(c).layout(Layout::Etcd).build();
    let (h, g, sc) = (etcd(cluster.client()), etcd(cluster.client()), cluster.client());
    // S's two tasks on two `Locks` of its one backend (each with turns of its own: one `Locks`'s tasks take turns,
    // and B would wait for A's turn instead of for its key).
    let (s, s2) = (etcd(sc.clone()), etcd(sc));
    let held = h.fair(path).unwrap().acquire().await.unwrap();
    let (first, second) = (s.fair(path).unwrap(), s2.fair(path).unwrap());
    let a = tokio::spawn(async move { first.acquire().await.map(|g| g.node().to_owned()) });
    wait_children(&cluster, path, 2).await;
    let gl = g.fair(path).unwrap();
    let gt = tokio::spawn(async move {
        let guard = gl.acquire().await.unwrap();
        tokio::time::sleep(Duration::from_millis(2000)).await;
        guard.release().await.unwrap();
    });
    wait_children(&cluster, path, 3).await;
    let b = tokio::spawn(async move {
        let guard = second.acquire().await.unwrap();
        guard.release().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let a_key = cluster.children(path)[1].clone();
    let idle = requests_in(&cluster, Duration::from_millis(300)).await;
    cluster
        .client()
        .current()
        .delete(&format!("{path}/{a_key}"))
        .await
        .unwrap();
    wait_children(&cluster, path, 3).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after_delete = requests_in(&cluster, Duration::from_millis(300)).await;
    // H lets go: G holds (for 2 s); A lists again and finds its name at B's place, behind G.
    held.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let spinning = requests_in(&cluster, Duration::from_millis(300)).await;
    eprintln!("requests in 300 ms: before the delete {idle}, after it {after_delete}, while G holds {spinning}");
    gt.await.unwrap();
    b.await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), a).await;
    assert!(
        spinning < 50,
        "the waiter spun: {spinning} requests in 300 ms (idle: {idle})"
    );
}
