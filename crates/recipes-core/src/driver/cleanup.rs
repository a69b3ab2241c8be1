//! Undoing what an acquire that did not complete made: its node, or a create whose reply never came, deleted on the
//! exit paths and in the background when the acquire is dropped (the deletes themselves are in `delete`).
//!
//! Every delete runs on the session that made the node, or not at all: a request of a session that is over fails,
//! and never runs on the session the backend opened after it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::{debug, warn};
use uuid::Uuid;

use super::delete::{delete_node_after, delete_once, Deleted, Identity};
use super::session::{self, reports_end, Tries};
use super::Ctx;
use crate::backend::{BackendExt, SessionId};
use crate::error::{Error, Result};
use crate::layout::{Layout, EXCLUSIVE_NODE};
use crate::metrics::{Count, Tags};
use crate::mutants::{is_active, Mutant};
use crate::path::LockPath;
use crate::protocol::made_by;

/// Deletes whatever node a create of this attempt, sent on `session`, may have made (its reply never arrived).
async fn delete_by_attempt(ctx: &Ctx, path: &LockPath, id: Identity) -> Result<()> {
    let on = ctx.backend.on(id.session);
    let tries = Tries::WhileTheSessionLives;
    let r = session::through_losses(ctx, id.session, path.as_str(), false, tries, |_| async move {
        // The create may have gone to a server we are no longer connected to: catch up first.
        if !is_active(Mutant::NoSyncAfterLostReply) {
            on.sync(path.as_str()).await?;
        }
        if id.fixed {
            // The fixed node, or etcd's own lock's key named by the session: deleted only when its data says ours.
            let name = match ctx.layout {
                Layout::Etcd => Layout::session_name(id.session),
                _ => EXCLUSIVE_NODE.to_owned(),
            };
            return delete_once(ctx, &path.child(&name), id).await;
        }
        let children = match on.children(path.as_str()).await {
            Ok(c) => c,
            Err(Error::NoNode(_)) => return Ok(Deleted::Absent),
            Err(e) => return Err(e),
        };
        let mut found = Deleted::Absent;
        for name in children {
            if made_by(ctx.layout, &name, id.attempt) {
                match on.delete(&path.child(&name)).await {
                    Ok(()) => found = Deleted::Ours,
                    Err(Error::NoNode(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(found)
    })
    .await;
    match r {
        // Whatever the create made went with its session.
        Err(e) if reports_end(&e) => Ok(()),
        r => r.map(drop),
    }
}

/// What an acquire that has not completed may have made.
#[derive(Debug)]
pub(crate) enum Pending {
    /// Nothing of ours may exist.
    Nothing,
    /// A create was sent on this session; its node may exist, name unknown.
    Sent(Uuid, SessionId),
    /// Our node exists, with this creation id.
    Created(Arc<str>, Uuid, SessionId, i64),
}

/// Undoes the remote side effects of an acquire that did not complete: deletes our node, awaited on the ordinary
/// exit paths and in the background when the acquire future is dropped (by the attempt's `Drop`, which lends it the
/// lock's context, path and labels: kept once in every waiter's state, not twice).
pub(crate) struct Cleanup {
    pub state: Pending,
    /// Earlier cleanups of this acquire still running in the background (their grace ran out). Rare: out of line,
    /// 8 bytes of every waiter's state rather than 24 (the point of the boxed `Vec` clippy warns of).
    #[allow(clippy::box_collection)]
    background: Option<Box<Vec<tokio::task::JoinHandle<()>>>>,
}

/// What a cleanup's delete needs of its attempt: the lock's context, its path, its metrics labels, and whether its
/// protocol's nodes have a fixed name (see [`Identity::fixed`]).
#[derive(Clone, Copy)]
pub(crate) struct Of<'a> {
    pub ctx: &'a Arc<Ctx>,
    pub path: &'a LockPath,
    pub tags: &'a Tags,
    pub fixed: bool,
}

impl Cleanup {
    pub fn new() -> Self {
        Cleanup {
            state: Pending::Nothing,
            background: None,
        }
    }

    /// Nothing is left to delete (we hold the node now, or it is known gone).
    pub fn disarm(&mut self) {
        self.state = Pending::Nothing;
    }

    fn task(&mut self, of: Of<'_>) -> Option<impl Future<Output = ()> + Send + 'static + use<>> {
        let mut state = std::mem::replace(&mut self.state, Pending::Nothing);
        if matches!(state, Pending::Sent(..)) && is_active(Mutant::CleanupIgnoresInFlight) {
            state = Pending::Nothing;
        }
        let fixed = of.fixed;
        let (node, id) = match state {
            Pending::Nothing => return None,
            Pending::Sent(attempt, session) => (
                None,
                Identity {
                    fixed,
                    attempt,
                    session,
                    czxid: None,
                    marks: None,
                },
            ),
            Pending::Created(node, attempt, session, czxid) => (
                Some(node),
                Identity {
                    fixed,
                    attempt,
                    session,
                    czxid: Some(czxid),
                    marks: None,
                },
            ),
        };
        let ctx = of.ctx.clone();
        let path = of.path.clone();
        let tags = of.tags.clone();
        let resort = node
            .as_ref()
            .zip(id.czxid)
            .map(|(n, czxid)| LastResort::new(of.ctx, n, &id, czxid));
        Some(async move {
            let res = match node {
                None => delete_by_attempt(&ctx, &path, id).await,
                Some(node) => match delete_node_after(&ctx, &node, id, false, Tries::WhileTheSessionLives).await {
                    Err(e) if reports_end(&e) => Ok(()),
                    r => r.map(drop),
                },
            };
            if let Some(resort) = resort {
                resort.done();
            }
            match res {
                Ok(()) => ctx.counters.count(Count::Cleanup, &tags),
                Err(e) => {
                    warn!(error = %e, "could not delete an abandoned lock node; it stays until its session ends")
                }
            }
        })
    }

    /// Runs the cleanup now, and waits at most `grace` for it and for earlier ones still running; past that they go on
    /// in the background.
    pub async fn finish_within(&mut self, grace: Duration, of: Of<'_>) {
        if let Some(t) = self.task(of) {
            let task = match of.ctx.backend.runtime() {
                Some(rt) => rt.spawn(t),
                None => tokio::spawn(t),
            };
            self.background.get_or_insert_with(Box::default).push(task);
        }
        let Some(background) = self.background.as_mut() else {
            return;
        };
        let until = Instant::now() + grace;
        while let Some(h) = background.last_mut() {
            if tokio::time::timeout_at(until, h).await.is_err() {
                return;
            }
            background.pop();
        }
    }

    /// The acquire was dropped: what it made is deleted in the background.
    pub fn abandon(&mut self, of: Of<'_>) {
        // Said with the node, when known: the event may come in the acquire's span (the attempt lives in the
        // instrumented future, which enters its span while it drops), or in the caller's when that span is off (found
        // by review, helper-78).
        let node = match &self.state {
            Pending::Created(node, ..) => Some(node.clone()),
            _ => None,
        };
        if let Some(t) = self.task(of) {
            debug!(path = %of.path, node = node.as_deref(), "acquire abandoned; cleaning up in the background");
            spawn_cleanup(of.ctx.backend.runtime().as_ref(), of.path.as_str(), t);
        }
    }
}

/// The delete a background cleanup leaves to do if it is dropped before it ends: sent at the drop, where the backend
/// can send a request before returning ([`SendNow`](crate::backend::SendNow)), its reply not awaited. A cleanup is
/// dropped unfinished when it was spawned on a runtime that shuts down, or on none: a backend with no runtime of its own
/// (the in-memory one) runs it on the caller's, and a runtime dropped with acquires or guards still alive on it left
/// their nodes behind while their session lived (found in the thirty-third session; on ZooKeeper the cleanup runs on
/// the session's runtime, and a session ends with its runtime). Only on the session that made the node. A node whose
/// name is its attempt's alone is deleted as it is; one of a fixed name (the exclusive recipe's `lock`, a
/// session-named key) only if its creation id is the one its attempt's create returned (found in the thirty-fourth
/// session), as a later attempt may have made the name again.
pub(crate) struct LastResort {
    ctx: Arc<Ctx>,
    node: Arc<str>,
    session: SessionId,
    /// `None`: the name is the attempt's alone. `Some`: a fixed name, deleted only if it has this creation id.
    fixed: Option<i64>,
    armed: bool,
}

impl LastResort {
    /// The last resort for `node`, made by the attempt `id` whose create returned the creation id `czxid`.
    pub fn new(ctx: &Arc<Ctx>, node: &Arc<str>, id: &Identity, czxid: i64) -> Self {
        LastResort {
            ctx: ctx.clone(),
            node: node.clone(),
            session: id.session,
            fixed: id.fixed.then_some(czxid),
            armed: true,
        }
    }

    /// The cleanup ended (whatever it found): nothing is left to do at the drop.
    pub fn done(mut self) {
        self.armed = false;
    }
}

impl Drop for LastResort {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let on = self.ctx.backend.on(self.session);
        let sent = match self.fixed {
            None => on.delete_sent(&self.node),
            Some(czxid) => on.delete_if_created_sent(&self.node, czxid),
        };
        match sent {
            Some(_reply) => {
                debug!(node = %self.node, "background cleanup dropped unfinished; its delete sent at the drop")
            }
            // The session is over (the node went with it), or disconnected where the backend refuses requests then
            // (etcd's client: the node stays until the session ends; ZooKeeper's client holds the delete and sends it
            // at the reconnection), or the backend cannot send this delete before returning.
            None => warn!(
                node = %self.node,
                "background cleanup dropped unfinished, its delete not sent (the session is over or disconnected, or \
                 the backend cannot send it at once); a node left stays until its session ends"
            ),
        }
    }
}

/// Runs a cleanup in the background, on `handle` or else the current runtime; without either, the node stays until
/// its session ends (said in a warning), unless its [`LastResort`] sends its delete.
pub(crate) fn spawn_cleanup(handle: Option<&Handle>, node: &str, fut: impl Future<Output = ()> + Send + 'static) {
    match handle.cloned().or_else(|| Handle::try_current().ok()) {
        Some(h) => {
            h.spawn(fut);
        }
        None => warn!(
            node,
            "no tokio runtime to delete the lock node in the background; its delete is sent now where the backend \
             can send it at once, else it stays until its session ends"
        ),
    }
}
