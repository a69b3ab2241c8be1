//! The contract's writes conditioned on a node's creation (`Backend::creation_checks`): offered where the backend
//! orders children by creation (etcd, and the in-memory cluster that stands for it), and nowhere else (ZooKeeper has
//! no such condition, and the in-memory cluster that stands for it must not be kinder).

use recipes_core::backend::{BackendExt, ChildOrder, CreateMode};
use recipes_core::Error;

use super::kept_containers;
use crate::harness::Harness;

/// A delete conditioned on the write that made the node deletes that node, and leaves alone a node of the same name
/// made again by another write (a release of a shared name: docs/algorithm.md, "releasing a shared name").
pub async fn a_delete_if_created_spares_a_name_made_again(h: &dyn Harness) {
    let c = h.client().await;
    let backend = c.locks.backend();
    let offered = backend.creation_checks().is_some();
    assert_eq!(
        offered,
        backend.child_order() == ChildOrder::Creation,
        "creation checks are etcd's: offered where children are ordered by creation, and only there"
    );
    let on = backend.current();
    let parent = h.path("delete-if-created");
    let node = format!("{parent}/n");
    if !offered {
        assert!(on.delete_if_created(&node, 1).await.is_none());
        return;
    }
    let keep = kept_containers(on, &parent).await;
    assert!(
        matches!(on.delete_if_created(&node, 1).await, Some(Err(Error::NoNode(_)))),
        "no node of that name"
    );
    let first = on.create(&node, b"first", CreateMode::Ephemeral).await.unwrap().czxid;
    on.delete(&node).await.unwrap();
    let again = on.create(&node, b"again", CreateMode::Ephemeral).await.unwrap().czxid;
    assert_ne!(first, again);
    let them = h.client().await;
    let (_, deleted) = them
        .locks
        .backend()
        .current()
        .watch_deletion(&node)
        .await
        .unwrap()
        .expect("the node is there");
    assert!(
        matches!(on.delete_if_created(&node, first).await, Some(Ok(false))),
        "the node made again is another's"
    );
    let (data, stat) = on.get(&node).await.unwrap().expect("left alone");
    assert_eq!((data.as_slice(), stat.czxid), (&b"again"[..], again));
    assert!(
        matches!(on.delete_if_created(&node, again).await, Some(Ok(true))),
        "the node that write made is deleted"
    );
    assert!(on.get(&node).await.unwrap().is_none(), "deleted");
    tokio::time::timeout(h.patience(), deleted)
        .await
        .expect("the deletion watch fires")
        .unwrap();
    assert!(
        matches!(on.delete_if_created(&node, again).await, Some(Err(Error::NoNode(_)))),
        "deleted once"
    );
    on.delete(&keep).await.unwrap();
}
