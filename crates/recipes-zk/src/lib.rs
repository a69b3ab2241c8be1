//! The ZooKeeper backend for `recipes-core`, on the `zookeeper-client` crate.
//!
//! One [`ZkBackend`] is one ZooKeeper session, shared by every lock made from it. It reports the session's state
//! to the recipes (Disconnected → suspended, reconnected → connected, Expired → expired) and, after an expiry,
//! opens a new session for later calls.
//!
//! ```no_run
//! # async fn f() -> Result<(), recipes_core::Error> {
//! use std::time::Duration;
//! use recipes_core::Locks;
//! use recipes_zk::{ZkBackend, ZkOptions};
//!
//! let zk = ZkBackend::connect(
//!     ZkOptions::new("zk1:2181,zk2:2181,zk3:2181/myapp").session_timeout(Duration::from_secs(10)),
//! )
//! .await?;
//! let locks = Locks::new(zk);
//! let guard = locks.fair("/orders/42")?.acquire().await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Work-arounds for the client
//! - A connection timeout reaches calls as `Error::Custom` or `Error::Timeout`, not `ConnectionLoss`: both, and
//!   any error while disconnected, are reported as [`Error::ConnectionLoss`].
//! - After `Expired` a `zookeeper_client::Client` is dead: a new one is connected, with a new session id.
//! - The client's own lock helper is not used.
//! - The client declares `Expired` on its own only about 7/5 of the session timeout after losing the server; the
//!   server may have expired the session earlier. A holder must not rely on that event alone (see leases).

#![warn(missing_docs)]

use std::fmt;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::{
    Backend, CreateMode, Created, DeletionWatch, Error, Lease, NodeEvent, NodeWatch, Result, SessionId, SessionState,
    SessionStatus, Stat,
};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{debug, info, warn};
pub use zookeeper_client as zk;

/// How to reach ZooKeeper.
#[derive(Clone)]
pub struct ZkOptions {
    servers: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    auth: Option<(String, Vec<u8>)>,
}

impl fmt::Debug for ZkOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkOptions")
            .field("servers", &self.servers)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("auth", &self.auth.as_ref().map(|(scheme, _)| scheme))
            .finish()
    }
}

impl ZkOptions {
    /// Options for the connect string `servers`: `host:port[,host:port…][/chroot]`.
    pub fn new(servers: impl Into<String>) -> Self {
        ZkOptions {
            servers: servers.into(),
            session_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            auth: None,
        }
    }

    /// The session timeout to ask the server for (default 10 s; the server bounds it).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`ZkBackend::connect`] (and each reconnect after an expiry) may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Digest authentication (`user:password`), sent on every connection.
    pub fn digest_auth(mut self, user_password: &str) -> Self {
        self.auth = Some(("digest".into(), user_password.as_bytes().to_vec()));
        self
    }

    /// The connect string.
    pub fn servers(&self) -> &str {
        &self.servers
    }

    async fn connect(&self) -> Result<zk::Client> {
        if self.servers.trim().is_empty() {
            return Err(Error::Unreachable {
                servers: self.servers.clone(),
                why: "the connect string is empty".into(),
            });
        }
        let mut connector = zk::Client::connector().with_session_timeout(self.session_timeout);
        if let Some((scheme, auth)) = &self.auth {
            connector = connector.with_auth(scheme, auth);
        }
        match tokio::time::timeout(self.connect_timeout, connector.connect(&self.servers)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(Error::Unreachable {
                servers: self.servers.clone(),
                why: e.to_string(),
            }),
            Err(_) => Err(Error::Unreachable {
                servers: self.servers.clone(),
                why: format!("no server answered within {:?}", self.connect_timeout),
            }),
        }
    }
}

struct Inner {
    options: ZkOptions,
    client: RwLock<Option<zk::Client>>,
    status: watch::Sender<SessionStatus>,
    closed: std::sync::atomic::AtomicBool,
    /// The session and the send time of its last answered request.
    lease: std::sync::Mutex<(SessionId, Option<Instant>, Duration)>,
    /// Wakes the heartbeat at once (after a reconnection).
    beat_now: Notify,
}

