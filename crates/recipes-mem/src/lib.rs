//! An in-memory backend for `recipes-core` with ZooKeeper's behaviour, for applications' own tests.
//!
//! A [`MemCluster`] is the shared tree, standing in for a ZooKeeper ensemble; each [`MemClient`] is one client
//! session on it, standing in for one process. `MemCluster` is `Clone`; clones share the tree.
//!
//! What it reproduces of ZooKeeper: persistent, container, ephemeral and ephemeral-sequential nodes; sequence
//! numbers from the parent's child-change counter (`%010d` of a signed 32-bit value, so they skip and can wrap);
//! strictly increasing creation ids (czxid); one-shot deletion watches registered before the existence check;
//! ephemeral nodes removed when their session expires or closes; container nodes removed once empty (at once,
//! which is harsher than ZooKeeper's periodic reaper, and so exercises the parent-vanished path); sessions that are
//! suspended while disconnected and expire on the server after their timeout, whether or not the client knows.
//!
//! Time is tokio's clock, so tests may run under `tokio::time::pause` (`#[tokio::test(start_paused = true)]`).
//!
//! Fault injection: [`MemClient::expire_session`], [`MemClient::disconnect_for`], [`MemClient::crash`],
//! [`MemClient::lose_next_create_replies`], [`MemCluster::set_watch_delay`], [`MemCluster::set_latency`].
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use recipes_core::{Locks, LostReason};
//! use recipes_mem::MemCluster;
//!
//! let cluster = MemCluster::new();
//! let a = cluster.client();
//! let locks = Locks::new(a.clone());
//! let guard = locks.fair("/jobs/etl").unwrap().acquire().await.unwrap();
//! a.expire_session();
//! assert_eq!(guard.lost().await, LostReason::SessionExpired);
//! assert!(cluster.children("/jobs/etl").is_empty());
//! # });
//! ```

#![warn(missing_docs)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::{
    Backend, CreateMode, Created, DeletionWatch, Error, Lease, NodeEvent, NodeWatch, Result, SessionId, SessionState,
    SessionStatus, Stat,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// The default session timeout of a client.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Node {
    data: Vec<u8>,
    czxid: i64,
    ephemeral_owner: SessionId,
    container: bool,
    children: BTreeSet<String>,
    cversion: i32,
    ctime: i64,
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

type WatchTx = oneshot::Sender<Result<NodeEvent>>;

/// What a watch waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchKind {
    /// Deletion only (an exists-watch).
    Deletion,
    /// Deletion or a change of data.
    Data,
}

#[derive(Debug)]
struct SessionRec {
    /// Alive on the server.
    alive: bool,
    /// Connected to the server (else suspended: events are queued).
    connected: bool,
    status: Arc<watch::Sender<SessionStatus>>,
    /// Watch events held back while disconnected.
    queued: Vec<(WatchTx, Result<NodeEvent>)>,
    /// Watches of this session that died with it, failed when the client learns of the expiry.
    doomed: Vec<WatchTx>,
    lose_create_replies: u32,
    timeout: Duration,
    /// When the current connection was made (heartbeats run from then on, every `timeout / 4`).
    connected_since: Instant,
    /// The send time of the last answered heartbeat before the connection was lost.
    frozen_heartbeat: Option<Instant>,
    /// The send time of the last answered request.
    last_answered: Option<Instant>,
    /// Delayed watch events, delivered in order by one task per session (ZooKeeper delivers a session's events in
    /// the order of the changes; the recipes rely on it).
    outbox: Option<mpsc::UnboundedSender<(Instant, WatchTx, Result<NodeEvent>)>>,
}

impl SessionRec {
    /// Sends a watch event to the client, after `delay`, in order with the session's other events.
    fn send(&mut self, delay: Duration, tx: WatchTx, event: Result<NodeEvent>) {
        if delay.is_zero() && self.outbox.is_none() {
            let _ = tx.send(event);
            return;
        }
        let outbox = self.outbox.get_or_insert_with(|| {
            let (otx, mut orx) = mpsc::unbounded_channel::<(Instant, WatchTx, Result<NodeEvent>)>();
            tokio::spawn(async move {
                while let Some((at, tx, event)) = orx.recv().await {
                    tokio::time::sleep_until(at).await;
                    let _ = tx.send(event);
                }
            });
            otx
        });
        let _ = outbox.send((Instant::now() + delay, tx, event));
    }
}

