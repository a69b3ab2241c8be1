//! The values the backend layer speaks in: sessions and their states, create modes, stats, leases, watches.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::error::Result;

/// A session id, as ZooKeeper numbers them. `0` never names a live session.
pub type SessionId = i64;

/// How a node is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CreateMode {
    /// Stays until deleted.
    Persistent,
    /// Persistent, but the server deletes it some time after its last child is gone (ZooKeeper 3.5+).
    Container,
    /// Deleted when the creating session ends.
    Ephemeral,
    /// Ephemeral, with a 10-digit sequence number appended to the name by the server.
    EphemeralSequential,
}

/// How a backend orders a lock path's children, and so what a [`CreateMode::EphemeralSequential`] create makes.
///
/// The recipes' queues are ordered by creation. ZooKeeper writes that order into the name (a sequence appended by
/// the server); etcd cannot (its order, the create revision, is known only in the reply), so it lists the children
/// in creation order instead (decisions 0065 and 0068).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ChildOrder {
    /// ZooKeeper's: a sequential create appends `%010d` of a signed 32-bit counter kept per parent, and the queue is
    /// ordered by that sequence; [`Backend::children`](crate::Backend::children) lists in no particular order.
    #[default]
    Sequence,
    /// etcd's: a sequential create makes the name as given (no suffix; the name must be unique, as the recipes' names
    /// are: they carry the attempt's id), and [`Backend::children`](crate::Backend::children) and
    /// [`Backend::create_and_list`](crate::Backend::create_and_list) list the children in the order of their creation
    /// (ascending czxid: etcd's create revision, global and never wrapping). A deleted name made again is a new node,
    /// at the end of that order.
    Creation,
}

/// The reply to a successful create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The full path of the node made: the path asked for, with the sequence suffix appended for sequential nodes
    /// (in the client's namespace: a chroot, say, is not in it). The recipes watch, mark and delete the node by it.
    pub path: String,
    /// The id of the transaction that created it (ZooKeeper's czxid): strictly increasing across creates.
    pub czxid: i64,
}

/// What the recipes read of a node's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stat {
    /// The id of the transaction that created the node.
    pub czxid: i64,
    /// The owning session of an ephemeral node, `0` for other nodes.
    pub ephemeral_owner: SessionId,
    /// When the node was created, in milliseconds since the Unix epoch, on the server's clock.
    pub ctime: i64,
}

impl Stat {
    /// A stat with these fields.
    pub fn new(czxid: i64, ephemeral_owner: SessionId, ctime: i64) -> Self {
        Stat {
            czxid,
            ephemeral_owner,
            ctime,
        }
    }
}

/// The state of a backend's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionState {
    /// Connected: requests are answered.
    Connected,
    /// Disconnected but the session may still be alive: locks are held, but not known to be valid.
    Suspended,
    /// The session expired: its ephemeral nodes are gone. A backend opens a new session for later calls.
    Expired,
    /// The application closed the backend.
    Closed,
}

/// A session id together with its state, as published by [`Backend::session`](crate::Backend::session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionStatus {
    /// The session the state belongs to.
    pub id: SessionId,
    /// Its state.
    pub state: SessionState,
}

/// The outcome of [`Backend::create_and_list`](crate::Backend::create_and_list): the create's, and that of the list
/// sent behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateAndList {
    /// The create's outcome.
    pub created: Result<Created>,
    /// The children of the new node's parent, listed after the create (meaningful only when the create succeeded).
    pub listed: Result<Vec<String>>,
}

/// The parent of a node's path: `/a/b` for `/a/b/c`, `/` for `/a`.
///
/// ```
/// assert_eq!(recipes_core::backend::parent_path("/locks/job/lock"), "/locks/job");
/// assert_eq!(recipes_core::backend::parent_path("/locks"), "/");
/// ```
pub fn parent_path(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((parent, _)) => parent,
    }
}

/// What a backend knows of its session's liveness, from which a lock's lease is computed.
///
/// The backend promises that the server does not expire the session before `answered_send + session_timeout`
/// (measured on the client's clock; the recipes take a margin off for clock rates). How it knows is its own: the
/// in-memory server expires a session `session_timeout` after the send time of the last request it answered;
/// ZooKeeper's leader alone expires sessions, so the ZooKeeper backend moves `answered_send` only on evidence that
/// passed through the leader, and assumes the shortest timeout any server grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The session this lease is about.
    pub session: SessionId,
    /// When the client sent the last request (or heartbeat) of this session that the server answered.
    pub answered_send: Option<tokio::time::Instant>,
    /// The session timeout the server granted.
    pub session_timeout: Duration,
}

/// What a one-shot node watch saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// The node was deleted.
    Deleted,
    /// The node's data changed.
    DataChanged,
}

/// A one-shot watch on a node's data and existence (see [`Backend::get_and_watch`](crate::Backend::get_and_watch)).
pub type NodeWatch = Pin<Box<dyn Future<Output = Result<NodeEvent>> + Send + 'static>>;

/// A one-shot deletion watch: resolves `Ok(())` when the node is deleted, or an error when the session that set
/// the watch ends ([`Error::SessionExpired`](crate::Error::SessionExpired), [`Error::Closed`](crate::Error::Closed)).
pub type DeletionWatch = Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>;

