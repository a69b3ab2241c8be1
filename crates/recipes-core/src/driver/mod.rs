//! Layer 2, the I/O half: the one driver that runs create / list / decide / watch / wait for every recipe, with
//! cleanup of our node on every exit path.
//!
//! Its rooms: [`session`] (what is known of the session our nodes belong to), [`attempt`] (one acquire: its bounds
//! and the requests it makes), [`exclusive`] and [`queue`] (making the node, for the fixed node and the queue),
//! [`wait`] (waiting for a deletion), [`held`] (the held node: lease, loss, release) and [`cleanup`] (deleting what an
//! acquire made). Every decision is made by the attempt's [`Protocol`](crate::protocol::Protocol); the driver only does I/O around it.
//!
//! Every request names the session it belongs to (`backend.on(sid)`): a request of a session that has ended fails,
//! and never runs on the session the backend opened after it.

mod attempt;
mod blocker;
mod cleanup;
mod delete;
mod deleted;
mod exclusive;
mod handoff;
mod held;
mod in_view;
mod lease;
mod listing;
mod made;
mod peer_semaphore;
mod permits;
mod queue;
mod scout;
pub(crate) mod session;
mod turns;
mod view;
mod views;
mod wait;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::metrics::{Count, Counters};
use crate::path::LockPath;
use crate::patience::Patience;
use crate::protocol::PeerSemaphore;
use crate::recipe::Recipe;
use attempt::{Attempt, Step, Stop};
use cleanup::Pending;
pub(crate) use held::HeldNode;

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
    /// Others may write lock-node data (`LocksBuilder::foreign_writes`): a change of a blocker's data says nothing
    /// until it is read back.
    pub foreign_writes: bool,
    /// Tasks of this process waiting in line, for a release to hand the lock to.
    pub handoffs: handoff::Handoffs,
    /// The turns of this process's tasks on keys named by their session (etcd's own lock's layout).
    pub turns: turns::Turns,
    /// The views of the queues of this process's sessions, for their waiters in line (decision 0085).
    pub views: views::Views,
}

/// How long a `try_acquire` may spend on requests (while disconnected they wait for the connection).
const TRY_BOUND: Duration = Duration::from_secs(5);
/// How long an acquire that gives up waits for its cleanup before leaving it to the background.
const CLEANUP_GRACE: Duration = Duration::from_millis(500);

/// Until when a wait for a release sent now may go: the cleanup grace from now, and never past `deadline` plus the
/// grace.
fn release_by(deadline: Option<Instant>) -> Instant {
    let grace = Instant::now() + CLEANUP_GRACE;
    deadline.map_or(grace, |d| grace.min(d + CLEANUP_GRACE))
}

/// Acquires the lock of `recipe` under `path`. `Ok(None)`: gave up (try-once found it held, or the deadline passed),
/// with our node deleted (or, when the server cannot be reached within a short grace, being deleted in the
/// background).
///
/// Every request is bounded by the deadline: a client that queues requests while disconnected cannot make a timed
/// acquire overrun. A `TryOnce` that cannot reach the server in a few seconds fails with `ConnectionLoss`.
///
/// # Cancel safety
/// Dropping the future at any await point deletes our node (or, when a create's reply is outstanding, any node
/// carrying our attempt id) in the background.
///
/// Not an `async fn`, nor is [`acquire_claim`]: each would wrap the attempt's future in one more of its own, which
/// its first poll makes and moves in (about 2 KB copied per layer and per acquire; docs/performance.md).
pub(crate) fn acquire<'a>(
    ctx: &'a Arc<Ctx>,
    path: &'a LockPath,
    recipe: Recipe,
    patience: Patience,
) -> impl Future<Output = Result<Option<HeldNode>>> + Send + 'a {
    acquire_claim(ctx, path, Claim::lock(recipe), patience)
}

/// What an acquire claims: a lock of a recipe, or `weight` of a semaphore's `permits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub recipe: Recipe,
    pub permits: u32,
    pub weight: u32,
    /// A fair lock's node named as Curator's `LeaderLatch` names its candidates' (an election's, [`Claim::latch`]).
    pub latch: bool,
}

impl Claim {
    /// A lock of `recipe`.
    pub fn lock(recipe: Recipe) -> Self {
        Claim {
            recipe,
            permits: 1,
            weight: 1,
            latch: false,
        }
    }

    /// A candidate's node of Curator's `LeaderLatch` (Curator layout): a fair lock's, named `_c_<uuid>-latch-<seq>`.
    pub fn latch() -> Self {
        Claim {
            latch: true,
            ..Claim::lock(Recipe::Fair)
        }
    }