impl Inner {
    /// Records that a request of `session` sent at `sent` was answered.
    fn answered(&self, session: SessionId, sent: Instant) {
        let mut lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        if lease.0 == session {
            lease.1 = lease.1.max(Some(sent));
        }
    }

    fn new_session(&self, client: &zk::Client, sent: Instant) {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) =
            (session_id(client), Some(sent), client.session_timeout());
    }
}

/// Whether a result came from the server (an answer), as opposed to a lost connection.
fn is_answer<T>(r: &std::result::Result<T, zk::Error>) -> bool {
    use zk::Error as Z;
    matches!(
        r,
        Ok(_)
            | Err(Z::NoNode
                | Z::NodeExists
                | Z::NotEmpty
                | Z::BadVersion
                | Z::NoChildrenForEphemerals
                | Z::NoAuth
                | Z::InvalidAcl)
    )
}

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

fn session_id(client: &zk::Client) -> SessionId {
    client.session_id().0
}

impl ZkBackend {
    /// Connects and opens a session.
    ///
    /// # Notable errors
    /// [`Error::Unreachable`] when no server answers within the connect timeout (never a hang).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the half-made session.
    pub async fn connect(options: ZkOptions) -> Result<Arc<ZkBackend>> {
        let sent = Instant::now();
        let client = options.connect().await?;
        let id = session_id(&client);
        info!(servers = %options.servers, session = format!("{id:#x}"), timeout = ?client.session_timeout(), "ZooKeeper session opened");
        let (status, _) = watch::channel(SessionStatus {
            id,
            state: SessionState::Connected,
        });
        let watcher = client.state_watcher();
        let inner = Arc::new(Inner {
            options,
            client: RwLock::new(Some(client)),
            status,
            closed: std::sync::atomic::AtomicBool::new(false),
            lease: std::sync::Mutex::new((0, None, Duration::ZERO)),
            beat_now: Notify::new(),
        });
        if let Ok(c) = inner.client() {
            inner.new_session(&c, sent);
        }
        tokio::spawn(monitor(Arc::downgrade(&inner), watcher, id));
        tokio::spawn(heartbeat(Arc::downgrade(&inner)));
        Ok(Arc::new(ZkBackend { inner }))
    }

    fn client(&self) -> Result<zk::Client> {
        self.inner.client()
    }

    /// The client of session `session`: requests are bound to the session they name, and fail rather than run on
    /// the session opened after it.
    fn client_for(&self, session: SessionId) -> Result<zk::Client> {
        self.inner.client_for(session)
    }

    /// The session timeout the server granted.
    pub fn session_timeout(&self) -> Duration {
        self.client()
            .map(|c| c.session_timeout())
            .unwrap_or(self.inner.options.session_timeout)
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
        self.client().ok().map(|c| c.session().clone())
    }