impl SessionRec {
    /// The send time of the last heartbeat the server answered: heartbeats are sent every `timeout / 4` while
    /// connected, starting with the connection itself.
    fn heartbeat(&self) -> Option<Instant> {
        if !(self.connected && self.alive) {
            return self.frozen_heartbeat;
        }
        let interval = (self.timeout / 4).max(Duration::from_millis(1)).as_nanos();
        let elapsed = Instant::now()
            .saturating_duration_since(self.connected_since)
            .as_nanos();
        let beats = elapsed / interval;
        Some(self.connected_since + Duration::from_nanos((beats * interval).min(u64::MAX as u128) as u64))
    }
}

#[derive(Debug)]
struct State {
    nodes: BTreeMap<String, Node>,
    zxid: i64,
    next_session: SessionId,
    sessions: HashMap<SessionId, SessionRec>,
    watches: HashMap<String, Vec<(SessionId, WatchKind, WatchTx)>>,
    watch_delay: Duration,
}

impl Default for State {
    fn default() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "/".to_owned(),
            Node {
                data: Vec::new(),
                czxid: 0,
                ephemeral_owner: 0,
                container: false,
                children: BTreeSet::new(),
                cversion: 0,
                ctime: 0,
            },
        );
        State {
            nodes,
            zxid: 0,
            next_session: 0x1000,
            sessions: HashMap::new(),
            watches: HashMap::new(),
            watch_delay: Duration::ZERO,
        }
    }
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn check_path(path: &str) -> Result<()> {
    if !path.starts_with('/') || (path.len() > 1 && path.ends_with('/')) || path.contains("//") {
        return Err(Error::Refused(format!("bad path {path:?}")));
    }
    Ok(())
}

impl State {
    fn deliver(&mut self, session: SessionId, tx: WatchTx, event: Result<NodeEvent>) {
        let delay = self.watch_delay;
        match self.sessions.get_mut(&session) {
            Some(rec) if rec.alive && rec.connected => rec.send(delay, tx, event),
            Some(rec) if rec.alive => rec.queued.push((tx, event)),
            Some(rec) => rec.doomed.push(tx),
            None => {}
        }
    }

    fn fire_deleted(&mut self, path: &str) {
        if let Some(ws) = self.watches.remove(path) {
            for (sid, _, tx) in ws {
                self.deliver(sid, tx, Ok(NodeEvent::Deleted));
            }
        }
    }

    fn fire_changed(&mut self, path: &str) {
        let Some(ws) = self.watches.get_mut(path) else { return };
        let (fire, keep): (Vec<_>, Vec<_>) = std::mem::take(ws)
            .into_iter()
            .partition(|(_, k, _)| *k == WatchKind::Data);
        *ws = keep;
        if ws.is_empty() {
            self.watches.remove(path);
        }
        for (sid, _, tx) in fire {
            self.deliver(sid, tx, Ok(NodeEvent::DataChanged));
        }
    }

    /// Removes `path` (no children), fires its watches, and reaps emptied container parents.
    fn remove(&mut self, path: &str) {
        if self.nodes.remove(path).is_none() {
            return;
        }
        self.zxid += 1;
        self.fire_deleted(path);
        let parent = parent_of(path).to_owned();
        let reap = match self.nodes.get_mut(&parent) {
            Some(p) => {
                p.children.remove(name_of(path));
                p.cversion = p.cversion.wrapping_add(1);
                p.container && p.children.is_empty()
            }
            None => false,
        };
        if reap && parent != "/" {
            self.remove(&parent);
        }
    }