    /// `weight` of a semaphore's `permits`.
    pub fn permits(permits: u32, weight: u32) -> Self {
        Claim {
            recipe: Recipe::Semaphore,
            permits,
            weight,
            latch: false,
        }
    }
}

/// As [`acquire`], for any claim.
pub(crate) fn acquire_claim<'a>(
    ctx: &'a Arc<Ctx>,
    path: &'a LockPath,
    claim: Claim,
    patience: Patience,
) -> impl Future<Output = Result<Option<HeldNode>>> + Send + 'a {
    if claim.recipe == Recipe::Semaphore {
        if let Some(peer) = PeerSemaphore::of(ctx.layout) {
            // Boxed: its mutex and lease make it the largest acquire, which every other acquire would carry.
            return Either::Left(Box::pin(peer_semaphore::acquire(ctx, peer, path, claim, patience)));
        }
    }
    Either::Right(acquire_on(ctx, path, claim, patience, None, ""))
}

/// As [`acquire`] of a fair lock, for an election's candidate: `candidate`, what its node's data says of it
/// ([`candidate_lines`](crate::info::candidate_lines)); `latch`, its node named as Curator's `LeaderLatch` names them.
pub(crate) fn stand<'a>(
    ctx: &'a Arc<Ctx>,
    path: &'a LockPath,
    patience: Patience,
    candidate: &'a str,
    latch: bool,
) -> impl Future<Output = Result<Option<HeldNode>>> + Send + 'a {
    let claim = if latch {
        Claim::latch()
    } else {
        Claim::lock(Recipe::Fair)
    };
    acquire_on(ctx, path, claim, patience, None, candidate)
}

/// How an attempt comes to hold when not by its protocol's own node (the fixed node, or a place in the queue): a
/// recipe with a procedure of its own brings it to the engine, which still bounds it (deadline, failure budget),
/// cleans up what it made, and confirms the lease of what it holds. Today: a peer semaphore's lease, made and counted
/// under its mutex.
pub(crate) trait Procedure: Send {
    /// The path the hold, and its refusals, are known by: the resource's, when the node is made under another path.
    fn resource(&self) -> &LockPath;

    /// Makes our node and runs until it holds (`Some`), a try finds no room (`None`), or the attempt stops.
    #[allow(clippy::type_complexity)]
    fn hold<'s, 'a: 's>(
        &'s mut self,
        attempt: &'s mut Attempt<'a>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Step<Option<HeldNode>>> + Send + 's>>;
}

/// An attempt's end without a hold, boxed (see `settle`).
type Settling<'s> = std::pin::Pin<Box<dyn Future<Output = Result<Option<HeldNode>>> + Send + 's>>;

/// As [`acquire_claim`]; `procedure`: how the attempt comes to hold, when not by its protocol's node; `candidate`:
/// an election candidate's lines in the node's data (empty for a lock).
///
/// Not an `async fn`: the attempt is made here and moved whole into the future, whose state then keeps it alone; an
/// `async fn`'s arguments, and a block's captures, take room in its state to its end (every waiter's heap). Its clock
/// starts at the first poll.
fn acquire_on<'a>(
    ctx: &'a Arc<Ctx>,
    path: &'a LockPath,
    claim: Claim,
    patience: Patience,
    procedure: Option<&'a mut dyn Procedure>,
    candidate: &'a str,
) -> impl Future<Output = Result<Option<HeldNode>>> + Send + 'a {
    use futures::FutureExt;
    let mut attempt = Attempt::new(ctx, path, claim, patience);
    if let Some(p) = procedure.as_ref() {
        attempt.hold_as(p.resource().clone());
    }
    attempt.stand_as(candidate);
    // Instrumented only when the span is enabled (a subscriber takes debug spans), and then boxed: a disabled span
    // still takes its 40 bytes in every waiter's state.
    let span = tracing::debug_span!(
        "acquire",
        path = %attempt.path,
        recipe = %attempt.recipe,
        node = tracing::field::Empty,
        token = tracing::field::Empty,
        waited_ms = tracing::field::Empty
    );
    let run = if span.is_disabled() {
        Either::Left(attempt.run_counted(procedure))
    } else {
        Either::Right(Box::pin(attempt.run_counted(procedure).instrument(span)))
    };
    run.map(|r| {
        let mut held = r?;
        if let Some(h) = held.as_mut() {
            // The hold is a span of the caller's, open as long as the guard.
            h.begin_hold();
        }
        Ok(held)
    })
}

