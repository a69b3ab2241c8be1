//! Sending a request: the checks a client makes first (its session, its paths), and a request made while the
//! connection is cut, held by the client until it is back (decision 0090).

use recipes_core::backend::{ChildOrder, CreateMode, PathChecker, SessionId, SessionState};
use recipes_core::mutants::{is_active, Mutant};
use recipes_core::{Error, Result};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::session::ClientShared;
use super::{Op, Request, Sent, State};

impl State {
    /// Sends a request on session `sid`. Checked first: the backend's contract binds a request to the session it
    /// names; a request of an ended session is not sent at all, and one made while disconnected is held by the client
    /// until the reconnection (refused at once where the cluster stands for etcd: [`State::hold`]).
    pub fn send(&mut self, client: &ClientShared, sid: SessionId, op: Op<'_>, now: Instant) -> Result<Sent> {
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
            _ => op.check_paths(self.tree.order, &mut self.paths)?,
        }
        match current.state {
            SessionState::Connected => {}
            // etcd's client refuses it (a cluster ordered by creation stands for etcd), ZooKeeper's holds it.
            SessionState::Suspended if self.tree.order == ChildOrder::Sequence => return self.hold(sid, op, now),
            _ => return Err(Error::ConnectionLoss),
        }
        let latency = self.latency;
        let immediate = self.immediate();
        let seq = self.next_seq();
        let Some(rec) = self.sessions.get_mut(&sid) else {
            unreachable!("the session a client uses keeps its record until the client learns that it ended")
        };
        if !rec.up || rec.crashed {
            unreachable!("a client shows `Connected` only while its connection is up, and a crash takes it down")
        }
        // Orphans of a broken connection are ahead too: a write of the new connection waits for them (helper-58: one
        // applied at once overtook them).
        let nothing_ahead =
            rec.outbound.is_empty() && rec.orphans.is_empty() && rec.inbound.is_empty() && rec.lose_create_replies == 0;
        if nothing_ahead && immediate {
            return Ok(Sent::Done(self.apply_now(sid, op, now)));
        }
        let (tx, rx) = oneshot::channel();
        let due = rec.next_due(now + latency);
        rec.outbound.push_back(Request {
            op: op.into_owned(),
            reply: Some(tx),
            sent: now,
            due,
            seq,
        });
        self.touch();
        // Applied at once, unless it is a write that waits for orphans: the pump applies them when due, then it.
        let may_apply = self.sessions.get(&sid).is_some_and(|r| r.next_apply().is_some());
        if immediate && may_apply {
            self.apply(sid, false, now);
            self.deliver_ready(sid);
        }
        Ok(Sent::Later(rx))
    }

    /// The client holds a request made while its connection is down, as zookeeper-client does: it is sent at the
    /// reconnection, behind those held before it, and fails if the client learns there that its session ended (the
    /// contract's `a_request_made_while_cut_off_waits_for_the_reconnection`). Its caller may give up meanwhile; the
    /// request is sent all the same. A crashed client holds nothing.
    pub(super) fn hold(&mut self, sid: SessionId, op: Op<'_>, now: Instant) -> Result<Sent> {
        let seq = self.next_seq();
        let Some(rec) = self.sessions.get_mut(&sid).filter(|r| !r.crashed) else {
            return Err(Error::ConnectionLoss);
        };
        let (tx, rx) = oneshot::channel();
        rec.held.push(Request {
            op: op.into_owned(),
            reply: Some(tx),
            sent: now,
            due: now,
            seq,
        });
        self.touch();
        Ok(Sent::Later(rx))
    }

    /// The connection of `sid` is back: the requests its client held go out on it, in order.
    pub(super) fn send_held(&mut self, sid: SessionId, now: Instant) {
        let latency = self.latency;
        let Some(rec) = self.sessions.get_mut(&sid) else { return };
        for mut req in std::mem::take(&mut rec.held) {
            req.due = rec.next_due(now + latency);
            rec.outbound.push_back(req);
        }
    }
}

impl Op<'_> {
    /// The checks of its paths that ZooKeeper makes (its client's, and its server's for a create or a set, made here
    /// at the send): `Refused` for a malformed one, as every backend refuses it.
    pub(super) fn check_paths(&self, order: ChildOrder, checker: &mut PathChecker) -> Result<()> {
        use recipes_core::backend::check_written_path;
        match self {
            Op::Create { path, mode, .. } => {
                let appended = *mode == CreateMode::EphemeralSequential && order == ChildOrder::Sequence;
                checker.check_create(path, appended)
            }
            Op::SetData { path, .. } | Op::SetDataAndDelete { path, .. } => {
                checker.check(path, false).and_then(|()| check_written_path(path))
            }
            Op::DeleteAll { paths } => paths.iter().try_for_each(|p| checker.check(p, false)),
            Op::Children { path }
            | Op::Get { path }
            | Op::Exists { path, .. }
            | Op::GetWatch { path, .. }
            | Op::WatchGone { path, .. }
            | Op::Delete { path }
            | Op::DeleteCreated { path, .. }
            | Op::Sync { path }
            | Op::AddTreeWatch { path, .. } => checker.check(path, false),
        }
    }
}
