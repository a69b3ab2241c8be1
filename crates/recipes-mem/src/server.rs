//! The server and the network between it and its clients: sessions, watches, and the requests, replies and watch
//! events in flight, each an event of its own.
//!
//! A request goes through three events, as on a real socket: it is *sent* (queued on its session's connection, in
//! order), *applied* by the server (atomically, under the session it was sent on, which must still be alive), and
//! its reply is *delivered* to the client (in order with the session's other replies and watch events). A caller
//! that drops its future after sending does not stop the request: it is applied anyway, as it would be by
//! ZooKeeper. When a connection breaks, the replies not yet delivered are lost (their callers see connection
//! loss), and the requests not yet applied may still be applied by the server ("orphans") until the client
//! reconnects.
//!
//! In the automatic mode (the default) a pump task applies and delivers after the configured latency, or at once
//! without latency. In the controlled mode (see [`Controller`](crate::Controller)) nothing happens by itself: a
//! model checker picks every event.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use recipes_core::mutants::{is_active, Mutant};
use recipes_core::{CreateMode, Created, Error, NodeEvent, Result, SessionId, SessionState, SessionStatus, Stat};
use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use crate::tree::Tree;

pub(crate) type WatchTx = oneshot::Sender<Result<NodeEvent>>;
pub(crate) type ReplyTx = oneshot::Sender<Result<Reply>>;

/// How long the connection is down after a reply was lost on purpose (`lose_next_create_replies`).
const LOST_REPLY_BLIP: Duration = Duration::from_millis(10);

/// A request, as sent on the wire.
#[derive(Debug)]
pub(crate) enum Op {
    Create {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
    },
    Children {
        path: String,
    },
    Get {
        path: String,
    },
    /// An exists-watch: registered (when the node exists) before the reply says whether it exists.
    Exists {
        path: String,
        watch: WatchTx,
    },
    /// A data watch with a read of the data.
    GetWatch {
        path: String,
        watch: WatchTx,
    },
    SetData {
        path: String,
        data: Vec<u8>,
    },
    Delete {
        path: String,
    },
    /// Catch up with the leader: the one server here is always caught up.
    Sync {
        path: String,
    },
}

impl Op {
    /// What the request reads and writes of the tree, for partial-order reduction.
    fn access(&self, sid: SessionId) -> Access {
        let node = |p: &str| format!("node:{p}");
        let children = |p: &str| format!("children:{}", crate::tree::parent_of(p));
        let (reads, writes) = match self {
            Op::Create { path, .. } | Op::Delete { path } => (vec![], vec![node(path), children(path)]),
            Op::SetData { path, .. } => (vec![], vec![node(path)]),
            Op::Children { path } => (vec![format!("children:{path}")], vec![]),
            Op::Get { path } | Op::Exists { path, .. } | Op::GetWatch { path, .. } => (vec![node(path)], vec![]),
            Op::Sync { .. } => (vec![], vec![]),
        };
        Access {
            session: Some(sid),
            reads,
            writes,
            global: false,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Op::Create { path, mode, .. } => format!("create {path} ({mode:?})"),
            Op::Children { path } => format!("list {path}"),
            Op::Get { path } => format!("get {path}"),
            Op::Exists { path, .. } => format!("exists+watch {path}"),
            Op::GetWatch { path, .. } => format!("get+watch {path}"),
            Op::SetData { path, .. } => format!("set {path}"),
            Op::Delete { path } => format!("delete {path}"),
            Op::Sync { path } => format!("sync {path}"),
        }
    }

    fn is_ephemeral_create(&self) -> bool {
        matches!(
            self,
            Op::Create {
                mode: CreateMode::Ephemeral | CreateMode::EphemeralSequential,
                ..
            }
        )
    }
}

/// A reply, as received.
#[derive(Debug)]
pub(crate) enum Reply {
    Created(Created),
    Names(Vec<String>),
    Node(Option<(Vec<u8>, Stat)>),
    Exists(Option<Stat>),
    Done,
}

/// What a watch waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchKind {
    /// Deletion only (an exists-watch).
    Deletion,
    /// Deletion or a change of data.
    Data,
}

/// The client side of a `MemClient`, shared with the server's records of its sessions.
#[derive(Debug)]
pub(crate) struct ClientShared {
    pub status: watch::Sender<SessionStatus>,
    pub timeout: Duration,
}

impl ClientShared {
    pub fn current(&self) -> SessionStatus {
        *self.status.borrow()
    }
}

