//! The held lock node: its lease, the ways it can be lost, and its release.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::{debug, warn, Instrument};
use uuid::Uuid;

use super::cleanup::{
    delete_node, delete_node_handing_over, on_session_through_losses, spawn_cleanup, Deleted, Identity,
};
use super::session::{self, reports_end};
use super::Ctx;
use crate::backend::{BackendExt, DeletionWatch, SessionId, SessionRef, SessionState, SessionStatus};
use crate::error::{Error, LostReason, NotHeldReason, Result, RetryReason};
use crate::layout::{Layout, NodeKind};
use crate::metrics::Tags;
use crate::mutants::{is_active, Mutant};
use crate::path::LockPath;
use crate::recipe::Recipe;

/// `lost()` reads the lease again at least this many times per session timeout.
const LOOK_AGAIN_PER_TIMEOUT: u32 = 8;
/// ... but not more often than this.
const LOOK_AGAIN_AT_MOST: Duration = Duration::from_millis(10);

/// A lock node that holds its lock. Deleting it releases the lock; dropping it unreleased deletes it in the
/// background.
#[derive(Debug)]
pub(crate) struct HeldNode {
    ctx: Arc<Ctx>,
    pub path: LockPath,
    pub node: String,
    pub czxid: i64,
    pub session: SessionId,
    attempt: Uuid,
    fixed: bool,
    handle: Option<Handle>,
    released: AtomicBool,
    /// A loss that cannot be undone, once `lost()` has seen it.
    known_loss: KnownLoss,
    /// The recipe that holds the node.
    recipe: Recipe,
    /// The metrics labels of the lock.
    tags: Tags,
    /// When the lock came to be held.
    held_since: Instant,
    /// The hold, a span of the caller's open as long as the node is held.
    span: tracing::Span,
    /// Whether a loss was counted and logged (once per node).
    loss_reported: AtomicBool,
    /// Whether the acquire handed the node out (counted as acquired): only then is its end counted as a release.
    handed_out: bool,
}

/// A loss that cannot be undone, remembered once seen (a lease that ran out may come back, and is not remembered).
#[derive(Debug, Default)]
struct KnownLoss(AtomicU8);

impl KnownLoss {
    const NONE: u8 = 0;
    const DELETED: u8 = 1;
    const EXPIRED: u8 = 2;

    fn get(&self) -> Option<LostReason> {
        match self.0.load(Ordering::Acquire) {
            Self::DELETED => Some(LostReason::NodeDeleted),
            Self::EXPIRED => Some(LostReason::SessionExpired),
            _ => None,
        }
    }

