//! Layer 2, the I/O half: the one driver that runs create / list / decide / watch / wait for every recipe, with
//! cleanup of our node on every exit path.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::{debug, warn, Instrument};
use uuid::Uuid;

use crate::backend::{Backend, CreateMode, SessionId, SessionState, SessionStatus};
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
            _ => None,
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

impl HeldNode {
    fn identity(&self) -> Identity {
        Identity {
            fixed: self.fixed,
            attempt: self.attempt,
            session: self.session,
        }
    }

    /// Deletes the node and reports what happened.
    pub async fn release(&self) -> Result<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            return Err(Error::NotHeld {
                path: self.path.to_string(),
                why: "it was released already".into(),
            });
        }
        Counters::bump(&self.ctx.counters.releases);
        let r = delete_with_retry(&self.ctx, &self.node, self.identity()).await;
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

    /// Resolves when the lock is known lost: the session expired or the node was deleted by someone else.
    pub async fn lost(&self) -> LostReason {
        let backend = &self.ctx.backend;
        let mut rx = backend.session();
        loop {
            let st = *rx.borrow_and_update();
            if st.id != self.session || matches!(st.state, SessionState::Expired | SessionState::Closed) {
                return LostReason::SessionExpired;
            }
            if st.state != SessionState::Connected {
                if rx.changed().await.is_err() {
                    return LostReason::SessionExpired;
                }
                continue;
            }
            match backend.watch_deletion(&self.node).await {
                Ok(None) => {
                    let st = *rx.borrow_and_update();
                    return if st.id != self.session || st.state != SessionState::Connected {
                        LostReason::SessionExpired
                    } else {
                        LostReason::NodeDeleted
                    };
                }
                Ok(Some(w)) => {
                    tokio::select! {
                        r = w => match r {
                            Ok(()) => {
                                let st = *rx.borrow_and_update();
                                return if st.id != self.session || matches!(st.state, SessionState::Expired | SessionState::Closed) {
                                    LostReason::SessionExpired
                                } else {
                                    LostReason::NodeDeleted
                                };
                            }
                            Err(Error::SessionExpired | Error::Closed) => return LostReason::SessionExpired,
                            Err(_) => continue,
                        },
                        r = rx.changed() => if r.is_err() { return LostReason::SessionExpired },
                    }
                }
                Err(Error::SessionExpired | Error::Closed) => return LostReason::SessionExpired,
                Err(_) => {
                    if rx.changed().await.is_err() {
                        return LostReason::SessionExpired;
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
    *backend.session().borrow()
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

    /// Runs the cleanup now.
    async fn finish(&mut self) {
        if let Some(t) = self.task() {
            t.await;
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

/// Creates the lock path and its ancestors as container nodes.
async fn ensure_parents(backend: &dyn Backend, path: &LockPath) -> Result<()> {
    for p in path.ancestors().chain(std::iter::once(path.as_str())) {
        match backend.create(p, b"", CreateMode::Container).await {
            Ok(_) | Err(Error::NodeExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

enum Waited {
    Deleted,
    TimedOut,
}

/// Waits for the deletion of `node`: watch set before the existence check, so no wake-up is lost.
async fn wait_for_deletion(ctx: &Ctx, node: &str, deadline: Option<Instant>, pinned: SessionId) -> Result<Waited> {
    let backend = &*ctx.backend;
    let mut rx = backend.session();
    loop {
        match backend.watch_deletion(node).await {
            Ok(None) => return Ok(Waited::Deleted),
            Ok(Some(w)) => {
                let timeout = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                let session_gone = async {
                    loop {
                        let st = *rx.borrow_and_update();
                        if st.id != pinned || matches!(st.state, SessionState::Expired | SessionState::Closed) {
                            return;
                        }
                        if rx.changed().await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! {
                    r = w => {
                        r?;
                        Counters::bump(&ctx.counters.wakeups);
                        return Ok(Waited::Deleted);
                    }
                    () = timeout => return Ok(Waited::TimedOut),
                    () = session_gone => return Err(Error::SessionExpired),
                }
            }
            Err(Error::ConnectionLoss) => {
                if wait_connected(backend, deadline).await?.is_none() {
                    return Ok(Waited::TimedOut);
                }
                if current(backend).id != pinned {
                    return Err(Error::SessionExpired);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Acquires `target` under `path`. `Ok(None)`: gave up (try-once found it held, or the deadline passed), with no
/// node of ours left behind.
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
        match target {
            Target::Exclusive => acquire_exclusive(ctx, path, recipe, patience).await,
            Target::Queue(kind) => acquire_queued(ctx, path, kind, recipe, patience).await,
        }
    }
    .instrument(span)
    .await
}

fn held(
    ctx: &Arc<Ctx>,
    path: &LockPath,
    node: String,
    czxid: i64,
    session: SessionId,
    attempt: Uuid,
    fixed: bool,
) -> HeldNode {
    Counters::bump(&ctx.counters.acquisitions);
    tracing::Span::current().record("node", node.as_str());
    debug!("acquired");
    HeldNode {
        ctx: ctx.clone(),
        path: path.clone(),
        node,
        czxid,
        session,
        attempt,
        fixed,
        handle: Handle::try_current().ok(),
        released: AtomicBool::new(false),
    }
}

fn exhausted(path: &LockPath, attempts: u32, why: &str) -> Error {
    Error::RetriesExhausted {
        path: path.to_string(),
        attempts,
        why: why.to_owned(),
    }
}

async fn acquire_exclusive(
    ctx: &Arc<Ctx>,
    path: &LockPath,
    recipe: &'static str,
    patience: Patience,
) -> Result<Option<HeldNode>> {
    let backend = &*ctx.backend;
    let deadline = patience.deadline();
    let node = path.child(EXCLUSIVE_NODE);
    let mut cleanup = Cleanup {
        ctx: ctx.clone(),
        path: path.clone(),
        fixed: true,
        state: Pending::Nothing,
    };
    let mut failures = 0;
    loop {
        if failures >= ctx.max_attempts {
            return Err(exhausted(
                path,
                failures,
                "the create kept failing (lost replies or vanishing parents)",
            ));
        }
        let Some(sid) = wait_connected(backend, deadline).await? else {
            return Ok(None);
        };
        let attempt = Uuid::new_v4();
        let data = NodeInfo::for_this_process(attempt, recipe).encode();
        cleanup.state = Pending::Sent(attempt);
        match backend.create(&node, &data, CreateMode::Ephemeral).await {
            Ok(c) => {
                Counters::bump(&ctx.counters.creates);
                cleanup.state = Pending::Created(c.path.clone(), attempt, sid);
                if current(backend).id != sid {
                    cleanup.disarm();
                    return Err(Error::SessionExpired);
                }
                cleanup.disarm();
                return Ok(Some(held(ctx, path, c.path, c.czxid, sid, attempt, true)));
            }
            Err(Error::NodeExists(_)) => {
                cleanup.disarm();
                if patience == Patience::TryOnce {
                    return Ok(None);
                }
                match wait_for_deletion(ctx, &node, deadline, sid).await? {
                    Waited::Deleted => {}
                    Waited::TimedOut => return Ok(None),
                }
            }
            Err(Error::NoNode(_)) => {
                cleanup.disarm();
                failures += 1;
                match ensure_parents(backend, path).await {
                    Ok(()) | Err(Error::ConnectionLoss) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(Error::ConnectionLoss) => {
                failures += 1;
                let Some(now_sid) = wait_connected(backend, deadline).await? else {
                    cleanup.finish().await;
                    return Ok(None);
                };
                if now_sid == sid {
                    if let Ok(Some((data, stat))) = backend.get(&node).await {
                        if stat.ephemeral_owner == sid && NodeInfo::decode(&data).is_some_and(|i| i.attempt == attempt)
                        {
                            Counters::bump(&ctx.counters.creates);
                            Counters::bump(&ctx.counters.create_recoveries);
                            cleanup.disarm();
                            return Ok(Some(held(ctx, path, node, stat.czxid, sid, attempt, true)));
                        }
                    }
                }
                // Not ours (or unknown): leave the cleanup armed for this attempt and try again.
                cleanup.finish().await;
            }
            Err(e) => {
                if matches!(e, Error::SessionExpired | Error::Closed) {
                    cleanup.disarm();
                }
                return Err(e);
            }
        }
    }
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

/// Creates our sequential node (protected: recognised by its attempt id after a lost reply).
/// `Ok(None)`: the deadline passed while disconnected.
async fn create_queued(
    ctx: &Arc<Ctx>,
    path: &LockPath,
    kind: NodeKind,
    recipe: &'static str,
    cleanup: &mut Cleanup,
    deadline: Option<Instant>,
    failures: &mut u32,
) -> Result<Option<Queued>> {
    let backend = &*ctx.backend;
    loop {
        if *failures >= ctx.max_attempts {
            return Err(exhausted(
                path,
                *failures,
                "the create kept failing (lost replies or vanishing parents)",
            ));
        }
        let Some(sid) = wait_connected(backend, deadline).await? else {
            return Ok(None);
        };
        let attempt = Uuid::new_v4();
        let prefix = path.child(&ctx.layout.prefix(kind, attempt));
        let data = NodeInfo::for_this_process(attempt, recipe).encode();
        cleanup.state = Pending::Sent(attempt);
        let (created, listed) = backend
            .create_and_list(&prefix, &data, CreateMode::EphemeralSequential, path.as_str())
            .await;
        match created {
            Ok(c) => {
                Counters::bump(&ctx.counters.creates);
                cleanup.state = Pending::Created(c.path.clone(), attempt, sid);
                return Ok(Some(Queued {
                    node: c.path,
                    czxid: c.czxid,
                    session: sid,
                    attempt,
                    children: listed.ok(),
                }));
            }
            Err(Error::NoNode(_)) => {
                cleanup.disarm();
                *failures += 1;
                match ensure_parents(backend, path).await {
                    Ok(()) | Err(Error::ConnectionLoss) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(Error::ConnectionLoss) => {
                *failures += 1;
                let Some(now_sid) = wait_connected(backend, deadline).await? else {
                    cleanup.finish().await;
                    return Ok(None);
                };
                if now_sid != sid {
                    // The session ended: whatever the create made went with it.
                    cleanup.disarm();
                    continue;
                }
                if let Some((node, czxid)) = find_ours(backend, ctx.layout, path, attempt, sid).await? {
                    Counters::bump(&ctx.counters.creates);
                    Counters::bump(&ctx.counters.create_recoveries);
                    debug!(%node, "create reply was lost; found our node by its attempt id");
                    cleanup.state = Pending::Created(node.clone(), attempt, sid);
                    return Ok(Some(Queued {
                        node,
                        czxid,
                        session: sid,
                        attempt,
                        children: None,
                    }));
                }
                cleanup.disarm();
            }
            Err(e) => {
                if matches!(e, Error::SessionExpired | Error::Closed) {
                    cleanup.disarm();
                }
                return Err(e);
            }
        }
    }
}

/// Finds the node our create made, by attempt id and ephemeral owner.
async fn find_ours(
    backend: &dyn Backend,
    layout: Layout,
    path: &LockPath,
    attempt: Uuid,
    sid: SessionId,
) -> Result<Option<(String, i64)>> {
    let children = match backend.children(path.as_str()).await {
        Ok(c) => c,
        Err(Error::NoNode(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    for name in children {
        if layout.parse(&name).is_some_and(|p| p.attempt == attempt) {
            let node = path.child(&name);
            if let Some((_, stat)) = backend.get(&node).await? {
                if stat.ephemeral_owner == sid {
                    return Ok(Some((node, stat.czxid)));
                }
            }
        }
    }
    Ok(None)
}

async fn acquire_queued(
    ctx: &Arc<Ctx>,
    path: &LockPath,
    kind: NodeKind,
    recipe: &'static str,
    patience: Patience,
) -> Result<Option<HeldNode>> {
    let backend = &*ctx.backend;
    let deadline = patience.deadline();
    if patience == Patience::TryOnce {
        // Give up before writing anything when the queue already says we would wait.
        match backend.children(path.as_str()).await {
            Ok(children) if would_wait(kind, &contenders(ctx.layout, &children)) => return Ok(None),
            Ok(_) | Err(Error::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let mut cleanup = Cleanup {
        ctx: ctx.clone(),
        path: path.clone(),
        fixed: false,
        state: Pending::Nothing,
    };
    let mut failures = 0;
    loop {
        let Some(Queued {
            node,
            czxid,
            session: sid,
            attempt,
            children: mut prefetched,
        }) = create_queued(ctx, path, kind, recipe, &mut cleanup, deadline, &mut failures).await?
        else {
            return Ok(None);
        };
        let name = node.rsplit('/').next().unwrap_or_default().to_owned();
        loop {
            let listed = match prefetched.take() {
                Some(c) => Ok(c),
                None => backend.children(path.as_str()).await,
            };
            let children = match listed {
                Ok(c) => c,
                Err(Error::NoNode(_)) => Vec::new(),
                Err(Error::ConnectionLoss) => {
                    if wait_connected(backend, deadline).await?.is_none() {
                        cleanup.finish().await;
                        return Ok(None);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            if current(backend).id != sid {
                cleanup.disarm();
                return Err(Error::SessionExpired);
            }
            match decide(kind, &contenders(ctx.layout, &children), &name) {
                Decision::Acquired => {
                    cleanup.disarm();
                    return Ok(Some(held(ctx, path, node, czxid, sid, attempt, false)));
                }
                Decision::Missing => {
                    // Our node vanished while the session lives (deleted by someone): queue again, bounded.
                    cleanup.disarm();
                    failures += 1;
                    debug!(%node, "our lock node vanished; creating it again");
                    break;
                }
                Decision::Wait { on } => {
                    if patience == Patience::TryOnce {
                        cleanup.finish().await;
                        return Ok(None);
                    }
                    match wait_for_deletion(ctx, &path.child(&on), deadline, sid).await? {
                        Waited::Deleted => {}
                        Waited::TimedOut => {
                            cleanup.finish().await;
                            return Ok(None);
                        }
                    }
                }
            }
        }
    }
}
