//! Layer 2, the I/O half: the one driver that runs create / list / decide / watch / wait for every recipe, with
//! cleanup of our node on every exit path.
//!
//! Every request names the session it belongs to (`backend.on(sid)`): a request of a session that has ended fails,
//! and never runs on the session the backend opened after it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::{debug, warn, Instrument};
use uuid::Uuid;

use crate::backend::{
    Backend, BackendExt, CreateMode, DeletionWatch, NodeEvent, SessionId, SessionState, SessionStatus,
};
use crate::decide::{contenders, decide, foreign, would_wait, wrapped, Decision};
use crate::error::{Error, LostReason, Result};
use crate::info::NodeInfo;
use crate::layout::{Family, Layout, NodeKind, EXCLUSIVE_NODE};
use crate::metrics::Counters;
use crate::mutants::{is_active, Mutant};
use crate::path::LockPath;

/// Shared by every lock made from one [`Locks`](crate::Locks) value.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub backend: Arc<dyn Backend>,
    pub layout: Layout,
    pub counters: Counters,
    /// Bound on creates per acquire (lost replies, vanished parents, vanished nodes).
    pub max_attempts: u32,
    /// The share of the session timeout a lease does not count on.
    pub lease_margin: f64,
}

/// What an acquire contends for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The one fixed node `P/lock`.
    Exclusive,
    /// A sequential node of this kind in the queue under `P`.
    Queue(NodeKind),
}

impl Target {
    /// The family of lock nodes this target makes and honours; every other family on the path is refused.
    fn family(self, layout: Layout) -> Family {
        match self {
            Target::Exclusive => Family::Exclusive,
            Target::Queue(_) => layout.queue_family(),
        }
    }
}

/// How long an acquire may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patience {
    /// Never queue: give up as soon as someone else holds the lock.
    TryOnce,
    /// Wait until this instant.
    Until(Instant),
    /// Wait as long as it takes.
    Forever,
}

impl Patience {
    fn deadline(self) -> Option<Instant> {
        match self {
            Patience::Until(d) => Some(d),
            // A try must not wait, but its requests may sit in the client while it is disconnected: bound them.
            Patience::TryOnce => Some(Instant::now() + TRY_BOUND),
            Patience::Forever => None,
        }
    }
}

const DELETE_ATTEMPTS: u32 = 20;
/// How long a `try_acquire` may spend on requests (while disconnected they wait for the connection).
const TRY_BOUND: Duration = Duration::from_secs(5);
/// How long a delete waits for a lost connection to come back before trying again.
const RECONNECT_WAIT: Duration = Duration::from_secs(30);
/// A waiter that came to hold the lock marks itself `first` only when at least this many blockers were ahead of it:
/// in a short queue the node behind it lists again more cheaply (a read) than the mark costs (a write). Marking is
/// only an optimisation: without a mark the node behind lists again.
const MARK_FROM_QUEUE_LEN: usize = 16;
/// How long an acquire that gives up waits for its cleanup before leaving it to the background.
const CLEANUP_GRACE: Duration = Duration::from_millis(500);

/// Whether the session `pinned` is over, as far as this client knows: the backend moved to another session, or
/// the session expired or was closed.
pub(crate) fn session_over(status: SessionStatus, pinned: SessionId) -> bool {
    status.id != pinned || matches!(status.state, SessionState::Expired | SessionState::Closed)
}

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
    /// A loss that cannot be undone, once `lost()` has seen it (0: none known).
    known_loss: AtomicU8,
}

const LOSS_NONE: u8 = 0;
const LOSS_DELETED: u8 = 1;
const LOSS_EXPIRED: u8 = 2;

impl HeldNode {
    fn identity(&self) -> Identity {
        Identity {
            fixed: self.fixed,
            attempt: self.attempt,
            session: self.session,
        }
    }

    /// Deletes the node and reports what happened.
    ///
    /// The node counts as released only once the delete has an outcome: if this future is dropped midway, the
    /// node's `Drop` still deletes it in the background.
    pub async fn release(&self) -> Result<()> {
        if self.released.load(Ordering::Acquire) {
            return Err(self.released_already());
        }
        let r = delete_with_retry(&self.ctx, &self.node, self.identity()).await;
        if self.released.swap(true, Ordering::AcqRel) {
            return Err(self.released_already());
        }
        Counters::bump(&self.ctx.counters.releases);
        debug!(node = %self.node, ok = r.is_ok(), "released");
        r.map_err(|e| self.not_held(e))
    }

    fn released_already(&self) -> Error {
        Error::NotHeld {
            path: self.path.to_string(),
            why: "it was released already".into(),
        }
    }

    fn not_held(&self, e: Error) -> Error {
        match e {
            Error::NoNode(_) => Error::NotHeld {
                path: self.path.to_string(),
                why: "its node was deleted by someone else before the release".into(),
            },
            Error::NodeExists(_) => Error::NotHeld {
                path: self.path.to_string(),
                why: "its node was deleted and now belongs to another holder".into(),
            },
            e => e,
        }
    }

    /// A loss this client knows of and that cannot be undone: the session is over, or `lost()` saw the node go.
    fn known_loss(&self, status: SessionStatus) -> Option<LostReason> {
        if session_over(status, self.session) {
            return Some(LostReason::SessionExpired);
        }
        match self.known_loss.load(Ordering::Acquire) {
            LOSS_DELETED => Some(LostReason::NodeDeleted),
            LOSS_EXPIRED => Some(LostReason::SessionExpired),
            _ => None,
        }
    }

