//! A backend's optional powers, found by type: [`Backend::transactions`](super::Backend::transactions) and
//! [`Backend::send_now`](super::Backend::send_now) return them, or `None` when the backend has not got them. A recipe
//! then takes the plain way (one delete after another, no handoff within the process), never a sentinel error.

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use tokio::sync::watch;

use super::{ReplyFuture, SessionId, SessionState, SessionStatus, TreeEvent, TreeWatch};
use crate::error::{Error, Result};

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
    /// live one); a malformed path is an answer, `Refused`, as the request's would be.
    fn delete_sent(&self, session: SessionId, path: &str) -> Option<ReplyFuture>;

    /// Sends [`Transactions::set_data_and_delete`] now, before returning, and returns the wait for its reply. `None`
    /// when nothing was sent: the session is not the current live one, or the backend has no such transaction (the
    /// default).
    fn set_data_and_delete_sent(&self, session: SessionId, path: &str, data: &[u8]) -> Option<ReplyFuture> {
        let _ = (session, path, data);
        None
    }

    /// Sends [`CreationChecks::delete_if_created`] now, before returning, and returns the wait for its reply: `Ok(())`
    /// whether it deleted the node or left alone a node of that name that another write made. `None` when nothing was
    /// sent: the session is not the current live one, or the backend cannot send it (the default).
    ///
    /// The library sends it only as a last resort, for a background delete of a fixed name dropped unfinished with the
    /// runtime it ran on ([`Backend::runtime`](super::Backend::runtime) is `None`). So the in-memory backend sends it
    /// in ZooKeeper's order too, where it offers no [`CreationChecks`]: it stands for the delete the ZooKeeper backend
    /// would go on to make on its session's runtime (a read of the node's creation id, then the delete). A recipe's
    /// ordinary paths never use it.
    fn delete_if_created_sent(&self, session: SessionId, path: &str, czxid: i64) -> Option<ReplyFuture> {
        let _ = (session, path, czxid);
        None
    }
}

/// Persistent watches on a tree of nodes (ZooKeeper 3.6's persistent recursive watch): one watch that reports every
/// change of a node and of every node below it, where one-shot watches cost a watch per node.
///
/// On ZooKeeper, and on the in-memory cluster in ZooKeeper's order; etcd's backend has none yet (its watch on a key
/// prefix would be one). The view of a queue per session rests on it (decisions 0084 and 0085).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use futures::StreamExt;
/// use recipes_core::backend::{BackendExt, CreateMode, TreeChange};
/// use recipes_core::Backend;
/// let client: std::sync::Arc<dyn Backend> = recipes_mem::MemCluster::new().client();
/// let on = client.current();
/// on.create("/queue", b"", CreateMode::Persistent).await?;
/// let mut events = client.tree_watches().expect("ZooKeeper's order").watch_tree(on.id(), "/queue").await?;
/// on.create("/queue/a", b"", CreateMode::Ephemeral).await?;
/// on.delete("/queue/a").await?;
/// let created = events.next().await.expect("an event")?;
/// assert_eq!((created.path.as_str(), created.change), ("/queue/a", TreeChange::Created));
/// assert_eq!(events.next().await.expect("an event")?.change, TreeChange::Deleted);
/// # Ok::<(), recipes_core::Error>(())
/// # }).unwrap();
/// ```
#[async_trait]
pub trait TreeWatches: Send + Sync {
    /// Sets a persistent watch of `session` on `path` and every node below it, whether `path` exists or not, in one
    /// request applied in order with the session's others.
    ///
    /// # Contract
    /// - Every change the server applies after the watch is set, to `path` or a node below it (a create, a change of
    ///   data, a delete; not a change of a child list as such), is reported once, in the order the server applied
    ///   them, by whichever session made it.
    /// - A session's events and replies come in one order: once a reply of `session` shows a change (a listing, a
    ///   read, a failed create), the change's event is in the stream already, ready without a wait.
    /// - At the first wake of the session's receiver after the request was sent
    ///   ([`Backend::session`](super::Backend::session): a disconnection, a reconnection, the expiry, the close, or the
    ///   lease moving back, which wakes it with the state unchanged), the stream yields one error and ends:
    ///   [`Error::ConnectionLoss`](crate::Error::ConnectionLoss),
    ///   [`Error::SessionExpired`](crate::Error::SessionExpired) or [`Error::Closed`](crate::Error::Closed).
    ///   ZooKeeper loses a persistent watch's events across a reconnection (ZOOKEEPER-4698), and a backend may learn of
    ///   a reconnection only after it: what the stream said is no longer the whole story, and whatever was built on it
    ///   must be built again (a new watch, a new listing). Events yielded before the error are true.
    /// - Dropping the stream removes the watch (on ZooKeeper before 3.9, best effort: ZOOKEEPER-4472; in memory, at
    ///   the next change it would report).
    /// - A one-shot watch of the same session on a node below `path` fires as it would alone. **Never set one on `path`
    ///   itself**: ZooKeeper before 3.9 keeps one watch mode per path and session (ZOOKEEPER-4466), and on ZooKeeper
    ///   3.8 the one-shot watch replaces the tree watch in the server's table of data watches: it then reports no
    ///   creation and no change of data, only deletions (from the table of child watches, where it stays), and does
    ///   not end. The in-memory backend does the same (found by review, helper-109 and helper-114). The locks' views
    ///   of a queue (decision 0085) are such watches on lock paths: an application's one-shot watch on a lock path,
    ///   on the session of its `Locks`, would silence the view of that session's waiters there.
    ///
    /// # Notable errors
    /// `ConnectionLoss`, `SessionExpired`, `Closed`.
    async fn watch_tree(&self, session: SessionId, path: &str) -> Result<TreeWatch>;
}

