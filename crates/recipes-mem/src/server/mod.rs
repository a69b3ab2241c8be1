//! The server and the network between it and its clients: sessions, watches, and the requests, replies and watch
//! events in flight, each an event of its own. This module holds the server's [`State`] and the three events of a
//! request (send, apply, deliver); [`ops`] runs requests on the tree and keeps the watches, [`session`] follows
//! sessions and their connections, [`events`] lists and fires the events the controlled mode picks from.
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

mod closes;
mod events;
mod ops;
mod queue;
mod send;
mod session;
mod unordered;
mod watches;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::{NodeEvent, SessionId, TreeEvent};
use recipes_core::{Error, Result};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use events::Timer;
pub use events::{Access, NetEvent};
pub(crate) use ops::{Op, Reply};
pub(crate) use session::{ClientShared, Session};
use watches::{Watch, Watches};

use crate::tree::{ReapChecks, Tree};

pub(crate) type WatchTx = oneshot::Sender<Result<NodeEvent>>;
pub(crate) type TreeTx = futures::channel::mpsc::UnboundedSender<Result<TreeEvent>>;

/// A request sent: its reply already (applied and delivered at once), or where it will come.
pub(crate) enum Sent {
    Done(Result<Reply>),
    Later(oneshot::Receiver<Result<Reply>>),
}
pub(crate) type ReplyTx = oneshot::Sender<Result<Reply>>;

/// How long the connection is down after a reply was lost on purpose (`lose_next_create_replies`).
const LOST_REPLY_BLIP: Duration = Duration::from_millis(10);

/// A request on its way to the server.
#[derive(Debug)]
struct Request {
    op: Op<'static>,
    /// Where the reply goes (taken when the caller learns that the connection broke).
    reply: Option<ReplyTx>,
    sent: Instant,
    due: Instant,
    seq: u64,
}

impl Request {
    /// Fails the caller, if it still waits for the reply.
    fn fail(&mut self, e: Error) {
        if let Some(tx) = self.reply.take() {
            let _ = tx.send(Err(e));
        }
    }
}

/// A reply or a watch event on its way to a client.
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
        /// The watch that fired, and its path: set again if the connection breaks before the event arrives (as
        /// ZooKeeper's client, which never got the event, sets its watch again at the reconnection).
        fired: Box<(String, Watch)>,
        event: Result<NodeEvent>,
        due: Instant,
        seq: u64,
        /// The write that fired it: the server's `activity` then, which every write's end moves (`touch`). Containers
        /// reaped as the server catches up (`catch_up`, which does not move it) count with the next write: events of
        /// two writes back to back, which ZooKeeper's stream may bring together too.
        write: u64,
    },
    /// An event of a tree watch: lost if the connection breaks before it arrives (ZOOKEEPER-4698).
    Tree {
        tx: TreeTx,
        event: Box<TreeEvent>,
        due: Instant,
        seq: u64,
    },
}

impl Inbound {
    fn due(&self) -> (Instant, u64) {
        match self {
            Inbound::Reply { due, seq, .. } | Inbound::Event { due, seq, .. } | Inbound::Tree { due, seq, .. } => {
                (*due, *seq)
            }
        }
    }

    /// When the request this replies to was sent (`None` for a watch event).
    fn request_sent(&self) -> Option<Instant> {
        match self {
            Inbound::Reply { sent, .. } => Some(*sent),
            Inbound::Event { .. } | Inbound::Tree { .. } => None,
        }
    }

    /// Hands the reply or the event to whoever waits for it.
    fn hand_over(self) {
        match self {
            Inbound::Reply { tx, result, .. } => {
                let _ = tx.send(result);
            }
            Inbound::Event { fired, event, .. } => fired.1.send(event),
            Inbound::Tree { tx, event, .. } => {
                let _ = tx.unbounded_send(Ok(*event));
            }
        }
    }
}