#[derive(Debug)]
struct Request {
    op: Op,
    reply: Option<ReplyTx>,
    sent: Instant,
    due: Instant,
    seq: u64,
}

#[derive(Debug)]
enum Inbound {
    Reply {
        tx: ReplyTx,
        result: Result<Reply>,
        sent: Instant,
        due: Instant,
        seq: u64,
    },
    Event {
        tx: WatchTx,
        event: Result<NodeEvent>,
        due: Instant,
        seq: u64,
    },
}

impl Inbound {
    fn due(&self) -> (Instant, u64) {
        match self {
            Inbound::Reply { due, seq, .. } | Inbound::Event { due, seq, .. } => (*due, *seq),
        }
    }
}

/// One session: the server's record of it, and the state of its client's connection.
#[derive(Debug)]
pub(crate) struct Session {
    client: Arc<ClientShared>,
    /// Alive on the server.
    pub alive: bool,
    /// The client's connection is up.
    pub up: bool,
    /// The client process is dead: nothing reaches it, and it sends nothing more.
    pub crashed: bool,
    /// Counts the connection's breaks: a timer scheduled for one break does nothing after a later one.
    epoch: u64,
    /// Sent on the current connection, not yet applied.
    outbound: VecDeque<Request>,
    /// Sent on a connection that broke, not yet applied: the server may still apply them.
    orphans: VecDeque<Request>,
    /// Replies and watch events on their way to the client.
    inbound: VecDeque<Inbound>,
    /// Watches of this session that died with it on the server, failed when the client learns of the expiry.
    doomed: Vec<WatchTx>,
    lose_create_replies: u32,
    pub timeout: Duration,
    /// When the current connection was made (heartbeats run from then on, every `timeout / 4`).
    connected_since: Instant,
    /// The send time of the last answered heartbeat before the connection was lost.
    frozen_heartbeat: Option<Instant>,
    /// The send time of the last answered request.
    last_answered: Option<Instant>,
}

impl Session {
    /// Whether the oldest request in flight must wait until the orphans of a broken connection have landed or been
    /// lost: a write or a `sync`. An orphan the leader began to commit before the session moved gets a transaction id
    /// below every later write of the session, and a sync is answered only once it is committed; a read of the new
    /// connection may be answered before it lands (by a server that has not applied it yet).
    fn waits_for_orphans(&self) -> bool {
        !self.orphans.is_empty()
            && self.outbound.front().is_some_and(|r| {
                matches!(
                    r.op,
                    Op::Sync { .. } | Op::Create { .. } | Op::Delete { .. } | Op::SetData { .. }
                )
            })
    }

    /// The send time of the last heartbeat the server answered: heartbeats are sent every `timeout / 4` while
    /// connected, starting with the connection itself.
    fn heartbeat(&self, now: Instant) -> Option<Instant> {
        if !(self.up && self.alive) {
            return self.frozen_heartbeat;
        }
        let interval = (self.timeout / 4).max(Duration::from_millis(1)).as_nanos();
        let elapsed = now.saturating_duration_since(self.connected_since).as_nanos();
        let beats = elapsed / interval;
        Some(self.connected_since + Duration::from_nanos((beats * interval).min(u64::MAX as u128) as u64))
    }

    /// The lease: the send time of the last answered request or heartbeat.
    pub fn answered_send(&self, now: Instant) -> Option<Instant> {
        self.last_answered.max(self.heartbeat(now))
    }

    fn publish(&self, id: SessionId, state: SessionState) {
        let new = SessionStatus { id, state };
        self.client.status.send_if_modified(|s| {
            if s.state == SessionState::Closed || *s == new {
                false
            } else {
                *s = new;
                true
            }
        });
    }

    /// Whether this session is the one its client uses now.
    fn is_current(&self, id: SessionId) -> bool {
        self.client.current().id == id
    }
}

/// A scheduled event of the world: a client reconnecting, or the server expiring a session it has not heard from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// The client of this session reconnects after the break of this epoch: to the same session if it is alive,
    /// else it learns of the expiry.
    Reconnect(SessionId, u64),
    /// The server expires this session, unless its client reconnected after the break of this epoch.
    ServerExpire(SessionId, u64),
}

/// What an event touches, so that a model checker can tell which events commute (partial-order reduction): two
/// events of different sessions commute when neither writes what the other reads or writes. Timers are global.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// The session whose queue the event takes from (`None`: none, or several).
    pub session: Option<SessionId>,
    /// What it reads: `node:<path>` (a node's data or existence), `children:<path>` (a node's child list).
    pub reads: Vec<String>,
    /// What it writes, in the same terms.
    pub writes: Vec<String>,
    /// Whether it may touch anything (a timer: reconnection, expiry).
    pub global: bool,
}

