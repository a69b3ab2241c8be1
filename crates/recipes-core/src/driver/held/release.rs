//! Releasing a held node: alone, or several in one transaction, handed over to a waiter of this process.

use std::sync::atomic::Ordering;

use tracing::{debug, Instrument};

use super::super::delete::{delete_node_handing_over, Deleted};
use super::super::session::reports_end;
use super::super::session::{through_losses, Tries};
use super::super::Ctx;
use crate::backend::{BackendExt, SessionId, SessionState};
use crate::error::{Error, LostReason, NotHeldReason, Result};

use super::HeldNode;

impl HeldNode {
    /// Counts the end of the hold (released, awaited or on drop).
    pub(super) fn count_release(&self) {
        // A node the acquire never handed out (dropped while its lease was being confirmed) was never counted held.
        let Some(since) = self.held_since else {
            return;
        };
        self.ctx.counters.released(&self.tags, since.elapsed());
    }

    /// Deletes the node and reports what happened.
    ///
    /// The node counts as released only once the delete has an outcome: if this future is dropped midway, or the
    /// delete gives up on a live session, the node's `Drop` still deletes it in the background.
    pub async fn release(&self) -> Result<()> {
        if self.released.load(Ordering::Acquire) {
            return Err(self.not_held(NotHeldReason::Released));
        }
        let span = tracing::debug_span!(parent: &self.span, "release", path = %self.path, node = %self.node);
        let waiters = if self.hands_over() {
            self.ctx.handoffs.take(self.session, &self.node)
        } else {
            Vec::new()
        };
        // The line is told before the delete is sent; if this future is dropped before the delete has an outcome, the
        // node is held still (its drop deletes it), and the line is told so again (review, helper-52: its waiters
        // would no longer watch the key, and waited on a lost guard's turn).
        self.releasing_turn();
        // From here a delete may be on its way whose outcome a later delete would not know (this future dropped, the
        // delete given up, a multi-lock's batch whose outcome stayed unknown): that one, here or in the drop, syncs
        // first (helper-60, helper-61).
        let lost_reply = self.delete_sent.swap(true, Ordering::AcqRel);
        let mut restore = RestoreHolder(Some(self));
        // Boxed: a task that releases after it waited keeps the largest of both futures in its state, in every
        // waiter's heap; this one is large (the delete through lost connections) and lives once per hold. The box is
        // instrumented, not the delete: an instrumented delete was moved whole twice (into its span's wrapper, then
        // into the box), about 2.4 KB per release.
        let r = Box::pin(delete_node_handing_over(
            &self.ctx,
            &self.node,
            self.identity(),
            waiters,
            lost_reply,
        ))
        .instrument(span.clone())
        .await;
        restore.0 = None;
        self.pass_turn();
        match r {
            // Given up on a live session (its connection lost at every try): the error is the caller's, and the node
            // is left to its drop's delete in the background, which tries again (found by review, helper-57: marked
            // released, the node stayed until the session ended).
            Err(e) if !reports_end(&e) => {
                debug!(parent: &span, error = %e, "release gave up: the node goes in the background");
                Err(e)
            }
            r => self.released_with(r, &span),
        }
    }