    /// Closes the session and waits (at most `limit`) until the close has reached the server, so that a process
    /// about to exit does not leave its ephemeral nodes to the session timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: the session is closed either way; only the wait is cut short.
    pub async fn shutdown(&self, limit: Duration) {
        let watcher = self.client().ok().map(|c| c.state_watcher());
        self.close();
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

    /// Closes the session: its ephemeral nodes (held locks) go at once; later calls fail with [`Error::Closed`].
    pub fn close(&self) {
        self.inner.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        let id = self.session_id();
        self.inner.status.send_replace(SessionStatus {
            id,
            state: SessionState::Closed,
        });
        // zookeeper-client closes the session when its last handle goes.
        drop(self.inner.client.write().unwrap_or_else(|e| e.into_inner()).take());
    }

    fn map_err(&self, e: zk::Error, path: &str) -> Error {
        use zk::Error as Z;
        match e {
            Z::NoNode => Error::NoNode(path.to_owned()),
            Z::NodeExists => Error::NodeExists(path.to_owned()),
            Z::NotEmpty => Error::NotEmpty(path.to_owned()),
            Z::SessionExpired => Error::SessionExpired,
            Z::NoChildrenForEphemerals => Error::Refused(format!("{path}: ephemeral nodes cannot have children")),
            Z::BadArguments(why) => Error::Refused(format!("{path}: {why}")),
            Z::NoAuth => Error::Refused(format!("{path}: not authorized")),
            Z::ClientClosed | Z::AuthFailed if self.is_closed() => Error::Closed,
            Z::ClientClosed => Error::SessionExpired,
            Z::ConnectionLoss | Z::Timeout | Z::Custom(_) | Z::Throttled => Error::ConnectionLoss,
            other => {
                if self.client().is_ok_and(|c| c.state() == zk::SessionState::Disconnected) {
                    Error::ConnectionLoss
                } else {
                    Error::Backend(other.to_string())
                }
            }
        }
    }

    /// Records the send time of an answered request.
    fn stamp<T>(&self, client: &zk::Client, sent: Instant, r: &std::result::Result<T, zk::Error>) {
        if is_answer(r) {
            self.inner.answered(session_id(client), sent);
        }
    }

    fn is_closed(&self) -> bool {
        self.inner.closed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Inner {
    fn client(&self) -> Result<zk::Client> {
        self.client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(Error::Closed)
    }

    fn client_for(&self, session: SessionId) -> Result<zk::Client> {
        let client = self.client()?;
        if session_id(&client) != session {
            // That session ended (a client is replaced only after its session expired).
            return Err(Error::SessionExpired);
        }
        Ok(client)
    }
}

fn publish(inner: &Inner, id: SessionId, state: SessionState) {
    let new = SessionStatus { id, state };
    inner.status.send_if_modified(|s| {
        if *s == new || s.state == SessionState::Closed {
            false
        } else {
            *s = new;
            true
        }
    });
}

/// Follows the session's state; after an expiry, connects a new session (retrying until the backend goes).
async fn monitor(inner: Weak<Inner>, mut watcher: zk::StateWatcher, mut id: SessionId) {
    loop {
        let state = watcher.changed().await;
        let Some(strong) = inner.upgrade() else { return };
        debug!(session = format!("{id:#x}"), ?state, "ZooKeeper session state");
        match state {
            zk::SessionState::SyncConnected => {
                publish(&strong, id, SessionState::Connected);
                strong.beat_now.notify_one();
            }
            zk::SessionState::Disconnected | zk::SessionState::ConnectedReadOnly => {
                publish(&strong, id, SessionState::Suspended)
            }
            zk::SessionState::Expired => {
                warn!(
                    session = format!("{id:#x}"),
                    "ZooKeeper session expired; opening a new one"
                );
                publish(&strong, id, SessionState::Expired);
                let mut backoff = Duration::from_millis(50);
                let client = loop {
                    if strong.closed.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    let sent = Instant::now();
                    match strong.options.connect().await {
                        Ok(c) => {
                            strong.new_session(&c, sent);
                            break c;
                        }
                        Err(e) => {
                            debug!(error = %e, "reconnect after expiry failed; retrying");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(2));
                        }
                    }
                };
                id = session_id(&client);
                watcher = client.state_watcher();
                let mut slot = strong.client.write().unwrap_or_else(|e| e.into_inner());
                if slot.is_none() {
                    return; // closed meanwhile
                }
                *slot = Some(client);
                drop(slot);
                info!(session = format!("{id:#x}"), "new ZooKeeper session");
                publish(&strong, id, SessionState::Connected);
            }
            zk::SessionState::Closed | zk::SessionState::AuthFailed => {
                publish(&strong, id, SessionState::Closed);
                return;
            }
        }
    }
}

/// Keeps the lease fresh on an idle session: a cheap read every quarter of the session timeout (and at once after a
/// reconnection), recording its send time when answered.
async fn heartbeat(inner: Weak<Inner>) {
    loop {
        let (interval, client) = {
            let Some(strong) = inner.upgrade() else { return };
            let Ok(client) = strong.client() else { return };
            ((client.session_timeout() / 4).max(Duration::from_millis(50)), client)
        };
        let sent = Instant::now();
        let r = tokio::time::timeout(interval * 4, client.check_stat("/")).await;
        let Some(strong) = inner.upgrade() else { return };
        if let Ok(r) = r {
            if is_answer(&r) {
                strong.answered(session_id(&client), sent);
            }
        }
        drop(client);
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = strong.beat_now.notified() => {}
        }
    }
}

fn zk_mode(mode: CreateMode) -> zk::CreateMode {
    match mode {
        CreateMode::Persistent => zk::CreateMode::Persistent,
        CreateMode::Container => zk::CreateMode::Container,
        CreateMode::Ephemeral => zk::CreateMode::Ephemeral,
        CreateMode::EphemeralSequential => zk::CreateMode::EphemeralSequential,
        // CreateMode is non-exhaustive; a future mode must be mapped here explicitly.
        #[allow(unreachable_patterns)]
        _ => zk::CreateMode::Persistent,
    }
}

fn created(path: &str, mode: CreateMode, stat: zk::Stat, seq: zk::CreateSequence) -> Created {
    let path = if mode == CreateMode::EphemeralSequential {
        format!("{path}{seq}")
    } else {
        path.to_owned()
    };
    Created {
        path,
        czxid: stat.czxid,
    }
}

#[async_trait]
impl Backend for ZkBackend {
    async fn create(&self, session: SessionId, path: &str, data: &[u8], mode: CreateMode) -> Result<Created> {
        let client = self.client_for(session)?;
        let options = zk_mode(mode).with_acls(zk::Acls::anyone_all());
        let sent = Instant::now();
        let r = client.create(path, data, &options).await;
        self.stamp(&client, sent, &r);
        match r {
            Ok((stat, seq)) => Ok(created(path, mode, stat, seq)),
            Err(e) => Err(self.map_err(e, path)),
        }
    }

