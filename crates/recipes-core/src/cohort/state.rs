//! A cohort's state, under its mutex: the node its tasks share, how many holds it has had and has out, who leads,
//! and the local FIFO of waiting tasks, with the moves on it that never wait.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::SessionStatus;
use crate::driver::{session, HeldNode};
use crate::mutants::{is_active, Mutant};

/// How a queued local task's turn comes.
#[derive(Debug)]
pub(super) enum Turn {
    /// It holds the cohort's node, as this pass of it.
    Hold(Arc<HeldNode>, u32),
    /// It leads: it runs the acquire that makes the cohort's next node.
    Lead,
}

#[derive(Debug, Default)]
pub(super) struct State {
    /// The node that a local task holds now; `None` between holders of different nodes.
    pub(super) node: Option<Arc<HeldNode>>,
    /// How many holds `node` has had (its first included).
    pub(super) holds: u32,
    /// How many local holds of `node` are out now (a read cohort's; at most one for an exclusive cohort).
    pub(super) active: u32,
    /// Whether a local holder of `node` learned that someone asked it to let go: no more passes.
    pub(super) revoked: bool,
    /// Whether a local task is running the acquire of the cohort's next node.
    pub(super) leading: bool,
    pub(super) next_id: u64,
    /// How many nodes were forgotten because their session ended: a task that queued before fails.
    pub(super) expiries: u64,
    /// The local tasks waiting for their turn, oldest first.
    pub(super) queue: VecDeque<(u64, oneshot::Sender<Turn>)>,
}

impl State {
    /// Hands `turn` to the oldest waiting task. `Err` gives it back when nobody waits.
    pub(super) fn hand(&mut self, mut turn: Turn) -> std::result::Result<(), Turn> {
        // Bounded by the queue's length: a queued task's receiver lives until it has removed itself, under the lock.
        while let Some((_, tx)) = self.queue.pop_front() {
            match tx.send(turn) {
                Ok(()) => return Ok(()),
                Err(back) => turn = back,
            }
        }
        Err(turn)
    }

    /// Nobody leads any more: the oldest waiting task does.
    pub(super) fn lead_next(&mut self) {
        self.leading = self.hand(Turn::Lead).is_ok();
    }

    /// Forgets the node when its session is over (its ephemeral node went with it): a holder that keeps its lost
    /// guard must not keep the cohort's other tasks from the lock, which may be free. The holder's later release
    /// finds another node, or none, and does nothing; its reference deletes nothing. The tasks waiting then fail as
    /// waiters in line on that session would (`expiries` tells them); a task that asks later leads.
    /// (Not for a lease that ran out on a live session: the node may still be first in the queue at the server.)
    pub(super) fn forget_if_over(&mut self, status: SessionStatus) {
        if self.node.as_ref().is_some_and(|n| session::is_over(status, n.session)) {
            self.forget();
            self.expiries += 1;
        }
    }

    /// The cohort holds no node any more (its last holder's reference releases it).
    pub(super) fn forget(&mut self) {
        self.node = None;
        self.holds = 0;
        self.active = 0;
        self.revoked = false;
    }

    /// Whether one more hold of `node` may be handed out now: under the bound, not asked to let go, its lease valid.
    pub(super) fn may_hold_again(&self, node: &HeldNode, bound: u32) -> bool {
        let bounded = self.holds < bound || is_active(Mutant::CohortUnbounded);
        bounded && !self.revoked && valid_now(node)
    }

    /// Counts out one more hold of `node`, and returns its pass.
    pub(super) fn count_hold(&mut self) -> u32 {
        let pass = self.holds;
        self.holds += 1;
        self.active += 1;
        pass
    }

    /// Nobody holds or leads while tasks wait (the waiting tasks of a forgotten node left, say): the oldest leads.
    pub(super) fn unstick(&mut self) {
        if self.node.is_none() && !self.leading {
            self.lead_next();
        }
    }
}

/// Whether `node`'s lease is valid now, read without counting or logging a loss (which calls the metrics recorder:
/// it runs under the cohort's mutex, where a recorder that panics must not leave the state half changed).
pub(super) fn valid_now(node: &HeldNode) -> bool {
    node.valid_until().is_some_and(|until| Instant::now() < until)
}