/// The whole simulated service.
#[derive(Debug)]
pub(crate) struct State {
    pub tree: Tree,
    pub sessions: BTreeMap<SessionId, Session>,
    next_session: SessionId,
    pub(crate) watches: Watches,
    pub latency: Duration,
    pub watch_delay: Duration,
    /// When the container reaper looks ([`MemCluster::set_container_reap_delay`](crate::MemCluster)).
    pub reap_checks: ReapChecks,
    pub controlled: bool,
    /// A delivery in the controlled mode brings a session every event of one write at once
    /// ([`Controller::events_of_a_write_together`](crate::Controller::events_of_a_write_together)).
    pub events_together: bool,
    timers: BTreeMap<(Instant, u64), Timer>,
    seq: u64,
    /// Counts every send, application, delivery and state change (for the model checker's "nothing moves").
    pub activity: u64,
    pub activity_notify: Arc<Notify>,
    /// The names returned by every list of children so far (what the recipes' lists cost).
    pub listed_names: u64,
    /// The requests applied so far, of every session (what the recipes' requests cost).
    pub requests: u64,
    /// The items in every session's queues (see [`queue::Queue`]).
    queued: Arc<AtomicUsize>,
    /// When the automatic mode's pump wakes by itself next (`None`: it waits to be woken, or is not running).
    pub pump_at: Option<Instant>,
    /// The checks of requests' paths, as ZooKeeper's client makes them.
    paths: recipes_core::backend::PathChecker,
}