    async fn create_and_list(
        &self,
        session: SessionId,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        parent: &str,
    ) -> (Result<Created>, Result<Vec<String>>) {
        let client = match self.client_for(session) {
            Ok(c) => c,
            Err(e) => return (Err(e.clone()), Err(e)),
        };
        let options = zk_mode(mode).with_acls(zk::Acls::anyone_all());
        // Both requests are sent now, in this order; the server applies them in order.
        let sent = Instant::now();
        let create = client.create(path, data, &options);
        let list = client.list_children(parent);
        let create = create.await;
        self.stamp(&client, sent, &create);
        let created = match create {
            Ok((stat, seq)) => Ok(created(path, mode, stat, seq)),
            Err(e) => Err(self.map_err(e, path)),
        };
        let listed = list.await;
        self.stamp(&client, sent, &listed);
        let listed = listed.map_err(|e| self.map_err(e, parent));
        (created, listed)
    }

    async fn children(&self, session: SessionId, path: &str) -> Result<Vec<String>> {
        let client = self.client_for(session)?;
        let sent = Instant::now();
        let r = client.list_children(path).await;
        self.stamp(&client, sent, &r);
        r.map_err(|e| self.map_err(e, path))
    }

    async fn get(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        let client = self.client_for(session)?;
        let sent = Instant::now();
        let r = client.get_data(path).await;
        self.stamp(&client, sent, &r);
        match r {
            Ok((data, stat)) => Ok(Some((data, Stat::new(stat.czxid, stat.ephemeral_owner, stat.ctime)))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.map_err(e, path)),
        }
    }