impl<'a> Attempt<'a> {
    /// The attempt, to its end (holding, gave up with nothing left behind, or failed), counted in the metrics. Its
    /// clock starts at the first poll.
    ///
    /// One future that owns the attempt: the block that owned it and the two `async fn`s it awaited in turn (the
    /// counting, the run) each kept the references they were called with, about 80 bytes of every waiter's state,
    /// which made a waiter's task one of tokio's 128-byte steps larger (issue 26, twenty-fourth session). Not an
    /// `async fn`: one would keep the attempt twice, as its argument and as its local.
    #[allow(clippy::manual_async_fn)]
    fn run_counted(
        mut self,
        procedure: Option<&'a mut dyn Procedure>,
    ) -> impl Future<Output = Result<Option<HeldNode>>> + Send + 'a {
        async move {
            self.begin();
            let outcome = match procedure {
                Some(p) => p.hold(&mut self).await,
                None if self.protocol.fixed_name().is_some() => self.exclusive().await,
                None => self.queued().await,
            };
            let mut outcome = self
                .settle(outcome)
                .await
                .map_err(|e| session::closed_or(self.ctx.backend.as_ref(), e));
            match &mut outcome {
                Ok(Some(held)) => {
                    // One clock read for the wait's end and the hold's start.
                    let now = Instant::now();
                    held.held_from(now);
                    self.ctx.counters.acquired(&self.tags, self.waited(now));
                    if self.handed.load(Ordering::Relaxed) {
                        self.count(Count::Handoff);
                    }
                }
                Ok(None) if self.try_once => self.count(Count::Busy),
                Ok(None) => self.count(Count::Timeout),
                Err(e) => self.ctx.counters.failed(&self.tags, e),
            }
            outcome
        }
    }

    /// The end of an attempt: a held node confirmed and handed out, or what it made cleaned up.
    ///
    /// Not an `async fn`: one taking the outcome kept it three times over in its state (its argument, its local, the
    /// node bound out of it), about 650 bytes of every acquire's future, a waiter's included. The outcome is taken
    /// apart here, and each way on is a future of its own.
    fn settle<'s>(
        &'s mut self,
        outcome: Step<Option<HeldNode>>,
    ) -> impl Future<Output = Result<Option<HeldNode>>> + Send + use<'a, 's> {
        match outcome {
            // Between the last reply and now the client may have learned that the session is over (a reply that
            // arrives with the news of the expiry): the node went with it; never hand out a guard known lost.
            Ok(Some(held)) if session::is_over(self.ctx.backend.session_status(), held.session) => {
                held.forget();
                Either::Left(Either::Left(std::future::ready(Err(Error::SessionExpired))))
            }
            Ok(Some(held)) => Either::Left(Either::Right(self.hand_out(held))),
            // The ways that end without a hold are boxed: each is larger than the hand-out, and the settling's future
            // is made, then moved into the attempt's, on every acquire.
            Ok(None) => Either::Right(Box::pin(async {
                self.finish_cleanup(CLEANUP_GRACE).await;
                Ok(None)
            }) as Settling<'s>),
            Err(stop) => Either::Right(Box::pin(self.gave_up(stop)) as Settling<'s>),
        }
    }

    /// A held node: handed out once its lease is confirmed.
    async fn hand_out(&mut self, held: HeldNode) -> Result<Option<HeldNode>> {
        match self.confirm_lease(&held).await {
            Ok(()) => Ok(Some(held)),
            Err(stop) => {
                // Never held, as far as the caller knows: our node goes back to the acquire's cleanup (deleted
                // within the grace, not counted as a hold). Rare: boxed.
                let (node, attempt, session, czxid) = held.unheld();
                self.cleanup.state = Pending::Created(node, attempt, session, czxid);
                Box::pin(self.gave_up(stop)).await
            }
        }
    }

    /// The attempt stopped: cleans up what it made (within the grace) and says how it ended.
    async fn gave_up(&mut self, stop: Stop) -> Result<Option<HeldNode>> {
        match stop {
            Stop::Deadline => {
                self.finish_cleanup(CLEANUP_GRACE).await;
                if self.try_once {
                    Err(Error::ConnectionLoss)
                } else {
                    Ok(None)
                }
            }
            Stop::Fail(e) => {
                if session::reports_end(&e) {
                    // Whatever we made went with the session.
                    self.cleanup.disarm();
                } else {
                    self.finish_cleanup(CLEANUP_GRACE).await;
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod future_sizes;
