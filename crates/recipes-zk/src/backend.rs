//! [`ZkBackend`]: one ZooKeeper session, implementing [`Backend`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::backend::{
    parent_path, CreateAndList, CreateMode, Created, DeletionWatch, GoneWatches, Lease, NodeWatch, SendNow, SessionId,
    SessionStatus, Stat, Transactions, TreeWatches,
};
use recipes_core::{Backend, Error, Result};
use tokio::sync::watch;
use tracing::info;

use crate::convert::{created, settle, stat, zk_mode};
use crate::errors::map_err;
use crate::lease::Stamp;
use crate::options::ZkOptions;
use crate::runtime::{io_runtime, start, AbortOnDrop};
use crate::session::{session_id, Evidence, Inner};
use crate::watches::{deletion_watch, node_watch};
use crate::zk;

mod powers;

/// How long [`Backend::close`] waits for the server to confirm the close.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// One ZooKeeper session, implementing [`Backend`]. Cheap to share (`Arc`); dropping the last handle closes the
/// session.
pub struct ZkBackend {
    inner: Arc<Inner>,
}

impl fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkBackend")
            .field("servers", &self.inner.options.servers)
            .field("session", &*self.inner.status.borrow())
            .finish()
    }
}

impl ZkBackend {
    /// Connects and opens a session.
    ///
    /// The session's connection, heartbeat and monitor run, by default, on the caller's runtime when it is a
    /// multi-thread one, and otherwise on a small runtime of the backend's own (threads named `recipes-zk`, one per
    /// core up to four, shared by every session of the process), which works whatever runtime calls the backend, a
    /// current-thread runtime that is not being driven and the blocking API's included. A caller's runtime dropped
    /// before the backend is closed ends the session, as an expiry would, and the backend goes on with a new session
    /// on its own runtime. The options' [`session_runtime`](ZkOptions::session_runtime) say where (decision 0095).
    ///
    /// The lease starts with the timeout the connected server granted. In the background, every server of the connect
    /// string is asked which session timeout it grants this client (with a short-lived session each), and the lease
    /// assumes the shortest as each answer arrives: a reconnection renegotiates the timeout. A server that does not
    /// answer holds up neither the connect nor the other answers.
    ///
    /// # Notable errors
    /// [`Error::Unreachable`] when no server answers within the connect timeout (never a hang), naming each server
    /// and what happened to it; [`Error::InvalidArgument`] for an empty connect string.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future abandons the connect, and a session it opened is closed.
    pub async fn connect(options: ZkOptions) -> Result<Arc<ZkBackend>> {
        if options.runtime.callers().is_some() {
            return Self::connect_here(options).await;
        }
        let mut task = AbortOnDrop(io_runtime()?.spawn(Self::connect_here(options)));
        match (&mut task.0).await {
            Ok(r) => r,
            Err(e) => Err(Error::Backend(format!("the connect task ended: {e}"))),
        }
    }

