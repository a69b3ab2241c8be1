//! Layer 2, the I/O half: the one driver that runs create / list / decide / watch / wait for every recipe, with
//! cleanup of our node on every exit path.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::{debug, warn, Instrument};
use uuid::Uuid;

use crate::backend::{Backend, CreateMode, DeletionWatch, NodeEvent, SessionId, SessionState, SessionStatus};
use crate::decide::{contenders, decide, would_wait, Decision};
use crate::error::{Error, LostReason, Result};
use crate::info::NodeInfo;
use crate::layout::{Layout, NodeKind, EXCLUSIVE_NODE};
use crate::metrics::Counters;
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
}

const DELETE_ATTEMPTS: u32 = 20;
/// How long a `try_acquire` may spend on requests (while disconnected they wait for the connection).
const TRY_BOUND: Duration = Duration::from_secs(5);
/// A waiter that came to hold the lock marks itself `first` only when at least this many blockers were ahead of it:
/// in a short queue the node behind it lists again more cheaply (a read) than the mark costs (a write). Marking is
/// only an optimisation: without a mark the node behind lists again.
const MARK_FROM_QUEUE_LEN: usize = 16;
/// How long an acquire that gives up waits for its cleanup before leaving it to the background.
const CLEANUP_GRACE: Duration = Duration::from_millis(500);

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
            return Err(Error::NotHeld {
                path: self.path.to_string(),
                why: "it was released already".into(),
            });
        }
        let r = delete_with_retry(&self.ctx, &self.node, self.identity()).await;
        if self.released.swap(true, Ordering::AcqRel) {
            return Err(Error::NotHeld {
                path: self.path.to_string(),
                why: "it was released already".into(),
            });
        }
        Counters::bump(&self.ctx.counters.releases);
        debug!(node = %self.node, ok = r.is_ok(), "released");
        r.map_err(|e| self.not_held(e))
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

    /// Until when the lock is known valid: the lease of its session, or `None` once that session is gone.
    pub fn valid_until(&self) -> Option<Instant> {
        let st = current(&*self.ctx.backend);
        if st.id != self.session || matches!(st.state, SessionState::Expired | SessionState::Closed) {
            return None;
        }
        let lease = self.ctx.backend.lease();
        if lease.session != self.session {
            return None;
        }
        let trusted = lease.session_timeout.mul_f64(1.0 - self.ctx.lease_margin);
        lease.answered_send.map(|t| t + trusted)
    }

    /// Resolves when the lock is known lost: the session expired, the node was deleted by someone else, or the
    /// lease ran out (checked on the clock, whatever the connection state claims).
    pub async fn lost(&self) -> LostReason {
        let backend = &self.ctx.backend;
        let mut rx = backend.session();
        loop {
            let st = *rx.borrow_and_update();
            if st.id != self.session || matches!(st.state, SessionState::Expired | SessionState::Closed) {
                return LostReason::SessionExpired;
            }
            let Some(until) = self.valid_until() else {
                return LostReason::SessionExpired;
            };
            if Instant::now() >= until {
                return LostReason::LeaseExpired;
            }
            let lease_end = tokio::time::sleep_until(until);
            tokio::pin!(lease_end);
            if st.state != SessionState::Connected {
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return LostReason::SessionExpired },
                    () = &mut lease_end => {}
                }
                continue;
            }
            let registered = tokio::select! {
                r = backend.watch_deletion(&self.node) => r,
                r = rx.changed() => {
                    if r.is_err() {
                        return LostReason::SessionExpired;
                    }
                    continue;
                }
                () = &mut lease_end => continue,
            };
            match registered {
                Ok(None) => {
                    let st = *rx.borrow_and_update();
                    return if st.id != self.session || st.state != SessionState::Connected {
                        LostReason::SessionExpired
                    } else {
                        LostReason::NodeDeleted
                    };
                }
                Ok(Some(w)) => {
                    tokio::pin!(w);
                    // Wait on this one watch; on lease timer or session events, re-check and keep waiting.
                    loop {
                        let Some(until) = self.valid_until() else {
                            return LostReason::SessionExpired;
                        };
                        if Instant::now() >= until {
                            return LostReason::LeaseExpired;
                        }
                        tokio::select! {
                            r = &mut w => match r {
                                Ok(()) => {
                                    let st = *rx.borrow_and_update();
                                    return if st.id != self.session
                                        || matches!(st.state, SessionState::Expired | SessionState::Closed)
                                    {
                                        LostReason::SessionExpired
                                    } else {
                                        LostReason::NodeDeleted
                                    };
                                }
                                Err(Error::SessionExpired | Error::Closed) => return LostReason::SessionExpired,
                                Err(_) => break,
                            },
                            r = rx.changed() => {
                                if r.is_err() {
                                    return LostReason::SessionExpired;
                                }
                                let st = *rx.borrow_and_update();
                                if st.id != self.session
                                    || matches!(st.state, SessionState::Expired | SessionState::Closed)
                                {
                                    return LostReason::SessionExpired;
                                }
                            }
                            () = tokio::time::sleep_until(until) => {}
                        }
                    }
                }
                Err(Error::SessionExpired | Error::Closed) => return LostReason::SessionExpired,
                Err(_) => {
                    tokio::select! {
                        r = rx.changed() => if r.is_err() { return LostReason::SessionExpired },
                        () = &mut lease_end => {}
                    }
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

fn current(backend: &dyn Backend) -> SessionStatus {
    backend.session_status()
}

async fn delete_once(ctx: &Ctx, node: &str, id: Identity) -> Result<()> {
    if id.fixed {
        match ctx.backend.get(node).await? {
            None => return Err(Error::NoNode(node.to_owned())),
            Some((data, stat)) => {
                let ours = stat.ephemeral_owner == id.session
                    && NodeInfo::decode(&data).is_some_and(|i| i.attempt == id.attempt);
                if !ours {
                    return Err(Error::NodeExists(node.to_owned()));
                }
            }
        }
    }
    ctx.backend.delete(node).await
}

/// Deletes our node, retrying through connection loss (bounded). `NoNode` after a lost reply counts as done.
async fn delete_with_retry(ctx: &Ctx, node: &str, id: Identity) -> Result<()> {
    let mut lost_reply = false;
    for _ in 0..DELETE_ATTEMPTS {
        let st = current(&*ctx.backend);
        if st.id != id.session || st.state == SessionState::Expired {
            // The session that owned the node is gone, and the node with it.
            return Err(Error::SessionExpired);
        }
        match delete_once(ctx, node, id).await {
            Ok(()) => return Ok(()),
            Err(Error::NoNode(_)) if lost_reply => return Ok(()),
            Err(Error::ConnectionLoss) => {
                lost_reply = true;
                let d = Instant::now() + std::time::Duration::from_secs(30);
                wait_connected(&*ctx.backend, Some(d)).await?;
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

/// Deletes whatever node a create with this attempt id may have made (its reply never arrived).
async fn delete_by_attempt(ctx: &Ctx, path: &LockPath, attempt: Uuid, fixed: bool) -> Result<()> {
    let mut lost_reply = false;
    for _ in 0..DELETE_ATTEMPTS {
        let st = current(&*ctx.backend);
        let r = if fixed {
            let node = path.child(EXCLUSIVE_NODE);
            let id = Identity {
                fixed,
                attempt,
                session: st.id,
            };
            match delete_once(ctx, &node, id).await {
                Err(Error::NoNode(_) | Error::NodeExists(_)) => Ok(()),
                r => r,
            }
        } else {
            match ctx.backend.children(path.as_str()).await {
                Ok(children) => {
                    let mut r = Ok(());
                    for name in children {
                        if ctx.layout.parse(&name).is_some_and(|p| p.attempt == attempt) {
                            r = match ctx.backend.delete(&path.child(&name)).await {
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
                let d = Instant::now() + std::time::Duration::from_secs(30);
                wait_connected(&*ctx.backend, Some(d)).await?;
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
    /// A create was sent; its node may exist, name unknown.
    Sent(Uuid),
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
}

impl Cleanup {
    fn disarm(&mut self) {
        self.state = Pending::Nothing;
    }

    fn task(&mut self) -> Option<impl Future<Output = ()> + Send + 'static> {
        let state = std::mem::replace(&mut self.state, Pending::Nothing);
        if let Pending::Nothing = state {
            return None;
        }
        let ctx = self.ctx.clone();
        let path = self.path.clone();
        let fixed = self.fixed;
        Some(async move {
            let res = match state {
                Pending::Nothing => Ok(()),
                Pending::Sent(attempt) => delete_by_attempt(&ctx, &path, attempt, fixed).await,
                Pending::Created(node, attempt, session) => {
                    let id = Identity {
                        fixed,
                        attempt,
                        session,
                    };
                    match delete_with_retry(&ctx, &node, id).await {
                        Err(Error::SessionExpired | Error::NoNode(_) | Error::NodeExists(_)) => Ok(()),
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

    /// Runs the cleanup now, waiting at most `grace` for it; past that it goes on in the background.
    async fn finish_within(&mut self, grace: Duration) {
        if let Some(t) = self.task() {
            let _ = tokio::time::timeout(grace, tokio::spawn(t)).await;
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
        let st = *rx.borrow_and_update();
        if st.id != pinned || matches!(st.state, SessionState::Expired | SessionState::Closed) {
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
            recipe,
            try_once: patience == Patience::TryOnce,
            deadline: patience.deadline(),
            failures: 0,
            cleanup: Cleanup {
                ctx: ctx.clone(),
                path: path.clone(),
                fixed: target == Target::Exclusive,
                state: Pending::Nothing,
            },
        };
        let outcome = match target {
            Target::Exclusive => attempt.exclusive().await,
            Target::Queue(kind) => attempt.queued(kind).await,
        };
        match outcome {
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
        }
    }

    /// Creates the lock path and its ancestors as container nodes.
    async fn ensure_parents(&self) -> Step<()> {
        let path = self.path;
        for p in path.ancestors().chain(std::iter::once(path.as_str())) {
            match self.call(self.backend().create(p, b"", CreateMode::Container)).await {
                Ok(_) | Err(Stop::Fail(Error::NodeExists(_))) => {}
                // The create is retried as a whole; a lost parent shows up as NoNode again.
                Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Waits for the deletion of `node`: the watch is set before the existence check, so no wake-up is lost.
    async fn wait_deleted(&self, node: &str, pinned: SessionId) -> Step<()> {
        let backend = self.backend();
        let mut rx = backend.session();
        loop {
            match self.call(backend.watch_deletion(node)).await {
                Ok(None) => return Ok(()),
                Ok(Some(w)) => {
                    let session_gone = session_ended(&mut rx, pinned);
                    tokio::select! {
                        r = w => match r {
                            Ok(()) => {
                                Counters::bump(&self.ctx.counters.wakeups);
                                return Ok(());
                            }
                            Err(Error::ConnectionLoss) => {}
                            Err(e) => return Err(e.into()),
                        },
                        () = self.deadline_passed() => return Err(Stop::Deadline),
                        () = session_gone => return Err(Stop::Fail(Error::SessionExpired)),
                    }
                }
                Err(Stop::Fail(Error::ConnectionLoss)) => {
                    if self.connected().await? != pinned {
                        return Err(Stop::Fail(Error::SessionExpired));
                    }
                }
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
        let backend = self.backend();
        let own_path = self.path.child(ours);
        let blocker_path = self.path.child(blocker);
        // Both watches in one round trip.
        let (own, watched) = tokio::join!(
            self.call(backend.watch_deletion(&own_path)),
            self.call(backend.get_and_watch(&blocker_path))
        );
        let mut own = match own {
            Ok(Some(w)) => w,
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
        let mut rx = backend.session();
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
                        match self.call(backend.get_and_watch(&blocker_path)).await {
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
                () = self.deadline_passed() => return Err(Stop::Deadline),
                () = session_gone => return Err(Stop::Fail(Error::SessionExpired)),
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
            self.mark_first(&q.node, q.attempt);
        }
        self.held(q.node, q.czxid, q.session, q.attempt)
    }

    /// Our node vanished while the session lives (deleted by someone): queue again, bounded.
    fn vanished(&mut self, node: &str) -> Step<()> {
        self.cleanup.disarm();
        self.failed()?;
        debug!(%node, "our lock node vanished; creating it again");
        Ok(())
    }

    /// Tells the node behind us that nothing is ahead of us any more (see `wait_in_line`). Not awaited: the
    /// request is ordered before our release.
    fn mark_first(&self, node: &str, attempt: Uuid) {
        let mut info = NodeInfo::for_this_process(attempt, self.recipe);
        info.first = true;
        self.backend().set_data_unacked(node, &info.encode());
    }

    /// The exclusive recipe: create `P/lock`; when it exists, wait for its deletion and try again.
    async fn exclusive(&mut self) -> Step<Option<HeldNode>> {
        let node = self.path.child(EXCLUSIVE_NODE);
        loop {
            let sid = self.connected().await?;
            let attempt = Uuid::new_v4();
            let data = NodeInfo::for_this_process(attempt, self.recipe).encode();
            self.cleanup.state = Pending::Sent(attempt);
            match self
                .call(self.backend().create(&node, &data, CreateMode::Ephemeral))
                .await
            {
                Ok(c) => {
                    Counters::bump(&self.ctx.counters.creates);
                    self.cleanup.disarm();
                    if current(self.backend()).id != sid {
                        return Err(Stop::Fail(Error::SessionExpired));
                    }
                    return Ok(Some(self.held(c.path, c.czxid, sid, attempt)));
                }
                Err(Stop::Fail(Error::NodeExists(_))) => {
                    self.cleanup.disarm();
                    if self.try_once {
                        return Ok(None);
                    }
                    self.wait_deleted(&node, sid).await?;
                }
                Err(Stop::Fail(Error::NoNode(_))) => {
                    self.cleanup.disarm();
                    self.failed()?;
                    self.ensure_parents().await?;
                }
                Err(Stop::Fail(Error::ConnectionLoss)) => {
                    self.failed()?;
                    if self.connected().await? == sid {
                        let found = match self.call(self.backend().get(&node)).await {
                            Ok(found) => found,
                            Err(Stop::Fail(Error::ConnectionLoss)) => None,
                            Err(e) => return Err(e),
                        };
                        if let Some((data, stat)) = found {
                            if stat.ephemeral_owner == sid
                                && NodeInfo::decode(&data).is_some_and(|i| i.attempt == attempt)
                            {
                                Counters::bump(&self.ctx.counters.creates);
                                Counters::bump(&self.ctx.counters.create_recoveries);
                                self.cleanup.disarm();
                                return Ok(Some(self.held(node, stat.czxid, sid, attempt)));
                            }
                        }
                    }
                    // Not known to be ours: delete whatever this attempt may have made, then try again.
                    self.cleanup.finish_within(CLEANUP_GRACE).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates our sequential node (protected: recognised by its attempt id after a lost reply).
    async fn create_queued(&mut self, kind: NodeKind) -> Step<Queued> {
        loop {
            let sid = self.connected().await?;
            let attempt = Uuid::new_v4();
            let prefix = self.path.child(&self.ctx.layout.prefix(kind, attempt));
            let data = NodeInfo::for_this_process(attempt, self.recipe).encode();
            self.cleanup.state = Pending::Sent(attempt);
            let backend = self.backend();
            let (created, listed) = self
                .call(async {
                    Ok(backend
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
                    self.ensure_parents().await?;
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
                        Err(Stop::Fail(Error::ConnectionLoss)) => self.cleanup.finish_within(CLEANUP_GRACE).await,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Finds the node our create made, by attempt id and ephemeral owner.
    async fn find_ours(&self, attempt: Uuid, sid: SessionId) -> Step<Option<(String, i64)>> {
        let children = match self.call(self.backend().children(self.path.as_str())).await {
            Ok(c) => c,
            Err(Stop::Fail(Error::NoNode(_))) => return Ok(None),
            Err(e) => return Err(e),
        };
        for name in children {
            if self.ctx.layout.parse(&name).is_some_and(|p| p.attempt == attempt) {
                let node = self.path.child(&name);
                if let Some((_, stat)) = self.call(self.backend().get(&node)).await? {
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
            // Give up before writing anything when the queue already says we would wait.
            let children = loop {
                self.connected().await?;
                match self.call(self.backend().children(self.path.as_str())).await {
                    Ok(c) => break c,
                    Err(Stop::Fail(Error::NoNode(_))) => break Vec::new(),
                    Err(Stop::Fail(Error::ConnectionLoss)) => continue,
                    Err(e) => return Err(e),
                }
            };
            if would_wait(kind, &contenders(self.ctx.layout, &children)) {
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
                let listed = match prefetched.take() {
                    Some(c) => Ok(c),
                    None => self.call(self.backend().children(self.path.as_str())).await,
                };
                let children = match listed {
                    Ok(c) => c,
                    Err(Stop::Fail(Error::NoNode(_))) => Vec::new(),
                    Err(Stop::Fail(Error::ConnectionLoss)) => {
                        self.connected().await?;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if current(self.backend()).id != q.session {
                    self.cleanup.disarm();
                    return Err(Stop::Fail(Error::SessionExpired));
                }
                let cs = contenders(self.ctx.layout, &children);
                match decide(self.ctx.layout, kind, &cs, &name) {
                    Decision::Acquired => return Ok(Some(self.won(q, mark && kind != NodeKind::Read))),
                    Decision::Missing => {
                        self.vanished(&q.node)?;
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
                        mark |= position >= MARK_FROM_QUEUE_LEN;
                        // Keep only what the wait needs: the queue itself can be long.
                        let blocker_first = cs.first().is_some_and(|c| c.name == on);
                        drop(cs);
                        drop(children);
                        match self.wait_in_line(&name, &on, blocker_first, q.session).await? {
                            InLine::Acquired => return Ok(Some(self.won(q, mark && kind != NodeKind::Read))),
                            InLine::Missing => {
                                self.vanished(&q.node)?;
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