impl Default for State {
    fn default() -> Self {
        State {
            tree: Tree::default(),
            sessions: BTreeMap::new(),
            next_session: 0x1000,
            watches: Watches::default(),
            latency: Duration::ZERO,
            watch_delay: Duration::ZERO,
            reap_checks: ReapChecks {
                origin: Instant::now(),
                every: Duration::from_secs(60),
            },
            controlled: false,
            events_together: false,
            timers: BTreeMap::new(),
            seq: 0,
            activity: 0,
            activity_notify: Arc::new(Notify::new()),
            listed_names: 0,
            requests: 0,
            queued: Arc::new(AtomicUsize::new(0)),
            pump_at: None,
            paths: Default::default(),
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
        // Every request catches up, and mostly no container is due: that answer costs one look at the first.
        if self.tree.next_reap(self.reap_checks).is_none_or(|at| at > now) {
            return;
        }
        for path in self.tree.reap(now, self.reap_checks) {
            self.fire_watches(&path, NodeEvent::Deleted, now);
        }
    }

    /// Sends, applies and delivers a request at once: what [`send`](Self::send) then [`apply`](Self::apply) and
    /// [`deliver`](Self::deliver) do in the immediate mode, for a session with nothing else on its way (no request
    /// ahead to apply first, no reply or event ahead to deliver first, no reply to lose), without queueing the
    /// request and its reply. Watch events the request fires reach their clients before the reply, as there.
    fn apply_now(&mut self, sid: SessionId, op: Op<'_>, now: Instant) -> Result<Reply> {
        self.catch_up(now);
        let alive = self.sessions.get(&sid).is_some_and(|rec| rec.alive);
        let result = if alive {
            self.execute(sid, op, false, now)
        } else {
            Err(Error::SessionExpired)
        };
        self.applying(sid).note_answer(&result, now);
        // The send, the application and the delivery, as the three events would count them.
        self.activity += 2;
        self.touch();
        result
    }

    /// Whether the automatic mode applies and delivers at once (no latency, no watch delay).
    fn immediate(&self) -> bool {
        !self.controlled && self.latency.is_zero() && self.watch_delay.is_zero()
    }

    /// Delivers, at once, what is ready on `sid`'s inbound queue (immediate mode only).
    fn deliver_ready(&mut self, sid: SessionId) {
        while self.sessions.get(&sid).and_then(Session::next_delivery).is_some() {
            self.deliver(sid);
        }
    }

    /// Applies the oldest request in flight of `sid` (an orphan of a broken connection when `orphan`). The caller
    /// has checked that there is one.
    pub fn apply(&mut self, sid: SessionId, orphan: bool, now: Instant) {
        self.catch_up(now);
        let Some(rec) = self.sessions.get_mut(&sid) else {
            unreachable!("a request is applied only when its session has one in flight")
        };
        let queue = if orphan { &mut rec.orphans } else { &mut rec.outbound };
        let Some(req) = queue.pop_front() else {
            unreachable!("a request is applied only when its session has one in flight")
        };
        let ephemeral_create = req.op.is_ephemeral_create();
        let result = if rec.alive {
            self.execute(sid, req.op, orphan, now)
        } else {
            Err(Error::SessionExpired)
        };
        // A lost reply is aimed at a lock node that was made (not at a create that failed), and at a reply still on its
        // way: a create a broken connection left in flight has none, and losing it broke the connection for nothing
        // (found by review, helper-123: a close applying such a create failed the write sent behind it).
        let lose = result.is_ok() && ephemeral_create && req.reply.is_some() && self.applying(sid).loses_create_reply();
        self.touch();
        if let Some(tx) = req.reply {
            let seq = self.next_seq();
            let earliest = now + self.latency;
            self.applying(sid).queue_inbound(earliest, |due| Inbound::Reply {
                tx,
                result,
                sent: req.sent,
                due,
                seq,
            });
        }
        if lose {
            // The reply is lost with the connection; the client reconnects to the same session shortly.
            if let Some(epoch) = self.link_down(sid, now) {
                self.schedule(now + LOST_REPLY_BLIP, Timer::Reconnect(sid, epoch));
            }
        }
    }

    /// The record of `sid`, whose request was just applied.
    fn applying(&mut self, sid: SessionId) -> &mut Session {
        let Some(rec) = self.sessions.get_mut(&sid) else {
            unreachable!("applying a request ends no session")
        };
        rec
    }

    /// Delivers the oldest reply or watch event on its way to `sid`'s client. The caller has checked that there
    /// is one.
    pub fn deliver(&mut self, sid: SessionId) {
        let Some(rec) = self.sessions.get_mut(&sid) else {
            unreachable!("a delivery is made only when its session has one on the way")
        };
        // Counted before the front item goes: the events of its write right behind it.
        let more = if self.events_together {
            rec.same_write_behind_front()
        } else {
            0
        };
        let Some(item) = rec.inbound.pop_front() else {
            unreachable!("a delivery is made only when its session has one on the way")
        };
        if let Inbound::Reply { result, sent, .. } = &item {
            rec.note_answer(result, *sent);
        }
        item.hand_over();
        // The events of the same write right behind it, where they come together: ZooKeeper sends them in one go, and a
        // client may read them all before it acts on the first.
        for _ in 0..more {
            if let Some(next) = rec.inbound.pop_front() {
                next.hand_over();
            }
        }
        self.touch();
    }

    /// Sends the event of `watch` (set on `path`) to its session's client, behind the replies and events already on
    /// their way.
    fn deliver_event(&mut self, path: &str, watch: Watch, event: Result<NodeEvent>, now: Instant) {
        let watch_delay = self.watch_delay;
        let immediate = self.immediate();
        let seq = self.next_seq();
        let Some(rec) = self.sessions.get_mut(&watch.session()) else {
            unreachable!("only live sessions set watches, and the server takes a session's watches when it ends it")
        };
        if !rec.alive {
            rec.doomed.push(watch.into_tx());
            return;
        }
        if immediate && rec.up && rec.inbound.is_empty() {
            watch.send(event);
            return;
        }
        let fired = Box::new((path.to_owned(), watch));
        let write = self.activity;
        rec.queue_inbound(now + watch_delay, |due| Inbound::Event {
            fired,
            event,
            due,
            seq,
            write,
        });
    }

    /// Sends the event of a tree watch of `sid` to its client, behind the replies and events already on their way
    /// (the session is up: a tree watch goes when its connection breaks).
    fn deliver_tree_event(&mut self, sid: SessionId, tx: TreeTx, event: TreeEvent, now: Instant) {
        let watch_delay = self.watch_delay;
        let immediate = self.immediate();
        let seq = self.next_seq();
        // A tree watch goes with its session's connection; were one left, its event would be lost as ZooKeeper's is.
        let Some(rec) = self.sessions.get_mut(&sid).filter(|r| r.up) else {
            return;
        };
        if immediate && rec.inbound.is_empty() {
            let _ = tx.unbounded_send(Ok(event));
            return;
        }
        let event = Box::new(event);
        rec.queue_inbound(now + watch_delay, |due| Inbound::Tree { tx, event, due, seq });
    }
}
