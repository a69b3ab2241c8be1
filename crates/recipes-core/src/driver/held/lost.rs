//! How a held node is lost (its session ends, it is deleted, its lease runs out), and a request to let go.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use super::super::session::{self, reports_end};
use crate::backend::{BackendExt, DeletionWatch, SessionRef, SessionState, SessionStatus};
use crate::error::{Error, LostReason, NotHeldReason, Result};
use crate::mutants::{is_active, Mutant};

use super::HeldNode;

/// `lost()` reads the lease again at least this many times per session timeout.
const LOOK_AGAIN_PER_TIMEOUT: u32 = 8;
/// ... but not more often than this.
const LOOK_AGAIN_AT_MOST: Duration = Duration::from_millis(10);

/// A loss that cannot be undone, remembered once seen (a lease that ran out may come back, and is not remembered).
#[derive(Debug, Default)]
pub(super) struct KnownLoss(AtomicU8);

impl KnownLoss {
    const NONE: u8 = 0;
    const DELETED: u8 = 1;
    const EXPIRED: u8 = 2;

    pub(super) fn get(&self) -> Option<LostReason> {
        match self.0.load(Ordering::Acquire) {
            Self::DELETED => Some(LostReason::NodeDeleted),
            Self::EXPIRED => Some(LostReason::SessionExpired),
            _ => None,
        }
    }

    pub(super) fn remember(&self, reason: LostReason) {
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
pub(super) enum Watched {
    /// The node is gone, or a node of our name that is not ours is there.
    Deleted,
    /// The session is over.
    SessionOver,
    /// The connection was lost: arm again once the session's state changes.
    Interrupted,
}

impl HeldNode {
    /// Counts and logs a loss the application has learned of, once per node.
    pub(super) fn report_loss(&self, reason: LostReason) {
        if self.loss_reported.swap(true, Ordering::AcqRel) {
            return;
        }
        self.ctx.counters.lost(&self.tags, reason);
        warn!(parent: &self.span, path = %self.path, node = %self.node, token = self.czxid, %reason, "lock lost");
    }

    /// A loss this client knows of and that cannot be undone: the session is over, or `lost()` saw the node go.
    pub(super) fn known_loss(&self, status: SessionStatus) -> Option<LostReason> {
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
    pub(super) fn lease_end(&self) -> Option<(Instant, Duration)> {
        if self.known_loss(self.ctx.backend.session_status()).is_some() {
            return None;
        }
        let lease = self.ctx.backend.lease();
        if lease.session != self.session {
            return None;
        }
        let trusted = if is_active(Mutant::TermPastLease) {
            lease.session_timeout * 3
        } else {
            lease.session_timeout.mul_f64(1.0 - self.ctx.lease_margin)
        };
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
    pub(super) async fn watch_for_loss(&self) -> LostReason {
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
            let armable = interrupted_at.is_none_or(|at| seen > at);
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
    pub(super) async fn watch_node(&self, on: SessionRef<'_>) -> Watched {
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