impl Access {
    /// Touches everything: commutes with nothing.
    pub fn global() -> Self {
        Access {
            global: true,
            ..Access::default()
        }
    }

    /// Touches nothing the server keeps, and no session's queue of requests (a delivery to a client).
    fn local(&self) -> bool {
        !self.global && self.session.is_none() && self.reads.is_empty() && self.writes.is_empty()
    }

    /// Whether the two events commute.
    pub fn independent(&self, other: &Access) -> bool {
        if self.global || other.global {
            return false;
        }
        if self.local() || other.local() {
            // A delivery pops the head of its session's inbound queue and lets its client run; every request the
            // client then sends goes behind those already queued, so it commutes with every network event.
            return true;
        }
        match (self.session, other.session) {
            (Some(a), Some(b)) if a != b => {}
            _ => return false,
        }
        let hits = |w: &[String], r: &[String]| w.iter().any(|x| r.contains(x));
        !(hits(&self.writes, &other.reads) || hits(&self.writes, &other.writes) || hits(&other.writes, &self.reads))
    }
}

/// An event the controlled mode lets a model checker pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NetEvent {
    /// The server applies the oldest request this session's client sent that is still in flight.
    Apply(SessionId),
    /// The server applies the oldest request that was in flight when this session's connection broke.
    ApplyOrphan(SessionId),
    /// The requests still in flight from this session's broken connection are lost.
    DropOrphans(SessionId),
    /// The oldest reply or watch event on its way to this session's client arrives.
    Deliver(SessionId),
    /// A scheduled event comes due (its sequence number): a reconnection, or the server expiring a session.
    Timer(u64),
}

/// The whole simulated service.
#[derive(Debug)]
pub(crate) struct State {
    pub tree: Tree,
    pub sessions: BTreeMap<SessionId, Session>,
    next_session: SessionId,
    watches: BTreeMap<String, Vec<(SessionId, WatchKind, WatchTx)>>,
    pub latency: Duration,
    pub watch_delay: Duration,
    pub reap_delay: Duration,
    pub controlled: bool,
    timers: BTreeMap<(Instant, u64), Timer>,
    seq: u64,
    /// Counts every send, application, delivery and state change (for the model checker's "nothing moves").
    pub activity: u64,
    pub activity_notify: Arc<Notify>,
}

impl Default for State {
    fn default() -> Self {
        State {
            tree: Tree::default(),
            sessions: BTreeMap::new(),
            next_session: 0x1000,
            watches: BTreeMap::new(),
            latency: Duration::ZERO,
            watch_delay: Duration::ZERO,
            reap_delay: Duration::from_secs(60),
            controlled: false,
            timers: BTreeMap::new(),
            seq: 0,
            activity: 0,
            activity_notify: Arc::new(Notify::new()),
        }
    }
}

impl State {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn touch(&mut self) {
        self.activity += 1;
        self.activity_notify.notify_one();
    }

    /// Brings the server up to `now`: reaps the containers that have been empty long enough.
    pub fn catch_up(&mut self, now: Instant) {
        for path in self.tree.reap(now, self.reap_delay) {
            self.fire_deleted(&path, now);
        }
    }

    pub fn open_session(&mut self, client: Arc<ClientShared>, now: Instant) -> SessionId {
        self.next_session += 1;
        let sid = self.next_session;
        let rec = Session {
            timeout: client.timeout,
            client,
            alive: true,
            up: true,
            crashed: false,
            epoch: 0,
            outbound: VecDeque::new(),
            orphans: VecDeque::new(),
            inbound: VecDeque::new(),
            doomed: Vec::new(),
            lose_create_replies: 0,
            connected_since: now,
            frozen_heartbeat: None,
            last_answered: None,
        };
        rec.client.status.send_replace(SessionStatus {
            id: sid,
            state: SessionState::Connected,
        });
        self.sessions.insert(sid, rec);
        self.touch();
        sid
    }

