//! A backend's optional powers, found by type: [`Backend::transactions`](super::Backend::transactions) and
//! [`Backend::send_now`](super::Backend::send_now) return them, or `None` when the backend has not got them. A recipe
//! then takes the plain way (one delete after another, no handoff within the process), never a sentinel error.

use async_trait::async_trait;

use super::{ReplyFuture, SessionId};
use crate::error::Result;

/// Transactions: several writes committed as one (ZooKeeper's `multi`, etcd's `txn`).
#[async_trait]
pub trait Transactions: Send + Sync {
    /// Deletes the nodes of `paths`, in that order, in one transaction: all of them, or none when any delete fails
    /// (its error is the transaction's: `NoNode`, `NotEmpty`). The server commits them as one write.
    ///
    /// # Notable errors
    /// As [`Backend::delete`](super::Backend::delete); after `ConnectionLoss` either all were deleted or none.
    async fn delete_all(&self, session: SessionId, paths: &[String]) -> Result<()>;

    /// Overwrites a node's data (any version) and deletes it, in one transaction: both, or neither when either fails
    /// (`NoNode`, `NotEmpty`, or the node's ACL refusing the write). The node's watchers see what a `setData` then a
    /// `delete` would show them: a data watch fires on the change (a one-shot watch is used up by it), and a read after
    /// its event finds the node gone; a deletion watch fires on the deletion. But the server commits both as one write,
    /// and no read ever sees the new data. A native lock node's release marks it `first` so (docs/algorithm.md,
    /// optimisation 3).
    ///
    /// # Notable errors
    /// As [`Backend::delete`](super::Backend::delete); after `ConnectionLoss` either both were applied or neither.
    async fn set_data_and_delete(&self, session: SessionId, path: &str, data: &[u8]) -> Result<()>;
}

/// Writes conditioned on a node's creation: the node that one write made, not any node of its name.
///
/// On the in-memory cluster ordered by creation (standing for etcd); ZooKeeper, and the cluster in its order, have
/// none:
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::backend::{BackendExt, ChildOrder, CreateMode};
/// use recipes_core::Backend;
/// let cluster = recipes_mem::MemCluster::new().ordered_by(ChildOrder::Creation);
/// let client: std::sync::Arc<dyn Backend> = cluster.client();
/// let on = client.current();
/// let first = on.create("/key", b"", CreateMode::Ephemeral).await?.czxid;
/// on.delete("/key").await?;
/// let again = on.create("/key", b"", CreateMode::Ephemeral).await?.czxid;
/// // The key made again is another write's: left alone.
/// assert_eq!(on.delete_if_created("/key", first).await, Some(Ok(false)));
/// assert_eq!(on.delete_if_created("/key", again).await, Some(Ok(true)));
/// let zookeeper_like: std::sync::Arc<dyn Backend> = recipes_mem::MemCluster::new().client();
/// assert!(zookeeper_like.creation_checks().is_none());
/// # Ok::<(), recipes_core::Error>(())
/// # }).unwrap();
/// ```
#[async_trait]
pub trait CreationChecks: Send + Sync {
    /// Deletes the node at `path` if the write `czxid` made it (its [`Stat::czxid`](super::Stat::czxid)), in one
    /// request: `Ok(true)`. A node of that name that another write made is left alone: `Ok(false)`. For an ephemeral
    /// node (a lock's): its children are not checked, as an ephemeral has none.
    ///
    /// # Notable errors
    /// `NoNode` when no node of that name is there; otherwise as [`Backend::delete`](super::Backend::delete).
    async fn delete_if_created(&self, session: SessionId, path: &str, czxid: i64) -> Result<bool>;
}

/// Requests sent before the call returns: the server applies them before every later request of the session.
pub trait SendNow: Send + Sync {
    /// Sends a delete now, before returning, and returns the wait for its reply (as
    /// [`Backend::delete`](super::Backend::delete)'s). `None` when nothing was sent (the session is not the current
    /// live one).
    fn delete_sent(&self, session: SessionId, path: &str) -> Option<ReplyFuture>;

    /// Sends [`Transactions::set_data_and_delete`] now, before returning, and returns the wait for its reply. `None`
    /// when nothing was sent: the session is not the current live one, or the backend has no such transaction (the
    /// default).
    fn set_data_and_delete_sent(&self, session: SessionId, path: &str, data: &[u8]) -> Option<ReplyFuture> {
        let _ = (session, path, data);
        None
    }
}
