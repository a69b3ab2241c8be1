//! Layer 1: the coordination primitives every recipe needs, in ZooKeeper's data model: what a backend implements
//! (the [`Backend`] trait, its value types, its optional powers [`Transactions`] and [`SendNow`]) and the session-bound
//! view every request goes through ([`BackendExt::on`]).
//!
//! An application needs only [`Backend`] (re-exported at the crate's root), to hold the backend it chose as
//! `Arc<dyn Backend>`; the rest of this module is for those who write a backend, or look at a session's state.

use std::fmt;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::error::Result;

mod paths;
mod powers;
mod types;

pub use paths::{check_create_path, check_path, check_written_path, PathChecker};
pub use powers::{tree_watch_until_moved, CreationChecks, GoneWatches, SendNow, Transactions, TreeWatches};
pub use types::*;

/// One client session on a ZooKeeper-like coordination service: the primitives the lock recipes are built on.
///
/// Every recipe in this crate is written against `Arc<dyn Backend>`, so applications choose the backend at run time
/// (ZooKeeper in production, `recipes_mem` in their tests).
///
/// # Contract
/// - One value is one client *connection* to the service, holding one session at a time. When that session
///   expires, the backend reports [`SessionState::Expired`] on [`session`](Backend::session), fails the watches of
///   that session with [`Error::SessionExpired`](crate::Error::SessionExpired), and opens a new session (a new id)
///   for later calls.
/// - **Every request names the session it is issued for** (its first argument), and runs on that session or not at
///   all: a request for a session that is not the backend's current live session fails with
///   [`Error::SessionExpired`](crate::Error::SessionExpired) (or [`Error::Closed`](crate::Error::Closed) once the
///   backend is closed), and so does a request whose session the server has ended. No request is ever carried over
///   to another session (a release that ran on the new session once deleted the next holder's node).
/// - Requests of one session are applied by the server in the order they are issued; a request is issued when its
///   future is first polled, and is applied even if the caller drops the future afterwards (its outcome is then
///   unknown to the caller, as with a lost reply).
/// - `create` of [`CreateMode::EphemeralSequential`] appends ZooKeeper's sequence: `%010d` of a signed 32-bit
///   counter kept per parent; or, on a backend whose [`child_order`](Backend::child_order) is
///   [`ChildOrder::Creation`], makes the name as given and lists children in creation order. `czxid`s strictly
///   increase across all creates.
/// - A create whose reply is lost returns [`Error::ConnectionLoss`](crate::Error::ConnectionLoss); the node may
///   or may not exist. Any error while disconnected is reported as connection loss.
/// - `watch_deletion` registers its watch *before* it checks that the node exists, so a deletion between the
///   check and the wait is never missed. It returns `None` when the node does not exist.
/// - A watch fires at most once. Watches survive a disconnection that ends within the session timeout.
/// - `create` fails with [`Error::NoNode`](crate::Error::NoNode) when the parent is missing and
///   [`Error::NodeExists`](crate::Error::NodeExists) when a non-sequential node exists; `delete` fails with
///   `NoNode` when the node is missing.
/// - A [`CreateMode::Container`] node is deleted by the server some time after its last child is gone (ZooKeeper
///   checks about once a minute), not at once: a create under it may fail with `NoNode` later.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    /// Creates a node with `data` and returns its full path and czxid.
    ///
    /// # Notable errors
    /// `NoNode` (parent missing), `NodeExists`, `ConnectionLoss` (outcome unknown), `SessionExpired`.
    async fn create(&self, session: SessionId, path: &str, data: &[u8], mode: CreateMode) -> Result<Created>;

    /// Creates a node, and lists the children of its parent ([`parent_path`]) *after* the create, in one round trip
    /// where the backend can pipeline (ZooKeeper applies one session's requests in order, so the list sees the new
    /// node). The list is meaningful only when the create succeeded. The default sends the two requests one after the
    /// other.
    ///
    /// # Notable errors
    /// As [`create`](Backend::create) and [`children`](Backend::children).
    async fn create_and_list(&self, session: SessionId, path: &str, data: &[u8], mode: CreateMode) -> CreateAndList {
        let created = self.create(session, path, data, mode).await;
        let listed = match &created {
            Ok(_) => self.children(session, parent_path(path)).await,
            Err(_) => Err(crate::Error::ConnectionLoss),
        };
        CreateAndList { created, listed }
    }

    /// Lists the names (not paths) of `path`'s children, in no particular order.
    ///
    /// # Notable errors
    /// `NoNode`, `ConnectionLoss`, `SessionExpired`.
    async fn children(&self, session: SessionId, path: &str) -> Result<Vec<String>>;

    /// Reads a node's data and stat, or `None` when it does not exist.
    ///
    /// # Notable errors
    /// `ConnectionLoss`, `SessionExpired`.
    async fn get(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, Stat)>>;

    /// Waits until the server this session is connected to has caught up with the leader (ZooKeeper's `sync`), so
    /// that a read sent after it sees every write committed before it. A read after a reconnection to another server
    /// may otherwise not show a create this session made before the connection broke.
    ///
    /// # Notable errors
    /// `ConnectionLoss`, `SessionExpired`.
    async fn sync(&self, session: SessionId, path: &str) -> Result<()>;

    /// Sets a one-shot watch for the deletion of `path`, then checks that it exists: its stat and the watch, or
    /// `None` when it does not exist.
    ///
    /// # Notable errors
    /// `ConnectionLoss`, `SessionExpired`.
    async fn watch_deletion(&self, session: SessionId, path: &str) -> Result<Option<(Stat, DeletionWatch)>>;

    /// Reads a node's data and sets a one-shot watch on it, firing on a change of its data or on its deletion.
    /// `None` when the node does not exist.
    ///
    /// # Notable errors
    /// `ConnectionLoss`, `SessionExpired`.
    async fn get_and_watch(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>>;

    /// Overwrites a node's data (any version), and waits for the reply.
    ///
    /// # Notable errors
    /// `NoNode`, `ConnectionLoss` (outcome unknown), `SessionExpired`.
    async fn set_data(&self, session: SessionId, path: &str, data: &[u8]) -> Result<()>;

    /// Overwrites a node's data without waiting for the reply, when its data version is `version` (ZooKeeper's:
    /// 0 until the data is first set; `None`: any). The request is sent before this returns, so the server applies it
    /// before every later request of this session; its outcome is not reported. Nothing is sent when `session` is not
    /// the current live session.
    fn set_data_unacked(&self, session: SessionId, path: &str, data: &[u8], version: Option<i32>);

    /// Deletes a node (any version).
    ///
    /// # Notable errors
    /// `NoNode`, `NotEmpty`, `ConnectionLoss`, `SessionExpired`.
    async fn delete(&self, session: SessionId, path: &str) -> Result<()>;

    /// How this backend orders a path's children (see [`ChildOrder`]): [`ChildOrder::Sequence`] (the default,
    /// ZooKeeper's) unless it says otherwise. Constant for the life of the backend.
    fn child_order(&self) -> ChildOrder {
        ChildOrder::Sequence
    }

    /// The backend's transactions (ZooKeeper's `multi`), or `None` (the default) when it has none: a multi-lock's
    /// release then deletes its nodes one by one.
    fn transactions(&self) -> Option<&dyn Transactions> {
        None
    }

    /// The backend's writes conditioned on a node's creation (etcd's create revision), or `None` (the default) when it
    /// has none (ZooKeeper: a name made again starts again at data version 0, so no condition it has tells the two
    /// nodes apart). A release of a node whose name is shared (the fixed node, etcd's key named by its session) then
    /// reads the node and deletes it by name: an operator's delete and another's create of that name between the two
    /// are deleted with it (docs/algorithm.md, "releasing a shared name").
    fn creation_checks(&self) -> Option<&dyn CreationChecks> {
        None
    }

    /// The backend's sending before returning, or `None` (the default) when it cannot: then the recipes hand no lock
    /// over within the process on release, and every waiter learns of the deletion from its watch (docs/algorithm.md,
    /// "same-session handoff").
    fn send_now(&self) -> Option<&dyn SendNow> {
        None
    }

    /// The backend's persistent watches on a tree of nodes, or `None` (the default) when it has none.
    fn tree_watches(&self) -> Option<&dyn TreeWatches> {
        None
    }

    /// The backend's watches of a node's deletion alone, or `None` (the default) when it has none: then a waiter in
    /// line reads its blocker back after a change of its data.
    fn gone_watches(&self) -> Option<&dyn GoneWatches> {
        None
    }

    /// The current session and its state; the receiver sees every later change, and is also woken (with the status
    /// unchanged) when the lease moves back: its end comes earlier than a reader of [`lease`](Backend::lease) may
    /// have computed (a shorter session timeout after a reconnection). Every reconnection is a change, even one whose
    /// disconnection the backend did not see, published as soon as the backend learns of it: a waiter in line that
    /// sees a change during its wait lists again rather than trust the order of its watches' events (after a
    /// reconnection, ZooKeeper reports re-registered watches' changes in the order of their re-registration).
    fn session(&self) -> watch::Receiver<SessionStatus>;

    /// The current session and its state, now (cheaper than subscribing with [`session`](Backend::session)).
    fn session_status(&self) -> SessionStatus {
        *self.session().borrow()
    }

    /// Closes the session: the requests already sent are applied first, then the server deletes its ephemeral nodes
    /// at once, which releases every lock it holds, and later requests fail with [`Error::Closed`](crate::Error::Closed).
    /// Waits a short, bounded time for the server to confirm (a few seconds at most, and not at all when the server has
    /// not been answering), so that a process about to exit does not leave its locks to the session timeout. Over a
    /// cut connection the server hears of the close only if the connection comes back before the session times out:
    /// the nodes stay until then, or until the server expires the session.
    ///
    /// # Cancel safety
    /// Cancel safe: the session is closed either way; only the wait is cut short.
    async fn close(&self);

    /// The current session's lease (see [`Lease`]). A backend keeps it fresh while idle (heartbeats at most a quarter
    /// of the session timeout apart) and never moves it forward for a request that was not answered.
    fn lease(&self) -> Lease;

    /// The runtime the session's own tasks (its connection) run on, if the backend chose one: its own, or the
    /// runtime it was connected on ([`SessionRuntime`]). The library deletes the nodes
    /// of dropped guards and abandoned acquires there, so that the deletion runs as long as the session lives, even
    /// when the runtime the application called from has been dropped or is no longer driven. `None` (the default): on
    /// the caller's runtime.
    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        None
    }
}

