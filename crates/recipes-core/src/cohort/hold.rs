//! What a task of a cohort keeps while it holds or waits: its hold of the cohort's node (`CohortHold`), and the guards
//! that hand a turn on when an acquire ends without one (`Leading`, `Queued`).

use std::sync::Arc;

use tokio::sync::oneshot;

use super::state::Turn;
use super::Cohort;
use crate::driver::HeldNode;

/// One local hold of the cohort's node: counted out (passing the lock on, or letting the node go) when dropped.
#[derive(Debug)]
pub(crate) struct CohortHold {
    pub(super) cohort: Arc<Cohort>,
    pub(super) node: Arc<HeldNode>,
    pub(super) pass: u32,
}

impl CohortHold {
    /// This hold's pass of its node (0 for the node's first hold).
    pub fn pass(&self) -> u32 {
        self.pass
    }

    /// The cohort's node this hold counts on.
    pub fn node(&self) -> &Arc<HeldNode> {
        &self.node
    }

    /// Someone asked this hold's node to let go: the node is released after this hold, not passed on.
    pub fn revoked(&self) {
        let mut s = self.cohort.state.lock();
        if s.node.as_ref().is_some_and(|n| Arc::ptr_eq(n, &self.node)) {
            s.revoked = true;
        }
    }
}

impl Drop for CohortHold {
    fn drop(&mut self) {
        self.cohort.let_go(&self.node);
    }
}

/// A leader's acquire in flight: when it ends without a hold (a try or a deadline that found the lock taken, an
/// error, a dropped future), the oldest waiting task leads.
pub(super) struct Leading<'a>(pub(super) Option<&'a Cohort>);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.state.lock().lead_next();
        }
    }
}

/// A queued task's place: removed when dropped; a turn that was handed to it meanwhile is handed on.
pub(super) struct Queued<'a> {
    pub(super) cohort: &'a Cohort,
    pub(super) id: u64,
    pub(super) rx: oneshot::Receiver<Turn>,
    pub(super) done: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut s = self.cohort.state.lock();
        if let Some(i) = s.queue.iter().position(|(id, _)| *id == self.id) {
            s.queue.remove(i);
            s.unstick();
            return;
        }
        // Not queued any more: a turn was sent to us (under the lock, so it is in the channel now).
        drop(s);
        if let Ok(turn) = self.rx.try_recv() {
            self.cohort.hand_on(turn);
        }
    }
}
