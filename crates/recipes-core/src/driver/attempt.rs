//! One acquire in progress: its bounds (deadline, failure budget), what it must clean up, and its refusals (the
//! listings are in `listing.rs`, the create of our node in `made.rs`).

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use super::cleanup::{Cleanup, Of};
use super::delete::Identity;
use super::turns::Turn;
use super::{session, Claim, Ctx, HeldNode, CLEANUP_GRACE, TRY_BOUND};
use crate::backend::{Backend, SessionId, SessionState};
use crate::error::{Error, Result, RetryReason};
use crate::layout::Family;
use crate::metrics::{Count, Tags};
use crate::path::LockPath;
use crate::patience::Patience;
use crate::protocol::{self, Refusal};
use crate::recipe::Recipe;

/// Why an attempt stopped short of holding the lock.
pub(crate) enum Stop {
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

pub(crate) type Step<T> = std::result::Result<T, Stop>;

/// One acquire in progress: its settings, its failure budget, and what it must clean up.
pub(crate) struct Attempt<'a> {
    pub ctx: &'a Arc<Ctx>,
    pub path: &'a LockPath,
    /// The recipe, for the metrics' labels and the node's data.
    pub recipe: Recipe,
    /// How the node is named and judged.
    pub protocol: protocol::AnyProtocol,
    pub try_once: bool,
    /// A try that makes its node without listing first (see [`Patience::TryEagerly`]).
    pub eager: bool,
    deadline: Option<Instant>,
    /// Failed creates of this acquire (lost replies, our node deleted under us), against `max_attempts` with
    /// `vanished_parents`.
    failures: u32,
    /// Creates of this acquire that found their parent missing, over the whole acquire, or since the lock last passed
    /// on for an exclusive acquire (`passed_on`, which keeps the first): the first is how a path not made yet is made,
    /// and is not counted against the bound (`parent_missing`). No flag of its own: the acquire's future has no byte
    /// to spare for one (the size test's bound).
    vanished_parents: u32,
    pub cleanup: Cleanup,
    /// The metrics labels of the lock.
    pub tags: Tags,
    /// When the acquire began: its first poll (`begin`); `None` before (an attempt made only to ask the server, as
    /// the peer semaphore's count checks, never begins). Not read when the attempt is made: an uncontended in-memory
    /// acquire + release read the clock eight times, each about 1% of it.
    pub started: Option<Instant>,
    /// Whether the lock came by a same-session handoff (counted once the guard is handed out).
    pub handed: AtomicBool,
    /// What few attempts carry, out of line: a lock's waiter keeps 8 bytes for it, not 48 (every waiter's heap).
    rare: Option<Box<Rare<'a>>>,
}

/// The parts of an attempt that only some recipes and layouts use.
#[derive(Default)]
struct Rare<'a> {
    /// The path the hold, and its refusals, are known by when our node is made under another path (a
    /// [`Procedure`](super::Procedure)'s resource); `None`: the attempt's path.
    held_as: Option<LockPath>,
    /// An election candidate's lines in the node's data ([`candidate_lines`](crate::info::candidate_lines)); empty
    /// for a lock.
    candidate: &'a str,
    /// This task's turn on a key named by its session, from before its create until its key is deleted (see
    /// `turns`); `None` in every other layout.
    turn: Option<Turn>,
}

impl<'a> Attempt<'a> {
    pub fn new(ctx: &'a Arc<Ctx>, path: &'a LockPath, claim: Claim, patience: Patience) -> Self {
        let recipe = claim.recipe;
        let tags = ctx.counters.tags(path, recipe);
        let protocol = if claim.latch {
            protocol::AnyProtocol::Queue(protocol::Queue::latch())
        } else {
            protocol::of(
                ctx.layout,
                ctx.backend.child_order(),
                recipe,
                claim.weight,
                claim.permits,
            )
        };
        Attempt {
            ctx,
            path,
            recipe,
            protocol,
            try_once: patience.tries_once(),
            eager: patience == Patience::TryEagerly,
            deadline: match patience {
                Patience::Until(d) => Some(d),
                // A try must not wait, but its requests may sit in the client while it is disconnected: bound them.
                Patience::TryOnce | Patience::TryEagerly => Some(Instant::now() + TRY_BOUND),
                Patience::Forever => None,
            },
            failures: 0,
            vanished_parents: 0,
            cleanup: Cleanup::new(),
            tags,
            started: None,
            handed: AtomicBool::new(false),
            rare: None,
        }
    }

    fn rare(&mut self) -> &mut Rare<'a> {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The path the hold, and its refusals, are known by: a procedure's resource, or the attempt's path.
    pub fn held_as(&self) -> &LockPath {
        self.rare.as_ref().and_then(|r| r.held_as.as_ref()).unwrap_or(self.path)
    }

