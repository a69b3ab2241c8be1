//! A client closes its session: as zookeeper-client does, behind the requests it already sent, and over a cut
//! connection only once the connection comes back (else the server expires the session).

use recipes_core::backend::{SessionId, SessionState};
use recipes_core::Error;
use tokio::time::Instant;

use super::{Inbound, State, Timer};

impl State {
    /// The client closes `sid`: the requests it already sent are applied and answered first (ZooKeeper's client sends
    /// its `closeSession` behind them), then its ephemeral nodes go, and later calls fail with `Closed`. Before, the
    /// requests in flight were dropped at the close: a write ZooKeeper makes was never made (found by review,
    /// helper-103). Over a cut connection, see [`close_cut_off`](Self::close_cut_off).
    pub fn close(&mut self, sid: SessionId, now: Instant) {
        let Some(rec) = self.sessions.get(&sid) else { return };
        if rec.client.current().state == SessionState::Closed || rec.crashed {
            // Closed already over a cut connection (the server hears of it at the reconnection, or expires the
            // session), or the process crashed: nothing more reaches the server (found by review, helper-122: a second
            // close, or the client's drop, deleted the nodes at once).
            return;
        }
        if rec.alive && !rec.up {
            self.close_cut_off(sid, now);
            return;
        }
        self.apply_in_flight(sid, now);
        if let Some(rec) = self.sessions.get(&sid) {
            rec.client.publish(sid, SessionState::Closed);
        }
        self.expire_on_server(sid, now);
        self.client_learns_expiry(sid, now);
    }

    /// Applies every request of `sid` still in flight, before its close. Those a broken connection left in flight are
    /// applied too (they may land or not; landing is one of the two), so that the requests behind them are
    /// (helper-122: a write behind them was failed). A reply lost on the way (an injected loss) does not turn a close
    /// into one over a cut connection: the client reconnects at once.
    pub(super) fn apply_in_flight(&mut self, sid: SessionId, now: Instant) {
        while let Some(r) = self.sessions.get(&sid).filter(|r| r.alive) {
            let orphan = r.orphans.front().is_some();
            if !orphan && r.outbound.front().is_none() {
                break;
            }
            self.apply(sid, orphan, now);
        }
    }

    /// [`close`](Self::close) over a cut connection: the client is closed at once, and its watches and the events on
    /// their way to it fail with `Closed`; the server hears of the close only when the connection comes back within
    /// the session's timeout (zookeeper-client goes on reconnecting, and sends its `closeSession` then; see
    /// [`reconnect`](Self::reconnect)), else it expires the session a timeout after the cut, ephemeral nodes with it.
    /// Before, the nodes went at the close, and a lock the session held passed on sooner than on ZooKeeper
    /// (helper-103's gap).
    fn close_cut_off(&mut self, sid: SessionId, now: Instant) {
        let watches = self.watches.take_session(sid);
        let Some(rec) = self.sessions.get_mut(&sid) else {
            unreachable!("the session was just seen")
        };
        rec.client.publish(sid, SessionState::Closed);
        // Ended by the application, as ZooKeeper's client tells its watchers (`a_watch_armed_at_a_close_ends_closed`).
        for tx in watches.into_iter().chain(rec.doomed.drain(..)) {
            let _ = tx.send(Err(Error::Closed));
        }
        // Events fired while it was cut off (found by review, helper-122: never delivered nor failed).
        for item in rec.inbound.take() {
            match item {
                Inbound::Event { fired, .. } => fired.1.send(Err(Error::Closed)),
                Inbound::Reply { tx, .. } => {
                    let _ = tx.send(Err(Error::Closed));
                }
                Inbound::Tree { .. } => {}
            }
        }
        let (at, epoch) = ((rec.down_since + rec.timeout).max(now), rec.epoch);
        self.schedule(at, Timer::ServerExpire(sid, epoch));
        self.touch();
    }
}
