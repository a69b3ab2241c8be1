//! The multi-lock: several locks taken as one, all or none, in one canonical order.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, select_all};
use tokio::time::Instant;

use crate::driver::HeldNode;
use crate::error::{Error, LostReason, Result};
use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::mutants::{is_active, Mutant};
use crate::patience::{forever, Patience};
use crate::recipe::Recipe;

/// Several locks taken as one: [`acquire`](MultiLock::acquire) returns when every member is held, and on a timeout,
/// an error or cancellation nothing stays held and no node is left.
///
/// The members are taken in one canonical order (by path), whatever order the caller listed them in, so two
/// multi-locks over overlapping sets never deadlock (Curator's `InterProcessMultiLock` takes them in the caller's
/// order, and two callers listing `[a, b]` and `[b, a]` can each hold one and wait for the other forever). Each
/// member has its own recipe: read one resource, write another.
///
/// First every member is tried at once (the requests of all members go out together: uncontended, the whole set
/// costs the round trips of one lock, not one per member). If some member is busy, the members from the first busy
/// one on (in the canonical order) are let go again, and the rest are waited for one by one in order, under the one
/// deadline that covers the whole set.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::{Locks, Recipe};
/// let locks = Locks::new(recipes_mem::MemCluster::new().client());
/// let transfer = locks.multi([("/accounts/b", Recipe::Write), ("/accounts/a", Recipe::Write), ("/rates", Recipe::Read)])?;
/// let held = transfer.acquire().await?;
/// assert_eq!(held.guards().len(), 3);
/// let token = held.guard("/accounts/a").unwrap().fencing_token(); // for the store you write to
/// # assert!(token > 0);
/// held.release().await?; // every member, in reverse order, reporting every failure
/// # Ok::<(), recipes_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    /// The members, in the canonical order.
    members: Arc<[Arc<dyn Lock>]>,
}

impl MultiLock {
    /// A multi-lock of `members` (in any order).
    ///
    /// # Notable errors
    /// [`Error::InvalidArgument`] when there are none, one path is listed twice (a lock would wait for itself), or a
    /// path lies inside an exclusive member's node (`P/lock` beside an exclusive `P`).
    pub(crate) fn new(mut members: Vec<Arc<dyn Lock>>) -> Result<Self> {
        if members.is_empty() {
            return Err(Error::InvalidArgument(
                "a multi-lock needs at least one member".to_owned(),
            ));
        }
        members.sort_by(|a, b| a.path().as_str().cmp(b.path().as_str()));
        if let Some(w) = members.windows(2).find(|w| w[0].path() == w[1].path()) {
            return Err(Error::InvalidArgument(format!(
                "a multi-lock lists {} twice ({} and {}): take one recipe per path (a write lock covers reading)",
                w[0].path(),
                w[0].recipe(),
                w[1].recipe()
            )));
        }
        // The exclusive recipe's node at P is P/lock: a member at P/lock, or below it, is a path inside another
        // member's lock node (its creates would be refused there, as children of an ephemeral node).
        for m in members.iter().filter(|m| m.recipe() == Recipe::Exclusive) {
            let node = m.path().child(crate::layout::EXCLUSIVE_NODE);
            let below = format!("{node}/");
            if let Some(inner) = members
                .iter()
                .find(|o| o.path().as_str() == node || o.path().as_str().starts_with(&below))
            {
                return Err(Error::InvalidArgument(format!(
                    "a multi-lock lists {} ({}) inside {node}, the node of its exclusive member at {}: take another \
                     path, or another recipe for {}",
                    inner.path(),
                    inner.recipe(),
                    m.path(),
                    m.path()
                )));
            }
        }
        Ok(MultiLock {
            members: members.into(),
        })
    }

    /// The members' paths and recipes, in the order they are taken.
    pub fn members(&self) -> impl Iterator<Item = (&str, Recipe)> {
        self.members.iter().map(|m| (m.path().as_str(), m.recipe()))
    }

    /// Waits until every member is held.
    ///
    /// # Notable errors
    /// The first error of a member (in the canonical order); every member held by then is released first.
    /// [`Error::SessionExpired`] when the session that holds a member ends before the whole set is held (as one lock's
    /// acquire fails when its session ends while it waits): the set is handed out only with every member held on
    /// one live session, none known lost. [`Error::LockLost`] when a member's node is known to have been deleted.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future releases every member held so far and leaves no node behind.
    pub async fn acquire(&self) -> Result<MultiGuard> {
        forever(self.get(Patience::Forever)).await
    }