/// Requests bound to one session: `backend.on(id).delete(path)` reads as what it does.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::backend::{BackendExt, CreateMode};
/// use recipes_core::Backend;
/// let client: std::sync::Arc<dyn Backend> = recipes_mem::MemCluster::new().client();
/// let now = client.current();
/// now.create("/config", b"v1", CreateMode::Persistent).await?;
/// assert_eq!(now.get("/config").await?.map(|(data, _)| data), Some(b"v1".to_vec()));
/// # Ok::<(), recipes_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Copy)]
pub struct SessionRef<'a> {
    backend: &'a dyn Backend,
    id: SessionId,
}

impl fmt::Debug for SessionRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionRef({:#x})", self.id)
    }
}

/// Binds requests to a session: `backend.on(id)` and `backend.current()`, on any backend, concrete or `dyn`.
pub trait BackendExt {
    /// Requests bound to the session `id`: they fail, rather than run on another session, once `id` has ended.
    fn on(&self, id: SessionId) -> SessionRef<'_>;

    /// Requests bound to the session that is current now.
    fn current(&self) -> SessionRef<'_>;
}

impl<B: Backend> BackendExt for B {
    fn on(&self, id: SessionId) -> SessionRef<'_> {
        SessionRef { backend: self, id }
    }

    fn current(&self) -> SessionRef<'_> {
        self.on(self.session_status().id)
    }
}

