//! The events of the world one at a time: timers ([`Timer`]), the events a model checker picks from in the
//! controlled mode ([`NetEvent`]) and what each touches ([`Access`]), listing, firing and describing them, and the
//! automatic mode's schedule (`next_due`, `run_due`).

use std::sync::atomic::Ordering;

use recipes_core::backend::SessionId;
use tokio::time::Instant;

use super::{Inbound, Reply, Session, State};

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
    /// The sessions whose watches it fires: it puts an event in their queues of replies and events, so it does not
    /// commute with another event that puts something in one of those queues (found by review: a delete that fires
    /// a session's watch was taken to commute with that session's own request, whose reply then always came first).
    pub notifies: Vec<SessionId>,
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
            // A delivery pops the head of its session's inbound queue (with the events of the same write right behind
            // it, where they come together) and lets its client run; every request the client then sends goes behind
            // those already queued (or, made while its connection is cut, is held until the reconnection, a timer's:
            // global), so it commutes with every network event.
            return true;
        }
        match (self.session, other.session) {
            (Some(a), Some(b)) if a != b => {}
            _ => return false,
        }
        let queues_meet = |a: &Access, b: &Access| {
            a.notifies
                .iter()
                .any(|s| Some(*s) == b.session || b.notifies.contains(s))
        };
        if queues_meet(self, other) || queues_meet(other, self) {
            return false;
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

impl State {
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
        let mut next = self.next_timer();
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        // Nothing queued on any session (the usual case without latency): no session to visit.
        let queued = self.queued.load(Ordering::Relaxed) > 0;
        if queued {
            for rec in self.sessions.values() {
                // As `run_due` picks them: a write that waits for the orphans is not due, they are (found by review,
                // helper-58: the write hid a later orphan, and the pump woke at the write's time for ever).
                if let Some(r) = rec.next_apply() {
                    consider(r.due);
                }
                if let Some(r) = rec.orphans.front() {
                    consider(r.due);
                }
                if let Some(i) = rec.next_delivery() {
                    consider(i.due().0);
                }
            }
        }
        if let Some(t) = self.tree.next_reap(self.reap_checks) {
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
                if due <= now && best.as_ref().is_none_or(|(d, s, _)| (due, seq) < (*d, *s)) {
                    best = Some((due, seq, e));
                }
            };
            if let Some(((at, seq), _)) = self.timers.iter().next() {
                consider(*at, *seq, NetEvent::Timer(*seq));
            }
            for (sid, rec) in &self.sessions {
                if let Some(r) = rec.next_apply() {
                    consider(r.due, r.seq, NetEvent::Apply(*sid));
                }
                if let Some(r) = rec.orphans.front() {
                    consider(r.due, r.seq, NetEvent::ApplyOrphan(*sid));
                }
                if let Some(i) = rec.next_delivery() {
                    let (due, seq) = i.due();
                    consider(due, seq, NetEvent::Deliver(*sid));
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
            if rec.next_apply().is_some() {
                out.push(NetEvent::Apply(*sid));
            }
            if !rec.orphans.is_empty() {
                out.push(NetEvent::ApplyOrphan(*sid));
                out.push(NetEvent::DropOrphans(*sid));
            }
            if rec.next_delivery().is_some() {
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
                if self.sessions.get(&sid).and_then(Session::next_apply).is_none() {
                    return false;
                }
                self.apply(sid, false, now);
            }
            NetEvent::ApplyOrphan(sid) => {
                if self.sessions.get(&sid).is_none_or(|r| r.orphans.is_empty()) {
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
                if self.sessions.get(&sid).and_then(Session::next_delivery).is_none() {
                    return false;
                }
                self.deliver(sid);
            }
            NetEvent::Timer(seq) => {
                let Some(key) = self.timers.keys().find(|(_, s)| *s == seq).copied() else {
                    return false;
                };
                let Some(timer) = self.timers.remove(&key) else {
                    unreachable!("the timer's key was just found in the map")
                };
                self.touch();
                self.fire(timer, now);
            }
        }
        true
    }

    /// `access`, with the sessions whose watches on the nodes it writes would fire (every watch of such a node: a
    /// data change fires only some, and counting them all is the safe side).
    fn with_watchers(&self, mut access: Access) -> Access {
        for w in &access.writes {
            if let Some(path) = w.strip_prefix("node:") {
                for s in self.watches.sessions_on(path) {
                    if !access.notifies.contains(&s) {
                        access.notifies.push(s);
                    }
                }
            }
        }
        access
    }

    /// What `e` would touch if it happened now.
    pub fn access(&self, e: NetEvent) -> Access {
        match e {
            NetEvent::Apply(s) => self
                .sessions
                .get(&s)
                .and_then(|r| r.outbound.front())
                .map_or_else(Access::global, |r| self.with_watchers(r.op.access(s))),
            NetEvent::ApplyOrphan(s) => self
                .sessions
                .get(&s)
                .and_then(|r| r.orphans.front())
                .map_or_else(Access::global, |r| self.with_watchers(r.op.access(s))),
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
            NetEvent::Deliver(s) => {
                let rec = self.sessions.get(&s);
                match rec.and_then(|r| r.inbound.front()) {
                    Some(Inbound::Reply { result, .. }) => format!("{} reply {}", sid(s), Reply::describe(result)),
                    Some(Inbound::Event { event, .. }) => match rec.map_or(0, |r| r.same_write_behind_front()) {
                        n if n > 0 && self.events_together => {
                            format!("{} watch {:?} and {n} more of its write", sid(s), event)
                        }
                        _ => format!("{} watch {:?}", sid(s), event),
                    },
                    Some(Inbound::Tree { event, .. }) => format!("{} tree {:?} {}", sid(s), event.change, event.path),
                    None => format!("{} deliver (nothing)", sid(s)),
                }
            }
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