    fn create(&mut self, sid: SessionId, path: &str, data: &[u8], mode: CreateMode) -> Result<Created> {
        check_path(path)?;
        if path == "/" {
            return Err(Error::NodeExists(path.to_owned()));
        }
        let parent_path = parent_of(path).to_owned();
        let parent = self
            .nodes
            .get_mut(&parent_path)
            .ok_or_else(|| Error::NoNode(parent_path.clone()))?;
        if parent.ephemeral_owner != 0 {
            return Err(Error::Refused(format!(
                "ephemeral node {parent_path} cannot have children"
            )));
        }
        let full = match mode {
            CreateMode::EphemeralSequential => format!("{path}{:010}", parent.cversion),
            _ => path.to_owned(),
        };
        let name = name_of(&full).to_owned();
        if parent.children.contains(&name) {
            return Err(Error::NodeExists(full));
        }
        parent.children.insert(name);
        parent.cversion = parent.cversion.wrapping_add(1);
        self.zxid += 1;
        let ephemeral = matches!(mode, CreateMode::Ephemeral | CreateMode::EphemeralSequential);
        self.nodes.insert(
            full.clone(),
            Node {
                data: data.to_vec(),
                czxid: self.zxid,
                ephemeral_owner: if ephemeral { sid } else { 0 },
                container: mode == CreateMode::Container,
                children: BTreeSet::new(),
                cversion: 0,
                ctime: now_millis(),
            },
        );
        Ok(Created {
            path: full,
            czxid: self.zxid,
        })
    }

    /// The server ends a session: its ephemerals go, its watches die.
    fn expire_on_server(&mut self, sid: SessionId) {
        let Some(rec) = self.sessions.get_mut(&sid) else {
            return;
        };
        if !rec.alive {
            return;
        }
        rec.alive = false;
        let queued = std::mem::take(&mut rec.queued);
        rec.doomed.extend(queued.into_iter().map(|(tx, _)| tx));
        let owned: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.ephemeral_owner == sid)
            .map(|(p, _)| p.clone())
            .collect();
        for p in owned {
            self.remove(&p);
        }
        let mut doomed = Vec::new();
        for ws in self.watches.values_mut() {
            let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(ws).into_iter().partition(|(s, _, _)| *s == sid);
            *ws = rest;
            doomed.extend(mine.into_iter().map(|(_, _, tx)| tx));
        }
        self.watches.retain(|_, ws| !ws.is_empty());
        if let Some(rec) = self.sessions.get_mut(&sid) {
            rec.doomed.extend(doomed);
        }
    }

    fn open_session(&mut self, status: Arc<watch::Sender<SessionStatus>>, timeout: Duration) -> SessionId {
        self.next_session += 1;
        let sid = self.next_session;
        self.sessions.insert(
            sid,
            SessionRec {
                alive: true,
                connected: true,
                status: status.clone(),
                queued: Vec::new(),
                doomed: Vec::new(),
                lose_create_replies: 0,
                timeout,
                connected_since: Instant::now(),
                frozen_heartbeat: None,
                last_answered: None,
                outbox: None,
            },
        );
        status.send_replace(SessionStatus {
            id: sid,
            state: SessionState::Connected,
        });
        sid
    }

    /// The client learns that its session expired: its watches fail, and a new session is opened for later calls.
    fn client_learns_expiry(&mut self, sid: SessionId) {
        let Some(rec) = self.sessions.remove(&sid) else {
            return;
        };
        let status = rec.status.clone();
        let timeout = rec.timeout;
        for tx in rec.doomed {
            let _ = tx.send(Err(Error::SessionExpired));
        }
        for (tx, _) in rec.queued {
            let _ = tx.send(Err(Error::SessionExpired));
        }
        if status.borrow().state == SessionState::Closed {
            return;
        }
        status.send_replace(SessionStatus {
            id: sid,
            state: SessionState::Expired,
        });
        self.open_session(status, timeout);
    }
}

/// The shared tree, standing in for a ZooKeeper ensemble. Clones share state.
#[derive(Debug, Clone, Default)]
pub struct MemCluster {
    state: Arc<Mutex<State>>,
    /// Request latency in nanoseconds (read without the lock on every request).
    latency_ns: Arc<std::sync::atomic::AtomicU64>,
}

impl MemCluster {
    /// An empty tree (just `/`).
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new client session with the default timeout ([`DEFAULT_SESSION_TIMEOUT`]).
    pub fn client(&self) -> Arc<MemClient> {
        self.client_with_timeout(DEFAULT_SESSION_TIMEOUT)
    }

    /// A new client session with this session timeout.
    pub fn client_with_timeout(&self, timeout: Duration) -> Arc<MemClient> {
        let (tx, _) = watch::channel(SessionStatus {
            id: 0,
            state: SessionState::Suspended,
        });
        let status = Arc::new(tx);
        self.lock().open_session(status.clone(), timeout);
        Arc::new(MemClient {
            cluster: self.clone(),
            status,
            timeout,
        })
    }