    /// Connects and opens a session from code that is not async (a plain `fn main`), as
    /// [`connect`](ZkBackend::connect) does; use the blocking API of `recipes-core` ([`recipes_core::BlockingLock`])
    /// on the `Locks` made from it.
    ///
    /// ```no_run
    /// use recipes_core::{BlockingLock, Locks};
    /// use recipes_zk::{ZkBackend, ZkOptions};
    ///
    /// fn main() -> Result<(), recipes_core::Error> {
    ///     let locks = Locks::new(ZkBackend::connect_blocking(ZkOptions::new("zk1:2181"))?);
    ///     let guard = locks.fair("/batch/nightly")?.acquire_blocking()?;
    ///     // ... the work ...
    ///     guard.release()?;
    ///     locks.close_blocking()
    /// }
    /// ```
    ///
    /// # Notable errors
    /// As [`connect`](ZkBackend::connect); [`Error::BlockingInAsync`] when called inside an async runtime (use
    /// `connect` there).
    pub fn connect_blocking(options: ZkOptions) -> Result<Arc<ZkBackend>> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::BlockingInAsync);
        }
        io_runtime()?.block_on(Self::connect_here(options))
    }

    /// Connects, on the runtime the session is to run on (the backend's own, or the caller's:
    /// [`SessionRuntime`](recipes_core::backend::SessionRuntime)).
    async fn connect_here(options: ZkOptions) -> Result<Arc<ZkBackend>> {
        let sent = Stamp::now();
        let client = options.connect().await?;
        let id = session_id(&client);
        info!(servers = %options.servers, session = format!("{id:#x}"), timeout = ?client.session_timeout(), "ZooKeeper session opened");
        let watcher = client.state_watcher();
        let inner = Arc::new(Inner::new(options, client, sent));
        start(&inner, &Arc::downgrade(&inner), id, watcher);
        Ok(Arc::new(ZkBackend { inner }))
    }

    /// The session timeout the lease assumes: the shortest any server of the connect string grants this client (the
    /// requested one, bounded by each server's `minSessionTimeout` and `maxSessionTimeout`).
    pub fn session_timeout(&self) -> Duration {
        self.inner.session_timeout()
    }

    /// Waits (at most `limit`) until every server of the connect string has been asked which session timeout it
    /// grants, so that [`session_timeout`](ZkBackend::session_timeout) is the shortest of them (a server that does not
    /// answer is not waited for past `limit`).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn timeouts_probed(&self, limit: Duration) {
        let mut rx = self.inner.probing.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|n| *n == 0)).await;
    }

    /// The current session id.
    pub fn session_id(&self) -> SessionId {
        self.inner.status.borrow().id
    }

    /// The options this backend was made with.
    pub fn options(&self) -> &ZkOptions {
        &self.inner.options
    }

    /// The current session's id and password, for fault injection in tests: a second connection attached to
    /// them and then closed expires the session on the server, as Curator's `KillSession` does. (Cut this client
    /// off first, or it re-attaches to its session before the close arrives.) `None` once closed.
    pub fn zk_session(&self) -> Option<zk::SessionInfo> {
        self.inner.client().ok().map(|c| c.session().clone())
    }

    /// Closes the session and waits (at most `limit`) until the close has reached the server, so that a process
    /// about to exit does not leave its ephemeral nodes to the session timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: the session is closed either way; only the wait is cut short.
    pub async fn shutdown(&self, limit: Duration) {
        let watcher = self.inner.client().ok().map(|c| c.state_watcher());
        self.close_now();
        if let Some(mut w) = watcher {
            let _ = tokio::time::timeout(limit, async {
                loop {
                    if matches!(w.changed().await, zk::SessionState::Closed | zk::SessionState::Expired) {
                        return;
                    }
                }
            })
            .await;
        }
    }

    /// Closes the session without waiting: its ephemeral nodes (held locks) go once the close reaches the server;
    /// later calls fail with [`Error::Closed`]. [`Backend::close`] waits for the server's confirmation.
    pub fn close_now(&self) {
        // zookeeper-client closes the session when its last handle goes.
        drop(self.inner.close());
    }

    fn map_err(&self, e: zk::Error, path: &str, client: &zk::Client) -> Error {
        map_err(
            e,
            path,
            self.inner.is_closed(),
            client.state() == zk::SessionState::Disconnected,
        )
    }

    /// Runs one request of `session` on that session's client, records what its answer proves for the lease, and maps
    /// its error. The request is sent when this future is first polled.
    async fn request<'a, T, F, Fut>(&self, session: SessionId, path: &str, evidence: Evidence, f: F) -> Result<T>
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>> + 'a,
    {
        let client = self.inner.client_for(session)?;
        let sent = Stamp::now();
        let r = f(client.clone()).await;
        settle(&self.inner, session, sent, evidence, r, path, &client)
    }
}

#[async_trait]
impl Backend for ZkBackend {
    async fn create(&self, session: SessionId, path: &str, data: &[u8], mode: CreateMode) -> Result<Created> {
        let options = zk_mode(mode)?.with_acls(zk::Acls::new(&self.inner.acl));
        let (stat, seq) = self
            .request(session, path, Evidence::Leader, |c| async move {
                c.create(path, data, &options).await
            })
            .await?;
        Ok(created(path, mode, stat, seq))
    }