    /// The end of a release whose delete had outcome `r`.
    pub(super) fn released_with(&self, r: Result<Deleted>, span: &tracing::Span) -> Result<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            return Err(self.not_held(NotHeldReason::Released));
        }
        self.count_release();
        debug!(parent: span, ok = matches!(r, Ok(Deleted::Ours)), "released");
        match r {
            Ok(Deleted::Ours) => Ok(()),
            Ok(Deleted::Absent) => {
                self.report_loss(LostReason::NodeDeleted);
                Err(self.not_held(NotHeldReason::Deleted))
            }
            Ok(Deleted::NotOurs) => {
                self.report_loss(LostReason::NodeDeleted);
                Err(self.not_held(NotHeldReason::Replaced))
            }
            Err(e) => {
                if reports_end(&e) {
                    self.report_loss(LostReason::SessionExpired);
                }
                Err(e)
            }
        }
    }

    /// Releases `nodes` (a multi-lock's members, in the order given) with one transaction where it can: the nodes of a
    /// queue (not the fixed node, which is checked to be ours before it is deleted), unreleased, of the one live
    /// session, on which no task of this process waits in line (those go alone, handed over as their delete is sent),
    /// when there are two or more and the backend has transactions. The server then commits their deletes as one
    /// write. Each node's outcome, in order.
    pub async fn release_all(nodes: Vec<HeldNode>) -> Vec<Result<()>> {
        let Some(first) = nodes.first() else {
            return Vec::new();
        };
        let (ctx, sid) = (first.ctx.clone(), first.session);
        let status = ctx.backend.session_status();
        let live = status.id == sid && status.state == SessionState::Connected && ctx.backend.transactions().is_some();
        let batched: Vec<bool> = nodes
            .iter()
            .map(|n| {
                live && !n.fixed
                    && n.session == sid
                    && !n.released.load(Ordering::Acquire)
                    && !(n.hands_over() && ctx.handoffs.has(sid, &n.node))
            })
            .collect();
        if batched.iter().filter(|b| **b).count() < 2 {
            return futures::future::join_all(nodes.iter().map(|n| n.release())).await;
        }
        let (together, alone): (Vec<_>, Vec<_>) = nodes.iter().zip(&batched).partition(|(_, b)| **b);
        let together: Vec<&HeldNode> = together.into_iter().map(|(n, _)| n).collect();
        let (mut together, mut alone) = futures::join!(
            Self::delete_in_one(&ctx, sid, &together),
            futures::future::join_all(alone.into_iter().map(|(n, _)| n.release()))
        );
        // Back in the order given.
        together.reverse();
        alone.reverse();
        batched
            .iter()
            .map(|b| if *b { together.pop() } else { alone.pop() }.unwrap_or(Ok(())))
            .collect()
    }

    /// Deletes `nodes` of session `sid` in one transaction. When it fails it deleted nothing (a member was lost, the
    /// session ended): each node is released alone, reporting its own outcome. When its reply is lost it deleted all or
    /// none: once it is known which (a `sync`, then a look at the nodes), as for a transaction that succeeded or failed.
    pub(super) async fn delete_in_one(ctx: &Ctx, sid: SessionId, nodes: &[&HeldNode]) -> Vec<Result<()>> {
        let paths: Vec<String> = nodes.iter().map(|n| n.node.to_string()).collect();
        let on = ctx.backend.on(sid);
        // No node with a turn is batched today (a shared name is never: see `release_all`); told all the same.
        for n in nodes {
            n.releasing_turn();
            // As in `release`: a drop after this deletes as after a lost reply.
            n.delete_sent.store(true, Ordering::Release);
        }
        // Whether the transaction applied, if known (a transaction applies whole or not at all).
        let applied = match on.delete_all(&paths).await {
            None => Some(false),
            Some(Ok(())) => Some(true),
            Some(Err(Error::ConnectionLoss)) => {
                let any_left = through_losses(ctx, sid, &paths[0], true, Tries::Bounded, |_| async {
                    on.sync(&paths[0]).await?;
                    for p in &paths {
                        if on.get(p).await?.is_some() {
                            return Ok(true);
                        }
                    }
                    Ok(false)
                })
                .await;
                // After a sync, a node left means the transaction failed; not knowing (given up) is `None`.
                any_left.ok().map(|left| !left)
            }
            Some(Err(e)) => {
                debug!(error = %e, "the release transaction failed; releasing one by one");
                Some(false)
            }
        };
        if applied != Some(true) {
            if applied == Some(false) {
                // Known not to have deleted anything: each release is a first one (a node gone is another's doing).
                for n in nodes {
                    n.delete_sent.store(false, Ordering::Release);
                }
            }
            return futures::future::join_all(nodes.iter().map(|n| n.release())).await;
        }
        nodes
            .iter()
            .map(|n| {
                n.pass_turn();
                let span = tracing::debug_span!(parent: &n.span, "release", path = %n.path, node = %n.node);
                n.released_with(Ok(Deleted::Ours), &span)
            })
            .collect()
    }

    /// Whether the release may hand the lock to tasks of this process waiting in line on this node (see
    /// `handoff`), as its protocol says: a node of the native queue that holds as the first contender (fair,
    /// reentrant, write). Not a reader, which may hold beside readers ahead of it; not a semaphore's permit, held
    /// beside others and waited on by nobody in line; not the fixed exclusive node, on which nobody waits in line;
    /// not the peers' layouts, whose waiters list again after every deletion.
    pub(super) fn hands_over(&self) -> bool {
        self.hands_over
    }

    pub(super) fn not_held(&self, why: NotHeldReason) -> Error {
        Error::NotHeld {
            path: self.path.to_string(),
            why,
        }
    }
}

/// Tells a node's line that it holds its key again, when dropped (a release future dropped before its delete had an
/// outcome): emptied once the delete has one.
struct RestoreHolder<'a>(Option<&'a HeldNode>);

impl Drop for RestoreHolder<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.0.take() {
            n.holding_again();
        }
    }
}