    fn remember_loss(&self, reason: LostReason) {
        let code = match reason {
            LostReason::NodeDeleted => LOSS_DELETED,
            LostReason::SessionExpired => LOSS_EXPIRED,
            LostReason::LeaseExpired => return,
        };
        let _ = self
            .known_loss
            .compare_exchange(LOSS_NONE, code, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Until when the lock is known valid: the lease of its session, or `None` once that session is gone (or the
    /// node is known to have been deleted).
    pub fn valid_until(&self) -> Option<Instant> {
        if self.known_loss(self.ctx.backend.session_status()).is_some() {
            return None;
        }
        let lease = self.ctx.backend.lease();
        if lease.session != self.session {
            return None;
        }
        let trusted = lease.session_timeout.mul_f64(1.0 - self.ctx.lease_margin);
        lease.answered_send.map(|t| t + trusted)
    }

    /// Why the lock cannot be trusted now, or `None` while its lease is valid.
    pub fn lost_now(&self) -> Option<LostReason> {
        if let Some(r) = self.known_loss(self.ctx.backend.session_status()) {
            return Some(r);
        }
        match self.valid_until() {
            Some(until) if Instant::now() < until => None,
            Some(_) => Some(LostReason::LeaseExpired),
            None => Some(LostReason::SessionExpired),
        }
    }

    /// Resolves when the lock is known lost: the session expired, the node was deleted by someone else, or the
    /// lease ran out (checked on the clock, whatever the connection state claims).
    pub async fn lost(&self) -> LostReason {
        let reason = self.watch_for_loss().await;
        self.remember_loss(reason);
        reason
    }

    async fn watch_for_loss(&self) -> LostReason {
        let backend = &*self.ctx.backend;
        let on = backend.on(self.session);
        let mut rx = backend.session();
        loop {
            let status = *rx.borrow_and_update();
            if let Some(r) = self.known_loss(status) {
                return r;
            }
            let Some(until) = self.valid_until() else {
                return LostReason::SessionExpired;
            };
            if Instant::now() >= until {
                return LostReason::LeaseExpired;
            }
            // Connected: arm a watch on our node, checking that the node carrying our name is ours (by its creation
            // id: the exclusive recipe's fixed name may by now be another holder's node).
            let mut watch: Option<DeletionWatch> = None;
            if status.state == SessionState::Connected {
                let armed = tokio::select! {
                    biased;
                    r = on.watch_deletion(&self.node) => r,
                    r = rx.changed() => {
                        if r.is_err() {
                            return LostReason::SessionExpired;
                        }
                        continue;
                    }
                    () = tokio::time::sleep_until(until) => continue,
                };
                match armed {
                    // Our session answered, and the node is not there: someone deleted it.
                    Ok(None) => return LostReason::NodeDeleted,
                    Ok(Some((stat, _))) if stat.czxid != self.czxid && !is_active(Mutant::LostIgnoresCzxid) => {
                        return LostReason::NodeDeleted
                    }
                    Ok(Some((_, w))) => watch = Some(w),
                    Err(Error::SessionExpired | Error::Closed) => return LostReason::SessionExpired,
                    // Connection loss: wait for the session to change state, then arm again.
                    Err(_) => {}
                }
            }
            // Wait for the watch, a change of the session's state, or the end of the lease.
            loop {
                let Some(until) = self.valid_until() else {
                    return LostReason::SessionExpired;
                };
                if Instant::now() >= until {
                    return LostReason::LeaseExpired;
                }
                let fired = async {
                    match watch.as_mut() {
                        Some(w) => w.await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    r = fired => match r {
                        // The deletion of our own session's ephemeral is never reported to that session's
                        // watches (it sees the expiry instead): someone else deleted the node.
                        Ok(()) => return LostReason::NodeDeleted,
                        Err(Error::SessionExpired | Error::Closed) => return LostReason::SessionExpired,
                        Err(_) => break,
                    },
                    r = rx.changed() => {
                        if r.is_err() {
                            return LostReason::SessionExpired;
                        }
                        if let Some(r) = self.known_loss(*rx.borrow_and_update()) {
                            return r;
                        }
                        if watch.is_none() {
                            break;
                        }
                    }
                    () = tokio::time::sleep_until(until) => {}
                }
            }
        }
    }
}

impl Drop for HeldNode {
    fn drop(&mut self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        Counters::bump(&self.ctx.counters.releases);
        let ctx = self.ctx.clone();
        let node = std::mem::take(&mut self.node);
        let id = self.identity();
        spawn_cleanup(self.handle.as_ref(), &node.clone(), async move {
            if let Err(e) = delete_with_retry(&ctx, &node, id).await {
                debug!(%node, error = %e, "release on drop found the lock already gone");
            }
        });
    }
}

fn spawn_cleanup(handle: Option<&Handle>, node: &str, fut: impl Future<Output = ()> + Send + 'static) {
    match handle.cloned().or_else(|| Handle::try_current().ok()) {
        Some(h) => {
            h.spawn(fut);
        }
        None => warn!(
            node,
            "no tokio runtime to delete the lock node in the background; it stays until its session ends"
        ),
    }
}

/// Whose node a delete may remove.
#[derive(Debug, Clone, Copy)]
struct Identity {
    /// A fixed-name node (exclusive) must be checked to be ours before deleting: after a loss, it may be another
    /// holder's node of the same name.
    fixed: bool,
    attempt: Uuid,
    /// The session that made the node: every request of the delete runs on it, or not at all.
    session: SessionId,
}

/// Waits until the session is connected; returns its id. `Ok(None)`: the deadline passed first.
async fn wait_connected(backend: &dyn Backend, deadline: Option<Instant>) -> Result<Option<SessionId>> {
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
        match deadline {
            Some(d) => match tokio::time::timeout_at(d, changed).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Closed),
                Err(_) => return Ok(None),
            },
            None => {
                if changed.await.is_err() {
                    return Err(Error::Closed);
                }
            }
        }
    }
}

/// Whether the node's data and stat say it is the node of this attempt, made by this session.
fn is_ours(data: &[u8], stat_owner: SessionId, attempt: Uuid, session: SessionId) -> bool {
    stat_owner == session && NodeInfo::decode(data).is_some_and(|i| i.attempt == attempt)
}

/// Deletes `node` on its own session. A fixed-name node is read first and deleted only if it is ours (both requests
/// on that session, so an expiry in between fails the delete instead of letting it run elsewhere).
async fn delete_once(ctx: &Ctx, node: &str, id: Identity) -> Result<()> {
    let on = ctx.backend.on(id.session);
    if id.fixed {
        match on.get(node).await? {
            None => return Err(Error::NoNode(node.to_owned())),
            Some((data, stat)) if !is_ours(&data, stat.ephemeral_owner, id.attempt, id.session) => {
                return Err(Error::NodeExists(node.to_owned()));
            }
            Some(_) => {}
        }
    }
    on.delete(node).await
}

/// Deletes our node, retrying through connection loss (bounded). `NoNode` after a lost reply counts as done.
///
/// After a lost reply, the earlier delete may still land (the server it went to may have passed it on), and a server
/// reached after the reconnection may not show it yet: a `sync` first, so that the check of a fixed-name node does not
/// read our node where the next holder's already is (found by the model checker: the stale check let the retried
/// delete remove the next holder's node).
async fn delete_with_retry(ctx: &Ctx, node: &str, id: Identity) -> Result<()> {
    let mut lost_reply = false;
    for _ in 0..DELETE_ATTEMPTS {
        if session_over(ctx.backend.session_status(), id.session) {
            // The session that owned the node is gone, and the node with it.
            return Err(Error::SessionExpired);
        }
        let attempt = async {
            if lost_reply && !is_active(Mutant::NoSyncAfterLostReply) {
                ctx.backend.on(id.session).sync(node).await?;
            }
            delete_once(ctx, node, id).await
        };
        match attempt.await {
            Ok(()) => return Ok(()),
            Err(Error::NoNode(_)) if lost_reply => return Ok(()),
            Err(Error::ConnectionLoss) => {
                lost_reply = true;
                wait_connected(&*ctx.backend, Some(Instant::now() + RECONNECT_WAIT)).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::RetriesExhausted {
        path: node.to_owned(),
        attempts: DELETE_ATTEMPTS,
        why: "the connection kept failing while deleting the lock node".into(),
    })
}

/// Deletes whatever node a create of this attempt, sent on `session`, may have made (its reply never arrived).
async fn delete_by_attempt(ctx: &Ctx, path: &LockPath, attempt: Uuid, session: SessionId, fixed: bool) -> Result<()> {
    let mut lost_reply = false;
    for _ in 0..DELETE_ATTEMPTS {
        if session_over(ctx.backend.session_status(), session) {
            // Whatever the create made went with its session.
            return Ok(());
        }
        // The create may have gone to a server we are no longer connected to: catch up first.
        let synced = if is_active(Mutant::NoSyncAfterLostReply) {
            Ok(())
        } else {
            ctx.backend.on(session).sync(path.as_str()).await
        };
        if let Err(e) = synced {
            match e {
                Error::ConnectionLoss => {
                    lost_reply = true;
                    wait_connected(&*ctx.backend, Some(Instant::now() + RECONNECT_WAIT)).await?;
                    continue;
                }
                Error::SessionExpired | Error::Closed => return Ok(()),
                e => return Err(e),
            }
        }
        let r = if fixed {
            let id = Identity {
                fixed,
                attempt,
                session,
            };
            match delete_once(ctx, &path.child(EXCLUSIVE_NODE), id).await {
                Err(Error::NoNode(_) | Error::NodeExists(_)) => Ok(()),
                r => r,
            }
        } else {
            let on = ctx.backend.on(session);
            match on.children(path.as_str()).await {
                Ok(children) => {
                    let mut r = Ok(());
                    for name in children {
                        if ctx.layout.parse(&name).is_some_and(|p| p.attempt == attempt) {
                            r = match on.delete(&path.child(&name)).await {
                                Err(Error::NoNode(_)) => Ok(()),
                                other => other,
                            };
                        }
                    }
                    r
                }
                Err(Error::NoNode(_)) => Ok(()),
                Err(e) => Err(e),
            }
        };
        match r {
            Ok(()) => return Ok(()),
            Err(Error::NoNode(_)) if lost_reply => return Ok(()),
            Err(Error::ConnectionLoss) => {
                lost_reply = true;
                wait_connected(&*ctx.backend, Some(Instant::now() + RECONNECT_WAIT)).await?;
            }
            Err(Error::SessionExpired | Error::Closed) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Err(Error::RetriesExhausted {
        path: path.to_string(),
        attempts: DELETE_ATTEMPTS,
        why: "the connection kept failing while cleaning up".into(),
    })
}

#[derive(Debug)]
enum Pending {
    /// Nothing of ours may exist.
    Nothing,
    /// A create was sent on this session; its node may exist, name unknown.
    Sent(Uuid, SessionId),
    /// Our node exists.
    Created(String, Uuid, SessionId),
}

/// Undoes the remote side effects of an acquire that did not complete: deletes our node, awaited on the ordinary
/// exit paths and in the background when the acquire future is dropped.
struct Cleanup {
    ctx: Arc<Ctx>,
    path: LockPath,
    fixed: bool,
    state: Pending,
    /// Earlier cleanups of this acquire still running in the background (their grace ran out).
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl Cleanup {
    fn disarm(&mut self) {
        self.state = Pending::Nothing;
    }

    fn task(&mut self) -> Option<impl Future<Output = ()> + Send + 'static> {
        let mut state = std::mem::replace(&mut self.state, Pending::Nothing);
        if matches!(state, Pending::Sent(..)) && is_active(Mutant::CleanupIgnoresInFlight) {
            state = Pending::Nothing;
        }
        if let Pending::Nothing = state {
            return None;
        }
        let ctx = self.ctx.clone();
        let path = self.path.clone();
        let fixed = self.fixed;
        Some(async move {
            let res = match state {
                Pending::Nothing => Ok(()),
                Pending::Sent(attempt, session) => delete_by_attempt(&ctx, &path, attempt, session, fixed).await,
                Pending::Created(node, attempt, session) => {
                    let id = Identity {
                        fixed,
                        attempt,
                        session,
                    };
                    match delete_with_retry(&ctx, &node, id).await {
                        Err(Error::SessionExpired | Error::Closed | Error::NoNode(_) | Error::NodeExists(_)) => Ok(()),
                        r => r,
                    }
                }
            };
            match res {
                Ok(()) => Counters::bump(&ctx.counters.cleanups),
                Err(e) => {
                    warn!(error = %e, "could not delete an abandoned lock node; it stays until its session ends")
                }
            }
        })
    }

    /// Runs the cleanup now, and waits at most `grace` for it and for earlier ones still running; past that they go on
    /// in the background.
    async fn finish_within(&mut self, grace: Duration) {
        if let Some(t) = self.task() {
            self.background.push(tokio::spawn(t));
        }
        let until = Instant::now() + grace;
        while let Some(h) = self.background.last_mut() {
            if tokio::time::timeout_at(until, h).await.is_err() {
                return;
            }
            self.background.pop();
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let node = self.path.to_string();
        if let Some(t) = self.task() {
            debug!(path = %node, "acquire abandoned; cleaning up in the background");
            spawn_cleanup(None, &node, t);
        }
    }
}

/// Why an attempt stopped short of holding the lock.
enum Stop {
    /// The deadline passed.
    Deadline,
    /// An error.
    Fail(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Fail(e)
    }
}

type Step<T> = std::result::Result<T, Stop>;

/// Resolves when the session `pinned` is over (its id changed, or it expired or closed).
async fn session_ended(rx: &mut tokio::sync::watch::Receiver<SessionStatus>, pinned: SessionId) {
    loop {
        if session_over(*rx.borrow_and_update(), pinned) {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Whether node data carries the `first` mark.
fn marked_first(data: &[u8]) -> bool {
    NodeInfo::decode(data).is_some_and(|i| i.first)
}

/// How a wait in line ended.
enum InLine {
    /// Every blocker ahead has gone: we hold the lock.
    Acquired,
    /// Our own node was deleted (by someone else).
    Missing,
    /// Look at the queue again.
    Relist,
}

/// Our node in the queue, just made.
struct Queued {
    node: String,
    czxid: i64,
    session: SessionId,
    attempt: Uuid,
    /// The children listed right after the create, pipelined with it (`None` when not available).
    children: Option<Vec<String>>,
}

/// One acquire in progress: its settings, its failure budget, and what it must clean up.
struct Attempt<'a> {
    ctx: &'a Arc<Ctx>,
    path: &'a LockPath,
    target: Target,
    recipe: &'static str,
    try_once: bool,
    deadline: Option<Instant>,
    failures: u32,
    cleanup: Cleanup,
}

/// Acquires `target` under `path`. `Ok(None)`: gave up (try-once found it held, or the deadline passed), with our
/// node deleted (or, when the server cannot be reached within a short grace, being deleted in the background).
///
/// Every request is bounded by the deadline: a client that queues requests while disconnected cannot make a timed
/// acquire overrun. A `TryOnce` that cannot reach the server in a few seconds fails with `ConnectionLoss`.
///
/// # Cancel safety
/// Dropping the future at any await point deletes our node (or, when a create's reply is outstanding, any node
/// carrying our attempt id) in the background.
pub(crate) async fn acquire(
    ctx: &Arc<Ctx>,
    path: &LockPath,
    target: Target,
    recipe: &'static str,
    patience: Patience,
) -> Result<Option<HeldNode>> {
    let span = tracing::debug_span!("acquire", %path, recipe, node = tracing::field::Empty);
    async move {
        let mut attempt = Attempt {
            ctx,
            path,
            target,
            recipe,
            try_once: patience == Patience::TryOnce,
            deadline: patience.deadline(),
            failures: 0,
            cleanup: Cleanup {
                ctx: ctx.clone(),
                path: path.clone(),
                fixed: target == Target::Exclusive,
                state: Pending::Nothing,
                background: Vec::new(),
            },
        };
        let outcome = match target {
            Target::Exclusive => attempt.exclusive().await,
            Target::Queue(kind) => attempt.queued(kind).await,
        };
        match outcome {
            // Between the last reply and now the client may have learned that the session is over (a reply that
            // arrives with the news of the expiry): the node went with it; never hand out a guard known lost.
            Ok(Some(held)) if session_over(ctx.backend.session_status(), held.session) => {
                held.released.store(true, Ordering::Release);
                Err(Error::SessionExpired)
            }
            Ok(Some(held)) => Ok(Some(held)),
            Ok(None) => {
                attempt.cleanup.finish_within(CLEANUP_GRACE).await;
                Ok(None)
            }
            Err(Stop::Deadline) => {
                attempt.cleanup.finish_within(CLEANUP_GRACE).await;
                if attempt.try_once {
                    Err(Error::ConnectionLoss)
                } else {
                    Ok(None)
                }
            }
            Err(Stop::Fail(e)) => {
                if matches!(e, Error::SessionExpired | Error::Closed) {
                    // Whatever we made went with the session.
                    attempt.cleanup.disarm();
                } else {
                    attempt.cleanup.finish_within(CLEANUP_GRACE).await;
                }
                Err(e)
            }
        }
    }
    .instrument(span)
    .await
}

impl Attempt<'_> {
    fn backend(&self) -> &dyn Backend {
        &*self.ctx.backend
    }

    /// Runs one request, bounded by the deadline.
    async fn call<T>(&self, f: impl Future<Output = Result<T>>) -> Step<T> {
        match self.deadline {
            Some(d) => match tokio::time::timeout_at(d, f).await {
                Ok(r) => Ok(r?),
                Err(_) => Err(Stop::Deadline),
            },
            None => Ok(f.await?),
        }
    }

    /// Waits until the session is connected; returns its id.
    async fn connected(&self) -> Step<SessionId> {
        wait_connected(self.backend(), self.deadline)
            .await?
            .ok_or(Stop::Deadline)
    }

    /// Waits until the session `pinned` is connected again; fails when it ended meanwhile.
    async fn reconnected(&self, pinned: SessionId) -> Step<()> {
        if self.connected().await? != pinned {
            return Err(Stop::Fail(Error::SessionExpired));
        }
        Ok(())
    }

    /// Counts a failed create (lost reply, vanished parent or node) against the bound.
    fn failed(&mut self) -> Step<()> {
        self.failures += 1;
        if self.failures >= self.ctx.max_attempts {
            return Err(Stop::Fail(Error::RetriesExhausted {
                path: self.path.to_string(),
                attempts: self.failures,
                why: "the lock node could not be made to stick (lost replies, vanishing parent or node)".into(),
            }));
        }
        Ok(())
    }

    fn held(&self, node: String, czxid: i64, session: SessionId, attempt: Uuid) -> HeldNode {
        Counters::bump(&self.ctx.counters.acquisitions);
        tracing::Span::current().record("node", node.as_str());
        debug!("acquired");
        HeldNode {
            ctx: self.ctx.clone(),
            path: self.path.clone(),
            node,
            czxid,
            session,
            attempt,
            fixed: self.cleanup.fixed,
            handle: Handle::try_current().ok(),
            released: AtomicBool::new(false),
            known_loss: AtomicU8::new(LOSS_NONE),
        }
    }

    /// The refusal when `children` hold a lock node of another family than ours; `None` otherwise.
    fn refusal(&self, children: &[String]) -> Option<Error> {
        if is_active(Mutant::NoForeignCheck) {
            return None;
        }
        let ours = self.target.family(self.ctx.layout);
        foreign(ours, children).map(|(node, family)| Error::ForeignLock {
            path: self.path.to_string(),
            node,
            found: family.describe().to_owned(),
            ours: ours.describe().to_owned(),
        })
    }

    /// Deletes the node we made (now, within a grace) and refuses with `e`.
    async fn refuse<T>(&mut self, e: Error) -> Step<T> {
        debug!(error = %e, "refusing the lock");
        self.clean_up_now().await;
        Err(Stop::Fail(e))
    }

    /// Runs the cleanup of what this acquire made so far, waiting for it at most until the deadline (and at most the
    /// cleanup grace): an acquire that gives up later waits at most one more grace past its deadline, all told.
    async fn clean_up_now(&mut self) {
        let grace = match self.deadline {
            Some(d) => CLEANUP_GRACE.min(d.saturating_duration_since(Instant::now())),
            None => CLEANUP_GRACE,
        };
        self.cleanup.finish_within(grace).await;
    }

    /// Lists the lock path on session `sid`, through connection losses of that session.
    async fn list(&self, sid: SessionId) -> Step<Vec<String>> {
        loop {
            match self.call(self.backend().on(sid).children(self.path.as_str())).await {
                Ok(c) => return Ok(c),
                Err(Stop::Fail(Error::NoNode(_))) => return Ok(Vec::new()),
                Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(sid).await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates the lock path and its ancestors as container nodes.
    async fn ensure_parents(&self, sid: SessionId) -> Step<()> {
        let on = self.backend().on(sid);
        for p in self.path.ancestors().chain(std::iter::once(self.path.as_str())) {
            match self.call(on.create(p, b"", CreateMode::Container)).await {
                Ok(_) | Err(Stop::Fail(Error::NodeExists(_))) => {}
                // The create is retried as a whole (bounded); a lost parent, or one the container reaper deleted
                // between two of these creates, shows up as NoNode again.
                Err(Stop::Fail(Error::ConnectionLoss | Error::NoNode(_))) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Waits for the deletion of `node`: the watch is set before the existence check, so no wake-up is lost.
    async fn wait_deleted(&self, node: &str, pinned: SessionId) -> Step<()> {
        let on = self.backend().on(pinned);
        let mut rx = self.backend().session();
        loop {
            match self.call(on.watch_deletion(node)).await {
                Ok(None) => return Ok(()),
                Ok(Some((_, w))) => {
                    let session_gone = session_ended(&mut rx, pinned);
                    tokio::select! {
                        biased;
                        r = w => match r {
                            Ok(()) => {
                                Counters::bump(&self.ctx.counters.wakeups);
                                return Ok(());
                            }
                            Err(Error::ConnectionLoss) => {}
                            Err(e) => return Err(e.into()),
                        },
                        () = session_gone => return Err(Stop::Fail(Error::SessionExpired)),
                        () = self.deadline_passed() => return Err(Stop::Deadline),
                    }
                }
                Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(pinned).await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// A deadline as a future (pending forever without one).
    async fn deadline_passed(&self) {
        match self.deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    }

    /// Native layout: waits for the blocker ahead of us without listing the children again when we can know that
    /// nothing else is ahead of it.
    ///
    /// # Contract
    /// - Nodes made after our list sort behind us (sequence order, across the wrap too), so nothing can appear
    ///   ahead of us. If nothing was ahead of our blocker (it was first in our list, or it marked itself `first`
    ///   in its data after it came to hold the lock), its deletion means we hold the lock: no list, one watch event
    ///   per handoff. Otherwise (a waiter ahead was cancelled or crashed) we list again.
    /// - The data of a native lock node is written only by this library: at creation, and once to mark it first.
    ///   So a data change seen on the blocker is its mark, even when the node is already gone when we look.
    /// - Our own node is watched as well, registered in the same round trip as the blocker's watch. ZooKeeper
    ///   delivers one session's watch events in the order of the changes, and the own-node watch is polled first,
    ///   so if our node was deleted (by someone else) before the blocker went, we never claim the lock.
    /// - `Relist` hands back to the listing path.
    async fn wait_in_line(&self, ours: &str, blocker: &str, blocker_first: bool, pinned: SessionId) -> Step<InLine> {
        let on = self.backend().on(pinned);
        let own_path = self.path.child(ours);
        let blocker_path = self.path.child(blocker);
        // Both watches in one round trip.
        let (own, watched) = tokio::join!(
            self.call(on.watch_deletion(&own_path)),
            self.call(on.get_and_watch(&blocker_path))
        );
        let mut own = match own {
            Ok(Some((_, w))) => w,
            Ok(None) => return Ok(InLine::Missing),
            Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(InLine::Relist),
            Err(e) => return Err(e),
        };
        let mut known_first = blocker_first;
        let mut watch = match watched {
            Ok(Some((data, w))) => {
                known_first |= marked_first(&data);
                w
            }
            Ok(None) => return Self::blocker_gone(known_first, &mut own).await,
            Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(InLine::Relist),
            Err(e) => return Err(e),
        };
        let mut rx = self.backend().session();
        loop {
            let session_gone = session_ended(&mut rx, pinned);
            tokio::select! {
                biased;
                r = &mut own => return match r {
                    Ok(()) => Ok(InLine::Missing),
                    Err(Error::ConnectionLoss) => Ok(InLine::Relist),
                    Err(e) => Err(e.into()),
                },
                r = &mut watch => match r {
                    Ok(NodeEvent::Deleted) => {
                        Counters::bump(&self.ctx.counters.wakeups);
                        return Self::blocker_gone(known_first, &mut own).await;
                    }
                    Ok(_) => {
                        // The blocker marked itself first (the only data change of a lock node): watch on.
                        known_first = true;
                        match self.call(on.get_and_watch(&blocker_path)).await {
                            Ok(Some((_, w))) => watch = w,
                            Ok(None) => {
                                Counters::bump(&self.ctx.counters.wakeups);
                                return Self::blocker_gone(true, &mut own).await;
                            }
                            Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(InLine::Relist),
                            Err(e) => return Err(e),
                        }
                    }
                    Err(Error::ConnectionLoss) => return Ok(InLine::Relist),
                    Err(e) => return Err(e.into()),
                },
                () = session_gone => return Err(Stop::Fail(Error::SessionExpired)),
                () = self.deadline_passed() => return Err(Stop::Deadline),
            }
        }
    }

    /// Our blocker is gone: with nothing known ahead of it we hold the lock, unless our own node went first.
    async fn blocker_gone(known_first: bool, own: &mut DeletionWatch) -> Step<InLine> {
        if !known_first {
            return Ok(InLine::Relist);
        }
        let own_gone = std::future::poll_fn(|cx| std::task::Poll::Ready(own.as_mut().poll(cx))).await;
        match own_gone {
            std::task::Poll::Pending => Ok(InLine::Acquired),
            std::task::Poll::Ready(Ok(())) => Ok(InLine::Missing),
            std::task::Poll::Ready(Err(Error::ConnectionLoss)) => Ok(InLine::Relist),
            std::task::Poll::Ready(Err(e)) => Err(e.into()),
        }
    }

    /// Our queued node holds the lock: keep it, and mark it first when the node behind may need to know.
    fn won(&mut self, q: Queued, mark: bool) -> HeldNode {
        self.cleanup.disarm();
        if mark {
            self.mark_first(&q.node, q.attempt, q.session);
        }
        self.held(q.node, q.czxid, q.session, q.attempt)
    }

    /// The decision could not find our node among the contenders: it was deleted (by someone), or it has a name
    /// the decision does not read. Either way, delete it by its path (the cleanup knows it) and queue again,
    /// bounded.
    async fn vanished(&mut self, node: &str) -> Step<()> {
        debug!(%node, "our lock node is not in the queue; deleting it by its path and creating it again");
        if is_active(Mutant::MissingForgetsNode) {
            self.cleanup.disarm();
        } else {
            self.clean_up_now().await;
        }
        self.failed()
    }

    /// Tells the node behind us that nothing is ahead of us any more (see `wait_in_line`). Not awaited: the
    /// request is ordered before our release.
    fn mark_first(&self, node: &str, attempt: Uuid, session: SessionId) {
        let mut info = NodeInfo::for_this_process(attempt, self.recipe);
        info.first = true;
        self.backend().on(session).set_data_unacked(node, &info.encode());
    }

    /// The exclusive recipe: create `P/lock` (and list `P` in the same round trip, to refuse beside the nodes of
    /// other recipes); when it exists, wait for its deletion and try again.
    async fn exclusive(&mut self) -> Step<Option<HeldNode>> {
        let node = self.path.child(EXCLUSIVE_NODE);
        loop {
            let sid = self.connected().await?;
            let ctx: &Arc<Ctx> = self.ctx;
            let on = ctx.backend.on(sid);
            let attempt = Uuid::new_v4();
            let data = NodeInfo::for_this_process(attempt, self.recipe).encode();
            self.cleanup.state = Pending::Sent(attempt, sid);
            let (created, listed) = self
                .call(async {
                    Ok(on
                        .create_and_list(&node, &data, CreateMode::Ephemeral, self.path.as_str())
                        .await)
                })
                .await?;
            let (czxid, listed) = match created {
                Ok(c) => {
                    Counters::bump(&self.ctx.counters.creates);
                    self.cleanup.state = Pending::Created(node.clone(), attempt, sid);
                    (c.czxid, listed.ok())
                }
                Err(Error::NodeExists(_)) => {
                    self.cleanup.disarm();
                    if let Some(e) = listed.ok().and_then(|c| self.refusal(&c)) {
                        return self.refuse(e).await;
                    }
                    if self.try_once {
                        return Ok(None);
                    }
                    self.wait_deleted(&node, sid).await?;
                    continue;
                }
                Err(Error::NoNode(_)) => {
                    self.cleanup.disarm();
                    self.failed()?;
                    self.ensure_parents(sid).await?;
                    continue;
                }
                Err(Error::ConnectionLoss) => {
                    self.failed()?;
                    match self.recover_exclusive(&node, attempt, sid).await? {
                        Some(czxid) => (czxid, None),
                        None => {
                            // Not known to be ours: delete whatever this attempt may have made, then try again.
                            self.clean_up_now().await;
                            continue;
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            };
            // We made `P/lock`; it holds unless a lock node of another recipe is on the path.
            let children = match listed {
                Some(c) => c,
                None => self.list(sid).await?,
            };
            if let Some(e) = self.refusal(&children) {
                return self.refuse(e).await;
            }
            self.cleanup.disarm();
            return Ok(Some(self.held(node, czxid, sid, attempt)));
        }
    }

    /// After a lost create reply: whether `P/lock` is the node of this attempt, made by session `sid`.
    async fn recover_exclusive(&mut self, node: &str, attempt: Uuid, sid: SessionId) -> Step<Option<i64>> {
        if self.connected().await? != sid {
            // The session ended: whatever the create made went with it.
            self.cleanup.disarm();
            return Ok(None);
        }
        // After a reconnection to another server, a read may not show our create yet: catch up with the leader.
        let on = self.backend().on(sid);
        let found = match self
            .call(async {
                on.sync(node).await?;
                on.get(node).await
            })
            .await
        {
            Ok(found) => found,
            Err(Stop::Fail(Error::ConnectionLoss)) => None,
            Err(e) => return Err(e),
        };
        match found {
            Some((data, stat)) if is_ours(&data, stat.ephemeral_owner, attempt, sid) => {
                Counters::bump(&self.ctx.counters.creates);
                Counters::bump(&self.ctx.counters.create_recoveries);
                self.cleanup.state = Pending::Created(node.to_owned(), attempt, sid);
                Ok(Some(stat.czxid))
            }
            _ => Ok(None),
        }
    }

    /// Creates our sequential node (protected: recognised by its attempt id after a lost reply).
    async fn create_queued(&mut self, kind: NodeKind) -> Step<Queued> {
        loop {
            let sid = self.connected().await?;
            let ctx: &Arc<Ctx> = self.ctx;
            let on = ctx.backend.on(sid);
            let attempt = Uuid::new_v4();
            let prefix = self.path.child(&self.ctx.layout.prefix(kind, attempt));
            let data = NodeInfo::for_this_process(attempt, self.recipe).encode();
            self.cleanup.state = Pending::Sent(attempt, sid);
            let (created, listed) = self
                .call(async {
                    Ok(on
                        .create_and_list(&prefix, &data, CreateMode::EphemeralSequential, self.path.as_str())
                        .await)
                })
                .await?;
            match created {
                Ok(c) => {
                    Counters::bump(&self.ctx.counters.creates);
                    self.cleanup.state = Pending::Created(c.path.clone(), attempt, sid);
                    return Ok(Queued {
                        node: c.path,
                        czxid: c.czxid,
                        session: sid,
                        attempt,
                        children: listed.ok(),
                    });
                }
                Err(Error::NoNode(_)) => {
                    self.cleanup.disarm();
                    self.failed()?;
                    self.ensure_parents(sid).await?;
                }
                Err(Error::ConnectionLoss) => {
                    self.failed()?;
                    if self.connected().await? != sid {
                        // The session ended: whatever the create made went with it.
                        self.cleanup.disarm();
                        continue;
                    }
                    match self.find_ours(attempt, sid).await {
                        Ok(Some((node, czxid))) => {
                            Counters::bump(&self.ctx.counters.creates);
                            Counters::bump(&self.ctx.counters.create_recoveries);
                            debug!(%node, "create reply was lost; found our node by its attempt id");
                            self.cleanup.state = Pending::Created(node.clone(), attempt, sid);
                            return Ok(Queued {
                                node,
                                czxid,
                                session: sid,
                                attempt,
                                children: None,
                            });
                        }
                        Ok(None) => self.cleanup.disarm(),
                        Err(Stop::Fail(Error::ConnectionLoss)) => self.clean_up_now().await,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Finds the node our create made, by attempt id and ephemeral owner.
    async fn find_ours(&self, attempt: Uuid, sid: SessionId) -> Step<Option<(String, i64)>> {
        let on = self.backend().on(sid);
        // After a reconnection to another server, a list may not show our create yet: catch up with the leader.
        let listed = async {
            if !is_active(Mutant::NoSyncAfterLostReply) {
                on.sync(self.path.as_str()).await?;
            }
            on.children(self.path.as_str()).await
        };
        let children = match self.call(listed).await {
            Ok(c) => c,
            Err(Stop::Fail(Error::NoNode(_))) => return Ok(None),
            Err(e) => return Err(e),
        };
        for name in children {
            if self.ctx.layout.parse(&name).is_some_and(|p| p.attempt == attempt) {
                let node = self.path.child(&name);
                if let Some((_, stat)) = self.call(on.get(&node)).await? {
                    if stat.ephemeral_owner == sid {
                        return Ok(Some((node, stat.czxid)));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The queued recipes: create our node, then decide / wait until it holds.
    async fn queued(&mut self, kind: NodeKind) -> Step<Option<HeldNode>> {
        if self.try_once {
            // Give up before writing anything when the queue already says we would wait (or is foreign).
            let sid = self.connected().await?;
            let children = self.list(sid).await?;
            if let Some(e) = self.refusal(&children) {
                return Err(Stop::Fail(e));
            }
            let cs = contenders(self.ctx.layout, &children);
            if let Some(c) = wrapped(self.ctx.layout, &cs) {
                return Err(Stop::Fail(Error::SequenceWrapped {
                    path: self.path.to_string(),
                    node: c.name.clone(),
                    layout: self.ctx.layout,
                }));
            }
            if would_wait(kind, &cs) {
                return Ok(None);
            }
        }
        loop {
            let mut q = self.create_queued(kind).await?;
            let name = q.node.rsplit('/').next().unwrap_or_default().to_owned();
            let mut prefetched = q.children.take();
            // Whether we waited behind a long queue (then we mark ourselves first once we hold the lock).
            let mut mark = false;
            loop {
                let children = match prefetched.take() {
                    Some(c) => c,
                    None => self.list(q.session).await?,
                };
                if session_over(self.backend().session_status(), q.session) {
                    self.cleanup.disarm();
                    return Err(Stop::Fail(Error::SessionExpired));
                }
                if let Some(e) = self.refusal(&children) {
                    return self.refuse(e).await;
                }
                let cs = contenders(self.ctx.layout, &children);
                if let Some(c) = wrapped(self.ctx.layout, &cs) {
                    let e = Error::SequenceWrapped {
                        path: self.path.to_string(),
                        node: c.name.clone(),
                        layout: self.ctx.layout,
                    };
                    return self.refuse(e).await;
                }
                match decide(self.ctx.layout, kind, &cs, &name) {
                    Decision::Acquired => return Ok(Some(self.won(q, mark && kind != NodeKind::Read))),
                    Decision::Missing => {
                        self.vanished(&q.node).await?;
                        break;
                    }
                    Decision::Wait { on } => {
                        if self.try_once {
                            return Ok(None);
                        }
                        if self.ctx.layout != Layout::Native {
                            // Peer layouts list again on every wake-up, as their peers do.
                            self.wait_deleted(&self.path.child(&on), q.session).await?;
                            continue;
                        }
                        // Only native nodes are marked (peers neither read the mark nor expect our writes).
                        let position = cs.iter().position(|c| c.name == name).unwrap_or(0);
                        mark |= position >= MARK_FROM_QUEUE_LEN || is_active(Mutant::AlwaysMark);
                        // Keep only what the wait needs: the queue itself can be long.
                        let blocker_first = cs.first().is_some_and(|c| c.name == on);
                        drop(cs);
                        drop(children);
                        match self.wait_in_line(&name, &on, blocker_first, q.session).await? {
                            InLine::Acquired => return Ok(Some(self.won(q, mark && kind != NodeKind::Read))),
                            InLine::Missing => {
                                self.vanished(&q.node).await?;
                                break;
                            }
                            InLine::Relist => {}
                        }
                    }
                }
            }
        }
    }
}
