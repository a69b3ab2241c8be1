//! Cohorts: the tasks of one process that wait for one fair lock (or one side of a read/write lock) through one
//! [`Locks`](crate::Locks) share one place in the lock's queue (lock cohorting, Dice, Marathe and Shavit, PPoPP 2012,
//! across processes instead of NUMA nodes). docs/algorithm.md, "Cohorts", gives the safety argument and the fairness
//! bound.
//!
//! One task of the cohort at a time (the *leader*) runs the lock's acquire and makes the cohort's node; the others
//! wait in a local FIFO queue. For an exclusive recipe (fair, write), a release passes the lock to the next local task
//! without a request to the store while the node stays first in the global queue, up to `bound` holds of one node in
//! a row; then (or when the node is lost, asked to let go, or nobody local waits) the node is released and the next
//! local task leads again, with a new node at the back of the global queue. For the read side, the tasks share the
//! held node at once: a reader joins the cohort's node while it holds, up to `bound` holds of it in all; the node is
//! released when its last local reader lets go, and the readers that came after the bound lead a new node.
//!
//! # Contract
//! - At most one local hold of an exclusive cohort's node at a time (a read cohort's holds share it); the node is held
//!   by the distributed lock whenever a local hold exists (a pass is made only while the node's lease is valid, and its taker checks the lease again
//!   before it hands out a guard: never a guard known lost).
//! - A task waiting in the cohort fails with `SessionExpired` when the session of the node the cohort holds ends, as
//!   a waiter in line on that session would (whenever it queued).
//! - A node is held at most `bound` times: another session's waiter queued behind it waits for at most `bound` local
//!   holds (a read cohort's holds may overlap).
//! - Local tasks are served in the order they asked (FIFO), and the leader is the oldest waiting task.
//! - Each hold's pass number (0 for the node's first hold) goes into its fencing token below the node's creation id,
//!   so tokens strictly increase across local passes too.

mod hold;
mod state;

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use crate::driver::{self, session, Ctx, HeldNode};
use crate::error::{Error, LostReason, Result};
use crate::guard::LockGuard;
use crate::mutants::{is_active, Mutant};
use crate::path::LockPath;
use crate::patience::Patience;
use crate::recipe::Recipe;

pub(crate) use hold::CohortHold;
use hold::{Leading, Queued};
use state::{valid_now, State, Turn};

/// The cohort of one lock path and recipe (fair, read or write), shared by every handle on the path made from one
/// [`Locks`](crate::Locks).
#[derive(Debug)]
pub(crate) struct Cohort {
    path: LockPath,
    recipe: Recipe,
    bound: u32,
    state: Mutex<State>,
    /// Woken when a leader's node becomes the cohort's: the waiting tasks watch its session.
    node_set: Notify,
}

impl Cohort {
    /// The cohort of `recipe` (fair, read or write) at `path`, of at most `bound` holds of one node.
    pub fn new(path: LockPath, recipe: Recipe, bound: u32) -> Self {
        Cohort {
            path,
            recipe,
            bound: bound.max(1),
            state: Mutex::default(),
            node_set: Notify::new(),
        }
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        &self.path
    }

    /// A turn handed to a task that will not take it goes on: a pass ends as a hold would, a lead goes to the next.
    fn hand_on(&self, turn: Turn) {
        match turn {
            Turn::Hold(node, _) => self.let_go(&node),
            Turn::Lead => self.state.lock().lead_next(),
        }
    }

    /// Whether the tasks share the node (the read side).
    fn shared(&self) -> bool {
        self.recipe == Recipe::Read
    }

    /// A local hold of `node` ends: passes the node to the oldest waiting task when it may, else lets it go (the
    /// caller's reference is then the last but the guard's, which releases it) and the oldest waiting task leads.
    /// A read cohort's node is let go when its last local hold ends (its waiting tasks came after the bound).
    fn let_go(&self, node: &Arc<HeldNode>) {
        let mut s = self.state.lock();
        if !s.node.as_ref().is_some_and(|n| Arc::ptr_eq(n, node)) {
            return;
        }
        s.active = s.active.saturating_sub(1);
        if self.shared() {
            if s.active > 0 {
                return;
            }
        } else if !s.queue.is_empty() && s.may_hold_again(node, self.bound) {
            let pass = s.holds;
            if s.hand(Turn::Hold(node.clone(), pass)).is_ok() {
                s.count_hold();
                return;
            }
        }
        s.forget();
        if matches!(node.loss_known(), Some(LostReason::SessionExpired)) {
            // Its session is over: the waiting tasks fail, as `forget_if_over` has them (whichever sees it first).
            s.expiries += 1;
        }
        s.lead_next();
    }