    /// The names of `path`'s children, sorted (empty when it does not exist).
    pub fn children(&self, path: &str) -> Vec<String> {
        self.lock()
            .nodes
            .get(path)
            .map(|n| n.children.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether `path` exists.
    pub fn exists(&self, path: &str) -> bool {
        self.lock().nodes.contains_key(path)
    }

    /// Every node path in the tree (including `/`), sorted.
    pub fn paths(&self) -> Vec<String> {
        self.lock().nodes.keys().cloned().collect()
    }

    /// Ephemeral nodes in the tree: `(path, owning session)`.
    pub fn ephemerals(&self) -> Vec<(String, SessionId)> {
        self.lock()
            .nodes
            .iter()
            .filter(|(_, n)| n.ephemeral_owner != 0)
            .map(|(p, n)| (p.clone(), n.ephemeral_owner))
            .collect()
    }

    /// Delays the delivery of every later watch event by `delay` (virtual time).
    pub fn set_watch_delay(&self, delay: Duration) {
        self.lock().watch_delay = delay;
    }

    /// Makes every request take `latency` to reach the server and `latency` again for its reply (virtual time),
    /// so that an acquire can be cancelled while a request is in flight.
    pub fn set_latency(&self, latency: Duration) {
        self.latency_ns.store(
            latency.as_nanos().min(u128::from(u64::MAX)) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Sets the next sequence number handed out under `parent` (to test the wrap of ZooKeeper's signed counter).
    ///
    /// # Notable errors
    /// [`Error::NoNode`] when `parent` does not exist.
    pub fn set_next_sequence(&self, parent: &str, next: i32) -> Result<()> {
        let mut st = self.lock();
        let node = st
            .nodes
            .get_mut(parent)
            .ok_or_else(|| Error::NoNode(parent.to_owned()))?;
        node.cversion = next;
        Ok(())
    }
}

/// One client session on a [`MemCluster`], standing in for one process's ZooKeeper client.
///
/// It implements [`Backend`]. Dropping the last handle closes the session (its ephemeral nodes go), as a process
/// exiting would. After its session expires it opens a new one for later calls, as the ZooKeeper backend does.
#[derive(Debug)]
pub struct MemClient {
    cluster: MemCluster,
    status: Arc<watch::Sender<SessionStatus>>,
    timeout: Duration,
}

impl MemClient {
    /// The cluster this client is connected to.
    pub fn cluster(&self) -> &MemCluster {
        &self.cluster
    }

    /// The current session id.
    pub fn session_id(&self) -> SessionId {
        self.status.borrow().id
    }

    /// The session timeout.
    pub fn session_timeout(&self) -> Duration {
        self.timeout
    }

    /// Expires the session now, on the server and in the client (as Curator's `KillSession` does): its ephemeral
    /// nodes are deleted, its watches fail with `SessionExpired`, and a new session is opened for later calls.
    pub fn expire_session(&self) {
        let sid = self.session_id();
        let mut st = self.cluster.lock();
        st.expire_on_server(sid);
        if st.sessions.get(&sid).is_some_and(|r| r.connected) {
            st.client_learns_expiry(sid);
        }
    }

    /// Cuts the connection for `duration` (virtual time). The session is suspended: requests fail with
    /// `ConnectionLoss`, watch events are held back. If `duration` is shorter than the session timeout the client
    /// reconnects to the same session, watches intact; otherwise the server expires the session when the timeout
    /// elapses (deleting its ephemeral nodes while the client still believes it is only disconnected), and the
    /// client learns of the expiry when the connection comes back.
    ///
    /// Must be called inside a tokio runtime. Does nothing when already disconnected.
    pub fn disconnect_for(self: &Arc<Self>, duration: Duration) {
        let Some(sid) = self.suspend() else {
            return;
        };
        let cluster = self.cluster.clone();
        let timeout = self.timeout;
        tokio::spawn(async move {
            if duration < timeout {
                tokio::time::sleep(duration).await;
                let mut st = cluster.lock();
                let alive = st.sessions.get(&sid).is_some_and(|r| r.alive);
                if alive {
                    reconnect(&mut st, sid);
                } else {
                    st.client_learns_expiry(sid);
                }
            } else {
                tokio::time::sleep(timeout).await;
                cluster.lock().expire_on_server(sid);
                tokio::time::sleep(duration - timeout).await;
                cluster.lock().client_learns_expiry(sid);
            }
        });
    }

    /// The process behind this client stops dead (as with SIGKILL): the client never talks to the server again,
    /// and the server expires the session after its timeout.
    ///
    /// Must be called inside a tokio runtime.
    pub fn crash(self: &Arc<Self>) {
        let Some(sid) = self.suspend() else {
            return;
        };
        let cluster = self.cluster.clone();
        let timeout = self.timeout;
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            cluster.lock().expire_on_server(sid);
        });
    }

    fn suspend(&self) -> Option<SessionId> {
        let sid = self.session_id();
        let mut st = self.cluster.lock();
        let rec = st.sessions.get_mut(&sid)?;
        if !rec.connected || !rec.alive {
            return None;
        }
        rec.frozen_heartbeat = rec.heartbeat();
        rec.connected = false;
        self.status.send_replace(SessionStatus {
            id: sid,
            state: SessionState::Suspended,
        });
        Some(sid)
    }

    /// The replies to the next `n` creates of ephemeral nodes (lock nodes) by this session are lost: each create is
    /// applied on the server, and the caller sees `ConnectionLoss`. Creates of parents are not affected, so a test
    /// can aim the fault at the lock node itself.
    pub fn lose_next_create_replies(&self, n: u32) {
        let sid = self.session_id();
        if let Some(rec) = self.cluster.lock().sessions.get_mut(&sid) {
            rec.lose_create_replies = n;
        }
    }

    /// Closes the session: its ephemeral nodes are deleted and later calls fail with `Closed`.
    pub fn close(&self) {
        let sid = self.session_id();
        let mut st = self.cluster.lock();
        self.status.send_replace(SessionStatus {
            id: sid,
            state: SessionState::Closed,
        });
        st.expire_on_server(sid);
        st.client_learns_expiry(sid);
    }

    /// Runs `f` on the server state for the current session, with the configured latency on both legs, and
    /// records the send time of a request that was answered (not of one whose reply was lost).
    async fn call<T>(&self, f: impl FnOnce(&mut State, SessionId) -> Result<T>) -> Result<T> {
        let sent = Instant::now();
        let latency = Duration::from_nanos(self.cluster.latency_ns.load(std::sync::atomic::Ordering::Relaxed));
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let (r, sid, answered) = {
            let mut st = self.cluster.lock();
            let status = *self.status.borrow();
            let r = match status.state {
                SessionState::Closed => Err(Error::Closed),
                SessionState::Connected => f(&mut st, status.id),
                _ => Err(Error::ConnectionLoss),
            };
            let answered = !matches!(r, Err(Error::ConnectionLoss | Error::Closed));
            if answered && latency.is_zero() {
                // The reply arrives at once: stamp it under the same lock.
                stamp(&mut st, status.id, sent);
            }
            (r, status.id, answered)
        };
        if latency.is_zero() {
            return r;
        }
        tokio::time::sleep(latency).await;
        if answered {
            stamp(&mut self.cluster.lock(), sid, sent);
        }
        r
    }
}

/// Records the send time of an answered request of `sid`.
fn stamp(st: &mut State, sid: SessionId, sent: Instant) {
    if let Some(rec) = st.sessions.get_mut(&sid) {
        if rec.alive && rec.connected {
            rec.last_answered = rec.last_answered.max(Some(sent));
        }
    }
}

fn reconnect(st: &mut State, sid: SessionId) {
    let delay = st.watch_delay;
    let Some(rec) = st.sessions.get_mut(&sid) else {
        return;
    };
    rec.connected = true;
    rec.connected_since = Instant::now();
    let queued = std::mem::take(&mut rec.queued);
    rec.status.send_replace(SessionStatus {
        id: sid,
        state: SessionState::Connected,
    });
    for (tx, ev) in queued {
        rec.send(delay, tx, ev);
    }
}

impl Drop for MemClient {
    fn drop(&mut self) {
        self.close();
    }
}

#[async_trait]
impl Backend for MemClient {
    async fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<Created> {
        self.call(|st, sid| {
            let created = st.create(sid, path, data, mode)?;
            let ephemeral = matches!(mode, CreateMode::Ephemeral | CreateMode::EphemeralSequential);
            let rec = st.sessions.get_mut(&sid);
            if let Some(rec) = rec.filter(|r| ephemeral && r.lose_create_replies > 0) {
                rec.lose_create_replies -= 1;
                return Err(Error::ConnectionLoss);
            }
            Ok(created)
        })
        .await
    }

    async fn create_and_list(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        parent: &str,
    ) -> (Result<Created>, Result<Vec<String>>) {
        // One request in, both answers out, as ZooKeeper pipelines them.
        let mut listed = Err(Error::ConnectionLoss);
        let created = self
            .call(|st, sid| {
                let created = st.create(sid, path, data, mode)?;
                let ephemeral = matches!(mode, CreateMode::Ephemeral | CreateMode::EphemeralSequential);
                if let Some(rec) = st
                    .sessions
                    .get_mut(&sid)
                    .filter(|r| ephemeral && r.lose_create_replies > 0)
                {
                    rec.lose_create_replies -= 1;
                    return Err(Error::ConnectionLoss);
                }
                listed = st
                    .nodes
                    .get(parent)
                    .map(|n| n.children.iter().cloned().collect())
                    .ok_or_else(|| Error::NoNode(parent.to_owned()));
                Ok(created)
            })
            .await;
        (created, listed)
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        self.call(|st, _| {
            st.nodes
                .get(path)
                .map(|n| n.children.iter().cloned().collect())
                .ok_or_else(|| Error::NoNode(path.to_owned()))
        })
        .await
    }

    async fn get(&self, path: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        self.call(|st, _| {
            Ok(st
                .nodes
                .get(path)
                .map(|n| (n.data.clone(), Stat::new(n.czxid, n.ephemeral_owner, n.ctime))))
        })
        .await
    }

    async fn watch_deletion(&self, path: &str) -> Result<Option<DeletionWatch>> {
        self.call(|st, sid| {
            if !st.nodes.contains_key(path) {
                return Ok(None);
            }
            let (tx, rx) = oneshot::channel();
            let ws = st.watches.entry(path.to_owned()).or_default();
            ws.retain(|(_, _, tx)| !tx.is_closed());
            ws.push((sid, WatchKind::Deletion, tx));
            let w: DeletionWatch = Box::pin(async move {
                match rx.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(Error::Closed),
                }
            });
            Ok(Some(w))
        })
        .await
    }

    async fn get_and_watch(&self, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
        self.call(|st, sid| {
            let Some(node) = st.nodes.get(path) else {
                return Ok(None);
            };
            let data = node.data.clone();
            let (tx, rx) = oneshot::channel();
            let ws = st.watches.entry(path.to_owned()).or_default();
            ws.retain(|(_, _, tx)| !tx.is_closed());
            ws.push((sid, WatchKind::Data, tx));
            let w: NodeWatch = Box::pin(async move { rx.await.unwrap_or(Err(Error::Closed)) });
            Ok(Some((data, w)))
        })
        .await
    }

    fn set_data_unacked(&self, path: &str, data: &[u8]) {
        let mut st = self.cluster.lock();
        if self.status.borrow().state != SessionState::Connected {
            return; // sent into a broken connection: lost
        }
        if let Some(node) = st.nodes.get_mut(path) {
            node.data = data.to_vec();
            st.zxid += 1;
            st.fire_changed(path);
        }
    }

    async fn delete(&self, path: &str) -> Result<()> {
        self.call(|st, _| {
            check_path(path)?;
            let node = st.nodes.get(path).ok_or_else(|| Error::NoNode(path.to_owned()))?;
            if !node.children.is_empty() {
                return Err(Error::NotEmpty(path.to_owned()));
            }
            if path == "/" {
                return Err(Error::Refused("cannot delete /".into()));
            }
            st.remove(path);
            Ok(())
        })
        .await
    }

    fn session_status(&self) -> SessionStatus {
        *self.status.borrow()
    }

    fn session(&self) -> watch::Receiver<SessionStatus> {
        self.status.subscribe()
    }

    fn lease(&self) -> Lease {
        let sid = self.session_id();
        let st = self.cluster.lock();
        // Only what the client can know: a session the server expired behind a cut connection keeps its frozen
        // lease until the client learns of the expiry.
        match st.sessions.get(&sid) {
            Some(rec) => Lease {
                session: sid,
                answered_send: rec.last_answered.max(rec.heartbeat()),
                session_timeout: rec.timeout,
            },
            None => Lease {
                session: sid,
                answered_send: None,
                session_timeout: self.timeout,
            },
        }
    }
}