    /// Holds and refuses as `resource` (a procedure's), when its node is made under another path.
    pub fn hold_as(&mut self, resource: LockPath) {
        self.rare().held_as = Some(resource);
    }

    /// An election candidate's lines in the node's data; empty for a lock.
    pub fn candidate(&self) -> &'a str {
        self.rare.as_ref().map_or("", |r| r.candidate)
    }

    /// Stands as an election candidate with these lines in the node's data (nothing for a lock: empty).
    pub fn stand_as(&mut self, candidate: &'a str) {
        if !candidate.is_empty() {
            self.rare().candidate = candidate;
        }
    }

    /// Keeps this task's turn on the key its session names, until its key is held (then the held node keeps it).
    pub fn keep_turn(&mut self, turn: Turn) {
        self.rare().turn = Some(turn);
    }

    /// How long the acquire has waited by `now` (nothing if it never began).
    pub fn waited(&self, now: Instant) -> Duration {
        self.started
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    /// Starts the attempt's clock (its wait, a try's bound) at its first poll, not when its future was made.
    pub fn begin(&mut self) {
        let now = Instant::now();
        self.started = Some(now);
        if self.try_once {
            self.deadline = Some(now + TRY_BOUND);
        }
    }

    /// The recipe's name in the node's data: `election` for a candidate's node (a fair lock's, by its protocol).
    pub fn data_recipe(&self) -> &'static str {
        if self.candidate().is_empty() {
            self.recipe.name()
        } else {
            crate::election::RECIPE_NAME
        }
    }

    pub fn backend(&self) -> &'a dyn Backend {
        &*self.ctx.backend
    }

    /// Runs one request, bounded by the deadline.
    ///
    /// Not an `async fn`: one would keep the request's future twice (as its argument and its local), in every wait.
    pub fn call<T, F>(&self, f: F) -> impl Future<Output = Step<T>> + use<T, F>
    where
        F: Future<Output = Result<T>>,
    {
        use futures::future::{Either, FutureExt};
        match self.deadline {
            Some(d) => Either::Left(tokio::time::timeout_at(d, f).map(|r| match r {
                Ok(r) => Ok(r?),
                Err(_) => Err(Stop::Deadline),
            })),
            None => Either::Right(f.map(|r| Ok(r?))),
        }
    }

    /// A deadline as a future (pending forever without one).
    ///
    /// Its timer is boxed: every wait selects on this future, and a timer kept in place would add its size to every
    /// waiting acquire's state (each waiter's heap), and to every move of an acquire's future, deadline or not.
    pub fn deadline_passed(&self) -> impl Future<Output = ()> + use<> {
        let timer = self.deadline.map(|d| Box::pin(tokio::time::sleep_until(d)));
        async move {
            match timer {
                Some(t) => t.await,
                None => std::future::pending().await,
            }
        }
    }

    /// Waits until the session is connected; returns its id.
    ///
    /// At once when it is: the wait for a connection (rare) is boxed, so that the futures that ask first (every
    /// create, every request after a lost connection) do not keep its state in place.
    pub fn connected(&self) -> impl Future<Output = Step<SessionId>> + '_ {
        let now = self.backend().session_status();
        let wait =
            (now.state != SessionState::Connected).then(|| Box::pin(session::connected(self.backend(), self.deadline)));
        async move {
            match wait {
                None => Ok(now.id),
                Some(w) => w.await?.ok_or(Stop::Deadline),
            }
        }
    }

    /// Waits until the session `pinned` is connected again; fails when it is over meanwhile.
    pub async fn reconnected(&self, pinned: SessionId) -> Step<()> {
        if self.connected().await? != pinned {
            return Err(Stop::Fail(Error::SessionExpired));
        }
        Ok(())
    }

    /// An exclusive create found `P/lock` there, and waits for it to go: the creates that found the path gone before it
    /// no longer count (but that the first of the acquire is still known: see `parent_missing`), as the lock passed on
    /// since each (the path is reaped whenever it is empty, and a waiter's create meets the reaper after a release now
    /// and then, at any number of the handoffs it waits through: found by review, helper-126, where such a waiter
    /// failed with `RetriesExhausted` after ten). Lost replies still count: the node found may be our own, left by a
    /// lost create whose cleanup has not run yet (helper-128).
    pub fn passed_on(&mut self) {
        self.vanished_parents = self.vanished_parents.min(1);
    }

    /// Counts a create that found its parent missing (the caller makes the path again) against the bound: an exclusive
    /// acquire's until the lock passes on (`passed_on`), any other's over the whole acquire. The first of an acquire
    /// counts for nothing: it is how every first acquire of a path makes it (found by review, helper-133: with
    /// `max_attempts(1)`, no acquire could make a new path).
    pub fn parent_missing(&mut self) -> Step<()> {
        self.vanished_parents = self.vanished_parents.saturating_add(1);
        self.bounded()
    }

    /// Counts a failed create (a lost reply, our node deleted under us) against the bound.
    pub fn failed(&mut self) -> Step<()> {
        self.failures += 1;
        self.bounded()
    }

    /// Fails once the failed creates counted reach `max_attempts`.
    fn bounded(&self) -> Step<()> {
        let attempts = self.failures.saturating_add(self.vanished_parents.saturating_sub(1));
        if attempts >= self.ctx.max_attempts {
            return Err(Stop::Fail(Error::RetriesExhausted {
                path: self.path.to_string(),
                attempts,
                why: RetryReason::NodeWouldNotStick,
            }));
        }
        Ok(())
    }

    /// Counts an event of this acquire.
    pub fn count(&self, what: Count) {
        self.ctx.counters.count(what, &self.tags);
    }

    /// Our node holds the lock: nothing is left to clean up.
    pub fn held(&mut self, node: Arc<str>, czxid: i64, id: Identity) -> HeldNode {
        // The held node first: from here its drop deletes the node, whatever panics (a tracing layer, a recorder).
        let path = self.held_as();
        let held = HeldNode::new(
            self.ctx.clone(),
            path.clone(),
            self.recipe,
            node,
            czxid,
            id,
            self.tags.clone(),
        )
        .handing_over(self.protocol.hands_over())
        .with_turn(
            self.rare
                .as_mut()
                .and_then(|r| r.turn.take())
                .inspect(|t| t.holds(czxid)),
        );
        self.cleanup.disarm();
        // Recorded on the acquire's span alone: when it is disabled, the current span is the caller's, which may
        // have fields of these names (found by review, helper-82).
        let span = tracing::Span::current();
        if span.metadata().is_some_and(|m| m.name() == "acquire") {
            span.record("node", &*held.node);
            span.record("token", czxid);
            span.record("waited_ms", self.waited(Instant::now()).as_millis() as u64);
        }
        debug!("acquired");
        held
    }

    /// The error for a refusal.
    fn refusal_error(&self, r: Refusal) -> Error {
        let path = self.held_as();
        match r {
            Refusal::Foreign { node, family } => {
                let ours = self.own_family();
                Error::ForeignLock {
                    path: path.to_string(),
                    node,
                    found: family.describe().to_owned(),
                    ours: ours.describe().to_owned(),
                }
            }
            Refusal::Wrapped { node } => Error::SequenceWrapped {
                path: path.to_string(),
                node,
                layout: self.ctx.layout,
            },
        }
    }

    /// Refuses before anything was made.
    pub fn refused<T>(&self, r: Refusal) -> Step<T> {
        Err(Stop::Fail(self.refusal_error(r)))
    }

    /// Deletes the node we made (now, within a grace) and refuses.
    pub async fn refuse<T>(&mut self, r: Refusal) -> Step<T> {
        let e = self.refusal_error(r);
        debug!(error = %e, "refusing the lock");
        self.clean_up_now().await;
        Err(Stop::Fail(e))
    }

    /// The deadline of every request (a try's bound included); `None`: none.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Until when a wait for a release sent now may go: the cleanup grace from now, and never past the deadline plus
    /// the grace.
    pub fn release_by(&self) -> Instant {
        super::release_by(self.deadline)
    }

    /// The family of the nodes this attempt makes.
    pub(super) fn own_family(&self) -> Family {
        self.protocol.family()
    }

    /// Runs the cleanup of what this acquire made so far, waiting for it at most until the deadline (and at most the
    /// cleanup grace): an acquire that gives up later waits at most one more grace past its deadline, all told.
    pub async fn clean_up_now(&mut self) {
        let grace = match self.deadline {
            Some(d) => CLEANUP_GRACE.min(d.saturating_duration_since(Instant::now())),
            None => CLEANUP_GRACE,
        };
        self.finish_cleanup(grace).await;
    }

    /// Runs the cleanup now, waiting for it at most `grace` (see [`Cleanup::finish_within`]).
    pub async fn finish_cleanup(&mut self, grace: Duration) {
        let (cleanup, of) = self.cleanup_of();
        cleanup.finish_within(grace, of).await;
    }

    /// The cleanup, and what its delete needs of this attempt.
    fn cleanup_of(&mut self) -> (&mut Cleanup, Of<'_>) {
        let of = Of {
            ctx: self.ctx,
            path: self.path,
            tags: &self.tags,
            fixed: self.protocol.name_is_shared(),
        };
        (&mut self.cleanup, of)
    }
}

impl Drop for Attempt<'_> {
    /// An acquire dropped before its end: what it made is deleted in the background.
    fn drop(&mut self) {
        let (cleanup, of) = self.cleanup_of();
        cleanup.abandon(of);
    }
}