    fn hold(self: &Arc<Self>, node: Arc<HeldNode>, pass: u32) -> CohortHold {
        CohortHold {
            cohort: self.clone(),
            node,
            pass,
        }
    }

    /// Acquires the lock for this task: leads when the cohort is idle, joins a read cohort's held node, else waits
    /// for its turn in the local queue (a try does not wait).
    ///
    /// # Cancel safety
    /// As [`enter`](Cohort::enter).
    pub async fn acquire(self: &Arc<Self>, ctx: &Arc<Ctx>, patience: Patience) -> Result<Option<LockGuard>> {
        Ok(self.enter(ctx, patience).await?.map(LockGuard::in_cohort))
    }

    /// Acquires the lock for this task, as [`acquire`](Cohort::acquire): the hold of the cohort's node.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped leader's acquire cleans up its node (the driver's rule) and the next task leads; a
    /// dropped waiter leaves the queue, and a turn already handed to it is handed on.
    pub async fn enter(self: &Arc<Self>, ctx: &Arc<Ctx>, patience: Patience) -> Result<Option<CohortHold>> {
        let queued = {
            let mut s = self.state.lock();
            s.forget_if_over(ctx.backend.session_status());
            if let Some(node) = s.node.clone().filter(|_| self.shared()) {
                if s.may_hold_again(&node, self.bound) {
                    // A reader shares the node its cohort holds (nobody waits locally while a read cohort holds).
                    let pass = s.count_hold();
                    return Ok(Some(self.hold(node, pass)));
                }
                // Held the bound's number of times (or asked to let go, or its lease ran out): its holders keep it,
                // and this reader leads a new node, at the back of the queue.
                s.forget();
            }
            if s.node.is_none() && !s.leading && s.queue.is_empty() {
                s.leading = true;
                None
            } else if patience.tries_once() {
                return Ok(None);
            } else {
                let id = s.next_id;
                s.next_id += 1;
                let (tx, rx) = oneshot::channel();
                s.queue.push_back((id, tx));
                Some((
                    Queued {
                        cohort: self,
                        id,
                        rx,
                        done: false,
                    },
                    s.expiries,
                ))
            }
        };
        if let Some((mut queued, expiries)) = queued {
            let Some(turn) = self.turn(ctx, &mut queued.rx, expiries, patience).await? else {
                return Ok(None);
            };
            queued.done = true;
            if self.state.lock().expiries != expiries {
                // A node the cohort held since we queued went with its session: we fail as a waiter in line on that
                // session would, and hand the turn on.
                self.hand_on(turn);
                return Err(session::closed_or(ctx.backend.as_ref(), Error::SessionExpired));
            }
            if let Turn::Hold(node, pass) = turn {
                if valid_now(&node) || is_active(Mutant::CohortPassUnchecked) {
                    return Ok(Some(self.hold(node, pass)));
                }
                if !self.lead_after_lost_pass(ctx, &node)? {
                    // A reader, while another reader already leads the cohort's next node: a node of its own is safe.
                    return self.alone(ctx, patience).await;
                }
            }
        }
        let mut leading = Leading(Some(self));
        let Some(node) = self.own_node(ctx, patience).await? else {
            return Ok(None);
        };
        let mut s = self.state.lock();
        s.leading = false;
        s.forget();
        s.node = Some(node.clone());
        let pass = s.count_hold();
        if self.shared() {
            // The readers waiting share the node at once, up to the bound; past it, the node's holders keep it and
            // the oldest reader still waiting leads a new node (it never waits for these holders to let go).
            while !s.queue.is_empty() && s.may_hold_again(&node, self.bound) {
                let pass = s.holds;
                if s.hand(Turn::Hold(node.clone(), pass)).is_err() {
                    break;
                }
                s.count_hold();
            }
            if !s.queue.is_empty() {
                s.forget();
                s.lead_next();
            }
        }
        drop(s);
        self.node_set.notify_waiters();
        leading.0 = None;
        Ok(Some(self.hold(node, pass)))
    }

