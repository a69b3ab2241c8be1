//! Sessions and their clients' connections: the server's record of a session, and what happens to it when the
//! connection breaks or comes back, when the server expires it, when its client learns of the end or crashes (a
//! close is `closes.rs`'s).

use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::{NodeEvent, SessionId, SessionState, SessionStatus};
use recipes_core::mutants::{is_active, Mutant};
use recipes_core::{Error, Result};
use tokio::sync::watch;
use tokio::time::Instant;

use super::queue::Queue;
use super::{Inbound, Reply, Request, State, Timer, WatchTx};

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

    /// Tells the client that its session `id` is now in `state`; nothing changes for a closed client.
    pub(super) fn publish(&self, id: SessionId, state: SessionState) {
        let new = SessionStatus { id, state };
        self.status.send_if_modified(|s| {
            if s.state == SessionState::Closed || *s == new {
                false
            } else {
                *s = new;
                true
            }
        });
    }
}

/// One session: the server's record of it, and the state of its client's connection.
#[derive(Debug)]
pub(crate) struct Session {
    pub(super) client: Arc<ClientShared>,
    /// Alive on the server.
    pub alive: bool,
    /// The client's connection is up.
    pub up: bool,
    /// The client process is dead: nothing reaches it, and it sends nothing more.
    pub crashed: bool,
    /// Counts the connection's breaks: a timer scheduled for one break does nothing after a later one.
    pub(super) epoch: u64,
    /// Sent on the current connection, not yet applied.
    pub(super) outbound: Queue<Request>,
    /// Sent on a connection that broke, not yet applied: the server may still apply them.
    pub(super) orphans: Queue<Request>,
    /// Replies and watch events on their way to the client.
    pub(super) inbound: Queue<Inbound>,
    /// Made while the connection was down, where the client holds them ([`State::hold`]): sent at the reconnection.
    pub(super) held: Vec<Request>,
    /// Watches of this session that died with it on the server, failed when the client learns of the expiry.
    pub(super) doomed: Vec<WatchTx>,
    pub(super) lose_create_replies: u32,
    pub timeout: Duration,
    /// When the current connection was made (heartbeats run from then on, every `timeout / 4`).
    connected_since: Instant,
    /// When the connection last broke (the server hears nothing of the client from then on).
    pub(super) down_since: Instant,
    /// The send time of the last answered heartbeat before the connection was lost.
    frozen_heartbeat: Option<Instant>,
    /// The send time of the last answered request.
    pub(super) last_answered: Option<Instant>,
}

impl Session {
    /// Whether the oldest request in flight must wait until the orphans of a broken connection have landed or been
    /// lost: a write or a `sync`. An orphan the leader began to commit before the session moved gets a transaction id
    /// below every later write of the session, and a sync is answered only once it is committed; a read of the new
    /// connection may be answered before it lands (by a server that has not applied it yet).
    fn waits_for_orphans(&self) -> bool {
        !self.orphans.is_empty() && self.outbound.front().is_some_and(|r| r.op.is_write_or_sync())
    }

    /// The request the server may apply next on the current connection (not one that waits for orphans).
    pub(super) fn next_apply(&self) -> Option<&Request> {
        self.outbound.front().filter(|_| !self.waits_for_orphans())
    }

    /// The reply or event the client may receive next (none while its connection is down).
    pub(super) fn next_delivery(&self) -> Option<&Inbound> {
        self.inbound.front().filter(|_| self.up && !self.crashed)
    }

    /// When a request sent now, due at `earliest`, is due: not before those already on their way.
    pub(super) fn next_due(&self, earliest: Instant) -> Instant {
        self.outbound.back().map_or(earliest, |r| r.due.max(earliest))
    }

    /// How many watch events of the front item's write come right behind it (none unless the front is such an
    /// event): what a delivery brings with it where a write's events come together.
    pub(super) fn same_write_behind_front(&self) -> usize {
        let mut items = self.inbound.iter();
        let Some(Inbound::Event { write, .. }) = items.next() else {
            return 0;
        };
        items
            .take_while(|i| matches!(i, Inbound::Event { write: w, .. } if w == write))
            .count()
    }

