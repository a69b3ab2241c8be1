//! The contract's lists of children: in which order they come, and how a sequential name is numbered. The recipes
//! sort a queue themselves; an in-memory backend whose lists came sorted would pass a recipe that forgot to.

use recipes_core::backend::{BackendExt, ChildOrder, CreateMode};
use uuid::Uuid;

use super::kept_containers;
use crate::harness::Harness;

/// How many nodes the order is judged on: two dozen random names fall in the order of their names, or of their
/// creation, once in 24! / 2 lists.
const NODES: usize = 24;

/// A list of children promises no order where children are ordered by sequence (ZooKeeper's are a hash set's): not
/// the names', nor the creation's. Where they are ordered by creation (etcd, and the in-memory cluster that stands for
/// it), a list comes in the order of the creates, as `Backend::child_order` says.
pub async fn a_listing_comes_in_no_order_unless_by_creation(h: &dyn Harness) {
    let c = h.client().await;
    let backend = c.locks.backend();
    let on = backend.current();
    let parent = h.path("listing-order");
    let keep = kept_containers(on, &parent).await;
    let mut made = Vec::with_capacity(NODES);
    for _ in 0..NODES {
        // Named as lock nodes are: a random id ahead of the sequence.
        let prefix = format!("{parent}/L-{}-", Uuid::new_v4().simple());
        let node = on.create(&prefix, b"", CreateMode::EphemeralSequential).await.unwrap();
        made.push(node.path.rsplit('/').next().unwrap().to_owned());
    }
    let listed: Vec<String> = on
        .children(&parent)
        .await
        .unwrap()
        .into_iter()
        .filter(|n| *n != "keep")
        .collect();
    let mut by_name = made.clone();
    by_name.sort();
    let mut same = listed.clone();
    same.sort();
    assert_eq!(same, by_name, "the list names every node made");
    match backend.child_order() {
        ChildOrder::Creation => assert_eq!(listed, made, "a list in the order of the creates"),
        _ => {
            assert_ne!(
                listed, by_name,
                "a list sorted by name, which ZooKeeper does not promise"
            );
            assert_ne!(
                listed, made,
                "a list in the order of the creates, which ZooKeeper does not promise"
            );
        }
    }
    for name in &made {
        on.delete(&format!("{parent}/{name}")).await.unwrap();
    }
    on.delete(&keep).await.unwrap();
}

/// A sequential name's number counts the creates of its parent's children: two sequential creates with a plain
/// create and its delete between them are two apart on ZooKeeper (3.8.0, measured: its sequence moves at each
/// create only, while the parent's `cversion` moves at each delete too), three on the in-memory backend, whose
/// counter moves at each delete too (its numbers skip and wrap sooner, never kinder: recipes-mem's documentation).
/// Where children are ordered by creation, names have no number.
pub async fn a_sequence_counts_the_parents_creates(h: &dyn Harness) {
    let c = h.client().await;
    let backend = c.locks.backend();
    if backend.child_order() == ChildOrder::Creation {
        return;
    }
    let on = backend.current();
    let parent = h.path("sequence-count");
    let keep = kept_containers(on, &parent).await;
    let number = |path: &str| -> i64 { path[path.len() - 10..].parse().expect("a ten-digit suffix") };
    let first = on
        .create(&format!("{parent}/a-"), b"", CreateMode::EphemeralSequential)
        .await
        .unwrap()
        .path;
    let plain = format!("{parent}/plain");
    on.create(&plain, b"", CreateMode::Ephemeral).await.unwrap();
    on.delete(&plain).await.unwrap();
    let second = on
        .create(&format!("{parent}/a-"), b"", CreateMode::EphemeralSequential)
        .await
        .unwrap()
        .path;
    // The in-memory backend, the only one whose parent's next sequence a test can set, counts the delete too.
    let expected = if h.capabilities().set_sequence { 3 } else { 2 };
    assert_eq!(
        number(&second) - number(&first),
        expected,
        "{first} then {second}: the first create and the plain create move the count (its delete too, in memory), \
         nothing else"
    );
    for node in [&first, &second, &keep] {
        on.delete(node).await.unwrap();
    }
}