    /// Takes every member if each is free now; never queues. `None`: some member is busy (nothing is held).
    ///
    /// # Notable errors
    /// As [`acquire`](MultiLock::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](MultiLock::acquire).
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        self.get(Patience::TryOnce).await
    }

    /// Waits at most `timeout` for the whole set (zero: as [`try_acquire`](MultiLock::try_acquire)). `None`: the time
    /// ran out, and nothing is held.
    ///
    /// # Notable errors
    /// As [`acquire`](MultiLock::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](MultiLock::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<MultiGuard>> {
        self.get(Patience::from_timeout(timeout)).await
    }

    async fn get(&self, patience: Patience) -> Result<Option<MultiGuard>> {
        let deadline = patience.deadline();
        // Every member at once, within the deadline (a try alone is bounded by a few seconds, not by ours).
        // Each try makes its node at once, without listing first: a free set in one round trip.
        let tries = join_all(self.members.iter().map(|m| m.__try_acquire_eagerly()));
        let tried = match deadline {
            Some(d) => match tokio::time::timeout_at(d, tries).await {
                Ok(t) => t,
                // Dropped tries delete whatever they made.
                Err(_) => return Ok(None),
            },
            None => tries.await,
        };
        let mut held = Held(Vec::with_capacity(self.members.len()));
        let mut later = Vec::new();
        let mut busy_from = None;
        let mut first_error = None;
        for (i, r) in tried.into_iter().enumerate() {
            match r {
                Ok(Some(g)) if busy_from.is_none() && first_error.is_none() => held.0.push(g),
                // Taken out of order, behind a busy member: let go (below), so that we never hold a later member
                // while waiting for an earlier one.
                Ok(Some(g)) => later.push(g),
                Ok(None) => {
                    busy_from.get_or_insert(i);
                }
                // A try gives up on a connection that does not answer within a few seconds; a waiting acquire waits
                // for it, as one lock would.
                Err(Error::ConnectionLoss) if !patience.tries_once() => {
                    busy_from.get_or_insert(i);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // The members taken out of order go together (one transaction, or one round trip), within the grace and
        // the caller's deadline plus the grace, however many they are; what is not confirmed by then goes on in
        // the background.
        if !later.is_empty() {
            let _ = tokio::time::timeout_at(release_by(deadline), release_reversed(later)).await;
        }
        if let Some(e) = first_error {
            held.release_all(deadline).await;
            return Err(e);
        }
        let Some(from) = busy_from else {
            return held.into_guard(deadline).await.map(Some);
        };
        // One by one, in order, under one deadline.
        if patience.tries_once() {
            held.release_all(deadline).await;
            return Ok(None);
        }
        for m in &self.members[from..] {
            // A member already lost (its session ended): waiting for the next one on a new session would be in vain.
            if let Err(e) = held.whole() {
                held.release_all(deadline).await;
                return Err(e);
            }
            let acquiring = async {
                match deadline {
                    None => m.acquire().await.map(Some),
                    Some(d) => match d.checked_duration_since(Instant::now()) {
                        Some(left) if !left.is_zero() => m.acquire_timeout(left).await,
                        _ => Ok(None),
                    },
                }
            };
            // While members are held, their session's end ends the wait (a member's acquire that began while the
            // session was suspended would go on to queue on the next session): dropped, it cleans up after itself.
            let got = match held.0.first() {
                // Biased, the session's end first: when both are ready at once (a client that learns of the expiry
                // with the last replies in hand), the set is refused, and a run repeats under a simulation.
                Some(first) if !is_active(Mutant::MultiHandsOutLost) => tokio::select! {
                    biased;
                    () = first.session_over() => Err(first.session_end()),
                    got = acquiring => got,
                },
                _ => acquiring.await,
            };
            match got {
                Ok(Some(g)) => held.0.push(g),
                Ok(None) => {
                    held.release_all(deadline).await;
                    return Ok(None);
                }
                Err(e) => {
                    held.release_all(deadline).await;
                    return Err(e);
                }
            }
        }
        held.into_guard(deadline).await.map(Some)
    }
}

/// How long an acquire that gives up waits for its members' releases before leaving them to the background (as one
/// lock's acquire waits for its cleanup): at most this grace from now, and never past the caller's deadline plus it.
const RELEASE_GRACE: Duration = Duration::from_millis(500);

/// Until when an acquire waits for releases it sends now (see [`RELEASE_GRACE`]).
fn release_by(deadline: Option<Instant>) -> Instant {
    let grace = Instant::now() + RELEASE_GRACE;
    deadline.map_or(grace, |d| grace.min(d + RELEASE_GRACE))
}

/// Releases `guards` in reverse order: their nodes are deleted in one transaction where the backend has them (one
/// commit at the server), else by deletes sent one behind the other without waiting for each reply (one session
/// applies its requests in the order they are sent), all in one round trip (a delete whose reply is lost is retried
/// later, out of that order; nothing depends on the order). Returns the path and error of every release that failed.
async fn release_reversed(guards: Vec<LockGuard>) -> Vec<(String, Error)> {
    let mut paths = Vec::with_capacity(guards.len());
    let mut nodes = Vec::with_capacity(guards.len());
    let mut failed = Vec::new();
    for g in guards.into_iter().rev() {
        let path = g.path().to_string();
        let shared = g.known_loss();
        match g.into_node() {
            Some(n) => {
                paths.push(path);
                nodes.push(n);
            }
            // A member that shares its node (a reader of a cohort) reports a loss known now, as `release` does.
            None => failed.extend(shared.err().map(|e| (path, e))),
        }
    }
    let outcomes = HeldNode::release_all(nodes).await;
    failed.extend(
        paths
            .into_iter()
            .zip(outcomes)
            .filter_map(|(p, r)| r.err().map(|e| (p, e))),
    );
    failed
}

/// The members held so far by an acquire; dropped (the acquire cancelled), their guards delete their nodes.
struct Held(Vec<LockGuard>);

impl Held {
    /// Releases every member held so far, waiting at most the grace (see [`release_by`]; the rest goes on in the
    /// background).
    async fn release_all(&mut self, deadline: Option<Instant>) {
        let by = release_by(deadline);
        let _ = tokio::time::timeout_at(by, release_reversed(std::mem::take(&mut self.0))).await;
    }

    /// Whether the members held so far are all on one session and none is known lost: a single lock never hands
    /// out a guard it knows is lost, and neither does the set. A member's session may have ended while another
    /// member's request hid it (a try cleaning up reports "busy" when its node went with the session), and the
    /// next member may then be taken on a new session.
    ///
    /// # Notable errors
    /// [`Error::SessionExpired`] when a member's session is over (or members are on two sessions: the older one is
    /// over), [`Error::LockLost`] when a member's node is known deleted.
    fn whole(&self) -> Result<()> {
        if is_active(Mutant::MultiHandsOutLost) {
            return Ok(());
        }
        let Some(last) = self.0.last() else {
            return Ok(());
        };
        for g in &self.0 {
            match g.loss_known() {
                Some(LostReason::SessionExpired) => return Err(g.session_end()),
                Some(reason) => {
                    return Err(Error::LockLost {
                        path: g.path().to_string(),
                        reason,
                    })
                }
                None if g.session_id() != last.session_id() => return Err(g.session_end()),
                None => {}
            }
        }
        Ok(())
    }

    /// The set, handed out only when [whole](Held::whole); else every member is let go, and the error returned.
    async fn into_guard(mut self, deadline: Option<Instant>) -> Result<MultiGuard> {
        if let Err(e) = self.whole() {
            self.release_all(deadline).await;
            return Err(e);
        }
        Ok(MultiGuard {
            guards: std::mem::take(&mut self.0),
        })
    }
}

/// Every member of a [`MultiLock`], held. Dropping it releases every member (in the background, as a
/// [`LockGuard`]'s drop does); [`release`](MultiGuard::release) does it now and reports every failure.
#[derive(Debug)]
#[must_use = "dropping a MultiGuard releases every member at once"]
pub struct MultiGuard {
    /// In the canonical order.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The members' guards, in the order they were taken (by path): each has its own fencing token, lease and lost
    /// signal.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guard of the member at `path`.
    pub fn guard(&self, path: &str) -> Option<&LockGuard> {
        self.guards.iter().find(|g| g.path().as_str() == path)
    }

    /// Whether every member is valid now (see [`LockGuard::is_valid`]).
    pub fn is_valid(&self) -> bool {
        self.guards.iter().all(LockGuard::is_valid)
    }

    /// Resolves when any member is lost: its path and why.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches; dropping it changes nothing, and it can be awaited again.
    pub async fn lost(&self) -> (String, LostReason) {
        let watches = self
            .guards
            .iter()
            .map(|g| Box::pin(async move { (g.path().to_string(), g.lost().await) }));
        select_all(watches).await.0
    }

    /// Releases every member, in one transaction (one commit at the server) where it can, else in reverse order (the
    /// deletes go out one behind the other in one round trip, and the server applies them in that order), and
    /// reports every failure.
    ///
    /// # Notable errors
    /// [`Error::ReleaseFailed`] with each member's path and error, when any release failed (the others are released
    /// all the same).
    ///
    /// # Cancel safety
    /// Cancel safe: a member not yet released when the future is dropped is released in the background.
    pub async fn release(mut self) -> Result<()> {
        let failures = release_reversed(std::mem::take(&mut self.guards)).await;
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::ReleaseFailed { failures })
        }
    }
}