    async fn create_and_list(&self, session: SessionId, path: &str, data: &[u8], mode: CreateMode) -> CreateAndList {
        let failed = |e: Error| CreateAndList {
            created: Err(e.clone()),
            listed: Err(e),
        };
        let client = match self.inner.client_for(session) {
            Ok(c) => c,
            Err(e) => return failed(e),
        };
        let options = match zk_mode(mode) {
            Ok(m) => m.with_acls(zk::Acls::new(&self.inner.acl)),
            Err(e) => return failed(e),
        };
        let parent = parent_path(path);
        // Both requests are sent now, in this order; the server applies them in order.
        let sent = Stamp::now();
        let create = client.create(path, data, &options);
        let list = client.list_children(parent);
        let create = create.await;
        self.inner.record(session, sent, Evidence::Leader, &create);
        let created = create
            .map(|(stat, seq)| created(path, mode, stat, seq))
            .map_err(|e| self.map_err(e, path, &client));
        let listed = list.await;
        self.inner.record(session, sent, Evidence::Seen, &listed);
        let listed = listed.map_err(|e| self.map_err(e, parent, &client));
        CreateAndList { created, listed }
    }

    async fn children(&self, session: SessionId, path: &str) -> Result<Vec<String>> {
        self.request(
            session,
            path,
            Evidence::Seen,
            |c| async move { c.list_children(path).await },
        )
        .await
    }

    async fn get(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        let r = self
            .request(session, path, Evidence::Seen, |c| async move {
                match c.get_data(path).await {
                    Ok(v) => Ok(Some(v)),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(r.map(|(data, s)| (data, stat(&s))))
    }

    async fn sync(&self, session: SessionId, path: &str) -> Result<()> {
        self.request(session, path, Evidence::Leader, |c| async move { c.sync(path).await })
            .await
    }

    async fn watch_deletion(&self, session: SessionId, path: &str) -> Result<Option<(Stat, DeletionWatch)>> {
        let (found, watcher) = self
            .request(session, path, Evidence::Seen, |c| async move {
                c.check_and_watch_stat(path).await
            })
            .await?;
        let Some(found) = found else {
            return Ok(None);
        };
        let w = deletion_watch(
            watcher,
            Arc::downgrade(&self.inner),
            session,
            path.to_owned(),
            found.czxid,
        );
        Ok(Some((stat(&found), w)))
    }

    async fn get_and_watch(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
        let r = self
            .request(session, path, Evidence::Seen, |c| async move {
                match c.get_and_watch_data(path).await {
                    Ok((data, _, w)) => Ok(Some((data, w))),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(r.map(|(data, w)| (data, node_watch(w, Arc::downgrade(&self.inner)))))
    }

    async fn set_data(&self, session: SessionId, path: &str, data: &[u8]) -> Result<()> {
        self.request(session, path, Evidence::Leader, |c| async move {
            c.set_data(path, data, None).await.map(|_| ())
        })
        .await
    }

    fn set_data_unacked(&self, session: SessionId, path: &str, data: &[u8], version: Option<i32>) {
        if let Ok(client) = self.inner.client_for(session) {
            // Sent now (zookeeper-client sends at call time); the reply is awaited in the background and ignored.
            let reply = client.set_data(path, data, version);
            drop(self.inner.runtime().spawn(async move {
                let _ = reply.await;
            }));
        }
    }

    async fn delete(&self, session: SessionId, path: &str) -> Result<()> {
        self.request(session, path, Evidence::Leader, |c| async move {
            c.delete(path, None).await
        })
        .await
    }

    fn transactions(&self) -> Option<&dyn Transactions> {
        Some(self)
    }

    fn send_now(&self) -> Option<&dyn SendNow> {
        Some(self)
    }

    fn tree_watches(&self) -> Option<&dyn TreeWatches> {
        Some(self)
    }

    fn gone_watches(&self) -> Option<&dyn GoneWatches> {
        Some(self)
    }

    fn session_status(&self) -> SessionStatus {
        *self.inner.status.borrow()
    }

    fn session(&self) -> watch::Receiver<SessionStatus> {
        self.inner.status.subscribe()
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        Some(self.inner.runtime())
    }

    async fn close(&self) {
        // Wait for the server's confirmation only while it is answering: a session nobody answers expires anyway,
        // and a process on its way out should not wait for it. Answering: it answered a request sent within a quarter
        // of the timeout (heartbeats go every eighth). Not the lease's base, which lags the last answer by a quarter
        // timeout or more: with it, a zklock whose lease ran out on a stopped server still waited the full close wait.
        let answering = self.inner.answered_lately(self.inner.session_timeout() / 4);
        self.shutdown(if answering { CLOSE_WAIT } else { Duration::ZERO }).await;
    }

    fn lease(&self) -> Lease {
        self.inner.lease()
    }
}