    async fn watch_deletion(&self, session: SessionId, path: &str) -> Result<Option<(Stat, DeletionWatch)>> {
        let client = self.client_for(session)?;
        let sent = Instant::now();
        let r = client.check_and_watch_stat(path).await;
        self.stamp(&client, sent, &r);
        let (stat, watcher) = r.map_err(|e| self.map_err(e, path))?;
        let Some(stat) = stat else {
            return Ok(None);
        };
        let stat = Stat::new(stat.czxid, stat.ephemeral_owner, stat.ctime);
        let path = path.to_owned();
        let weak = Arc::downgrade(&self.inner);
        let w: DeletionWatch = Box::pin(async move {
            let mut watcher = watcher;
            loop {
                let event = watcher.changed().await;
                match event.event_type {
                    zk::EventType::NodeDeleted => return Ok(()),
                    zk::EventType::Session => {
                        return Err(match event.session_state {
                            zk::SessionState::Expired => Error::SessionExpired,
                            zk::SessionState::Closed | zk::SessionState::AuthFailed => match weak.upgrade() {
                                Some(i) if !i.closed.load(std::sync::atomic::Ordering::SeqCst) => Error::SessionExpired,
                                _ => Error::Closed,
                            },
                            _ => Error::ConnectionLoss,
                        })
                    }
                    _ => {
                        // Data changed (or similar): the node may still exist; watch again, on the same session.
                        let client = match weak.upgrade().map(|i| i.client_for(session)) {
                            Some(Ok(c)) => c,
                            Some(Err(e)) => return Err(e),
                            None => return Err(Error::Closed),
                        };
                        match client.check_and_watch_stat(&path).await {
                            Ok((None, _)) => return Ok(()),
                            Ok((Some(_), w)) => watcher = w,
                            Err(zk::Error::SessionExpired) => return Err(Error::SessionExpired),
                            Err(_) => return Err(Error::ConnectionLoss),
                        }
                    }
                }
            }
        });
        Ok(Some((stat, w)))
    }

    async fn get_and_watch(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
        let client = self.client_for(session)?;
        let sent = Instant::now();
        let r = client.get_and_watch_data(path).await;
        self.stamp(&client, sent, &r);
        let (data, _, watcher) = match r {
            Ok(v) => v,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(self.map_err(e, path)),
        };
        let weak = Arc::downgrade(&self.inner);
        let w: NodeWatch = Box::pin(async move {
            let event = watcher.changed().await;
            match event.event_type {
                zk::EventType::NodeDeleted => Ok(NodeEvent::Deleted),
                zk::EventType::NodeDataChanged | zk::EventType::NodeCreated | zk::EventType::NodeChildrenChanged => {
                    Ok(NodeEvent::DataChanged)
                }
                zk::EventType::Session => Err(match event.session_state {
                    zk::SessionState::Expired => Error::SessionExpired,
                    zk::SessionState::Closed | zk::SessionState::AuthFailed => match weak.upgrade() {
                        Some(i) if !i.closed.load(std::sync::atomic::Ordering::SeqCst) => Error::SessionExpired,
                        _ => Error::Closed,
                    },
                    _ => Error::ConnectionLoss,
                }),
            }
        });
        Ok(Some((data, w)))
    }

    fn set_data_unacked(&self, session: SessionId, path: &str, data: &[u8]) {
        if let Ok(client) = self.client_for(session) {
            // Sent now (zookeeper-client sends at call time); the reply is awaited in the background and ignored.
            let reply = client.set_data(path, data, None);
            tokio::spawn(async move {
                let _ = reply.await;
            });
        }
    }

    async fn delete(&self, session: SessionId, path: &str) -> Result<()> {
        let client = self.client_for(session)?;
        let sent = Instant::now();
        let r = client.delete(path, None).await;
        self.stamp(&client, sent, &r);
        r.map_err(|e| self.map_err(e, path))
    }

    fn session_status(&self) -> SessionStatus {
        *self.inner.status.borrow()
    }

    fn session(&self) -> watch::Receiver<SessionStatus> {
        self.inner.status.subscribe()
    }

    fn lease(&self) -> Lease {
        let (session, answered_send, session_timeout) = *self.inner.lease.lock().unwrap_or_else(|e| e.into_inner());
        Lease {
            session,
            answered_send,
            session_timeout,
        }
    }
}
