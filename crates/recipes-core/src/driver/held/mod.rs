//! The held lock node: what an acquire hands out, and what dropping it does. Its loss and lease are in `lost`, its
//! release in `release`.

mod lost;
mod release;

use lost::KnownLoss;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::{debug, warn};
use uuid::Uuid;

use super::cleanup::{spawn_cleanup, LastResort};
use super::delete::{delete_node_after, Deleted, Identity};
use super::session::{reports_end, Tries};
use super::turns::Turn;
use super::Ctx;
use crate::backend::{NodeWatch, SessionId};
use crate::metrics::Tags;
use crate::path::LockPath;
use crate::recipe::Recipe;

/// A lock node that holds its lock. Deleting it releases the lock; dropping it unreleased deletes it in the
/// background.
///
/// Boxed: an acquire's outcome passes through a dozen layers of futures on its way to the caller's guard (the
/// attempt's end, its settling, the recipe's and the patience's maps), each moving it once; about 20 moves of the
/// node's 208 bytes per acquire + release were a third of the bytes an uncontended in-memory acquire + release
/// moved. One allocation per hold moves a pointer instead.
#[derive(Debug)]
pub(crate) struct HeldNode(Box<Held>);

impl std::ops::Deref for HeldNode {
    type Target = Held;
    fn deref(&self) -> &Held {
        &self.0
    }
}

impl std::ops::DerefMut for HeldNode {
    fn deref_mut(&mut self) -> &mut Held {
        &mut self.0
    }
}

/// What a [`HeldNode`] knows of its node.
#[derive(Debug)]
pub(crate) struct Held {
    ctx: Arc<Ctx>,
    pub path: LockPath,
    pub node: Arc<str>,
    pub czxid: i64,
    pub session: SessionId,
    attempt: Uuid,
    fixed: bool,
    handle: Option<Handle>,
    released: AtomicBool,
    /// A release sent (or may have sent) a delete of the node without learning its outcome: a delete after it must be
    /// one after a lost reply (a `sync` first, so that a read of the fixed name is not served from before that delete
    /// landed; found by review, helper-60).
    delete_sent: AtomicBool,
    /// A loss that cannot be undone, once `lost()` has seen it.
    known_loss: KnownLoss,
    /// The recipe that holds the node.
    recipe: Recipe,
    /// Whether a release may hand the lock to tasks of this process waiting in line on the node (the protocol's
    /// [`hands_over`](crate::protocol::Protocol::hands_over)).
    hands_over: bool,
    /// The metrics labels of the lock.
    tags: Tags,
    /// When the acquire handed the guard out, counted as acquired (`None` until then): only such a hold's end is
    /// counted as a release.
    held_since: Option<Instant>,
    /// The hold, a span of the caller's open as long as the node is held.
    span: tracing::Span,
    /// Whether a loss was counted and logged (once per node).
    loss_reported: AtomicBool,
    /// The watch on the node armed while it waited in line, kept only so that it ends with the node's
    /// delete: a watch dropped unfired costs the session a request to remove it. `lost()` arms a watch of its own:
    /// one armed long before may have an event on its way that heartbeats answered since do not show (see
    /// docs/algorithm.md, the own-node watch). Beside it, the same way, the last wait's watch of its blocker's deletion
    /// alone (decision 0092).
    own_watch: OwnWatch,
    /// Whether its delete also marks it `first`, in one transaction (a native lock's or writer's node that judged a
    /// long listing, or that passes on its blocker's mark, on a backend with transactions: the node behind then holds
    /// without listing, and the mark costs no write of its own). Never where others may write lock-node data
    /// (`foreign_writes`): nobody could read that mark back. See docs/algorithm.md, optimisation 3.
    marks_on_release: bool,
    /// Its task's turn on a key named by its session (see `turns`): passed on once the key is deleted.
    turn: parking_lot::Mutex<Option<Turn>>,
}

/// The watch a held node keeps (see `HeldNode::own_watch`): set when the node is made, taken when it is dropped,
/// never shared (the mutex only makes the node `Sync`; it is never locked).
#[derive(Default)]
struct OwnWatch(std::sync::Mutex<(Option<NodeWatch>, Option<NodeWatch>)>);

impl std::fmt::Debug for OwnWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let armed = self.0.try_lock().is_ok_and(|w| w.0.is_some());
        f.debug_struct("OwnWatch").field("armed", &armed).finish()
    }
}