    /// Sends a request on session `sid`. Checked first: the backend's contract binds a request to the session it
    /// names; a request of an ended session, or one sent while disconnected, is not sent at all.
    pub fn send(
        &mut self,
        client: &ClientShared,
        sid: SessionId,
        op: Op,
        now: Instant,
    ) -> Result<oneshot::Receiver<Result<Reply>>> {
        let current = client.current();
        let sid = if is_active(Mutant::UnboundRequests) {
            current.id
        } else {
            sid
        };
        match current.state {
            SessionState::Closed => return Err(Error::Closed),
            _ if current.id != sid => return Err(Error::SessionExpired),
            SessionState::Expired => return Err(Error::SessionExpired),
            SessionState::Connected => {}
            _ => return Err(Error::ConnectionLoss),
        }
        let latency = self.latency;
        let seq = self.next_seq();
        let Some(rec) = self.sessions.get_mut(&sid) else {
            return Err(Error::SessionExpired);
        };
        if !rec.up || rec.crashed {
            return Err(Error::ConnectionLoss);
        }
        let (tx, rx) = oneshot::channel();
        let due = rec.outbound.back().map_or(now + latency, |r| r.due.max(now + latency));
        rec.outbound.push_back(Request {
            op,
            reply: Some(tx),
            sent: now,
            due,
            seq,
        });
        self.touch();
        if self.immediate() {
            self.apply(sid, false, now);
            self.deliver_ready(sid, now);
        }
        Ok(rx)
    }

    /// Whether the automatic mode applies and delivers at once (no latency, no watch delay).
    fn immediate(&self) -> bool {
        !self.controlled && self.latency.is_zero() && self.watch_delay.is_zero()
    }

    /// Delivers, at once, what is ready on `sid`'s inbound queue (immediate mode only).
    fn deliver_ready(&mut self, sid: SessionId, now: Instant) {
        while self
            .sessions
            .get(&sid)
            .is_some_and(|r| r.up && !r.crashed && !r.inbound.is_empty())
        {
            self.deliver(sid, now);
        }
    }

    /// Applies the oldest request in flight of `sid` (an orphan of a broken connection when `orphan`).
    pub fn apply(&mut self, sid: SessionId, orphan: bool, now: Instant) {
        self.catch_up(now);
        let Some(rec) = self.sessions.get_mut(&sid) else { return };
        let queue = if orphan { &mut rec.orphans } else { &mut rec.outbound };
        let Some(req) = queue.pop_front() else { return };
        let alive = rec.alive;
        let ephemeral_create = req.op.is_ephemeral_create();
        let result = if alive {
            self.execute(sid, req.op, now)
        } else {
            Err(Error::SessionExpired)
        };
        // A lost reply is aimed at a lock node that was made (not at a create that failed).
        let lose = result.is_ok()
            && ephemeral_create
            && self.sessions.get_mut(&sid).is_some_and(|rec| {
                let lose = rec.lose_create_replies > 0;
                rec.lose_create_replies = rec.lose_create_replies.saturating_sub(1);
                lose
            });
        self.touch();
        if let Some(tx) = req.reply {
            self.push_inbound(
                sid,
                |due, seq| Inbound::Reply {
                    tx,
                    result,
                    sent: req.sent,
                    due,
                    seq,
                },
                now,
            );
        }
        if lose {
            // The reply is lost with the connection; the client reconnects to the same session shortly.
            if let Some(epoch) = self.link_down(sid, now) {
                self.schedule(now + LOST_REPLY_BLIP, Timer::Reconnect(sid, epoch));
            }
        }
    }

    fn push_inbound(&mut self, sid: SessionId, make: impl FnOnce(Instant, u64) -> Inbound, now: Instant) {
        let seq = self.next_seq();
        let delay = self.latency;
        let Some(rec) = self.sessions.get_mut(&sid) else { return };
        let due = rec.inbound.back().map_or(now + delay, |i| i.due().0.max(now + delay));
        rec.inbound.push_back(make(due, seq));
    }

    /// Runs a request on the tree, as session `sid`.
    fn execute(&mut self, sid: SessionId, op: Op, now: Instant) -> Result<Reply> {
        match op {
            Op::Create { path, data, mode } => {
                let created = self.tree.create(sid, &path, &data, mode)?;
                Ok(Reply::Created(created))
            }
            Op::Children { path } => self.tree.children(&path).map(Reply::Names),
            Op::Get { path } => Ok(Reply::Node(self.tree.node(&path).map(|n| (n.data.clone(), n.stat())))),
            Op::Exists { path, watch } => {
                let stat = self.tree.node(&path).map(|n| n.stat());
                if stat.is_some() {
                    self.watches
                        .entry(path)
                        .or_default()
                        .push((sid, WatchKind::Deletion, watch));
                }
                Ok(Reply::Exists(stat))
            }
            Op::GetWatch { path, watch } => {
                let found = self.tree.node(&path).map(|n| (n.data.clone(), n.stat()));
                if found.is_some() {
                    self.watches
                        .entry(path)
                        .or_default()
                        .push((sid, WatchKind::Data, watch));
                }
                Ok(Reply::Node(found))
            }
            Op::SetData { path, data } => {
                self.tree.set_data(&path, &data)?;
                self.fire_changed(&path, now);
                Ok(Reply::Done)
            }
            Op::Delete { path } => {
                self.tree.delete(&path, now)?;
                self.fire_deleted(&path, now);
                Ok(Reply::Done)
            }
            Op::Sync { .. } => Ok(Reply::Done),
        }
    }