    /// Queues a reply or a watch event behind those on their way to the client, due at `earliest` or later.
    pub(super) fn queue_inbound(&mut self, earliest: Instant, make: impl FnOnce(Instant) -> Inbound) {
        let due = self.inbound.back().map_or(earliest, |i| i.due().0.max(earliest));
        self.inbound.push_back(make(due));
    }

    /// A reply reaches the client: an answer (not a failure of the connection) to a request sent at `sent`, on a live
    /// connection of a live session, is evidence for the lease ([`answered_send`](Self::answered_send)).
    pub(super) fn note_answer(&mut self, result: &Result<Reply>, sent: Instant) {
        let answered = !matches!(result, Err(Error::ConnectionLoss | Error::Closed));
        if answered && self.alive && self.up {
            self.last_answered = self.last_answered.max(Some(sent));
        }
    }

    /// Whether the reply to a lock node's create is to be lost (`lose_next_create_replies`); counts it.
    pub(super) fn loses_create_reply(&mut self) -> bool {
        let lose = self.lose_create_replies > 0;
        self.lose_create_replies = self.lose_create_replies.saturating_sub(1);
        lose
    }

    /// The send time of the last heartbeat the server answered: heartbeats are sent every `timeout / 4` while
    /// connected, starting with the connection itself. As ZooKeeper answers one session's requests in order, a
    /// heartbeat is answered only behind every request sent before it: none sent after the oldest request still
    /// waiting for its reply (not yet applied, or its reply on the way) counts.
    fn heartbeat(&self, now: Instant) -> Option<Instant> {
        if !(self.up && self.alive) {
            return self.frozen_heartbeat;
        }
        let waiting = (self.outbound.iter().map(|r| r.sent))
            .chain(self.inbound.iter().filter_map(Inbound::request_sent))
            .min();
        // A heartbeat sent at the same instant as the waiting request may be behind it: not counted.
        let answered_until = waiting.map_or(now, |sent| {
            let before = sent.checked_sub(Duration::from_nanos(1)).unwrap_or(sent);
            before.min(now)
        });
        // In whole nanoseconds of 64 bits (584 years): a 128-bit division is a call of its own on every lease read.
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let interval = nanos((self.timeout / 4).max(Duration::from_millis(1)));
        let elapsed = nanos(answered_until.saturating_duration_since(self.connected_since));
        Some(self.connected_since + Duration::from_nanos(elapsed - elapsed % interval))
    }

    /// The lease: the send time of the last answered request or heartbeat.
    pub fn answered_send(&self, now: Instant) -> Option<Instant> {
        self.last_answered.max(self.heartbeat(now))
    }
}

impl State {
    pub fn open_session(&mut self, client: Arc<ClientShared>, now: Instant) -> SessionId {
        self.next_session += 1;
        let sid = self.next_session;
        client.publish(sid, SessionState::Connected);
        let rec = Session {
            timeout: client.timeout,
            client,
            alive: true,
            up: true,
            crashed: false,
            epoch: 0,
            outbound: Queue::new(&self.queued),
            orphans: Queue::new(&self.queued),
            inbound: Queue::new(&self.queued),
            held: Vec::new(),
            doomed: Vec::new(),
            lose_create_replies: 0,
            connected_since: now,
            down_since: now,
            frozen_heartbeat: None,
            last_answered: None,
        };
        self.sessions.insert(sid, rec);
        self.touch();
        sid
    }