impl HeldNode {
    /// A node that an acquire made and found holding the lock.
    pub fn new(
        ctx: Arc<Ctx>,
        path: LockPath,
        recipe: Recipe,
        node: Arc<str>,
        czxid: i64,
        id: Identity,
        tags: Tags,
    ) -> Self {
        // The session's own runtime if the backend has one: the caller's may be gone when the node is dropped.
        let handle = ctx.backend.runtime().or_else(|| Handle::try_current().ok());
        HeldNode(Box::new(Held {
            ctx,
            path,
            node,
            czxid,
            session: id.session,
            attempt: id.attempt,
            fixed: id.fixed,
            handle,
            released: AtomicBool::new(false),
            delete_sent: AtomicBool::new(false),
            known_loss: KnownLoss::default(),
            recipe,
            hands_over: false,
            tags,
            // Set when the acquire hands the guard out (`held_from`): only a hold handed out is counted.
            held_since: None,
            span: tracing::Span::none(),
            loss_reported: AtomicBool::new(false),
            own_watch: OwnWatch::default(),
            marks_on_release: false,
            turn: parking_lot::Mutex::new(None),
        }))
    }

    /// Keeps `watch`, the watch on this very node's data and deletion armed while it waited (on the node this attempt
    /// made), and `gone`, the last wait's watch of its blocker's deletion alone, until the node's end.
    pub fn watched_by(mut self, watch: Option<NodeWatch>, gone: Option<NodeWatch>) -> Self {
        self.own_watch = OwnWatch(std::sync::Mutex::new((watch, gone)));
        self
    }

    /// Has the node's delete mark it `first` in the same transaction (see `marks_on_release`).
    pub fn marking_on_release(mut self, yes: bool) -> Self {
        self.marks_on_release = yes;
        self
    }

    /// Keeps its task's turn on its key (see `turns`) until the key is deleted.
    pub fn with_turn(self, turn: Option<Turn>) -> Self {
        *self.turn.lock() = turn;
        self
    }

    /// Passes its task's turn on (its key is deleted, or went with its session).
    pub(super) fn pass_turn(&self) {
        drop(self.turn.lock().take());
    }

    /// Tells its task's line that it holds its key still (a release that was dropped midway).
    pub(super) fn holding_again(&self) {
        if let Some(t) = self.turn.lock().as_ref() {
            t.holds(self.czxid);
        }
    }

    /// Tells its task's line that the key is being released (before the delete is sent: see `Turn::releasing`).
    pub(super) fn releasing_turn(&self) {
        if let Some(t) = self.turn.lock().as_ref() {
            t.releasing();
        }
    }

    /// Lets a release hand the lock to tasks of this process waiting in line on the node (the protocol says when).
    pub fn handing_over(mut self, yes: bool) -> Self {
        self.hands_over = yes;
        self
    }

    /// The hold counts from `since` (the time the acquire hands the guard out, read once for this and its wait).
    pub fn held_from(&mut self, since: Instant) {
        self.held_since = Some(since);
    }

    /// Opens the hold's span, as a child of the caller's current span.
    pub fn begin_hold(&mut self) {
        self.span = tracing::debug_span!(
            "hold",
            path = %self.path,
            recipe = %self.recipe,
            node = %self.node,
            token = self.czxid
        );
    }

    pub(super) fn identity(&self) -> Identity {
        Identity {
            fixed: self.fixed,
            attempt: self.attempt,
            session: self.session,
            czxid: Some(self.czxid),
            marks: self.marks_on_release.then_some(self.recipe),
        }
    }

    /// Marks the node as gone with its session, so that dropping it deletes nothing.
    pub fn forget(self) {
        self.released.store(true, Ordering::Release);
        self.pass_turn();
    }

    /// Gives the node back to the acquire that made it, never handed out (neither counted nor deleted here): its
    /// path, attempt id and session, for the acquire's cleanup.
    pub fn unheld(self) -> (Arc<str>, Uuid, SessionId, i64) {
        self.released.store(true, Ordering::Release);
        (self.node.clone(), self.attempt, self.session, self.czxid)
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
        let lost_reply = self.delete_sent.load(Ordering::Acquire);
        // The watch on the node ends with the delete (see `own_watch`).
        let watch = self.own_watch.0.get_mut().map_or((None, None), std::mem::take);
        // The turn passes once the key is deleted (see `turns`).
        let turn = self.turn.get_mut().take();
        if let Some(t) = &turn {
            t.releasing();
        }
        let resort = LastResort::new(&ctx, &node, &id, self.czxid);
        spawn_cleanup(self.handle.as_ref(), &node.clone(), async move {
            let _watch = watch;
            let deleted = delete_node_after(&ctx, &node, id, lost_reply, Tries::WhileTheSessionLives).await;
            resort.done();
            match deleted {
                Ok(Deleted::Ours) => {}
                Ok(found) => debug!(%node, ?found, "release on drop found the lock already gone"),
                // The session ended: the node went with it.
                Err(e) if reports_end(&e) => debug!(%node, error = %e, "release on drop: the session ended first"),
                // Refused (connection losses are tried through while the session lives; helper-63: this said "already
                // gone" too): the node stays until its session ends.
                Err(e) => warn!(%node, error = %e, "release on drop failed; the node stays until its session ends"),
            }
            drop(turn);
        });
        // Counted once the delete is on its way: a recorder that panics cannot leave the node behind.
        self.count_release();
    }
}