    /// Delivers the oldest reply or watch event on its way to `sid`'s client.
    pub fn deliver(&mut self, sid: SessionId, now: Instant) {
        let Some(rec) = self.sessions.get_mut(&sid) else { return };
        let Some(item) = rec.inbound.pop_front() else { return };
        match item {
            Inbound::Reply { tx, result, sent, .. } => {
                let answered = !matches!(result, Err(Error::ConnectionLoss | Error::Closed));
                if answered && rec.alive && rec.up {
                    rec.last_answered = rec.last_answered.max(Some(sent));
                }
                let _ = tx.send(result);
            }
            Inbound::Event { tx, event, .. } => {
                let _ = tx.send(event);
            }
        }
        let _ = now;
        self.touch();
    }

    fn deliver_event(&mut self, sid: SessionId, tx: WatchTx, event: Result<NodeEvent>, now: Instant) {
        let watch_delay = self.watch_delay;
        let immediate = self.immediate();
        let seq = self.next_seq();
        let Some(rec) = self.sessions.get_mut(&sid) else { return };
        if !rec.alive {
            rec.doomed.push(tx);
            return;
        }
        if immediate && rec.up && rec.inbound.is_empty() {
            let _ = tx.send(event);
            return;
        }
        let due = rec
            .inbound
            .back()
            .map_or(now + watch_delay, |i| i.due().0.max(now + watch_delay));
        rec.inbound.push_back(Inbound::Event { tx, event, due, seq });
    }

    fn fire_deleted(&mut self, path: &str, now: Instant) {
        if let Some(ws) = self.watches.remove(path) {
            for (sid, _, tx) in ws {
                self.deliver_event(sid, tx, Ok(NodeEvent::Deleted), now);
            }
        }
    }

    fn fire_changed(&mut self, path: &str, now: Instant) {
        let Some(ws) = self.watches.get_mut(path) else { return };
        let (fire, keep): (Vec<_>, Vec<_>) = std::mem::take(ws)
            .into_iter()
            .partition(|(_, k, _)| *k == WatchKind::Data);
        *ws = keep;
        if ws.is_empty() {
            self.watches.remove(path);
        }
        for (sid, _, tx) in fire {
            self.deliver_event(sid, tx, Ok(NodeEvent::DataChanged), now);
        }
    }

    /// The connection of `sid` breaks: replies on their way are lost (their callers see connection loss), requests
    /// not yet applied become orphans, watch events wait for the reconnection. Returns the break's epoch (`None`
    /// when the connection was already down).
    pub fn link_down(&mut self, sid: SessionId, now: Instant) -> Option<u64> {
        let rec = self.sessions.get_mut(&sid)?;
        if !rec.up {
            return None;
        }
        rec.frozen_heartbeat = rec.heartbeat(now);
        rec.up = false;
        rec.epoch += 1;
        let epoch = rec.epoch;
        let inbound = std::mem::take(&mut rec.inbound);
        for item in inbound {
            match item {
                Inbound::Reply { tx, .. } => {
                    let _ = tx.send(Err(Error::ConnectionLoss));
                }
                event @ Inbound::Event { .. } => rec.inbound.push_back(event),
            }
        }
        let outbound = std::mem::take(&mut rec.outbound);
        for mut req in outbound {
            if let Some(tx) = req.reply.take() {
                let _ = tx.send(Err(Error::ConnectionLoss));
            }
            rec.orphans.push_back(req);
        }
        if rec.is_current(sid) {
            rec.publish(sid, SessionState::Suspended);
        }
        self.touch();
        Some(epoch)
    }