impl BackendExt for dyn Backend + '_ {
    fn on(&self, id: SessionId) -> SessionRef<'_> {
        SessionRef { backend: self, id }
    }

    fn current(&self) -> SessionRef<'_> {
        self.on(self.session_status().id)
    }
}

impl SessionRef<'_> {
    /// The session these requests are bound to.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// See [`Backend::child_order`].
    pub fn child_order(&self) -> ChildOrder {
        self.backend.child_order()
    }

    /// See [`Backend::create`].
    pub async fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<Created> {
        self.backend.create(self.id, path, data, mode).await
    }

    /// See [`Backend::create_and_list`].
    pub async fn create_and_list(&self, path: &str, data: &[u8], mode: CreateMode) -> CreateAndList {
        self.backend.create_and_list(self.id, path, data, mode).await
    }

    /// See [`Backend::children`].
    pub async fn children(&self, path: &str) -> Result<Vec<String>> {
        self.backend.children(self.id, path).await
    }

    /// See [`Backend::get`].
    pub async fn get(&self, path: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        self.backend.get(self.id, path).await
    }

    /// See [`Backend::sync`].
    pub async fn sync(&self, path: &str) -> Result<()> {
        self.backend.sync(self.id, path).await
    }

    /// See [`Backend::watch_deletion`].
    pub async fn watch_deletion(&self, path: &str) -> Result<Option<(Stat, DeletionWatch)>> {
        self.backend.watch_deletion(self.id, path).await
    }

    /// See [`Backend::get_and_watch`].
    pub async fn get_and_watch(&self, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
        self.backend.get_and_watch(self.id, path).await
    }

    /// See [`GoneWatches::watch_gone`]; `Ok(None)` too when the backend has no such watches.
    pub async fn watch_gone(&self, path: &str) -> Result<Option<NodeWatch>> {
        match self.backend.gone_watches() {
            Some(g) => g.watch_gone(self.id, path).await,
            None => Ok(None),
        }
    }

    /// See [`Backend::set_data`].
    pub async fn set_data(&self, path: &str, data: &[u8]) -> Result<()> {
        self.backend.set_data(self.id, path, data).await
    }

    /// See [`Backend::set_data_unacked`].
    pub fn set_data_unacked(&self, path: &str, data: &[u8], version: Option<i32>) {
        self.backend.set_data_unacked(self.id, path, data, version)
    }

    /// See [`Backend::delete`].
    pub async fn delete(&self, path: &str) -> Result<()> {
        self.backend.delete(self.id, path).await
    }

    /// See [`Transactions::delete_all`]; `None` when the backend has no transactions.
    pub async fn delete_all(&self, paths: &[String]) -> Option<Result<()>> {
        Some(self.backend.transactions()?.delete_all(self.id, paths).await)
    }

    /// See [`Transactions::set_data_and_delete`]; `None` when the backend has no transactions.
    pub async fn set_data_and_delete(&self, path: &str, data: &[u8]) -> Option<Result<()>> {
        Some(
            self.backend
                .transactions()?
                .set_data_and_delete(self.id, path, data)
                .await,
        )
    }

    /// See [`CreationChecks::delete_if_created`]; `None` when the backend has no creation checks.
    pub async fn delete_if_created(&self, path: &str, czxid: i64) -> Option<Result<bool>> {
        Some(
            self.backend
                .creation_checks()?
                .delete_if_created(self.id, path, czxid)
                .await,
        )
    }

    /// See [`SendNow::delete_sent`]; `None` when nothing was sent (the backend cannot send before returning, or the
    /// session is not the current live one).
    pub fn delete_sent(&self, path: &str) -> Option<ReplyFuture> {
        self.backend.send_now()?.delete_sent(self.id, path)
    }

    /// See [`SendNow::set_data_and_delete_sent`]; `None` when nothing was sent.
    pub fn set_data_and_delete_sent(&self, path: &str, data: &[u8]) -> Option<ReplyFuture> {
        self.backend.send_now()?.set_data_and_delete_sent(self.id, path, data)
    }

    /// See [`SendNow::delete_if_created_sent`]; `None` when nothing was sent.
    pub fn delete_if_created_sent(&self, path: &str, czxid: i64) -> Option<ReplyFuture> {
        self.backend.send_now()?.delete_if_created_sent(self.id, path, czxid)
    }
}