    /// The connection of `sid` breaks: replies on their way are lost (their callers see connection loss), requests
    /// not yet applied become orphans, and watch events on their way are lost too, their watches set again at the
    /// reconnection (ZooKeeper's client never got them: it sets them again with its others, answered from the nodes
    /// as they are then, found by review, helper-108). Returns the break's epoch (`None` when the connection was
    /// already down).
    pub fn link_down(&mut self, sid: SessionId, now: Instant) -> Option<u64> {
        let rec = self.sessions.get_mut(&sid)?;
        if !rec.up {
            return None;
        }
        rec.frozen_heartbeat = rec.heartbeat(now);
        rec.up = false;
        rec.down_since = now;
        rec.epoch += 1;
        let epoch = rec.epoch;
        let mut unsent = Vec::new();
        for item in rec.inbound.take() {
            match item {
                Inbound::Reply { tx, .. } => {
                    let _ = tx.send(Err(Error::ConnectionLoss));
                }
                Inbound::Event { fired, .. } => unsent.push(*fired),
                // Lost with the connection (ZOOKEEPER-4698); the stream ends at the state's change.
                Inbound::Tree { .. } => {}
            }
        }
        let outbound = rec.outbound.take();
        for mut req in outbound {
            req.fail(Error::ConnectionLoss);
            rec.orphans.push_back(req);
        }
        if rec.client.current().id != sid {
            unreachable!("a session has its record only while its client uses it")
        }
        rec.client.publish(sid, SessionState::Suspended);
        self.watches.drop_trees_of(sid);
        for (path, watch) in unsent {
            self.watches.add(path, watch);
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
        if rec.client.current().state == SessionState::Closed {
            // Closed while cut off: the requests it held go first, then its `closeSession` reaches the server (see
            // `close_cut_off`).
            self.send_held(sid, now);
            self.apply_in_flight(sid, now);
            self.expire_on_server(sid, now);
            self.client_learns_expiry(sid, now);
            return;
        }
        rec.up = true;
        rec.connected_since = now;
        // Requests of the broken connection may still land after the reconnection (ZooKeeper: the old server may have
        // forwarded them to the leader before the session moved), though before any later write or `sync` of the
        // session (see `waits_for_orphans`). So orphans stay in flight.
        rec.client.publish(sid, SessionState::Connected);
        // zookeeper-client sets its watches again, then sends what it held.
        self.watches_set_again(sid, now);
        self.send_held(sid, now);
        self.touch();
        if self.immediate() {
            while self.sessions.get(&sid).is_some_and(|r| r.next_apply().is_some()) {
                self.apply(sid, false, now);
            }
            self.deliver_ready(sid);
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
                self.fire_watches(&p, NodeEvent::Deleted, now);
            }
        }
        let doomed = self.watches.take_session(sid);
        self.watches.drop_trees_of(sid);
        let Some(rec) = self.sessions.get_mut(&sid) else {
            unreachable!("a session's record goes only once its client learns of the end")
        };
        rec.doomed.extend(doomed);
        self.touch();
    }

    /// The client of `sid` learns that its session is over: what the server answered before reaches it, its
    /// watches fail, requests still in flight or held fail, and (unless the client was closed) a new session is
    /// opened.
    pub fn client_learns_expiry(&mut self, sid: SessionId, now: Instant) {
        let Some(rec) = self.sessions.remove(&sid) else { return };
        let client = rec.client.clone();
        for item in rec.inbound {
            item.hand_over();
        }
        // A close ends the watches as the application's (ZooKeeper's client sends its watchers its closing event).
        let closed = client.current().state == SessionState::Closed;
        let ended = if closed { Error::Closed } else { Error::SessionExpired };
        for tx in rec.doomed {
            let _ = tx.send(Err(ended.clone()));
        }
        let carried: Vec<Request> = if is_active(Mutant::UnboundRequests) && !closed {
            rec.outbound.into_iter().chain(rec.held).collect()
        } else {
            for mut req in rec.outbound {
                req.fail(ended.clone());
            }
            // Still held: the session ended on the server before they could go (after a close too, as
            // zookeeper-client fails them when it learns of the expiry; a close that reached the server sent them).
            for mut req in rec.held {
                req.fail(Error::SessionExpired);
            }
            Vec::new()
        };
        self.touch();
        if closed {
            return;
        }
        client.publish(sid, SessionState::Expired);
        let new = self.open_session(client, now);
        let Some(rec) = self.sessions.get_mut(&new) else {
            unreachable!("the session was just opened")
        };
        // The bug this mutant stands for: requests sent on the old session run on the new one.
        rec.outbound.extend(carried);
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
        for mut req in rec.held.drain(..) {
            req.fail(Error::ConnectionLoss);
        }
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
        let Some(epoch) = self.link_down(sid, now) else {
            unreachable!("the connection was just seen up")
        };
        if d >= timeout {
            self.schedule(now + timeout, Timer::ServerExpire(sid, epoch));
        }
        self.schedule(now + d, Timer::Reconnect(sid, epoch));
    }

    pub fn lose_create_replies(&mut self, sid: SessionId, n: u32) {
        if let Some(rec) = self.sessions.get_mut(&sid) {
            rec.lose_create_replies = n;
        }
    }
}