/// A change a [`TreeWatch`] reports: ZooKeeper's events of a persistent recursive watch (its `NodeCreated`,
/// `NodeDataChanged` and `NodeDeleted`; no child-list events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TreeChange {
    /// The node was made.
    Created,
    /// The node's data changed.
    DataChanged,
    /// The node was deleted.
    Deleted,
}

/// One event of a [`TreeWatch`]: what changed, and the full path of the node it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEvent {
    /// The node's path (the watched path itself, or a path below it).
    pub path: String,
    /// What happened to it.
    pub change: TreeChange,
}

/// A persistent watch on a node and every node below it (see
/// [`TreeWatches::watch_tree`](crate::backend::TreeWatches::watch_tree)): its events, in order, until it ends with an
/// error.
pub type TreeWatch = Pin<Box<dyn futures::Stream<Item = Result<TreeEvent>> + Send + 'static>>;

/// The reply to a request already sent (see [`SendNow::delete_sent`](crate::backend::SendNow::delete_sent)).
pub type ReplyFuture = Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>;

/// Where a production backend runs a session's own tasks: its connection, its heartbeats and its monitor (see
/// [`Backend::runtime`](crate::Backend::runtime)).
///
/// Every event and every reply of a session is read by its connection's task and handed to the task that waits for
/// it. On a runtime of the backend's own that is a wake-up of a thread of another runtime each way; on the caller's,
/// a wake-up within one runtime: contended handoffs on ZooKeeper go 3 – 13% faster, etcd's up to a third
/// (docs/performance.md, "The session on the caller's runtime"; decisions 0094 and 0095). Each backend's options
/// say which is its default.
///
/// ```
/// use recipes_core::backend::SessionRuntime;
///
/// // On a multi-thread runtime, `Caller` runs the session there ...
/// let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
/// assert!(rt.block_on(async { SessionRuntime::Caller.callers().is_some() }));
/// assert!(rt.block_on(async { SessionRuntime::Own.callers().is_none() }));
/// // ... and never on a current-thread runtime, which nobody may be driving between two calls.
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// assert!(rt.block_on(async { SessionRuntime::Caller.callers().is_none() }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionRuntime {
    /// The backend's own runtime (threads named after the backend, shared by every session of the process), whatever
    /// calls it: the session works from any runtime or none (the blocking API), a runtime that is not being driven
    /// included, and outlives the runtime it was connected from. The etcd backend's default.
    Own,
    /// The runtime `connect` is called on, when it is a multi-thread tokio runtime (a service's `#[tokio::main]`;
    /// it needs its time and IO drivers, `enable_all()`); on a current-thread runtime, and for a blocking connect,
    /// the backend's own. The ZooKeeper backend's default (decision 0095). Close the backend before the runtime is
    /// dropped: the session cannot outlive it.
    ///
    /// A runtime dropped first ends the session with it, as an expiry would: its guards are no longer valid, its
    /// waits end, and the server frees its nodes at its timeout. Then the backend goes on: on ZooKeeper it opens a new
    /// session on its own runtime (a sync program that connected through a runtime made only for the connect keeps a
    /// working backend), on etcd it is closed. On ZooKeeper a wait of the ended session on another runtime ends
    /// through a panic of zookeeper-client's watcher, caught by the backend; under `panic = "abort"` it ends the
    /// process.
    Caller,
}

/// Runs `task`, and `unfinished` if the task is dropped before it ends: what a backend's session task does when the
/// runtime it runs on is shut down under it ([`SessionRuntime::Caller`]), or when it panics.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use recipes_core::backend::on_drop_unfinished;
///
/// static CLOSED: AtomicBool = AtomicBool::new(false);
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// // Finished: `unfinished` does not run.
/// rt.block_on(on_drop_unfinished(async {}, || CLOSED.store(true, Ordering::SeqCst)));
/// assert!(!CLOSED.load(Ordering::SeqCst));
/// // Dropped with its runtime before it ends (here before its first poll): it runs.
/// rt.spawn(on_drop_unfinished(std::future::pending::<()>(), || CLOSED.store(true, Ordering::SeqCst)));
/// drop(rt);
/// assert!(CLOSED.load(Ordering::SeqCst));
/// ```
pub fn on_drop_unfinished<F: Future>(task: F, unfinished: impl FnOnce()) -> impl Future<Output = F::Output> {
    /// Runs its closure when dropped while it still holds it.
    struct Unfinished<G: FnOnce()>(Option<G>);
    impl<G: FnOnce()> Drop for Unfinished<G> {
        fn drop(&mut self) {
            if let Some(g) = self.0.take() {
                g();
            }
        }
    }
    // Made here, not in the block: a task dropped before its first poll (its runtime shut down first) drops it too.
    let guard = Unfinished(Some(unfinished));
    async move {
        let mut guard = guard;
        let out = task.await;
        guard.0 = None;
        out
    }
}

impl SessionRuntime {
    /// The runtime a session connected now runs on when it is the caller's: `Some` under
    /// [`Caller`](SessionRuntime::Caller) on a multi-thread tokio runtime; `None` where the backend's own is meant.
    pub fn callers(self) -> Option<tokio::runtime::Handle> {
        match self {
            SessionRuntime::Caller => tokio::runtime::Handle::try_current()
                .ok()
                .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread),
            SessionRuntime::Own => None,
        }
    }
}