/// Watches that see a node's deletion and nothing else: a change of its data leaves them armed (ZooKeeper's watch on
/// a node's list of children, which a node without children fires only at its deletion).
///
/// A waiter in line whose blocker marks itself `first` in its release (a change of data and the deletion in one
/// transaction, decision 0064) sees the change on its data watch, which the change uses up; with this watch set
/// beside it, the deletion comes as an event too, and no read of the blocker follows (decision 0092).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// use recipes_core::backend::{CreateMode, NodeEvent};
/// use recipes_core::Backend;
/// use futures::FutureExt;
///
/// let client = recipes_mem::MemCluster::new().client();
/// let s = client.session_id();
/// client.create(s, "/job", b"", CreateMode::Ephemeral).await?;
/// let gone = client.gone_watches().expect("the in-memory backend has them");
/// let mut watch = gone.watch_gone(s, "/job").await?.expect("the node is there");
/// client.set_data(s, "/job", b"changed").await?;
/// assert!((&mut watch).now_or_never().is_none(), "a change of data leaves it armed");
/// client.delete(s, "/job").await?;
/// assert_eq!(watch.await?, NodeEvent::Deleted);
/// assert!(gone.watch_gone(s, "/job").await?.is_none(), "no node, no watch");
/// # Ok::<(), recipes_core::Error>(())
/// # }).unwrap();
/// ```
#[async_trait]
pub trait GoneWatches: Send + Sync {
    /// Sets a one-shot watch of `session` on the node at `path` that fires at its deletion, in one request applied in
    /// order with the session's others; `None` when there is no node there.
    ///
    /// # Contract
    /// - It yields [`NodeEvent::Deleted`](super::NodeEvent::Deleted) once the node is deleted. A change of the node's
    ///   data does not fire it. Anything else that would (on ZooKeeper a child made or deleted under the node, which a
    ///   lock node, ephemeral, cannot have; a node of the name made again while the client was disconnected) yields
    ///   [`NodeEvent::DataChanged`](super::NodeEvent::DataChanged): not a deletion, look again.
    /// - A session's events and replies come in one order, as [`Backend::get_and_watch`](super::Backend::get_and_watch)'s
    ///   watches: the deletion's event is ready once any later event or reply of the session is.
    /// - A lost connection leaves it set, as a data watch: the client sets it again at the reconnection, and it then
    ///   reports what happened meanwhile (the node gone: `Deleted`; a node of the name made again: `DataChanged`;
    ///   only a change of data: nothing, it stays set). The session's end yields its error.
    /// - Never set one on the root of a [tree watch](TreeWatches::watch_tree) of the same session (ZOOKEEPER-4466: it
    ///   would take the tree watch's place in the server's table of child watches).
    ///
    /// # Notable errors
    /// `ConnectionLoss`, `SessionExpired`, `Closed`.
    async fn watch_gone(&self, session: SessionId, path: &str) -> Result<Option<super::NodeWatch>>;
}

/// A backend's tree watch: `events` until the first change of the session's state that `armed` (subscribed and
/// marked seen before the watch's request was sent) reports, then that change's error, then the end (see
/// [`TreeWatches::watch_tree`]). An end of `events` itself is reported as [`Error::Closed`](crate::Error::Closed).
pub fn tree_watch_until_moved<S>(events: S, armed: watch::Receiver<SessionStatus>) -> TreeWatch
where
    S: Stream<Item = Result<TreeEvent>> + Send + Unpin + 'static,
{
    let id = armed.borrow().id;
    Box::pin(futures::stream::unfold(
        Some((events, armed)),
        move |state| async move {
            let (mut events, mut armed) = state?;
            // A change of the session's state comes first: whatever the watch says after it may be missing events.
            let moved = |s: SessionStatus| match s.state {
                SessionState::Closed => Error::Closed,
                SessionState::Expired => Error::SessionExpired,
                _ if s.id != id => Error::SessionExpired,
                _ => Error::ConnectionLoss,
            };
            match armed.has_changed() {
                Ok(false) => {}
                Ok(true) => {
                    let now = *armed.borrow();
                    return Some((Err(moved(now)), None));
                }
                // The backend is gone.
                Err(_) => return Some((Err(Error::Closed), None)),
            }
            tokio::select! {
                biased;
                changed = armed.changed() => {
                    let now = *armed.borrow();
                    Some((Err(if changed.is_ok() { moved(now) } else { Error::Closed }), None))
                }
                event = events.next() => match event {
                    Some(Ok(e)) => Some((Ok(e), Some((events, armed)))),
                    Some(Err(e)) => Some((Err(e), None)),
                    None => Some((Err(Error::Closed), None)),
                },
            }
        },
    ))
}