    /// The client of `sid` reconnects: to its session if the server still has it, else it learns of the expiry.
    pub fn reconnect(&mut self, sid: SessionId, now: Instant) {
        let Some(rec) = self.sessions.get_mut(&sid) else { return };
        if rec.up || rec.crashed {
            return;
        }
        if !rec.alive {
            self.client_learns_expiry(sid, now);
            return;
        }
        rec.up = true;
        rec.connected_since = now;
        // Requests of the broken connection may still land after the reconnection (ZooKeeper: the old server may have
        // forwarded them to the leader before the session moved), though before any later write or `sync` of the
        // session (see `waits_for_orphans`). So orphans stay in flight.
        let watch_delay = self.watch_delay;
        for item in rec.inbound.iter_mut() {
            if let Inbound::Event { due, .. } = item {
                *due = (*due).max(now + watch_delay);
            }
        }
        rec.publish(sid, SessionState::Connected);
        self.touch();
        if self.immediate() {
            self.deliver_ready(sid, now);
        }
    }

    /// The server ends `sid`: its ephemeral nodes go (firing other sessions' watches), its own watches die.
    pub fn expire_on_server(&mut self, sid: SessionId, now: Instant) {
        let Some(rec) = self.sessions.get_mut(&sid) else { return };
        if !rec.alive {
            return;
        }
        rec.alive = false;
        rec.orphans.clear();
        for p in self.tree.ephemerals_of(sid) {
            if self.tree.remove(&p, now) {
                self.fire_deleted(&p, now);
            }
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
        self.touch();
    }

    /// The client of `sid` learns that its session is over: what the server answered before reaches it, its
    /// watches fail, requests still in flight fail, and (unless the client was closed) a new session is opened.
    pub fn client_learns_expiry(&mut self, sid: SessionId, now: Instant) {
        let Some(rec) = self.sessions.remove(&sid) else { return };
        let client = rec.client.clone();
        for item in rec.inbound {
            match item {
                Inbound::Reply { tx, result, .. } => {
                    let _ = tx.send(result);
                }
                Inbound::Event { tx, event, .. } => {
                    let _ = tx.send(event);
                }
            }
        }
        for tx in rec.doomed {
            let _ = tx.send(Err(Error::SessionExpired));
        }
        let closed = client.current().state == SessionState::Closed;
        let carried: Vec<Request> = if is_active(Mutant::UnboundRequests) && !closed {
            rec.outbound.into_iter().collect()
        } else {
            for mut req in rec.outbound {
                if let Some(tx) = req.reply.take() {
                    let _ = tx.send(Err(if closed { Error::Closed } else { Error::SessionExpired }));
                }
            }
            Vec::new()
        };
        self.touch();
        if closed {
            return;
        }
        client.status.send_replace(SessionStatus {
            id: sid,
            state: SessionState::Expired,
        });
        let new = self.open_session(client, now);
        if let Some(rec) = self.sessions.get_mut(&new) {
            // The bug this mutant stands for: requests sent on the old session run on the new one.
            rec.outbound.extend(carried);
        }
    }

    /// The server expires `sid` and, if its client is connected, the client learns at once (Curator's
    /// `KillSession`).
    pub fn kill(&mut self, sid: SessionId, now: Instant) {
        self.expire_on_server(sid, now);
        if self.sessions.get(&sid).is_some_and(|r| r.up) {
            self.client_learns_expiry(sid, now);
        }
    }

    /// The client process dies: nothing more reaches it or comes from it; the server expires the session after its
    /// timeout.
    pub fn crash(&mut self, sid: SessionId, now: Instant) {
        let down = self.link_down(sid, now);
        let Some(rec) = self.sessions.get_mut(&sid) else { return };
        rec.crashed = true;
        let (at, epoch) = (now + rec.timeout, rec.epoch);
        if down.is_some() || rec.alive {
            self.schedule(at, Timer::ServerExpire(sid, epoch));
        }
    }

    /// Cuts the connection of `sid` for `d`: past the session timeout the server expires the session meanwhile.
    pub fn partition(&mut self, sid: SessionId, d: Duration, now: Instant) {
        let Some(rec) = self.sessions.get(&sid) else { return };
        if !rec.up || !rec.alive {
            return;
        }
        let timeout = rec.timeout;
        let Some(epoch) = self.link_down(sid, now) else { return };
        if d >= timeout {
            self.schedule(now + timeout, Timer::ServerExpire(sid, epoch));
        }
        self.schedule(now + d, Timer::Reconnect(sid, epoch));
    }

    /// The client closes `sid`: its ephemeral nodes go, and later calls fail with `Closed`.
    pub fn close(&mut self, sid: SessionId, now: Instant) {
        if let Some(rec) = self.sessions.get(&sid) {
            rec.client.status.send_replace(SessionStatus {
                id: sid,
                state: SessionState::Closed,
            });
        }
        self.expire_on_server(sid, now);
        self.client_learns_expiry(sid, now);
    }

    /// Deletes a node from outside every session (an operator's tool), firing its watches.
    pub fn operator_delete(&mut self, path: &str, now: Instant) -> Result<()> {
        self.tree.delete(path, now)?;
        self.fire_deleted(path, now);
        self.touch();
        Ok(())
    }

    pub fn lose_create_replies(&mut self, sid: SessionId, n: u32) {
        if let Some(rec) = self.sessions.get_mut(&sid) {
            rec.lose_create_replies = n;
        }
    }

    pub fn schedule(&mut self, at: Instant, timer: Timer) {
        let seq = self.next_seq();
        self.timers.insert((at, seq), timer);
        self.touch();
    }

    fn fire(&mut self, timer: Timer, now: Instant) {
        match timer {
            Timer::Reconnect(sid, epoch) => {
                if self.sessions.get(&sid).is_some_and(|r| r.epoch == epoch) {
                    self.reconnect(sid, now);
                }
            }
            Timer::ServerExpire(sid, epoch) => {
                if self.sessions.get(&sid).is_some_and(|r| r.epoch == epoch && !r.up) {
                    self.expire_on_server(sid, now);
                }
            }
        }
    }

    /// The earliest moment something is due in the automatic mode: a timer, a request, a delivery or a reap.
    pub fn next_due(&self) -> Option<Instant> {
        let mut next = self.timers.keys().next().map(|(at, _)| *at);
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        for rec in self.sessions.values() {
            if let Some(r) = rec.outbound.front().or(rec.orphans.front()) {
                consider(r.due);
            }
            if rec.up && !rec.crashed {
                if let Some(i) = rec.inbound.front() {
                    consider(i.due().0);
                }
            }
        }
        if let Some(t) = self.tree.next_reap(self.reap_delay) {
            consider(t);
        }
        next
    }

    /// Runs everything due by `now`, in order (the automatic mode's pump).
    pub fn run_due(&mut self, now: Instant) {
        self.catch_up(now);
        loop {
            // The earliest due item: (due, seq, what).
            let mut best: Option<(Instant, u64, NetEvent)> = None;
            let mut consider = |due: Instant, seq: u64, e: NetEvent| {
                if due <= now && best.as_ref().map_or(true, |(d, s, _)| (due, seq) < (*d, *s)) {
                    best = Some((due, seq, e));
                }
            };
            if let Some(((at, seq), _)) = self.timers.iter().next() {
                consider(*at, *seq, NetEvent::Timer(*seq));
            }
            for (sid, rec) in &self.sessions {
                if let Some(r) = rec.outbound.front().filter(|_| !rec.waits_for_orphans()) {
                    consider(r.due, r.seq, NetEvent::Apply(*sid));
                }
                if let Some(r) = rec.orphans.front() {
                    consider(r.due, r.seq, NetEvent::ApplyOrphan(*sid));
                }
                if rec.up && !rec.crashed {
                    if let Some(i) = rec.inbound.front() {
                        let (due, seq) = i.due();
                        consider(due, seq, NetEvent::Deliver(*sid));
                    }
                }
            }
            let Some((_, _, e)) = best else { return };
            self.fire_event(e, now);
        }
    }

    /// The events the controlled mode may pick now.
    pub fn events(&self, now: Instant) -> Vec<NetEvent> {
        let mut out = Vec::new();
        for (sid, rec) in &self.sessions {
            if !rec.outbound.is_empty() && !rec.waits_for_orphans() {
                out.push(NetEvent::Apply(*sid));
            }
            if !rec.orphans.is_empty() {
                out.push(NetEvent::ApplyOrphan(*sid));
                out.push(NetEvent::DropOrphans(*sid));
            }
            if rec.up && !rec.crashed && !rec.inbound.is_empty() {
                out.push(NetEvent::Deliver(*sid));
            }
        }
        for (at, seq) in self.timers.keys() {
            if *at <= now {
                out.push(NetEvent::Timer(*seq));
            }
        }
        out
    }

    /// The earliest scheduled timer (the controlled mode advances time to it).
    pub fn next_timer(&self) -> Option<Instant> {
        self.timers.keys().next().map(|(at, _)| *at)
    }

    /// Applies one event. Returns `false` when it is not enabled.
    pub fn fire_event(&mut self, e: NetEvent, now: Instant) -> bool {
        match e {
            NetEvent::Apply(sid) => {
                if self
                    .sessions
                    .get(&sid)
                    .map_or(true, |r| r.outbound.is_empty() || r.waits_for_orphans())
                {
                    return false;
                }
                self.apply(sid, false, now);
            }
            NetEvent::ApplyOrphan(sid) => {
                if self.sessions.get(&sid).map_or(true, |r| r.orphans.is_empty()) {
                    return false;
                }
                self.apply(sid, true, now);
            }
            NetEvent::DropOrphans(sid) => {
                let Some(rec) = self.sessions.get_mut(&sid) else {
                    return false;
                };
                if rec.orphans.is_empty() {
                    return false;
                }
                rec.orphans.clear();
                self.touch();
            }
            NetEvent::Deliver(sid) => {
                if self
                    .sessions
                    .get(&sid)
                    .map_or(true, |r| !r.up || r.crashed || r.inbound.is_empty())
                {
                    return false;
                }
                self.deliver(sid, now);
            }
            NetEvent::Timer(seq) => {
                let Some(key) = self.timers.keys().find(|(_, s)| *s == seq).copied() else {
                    return false;
                };
                let Some(timer) = self.timers.remove(&key) else {
                    return false;
                };
                self.touch();
                self.fire(timer, now);
            }
        }
        true
    }

    /// What `e` would touch if it happened now.
    pub fn access(&self, e: NetEvent) -> Access {
        match e {
            NetEvent::Apply(s) => self
                .sessions
                .get(&s)
                .and_then(|r| r.outbound.front())
                .map_or_else(Access::global, |r| r.op.access(s)),
            NetEvent::ApplyOrphan(s) => self
                .sessions
                .get(&s)
                .and_then(|r| r.orphans.front())
                .map_or_else(Access::global, |r| r.op.access(s)),
            NetEvent::DropOrphans(s) => Access {
                session: Some(s),
                ..Access::default()
            },
            NetEvent::Deliver(_) => Access::default(),
            NetEvent::Timer(_) => Access::global(),
        }
    }

    /// A readable description of an event, for traces.
    pub fn describe(&self, e: NetEvent) -> String {
        let sid = |s: SessionId| format!("s{s:x}");
        match e {
            NetEvent::Apply(s) => match self.sessions.get(&s).and_then(|r| r.outbound.front()) {
                Some(r) => format!("{} apply {}", sid(s), r.op.describe()),
                None => format!("{} apply (nothing)", sid(s)),
            },
            NetEvent::ApplyOrphan(s) => match self.sessions.get(&s).and_then(|r| r.orphans.front()) {
                Some(r) => format!("{} apply orphan {}", sid(s), r.op.describe()),
                None => format!("{} apply orphan (nothing)", sid(s)),
            },
            NetEvent::DropOrphans(s) => format!("{} orphans lost", sid(s)),
            NetEvent::Deliver(s) => match self.sessions.get(&s).and_then(|r| r.inbound.front()) {
                Some(Inbound::Reply { result, .. }) => format!("{} reply {}", sid(s), describe_result(result)),
                Some(Inbound::Event { event, .. }) => format!("{} watch {:?}", sid(s), event),
                None => format!("{} deliver (nothing)", sid(s)),
            },
            NetEvent::Timer(seq) => match self.timers.iter().find(|((_, q), _)| *q == seq) {
                Some((_, Timer::Reconnect(s, _))) => format!("{} reconnects", sid(*s)),
                Some((_, Timer::ServerExpire(s, _))) => format!("{} expired by the server", sid(*s)),
                None => "timer (gone)".into(),
            },
        }
    }

    /// How much is in flight (requests, orphans, deliveries, timers): part of the model checker's progress marker.
    pub fn in_flight(&self) -> usize {
        self.timers.len()
            + self
                .sessions
                .values()
                .map(|r| r.outbound.len() + r.orphans.len() + r.inbound.len())
                .sum::<usize>()
    }
}

fn describe_result(r: &Result<Reply>) -> String {
    match r {
        Ok(Reply::Created(c)) => format!("created {}", c.path),
        Ok(Reply::Names(n)) => format!("{} children", n.len()),
        Ok(Reply::Node(Some(_))) => "node".into(),
        Ok(Reply::Node(None)) => "no node".into(),
        Ok(Reply::Exists(Some(_))) => "exists (watch set)".into(),
        Ok(Reply::Exists(None)) => "does not exist".into(),
        Ok(Reply::Done) => "ok".into(),
        Err(e) => format!("error: {e}"),
    }
}