    /// A task was handed a hold of `node` while its lease was valid, and the lease is gone now that it runs: never
    /// hand out a guard known lost. The node is ours now; the cohort forgets it (our reference, the last but its
    /// other readers', deletes it in the background). Fails when the session is over; otherwise (the lease ran out,
    /// or the node was deleted) we lead, with a node of our own: `Ok(true)`. `Ok(false)`: a reader handed the same
    /// node already leads.
    fn lead_after_lost_pass(&self, ctx: &Ctx, node: &Arc<HeldNode>) -> Result<bool> {
        let mut s = self.state.lock();
        let over = session::is_over(ctx.backend.session_status(), node.session);
        if s.node.as_ref().is_some_and(|n| Arc::ptr_eq(n, node)) {
            s.forget();
            if over {
                // The tasks still waiting fail too (they see `expiries`), as waiters in line would.
                s.expiries += 1;
            }
        }
        if over {
            s.unstick();
            return Err(node.session_end());
        }
        if self.shared() && s.leading {
            return Ok(false);
        }
        s.leading = true;
        Ok(true)
    }

    /// A reader handed a node whose lease ran out before it took it, while another task leads the cohort's next
    /// node: it takes a node of its own, outside the cohort (a pass of 0, as a reader without cohorts).
    async fn alone(self: &Arc<Self>, ctx: &Arc<Ctx>, patience: Patience) -> Result<Option<CohortHold>> {
        Ok(self.own_node(ctx, patience).await?.map(|node| self.hold(node, 0)))
    }

    /// The driver's acquire of a node of this cohort's recipe. Boxed: a task runs it once per node, while every task
    /// waiting in the cohort would carry it.
    async fn own_node(&self, ctx: &Arc<Ctx>, patience: Patience) -> Result<Option<Arc<HeldNode>>> {
        let node = Box::pin(driver::acquire(ctx, &self.path, self.recipe, patience)).await?;
        Ok(node.map(Arc::new))
    }

    /// Waits for a queued task's turn. `Ok(None)`: the deadline passed first.
    ///
    /// # Notable errors
    /// [`Error::SessionExpired`] (or [`Error::Closed`]) when the session of the node the cohort holds ends while we
    /// wait (whichever node it holds by then: a task that queued while a leader was acquiring learns it too).
    async fn turn(
        &self,
        ctx: &Ctx,
        rx: &mut oneshot::Receiver<Turn>,
        expiries: u64,
        patience: Patience,
    ) -> Result<Option<Turn>> {
        let over = async {
            let mut status = ctx.backend.session();
            // Bounded: each turn follows a change of the session's status or of the cohort's node.
            loop {
                let node_set = self.node_set.notified();
                tokio::pin!(node_set);
                node_set.as_mut().enable();
                status.borrow_and_update();
                let over = {
                    let mut s = self.state.lock();
                    // Read under the lock, never older than the node: a status read before it, stale by the time
                    // the lock is ours, would forget a live node of a new session.
                    s.forget_if_over(ctx.backend.session_status());
                    // A node the cohort held since we queued went with its session.
                    s.expiries != expiries
                };
                if over {
                    return;
                }
                tokio::select! {
                    biased;
                    changed = status.changed() => {
                        if changed.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    () = node_set => {}
                }
            }
        };
        // Pinned here and lent to the wait: moved into it, it would be kept twice (as the wait's capture, and in its
        // `select!`), in every waiting task's state.
        tokio::pin!(over);
        let wait = async {
            tokio::select! {
                biased;
                turn = rx => turn.map_err(|_| self.vanished()),
                () = &mut over => Err(session::closed_or(ctx.backend.as_ref(), Error::SessionExpired)),
            }
        };
        match patience.deadline() {
            Some(d) => match tokio::time::timeout_at(d, wait).await {
                Ok(turn) => turn.map(Some),
                Err(_) => Ok(None),
            },
            None => wait.await.map(Some),
        }
    }

    /// A queued task's sender went without a turn. It cannot: senders live in the queue until they send, and the
    /// queue lives as long as the waiter's `Arc` of the cohort; but never wait on nothing, nor panic.
    fn vanished(&self) -> Error {
        Error::InvalidArgument(format!("the cohort of {} dropped a waiting task's turn", self.path))
    }
}
