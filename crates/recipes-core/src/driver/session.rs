//! What the driver knows of the session its nodes belong to.
//!
//! Three things are easy to confuse, and each has one name here:
//! - A session is **over** ([`is_over`], [`over`]): it expired, the application closed it, or the backend moved on
//!   to a new session. Its ephemeral nodes are gone (or going), and no request may run on it any more.
//! - A request **reports the end** of its session ([`reports_end`]): `SessionExpired` or `Closed`. It says what
//!   `is_over` says, learned from a reply rather than from the session's status.
//! - The connection is **lost** (`ConnectionLoss`): the session may live on, and the outcome of the request is
//!   unknown. [`connected`] waits for the connection to come back.
//!
//! Whether a lock can be trusted *now* (its lease) is a fourth question, answered in `held.rs`.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::warn;

use super::Ctx;
use crate::backend::{Backend, SessionId, SessionState, SessionStatus};
use crate::error::{Error, Result, RetryReason};

/// How many times a request is sent through connection losses before giving up (a delete, a release's batch).
const DELETE_ATTEMPTS: u32 = 20;
/// How long a request waits for a lost connection to come back before trying again.
const RECONNECT_WAIT: Duration = Duration::from_secs(30);

/// Whether the session `pinned` is over, as far as this client knows: the backend moved to another session, or the
/// session expired or was closed.
pub(crate) fn is_over(status: SessionStatus, pinned: SessionId) -> bool {
    status.id != pinned || matches!(status.state, SessionState::Expired | SessionState::Closed)
}

/// Whether a request's error says that the session it ran on is over (its nodes went with it).
pub(crate) fn reports_end(e: &Error) -> bool {
    matches!(e, Error::SessionExpired | Error::Closed)
}

/// `e`, or [`Error::Closed`] in its place when `e` says the session is over because the application closed the
/// backend (an acquire in flight when `Locks::close` runs ends as a closed call, not as an expiry).
pub(crate) fn closed_or(backend: &dyn Backend, e: Error) -> Error {
    if e == Error::SessionExpired && backend.session_status().state == SessionState::Closed {
        Error::Closed
    } else {
        e
    }
}

/// Resolves when the session `pinned` is over.
///
/// # Cancel safety
/// Cancel safe: it only reads the status channel.
///
/// Not an `async fn`: one keeps its arguments twice in its state, and every waiter in line keeps this future (the
/// point of the block clippy would make an `async fn` again).
#[allow(clippy::manual_async_fn)]
pub(crate) fn over(rx: &mut watch::Receiver<SessionStatus>, pinned: SessionId) -> impl Future<Output = ()> + Send + '_ {
    async move {
        loop {
            if is_over(*rx.borrow_and_update(), pinned) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Waits until the backend's session is connected; returns its id (a new session's, after an expiry). `Ok(None)`:
/// the deadline passed first.
///
/// # Notable errors
/// [`Error::Closed`] once the application closed the backend.
///
/// # Cancel safety
/// Cancel safe: it only reads the status channel.
pub(crate) async fn connected(backend: &dyn Backend, deadline: Option<Instant>) -> Result<Option<SessionId>> {
    let now = backend.session_status();
    if now.state == SessionState::Connected {
        return Ok(Some(now.id));
    }
    let mut rx = backend.session();
    loop {
        let st = *rx.borrow_and_update();
        match st.state {
            SessionState::Connected => return Ok(Some(st.id)),
            SessionState::Closed => return Err(Error::Closed),
            SessionState::Suspended | SessionState::Expired => {}
        }
        let changed = rx.changed();
        let changed = match deadline {
            Some(d) => match tokio::time::timeout_at(d, changed).await {
                Ok(r) => r,
                Err(_) => return Ok(None),
            },
            None => changed.await,
        };
        if changed.is_err() {
            return Err(Error::Closed);
        }
    }
}

/// How far [`through_losses`] goes on through connection losses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tries {
    /// At most [`DELETE_ATTEMPTS`] times, then `RetriesExhausted` (`ReleaseKeptFailing`): a caller waits for the
    /// outcome, and the error is theirs (a release; its node is then left to its drop's delete in the background,
    /// which goes on).
    Bounded,
    /// Until an outcome, or until the session is over or the backend closed: a delete in the background, which
    /// nothing would try again. Given up while its session lived, its node stayed until the session ended, and an
    /// acquire of the same session waited on it (found by review, helper-128, for an exclusive acquire whose create
    /// and recovery read lost their replies, on a connection that then failed under each of its cleanup's requests: it
    /// waited on its own `P/lock` until its deadline and left it there; in the thirty-sixth session, on every recipe).
    /// Past [`DELETE_ATTEMPTS`] losses, each try waits [`PERSIST_PAUSE`] first, so that a connection that fails
    /// without ever saying so is not tried in a loop. An error other than a lost connection still ends it.
    WhileTheSessionLives,
}

/// How long a delete in the background waits between tries once it has lost [`DELETE_ATTEMPTS`] replies.
const PERSIST_PAUSE: Duration = Duration::from_secs(1);

/// Runs `step` on session `session` until it has an outcome, through connection losses (at most
/// [`DELETE_ATTEMPTS`] times, or while the session lives: see [`Tries`]). `step` is told whether an earlier try lost
/// its reply: that try may still land, and a server reached after the reconnection may not show it yet.
///
/// # Notable errors
/// [`Error::SessionExpired`] once the session is over (its nodes went with it), or the backend closed (or
/// [`Error::Closed`], from the wait for the connection); `RetriesExhausted` (bounded tries only).
pub(crate) async fn through_losses<T, F, Fut>(
    ctx: &Ctx,
    session: SessionId,
    path: &str,
    lost_before: bool,
    tries: Tries,
    mut step: F,
) -> Result<T>
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut lost_reply = lost_before;
    let mut losses = 0u32;
    loop {
        if is_over(ctx.backend.session_status(), session) {
            return Err(Error::SessionExpired);
        }
        match step(lost_reply).await {
            Err(Error::ConnectionLoss) => {
                lost_reply = true;
                losses = losses.saturating_add(1);
                let past_bound = losses >= DELETE_ATTEMPTS;
                if past_bound && tries == Tries::WhileTheSessionLives {
                    if losses % DELETE_ATTEMPTS == 0 {
                        warn!(
                            path,
                            losses, "a delete in the background keeps losing its connection; it goes on"
                        );
                    }
                    tokio::time::sleep(PERSIST_PAUSE).await;
                }
                // Boxed: a rare path, whose state every release's future would otherwise carry.
                Box::pin(connected(&*ctx.backend, Some(Instant::now() + RECONNECT_WAIT))).await?;
                if past_bound && tries == Tries::Bounded {
                    return Err(Error::RetriesExhausted {
                        path: path.to_owned(),
                        attempts: DELETE_ATTEMPTS,
                        why: RetryReason::ReleaseKeptFailing,
                    });
                }
            }
            r => return r,
        }
    }
}