    fn remember(&self, reason: LostReason) {
        let code = match reason {
            LostReason::NodeDeleted => Self::DELETED,
            LostReason::SessionExpired => Self::EXPIRED,
            LostReason::LeaseExpired => return,
        };
        let _ = self
            .0
            .compare_exchange(Self::NONE, code, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// How a watch on our node ended.
enum Watched {
    /// The node is gone, or a node of our name that is not ours is there.
    Deleted,
    /// The session is over.
    SessionOver,
    /// The connection was lost: arm again once the session's state changes.
    Interrupted,
}

impl HeldNode {
    /// A node that an acquire made and found holding the lock.
    pub fn new(
        ctx: Arc<Ctx>,
        path: LockPath,
        recipe: Recipe,
        node: String,
        czxid: i64,
        id: Identity,
        tags: Tags,
    ) -> Self {
        // The session's own runtime if the backend has one: the caller's may be gone when the node is dropped.
        let handle = ctx.backend.runtime().or_else(|| Handle::try_current().ok());
        HeldNode {
            ctx,
            path,
            node,
            czxid,
            session: id.session,
            attempt: id.attempt,
            fixed: id.fixed,
            handle,
            released: AtomicBool::new(false),
            known_loss: KnownLoss::default(),
            recipe,
            tags,
            held_since: Instant::now(),
            span: tracing::Span::none(),
            loss_reported: AtomicBool::new(false),
            handed_out: false,
        }
    }

    /// Opens the hold's span, as a child of the caller's current span.
    pub fn begin_hold(&mut self) {
        self.handed_out = true;
        self.span = tracing::debug_span!(
            "hold",
            path = %self.path,
            recipe = %self.recipe,
            node = %self.node,
            token = self.czxid
        );
    }

    /// Counts the end of the hold (released, awaited or on drop).
    fn count_release(&self) {
        // A node the acquire never handed out (dropped while its lease was being confirmed) was never counted held.
        if !self.handed_out {
            return;
        }
        self.ctx.counters.released(&self.tags, self.held_since.elapsed());
    }

    /// Counts and logs a loss the application has learned of, once per node.
    fn report_loss(&self, reason: LostReason) {
        if self.loss_reported.swap(true, Ordering::AcqRel) {
            return;
        }
        self.ctx.counters.lost(&self.tags, reason);
        warn!(parent: &self.span, path = %self.path, node = %self.node, token = self.czxid, %reason, "lock lost");
    }

    fn identity(&self) -> Identity {
        Identity {
            fixed: self.fixed,
            attempt: self.attempt,
            session: self.session,
            czxid: Some(self.czxid),
        }
    }

    /// Marks the node as gone with its session, so that dropping it deletes nothing.
    pub fn forget(self) {
        self.released.store(true, Ordering::Release);
    }

    /// Gives the node back to the acquire that made it, never handed out (neither counted nor deleted here): its
    /// path, attempt id and session, for the acquire's cleanup.
    pub fn unheld(self) -> (String, Uuid, SessionId, i64) {
        self.released.store(true, Ordering::Release);
        (self.node.clone(), self.attempt, self.session, self.czxid)
    }

    /// Deletes the node and reports what happened.
    ///
    /// The node counts as released only once the delete has an outcome: if this future is dropped midway, the
    /// node's `Drop` still deletes it in the background.
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
        let r = delete_node_handing_over(&self.ctx, &self.node, self.identity(), waiters)
            .instrument(span.clone())
            .await;
        self.released_with(r, &span)
    }

    /// The end of a release whose delete had outcome `r`.
    fn released_with(&self, r: Result<Deleted>, span: &tracing::Span) -> Result<()> {
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
        let live = status.id == sid && status.state == SessionState::Connected;
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
    async fn delete_in_one(ctx: &Ctx, sid: SessionId, nodes: &[&HeldNode]) -> Vec<Result<()>> {
        let paths: Vec<String> = nodes.iter().map(|n| n.node.clone()).collect();
        let on = ctx.backend.on(sid);
        let applied = match on.delete_all(&paths).await {
            Ok(()) => true,
            Err(Error::ConnectionLoss) => {
                let why = RetryReason::ReleaseKeptFailing;
                let any_left = on_session_through_losses(ctx, sid, &paths[0], why, true, |_| async {
                    on.sync(&paths[0]).await?;
                    for p in &paths {
                        if on.get(p).await?.is_some() {
                            return Ok(true);
                        }
                    }
                    Ok(false)
                })
                .await;
                matches!(any_left, Ok(false))
            }
            Err(e) => {
                debug!(error = %e, "the release transaction failed; releasing one by one");
                false
            }
        };
        if !applied {
            return futures::future::join_all(nodes.iter().map(|n| n.release())).await;
        }
        nodes
            .iter()
            .map(|n| {
                let span = tracing::debug_span!(parent: &n.span, "release", path = %n.path, node = %n.node);
                n.released_with(Ok(Deleted::Ours), &span)
            })
            .collect()
    }

    /// Whether the release may hand the lock to tasks of this process waiting in line on this node (see
    /// `handoff`): a node of the native queue that holds as the first contender (fair, reentrant, write). Not a
    /// reader, which may hold beside readers ahead of it; not a semaphore's permit, held beside others and waited on
    /// by nobody in line; not the fixed exclusive node (no node kind), on which nobody waits in line; not the peers'
    /// layouts, whose waiters list again after every deletion.
    fn hands_over(&self) -> bool {
        let first_contender = |kind| match kind {
            NodeKind::Lock | NodeKind::Write => true,
            NodeKind::Read => is_active(Mutant::ReadersHandOver),
            NodeKind::Permit => false,
        };
        self.ctx.layout == Layout::Native && matches!(self.recipe.node_kind(), Some(kind) if first_contender(kind))
    }

    fn not_held(&self, why: NotHeldReason) -> Error {
        Error::NotHeld {
            path: self.path.to_string(),
            why,
        }
    }

    /// A loss this client knows of and that cannot be undone: the session is over, or `lost()` saw the node go.
    fn known_loss(&self, status: SessionStatus) -> Option<LostReason> {
        if session::is_over(status, self.session) {
            return Some(LostReason::SessionExpired);
        }
        self.known_loss.get()
    }

    /// A loss that this client knows of now and that cannot be undone (see `known_loss`).
    pub fn loss_known(&self) -> Option<LostReason> {
        self.known_loss(self.ctx.backend.session_status())
    }

    /// Resolves when this node's session is over (expired, closed, or replaced by a new session).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads the session's status channel.
    pub async fn session_over(&self) {
        let mut rx = self.ctx.backend.session();
        session::over(&mut rx, self.session).await;
    }

    /// The error of a call that found this node's session over: [`Error::Closed`] when the application closed the
    /// backend, else [`Error::SessionExpired`].
    pub fn session_end(&self) -> Error {
        session::closed_or(self.ctx.backend.as_ref(), Error::SessionExpired)
    }

    /// Until when the lock is known valid: the lease of its session, or `None` once that session is over (or the
    /// node is known to have been deleted).
    pub fn valid_until(&self) -> Option<Instant> {
        self.lease_end().map(|(until, _)| until)
    }

    /// The end of the lease, and the session timeout it assumes.
    fn lease_end(&self) -> Option<(Instant, Duration)> {
        if self.known_loss(self.ctx.backend.session_status()).is_some() {
            return None;
        }
        let lease = self.ctx.backend.lease();
        if lease.session != self.session {
            return None;
        }
        let trusted = lease.session_timeout.mul_f64(1.0 - self.ctx.lease_margin);
        lease.answered_send.map(|t| (t + trusted, lease.session_timeout))
    }

    /// Why the lock cannot be trusted now, or `None` while its lease is valid.
    pub fn lost_now(&self) -> Option<LostReason> {
        let lost = if let Some(r) = self.known_loss(self.ctx.backend.session_status()) {
            Some(r)
        } else {
            match self.valid_until() {
                Some(until) if Instant::now() < until => None,
                Some(_) => Some(LostReason::LeaseExpired),
                None => Some(LostReason::SessionExpired),
            }
        };
        if let Some(r) = lost {
            self.report_loss(r);
        }
        lost
    }

    /// Resolves `Ok` when someone asked the holder to let go: our node's data was set to
    /// [`REVOKE_MESSAGE`](crate::REVOKE_MESSAGE) (Curator's revocation protocol). An error when the node went first
    /// (released, deleted, or its session ended).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it only drops a watch registration.
    pub async fn revocation_requested(&self) -> Result<()> {
        // Bounded: each turn is a watch event on our node or a reconnection of its session.
        loop {
            if self.released.load(Ordering::Acquire) {
                return Err(self.not_held(NotHeldReason::Released));
            }
            let on = self.ctx.backend.on(self.session);
            let event = match on.get_and_watch(&self.node).await {
                Ok(Some((data, _))) if data == crate::REVOKE_MESSAGE => return Ok(()),
                Ok(Some((_, watch))) => watch.await,
                Ok(None) => return Err(self.not_held(NotHeldReason::Deleted)),
                Err(e) => Err(e),
            };
            match event {
                Ok(_) => {}
                Err(Error::ConnectionLoss) => {
                    if session::connected(&*self.ctx.backend, None).await? != Some(self.session) {
                        return Err(Error::SessionExpired);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Resolves when the lock is known lost: the session expired, the node was deleted by someone else, or the
    /// lease ran out (checked on the clock, whatever the connection state claims).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it only drops a watch registration.
    pub async fn lost(&self) -> LostReason {
        let reason = self.watch_for_loss().await;
        self.known_loss.remember(reason);
        self.report_loss(reason);
        reason
    }

    /// One `select!` over the ways a lock is lost: the session's state, a watch on our node (armed while connected,
    /// and again after a reconnection when the connection interrupted it), and the end of the lease.
    async fn watch_for_loss(&self) -> LostReason {
        let on = self.ctx.backend.on(self.session);
        let mut rx = self.ctx.backend.session();
        let mut watch = None;
        // Changes of the session's state seen so far; the one at which the watch was armed; after an interruption,
        // the watch is armed again only once the state has changed since it was armed (a reconnection).
        let mut seen = 0u64;
        let mut armed_at = 0u64;
        let mut interrupted_at: Option<u64> = None;
        loop {
            if rx.has_changed().unwrap_or(true) {
                seen += 1;
            }
            let status = *rx.borrow_and_update();
            if let Some(r) = self.known_loss(status) {
                return r;
            }
            let (until, timeout) = match self.lease_end() {
                None => return LostReason::SessionExpired,
                Some((until, _)) if Instant::now() >= until => return LostReason::LeaseExpired,
                Some(end) => end,
            };
            // The lease may also end earlier than it did when read (a shorter session timeout after a reconnection,
            // time the machine spent suspended): look again at least every eighth of the timeout.
            let look_again = if is_active(Mutant::LostSleepsToLeaseEnd) {
                until
            } else {
                until.min(Instant::now() + (timeout / LOOK_AGAIN_PER_TIMEOUT).max(LOOK_AGAIN_AT_MOST))
            };
            let armable = interrupted_at.map_or(true, |at| seen > at);
            if watch.is_none() && armable && status.state == SessionState::Connected {
                watch = Some(Box::pin(self.watch_node(on)));
                armed_at = seen;
            }
            let deletion = async {
                match watch.as_mut() {
                    Some(w) => w.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                w = deletion => match w {
                    Watched::Deleted => return LostReason::NodeDeleted,
                    Watched::SessionOver => return LostReason::SessionExpired,
                    Watched::Interrupted => {
                        watch = None;
                        interrupted_at = Some(armed_at);
                    }
                },
                r = rx.changed() => {
                    if r.is_err() {
                        return LostReason::SessionExpired;
                    }
                    seen += 1;
                }
                () = tokio::time::sleep_until(look_again) => {}
            }
        }
    }

    /// Arms a deletion watch on our node, checking that the node carrying our name is ours (by its creation id: the
    /// exclusive recipe's fixed name may by now be another holder's node), and waits for it.
    async fn watch_node(&self, on: SessionRef<'_>) -> Watched {
        let interrupted = |e: Error| {
            if reports_end(&e) {
                Watched::SessionOver
            } else {
                Watched::Interrupted
            }
        };
        let w: DeletionWatch = match on.watch_deletion(&self.node).await {
            // Our session answered, and the node is not there: someone deleted it.
            Ok(None) => return Watched::Deleted,
            Ok(Some((stat, _))) if stat.czxid != self.czxid && !is_active(Mutant::LostIgnoresCzxid) => {
                return Watched::Deleted
            }
            Ok(Some((_, w))) => w,
            Err(e) => return interrupted(e),
        };
        match w.await {
            // The deletion of our own session's ephemeral is never reported to that session's watches (it sees the
            // expiry instead): someone else deleted the node.
            Ok(()) => Watched::Deleted,
            Err(e) => interrupted(e),
        }
    }
}

impl Drop for HeldNode {
    fn drop(&mut self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        let ctx = self.ctx.clone();
        let node = self.node.clone();
        let id = self.identity();
        spawn_cleanup(self.handle.as_ref(), &node.clone(), async move {
            match delete_node(&ctx, &node, id).await {
                Ok(Deleted::Ours) => {}
                Ok(found) => debug!(%node, ?found, "release on drop found the lock already gone"),
                Err(e) => debug!(%node, error = %e, "release on drop found the lock already gone"),
            }
        });
        // Counted once the delete is on its way: a recorder that panics cannot leave the node behind.
        self.count_release();
    }
}
