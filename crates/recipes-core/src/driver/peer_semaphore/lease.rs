//! A peer semaphore's lease, made and counted under its mutex on the mutex's session: the engine's attempt with a
//! [`Procedure`] of its own. Curator's makes its lease, then counts; kazoo's counts, then makes it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;
use uuid::Uuid;

use crate::backend::{BackendExt, CreateAndList, CreateMode, SessionId};
use crate::driver::attempt::{Attempt, Step, Stop};
use crate::driver::cleanup::Pending;
use crate::driver::delete::Identity;
use crate::driver::{HeldNode, Procedure};
use crate::error::Error;
use crate::info::{decode_permits, encode_permits, NodeInfo};
use crate::layout::Family;
use crate::metrics::Count;
use crate::mutants::{is_active, Mutant};
use crate::path::LockPath;
use crate::protocol::{foreign, PeerSemaphore, Refusal};

/// How long a kazoo-layout wait beside children that are no kazoo leases goes before counting again.
const RECHECK: Duration = Duration::from_secs(1);

/// How one try at a lease ended.
enum Got {
    Held(Box<HeldNode>),
    /// Full, and a try-once does not wait.
    Busy,
    /// Our lease vanished, or its create failed: make it again (bounded).
    Again,
}

/// The semaphore's path: checked against our count when it stores one, or made with it (as the peer makes it, see
/// [`PeerSemaphore::path_mode`]). Empty data as made gets our count; other data that is no count is accepted, as
/// kazoo accepts it.
pub(super) async fn peer_count(a: &Attempt<'_>, peer: PeerSemaphore, permits: u32) -> Step<()> {
    let sid = a.connected().await?;
    let on = a.backend().on(sid);
    let path = a.path;
    // Bounded: made, then reaped or deleted before it was read, a few times over.
    let mut wrote = false;
    for _ in 0..4 {
        match a.call(on.get(path.as_str())).await {
            // A path made by another recipe or by a peer without a count (its data as made): ours is written over
            // that data only (version 0), and read back, so that two of our clients with different counts do not
            // both go in there (found by review).
            Ok(Some((data, _))) if data.is_empty() && !wrote => {
                on.set_data_unacked(path.as_str(), &encode_permits(permits), Some(0));
                wrote = true;
                continue;
            }
            Ok(Some((data, _))) => {
                return match decode_permits(&data) {
                    Some(stored) if stored != permits => Err(Stop::Fail(Error::PermitsMismatch {
                        path: path.to_string(),
                        asked: permits,
                        stored: Some(stored),
                    })),
                    _ => Ok(()),
                }
            }
            Ok(None) => {}
            Err(Stop::Fail(Error::ConnectionLoss)) => {
                a.reconnected(sid).await?;
                continue;
            }
            Err(e) => return Err(e),
        }
        for ancestor in path.ancestors() {
            match a.call(on.create(ancestor, b"", CreateMode::Container)).await {
                Ok(_) | Err(Stop::Fail(Error::NodeExists(_) | Error::NoNode(_) | Error::ConnectionLoss)) => {}
                Err(e) => return Err(e),
            }
        }
        match a
            .call(on.create(path.as_str(), &encode_permits(permits), peer.path_mode()))
            .await
        {
            Ok(_) => return Ok(()),
            // Made by another meanwhile (read its count), or an ancestor went (make it again).
            Err(Stop::Fail(Error::NodeExists(_) | Error::NoNode(_))) => {}
            Err(Stop::Fail(Error::ConnectionLoss)) => a.reconnected(sid).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
/// A peer semaphore's lease, made and counted under its mutex, on the mutex's session.
pub(crate) struct LeaseUnderMutex {
    pub(super) peer: PeerSemaphore,
    /// The semaphore's path: the lease holds, and refuses, as the semaphore's.
    pub(super) root: LockPath,
    pub(super) permits: u32,
    /// The mutex's session: the lease must be made where the mutex is held.
    pub(super) session: SessionId,
    /// The mutex, held while the lease is made and counted.
    pub(super) mutex: Option<HeldNode>,
    /// The lease attempt's deadline (a try's too, once the attempt has begun): the mutex's release after the lease's
    /// cleanup waits until it, plus the grace, at most.
    pub(super) deadline: Option<Instant>,
}

impl Procedure for LeaseUnderMutex {
    fn resource(&self) -> &LockPath {
        &self.root
    }

    fn hold<'s, 'a: 's>(
        &'s mut self,
        a: &'s mut Attempt<'a>,
    ) -> Pin<Box<dyn Future<Output = Step<Option<HeldNode>>> + Send + 's>> {
        Box::pin(self.lease(a))
    }
}

impl LeaseUnderMutex {
    /// Releases the mutex, waiting until `by` at most (past it, the release goes on in the background: the mutex
    /// node's drop).
    pub(super) async fn release_mutex(&mut self, by: Instant) {
        if let Some(mutex) = self.mutex.take() {
            if let Ok(Err(e)) = tokio::time::timeout_at(by, mutex.release()).await {
                debug!(error = %e, "a semaphore's mutex was not released cleanly");
            }
        }
    }

    /// One lease, made under the mutex; once it holds, the mutex goes, before the lease is confirmed (which may take
    /// a while, and must be the last thing before the guard is handed out).
    async fn lease(&mut self, a: &mut Attempt<'_>) -> Step<Option<HeldNode>> {
        self.deadline = a.deadline();
        loop {
            // The mutex's session, or the mutex is gone: the lease must be made where the mutex is held.
            a.reconnected(self.session).await?;
            let got = if self.peer.makes_before_counting() {
                self.make_then_count(a).await?
            } else {
                self.count_then_make(a).await?
            };
            match got {
                Got::Held(h) => {
                    self.release_mutex(a.release_by()).await;
                    return Ok(Some(*h));
                }
                Got::Busy => return Ok(None),
                Got::Again => {}
            }
        }
    }

    /// A child of another family among `children` of `parent`, whose nodes count as `own`: refuse (a lock, or
    /// another layout's semaphore, on this path). Called on a list made after our lease's create, so that of two
    /// racing contenders of different families at least one sees the other (see [`foreign`]).
    async fn foreign_beside(
        a: &Attempt<'_>,
        own: Family,
        parent: &str,
        children: &[String],
        sid: SessionId,
    ) -> Step<Option<Refusal>> {
        if foreign(own, children).is_none() {
            return Ok(None);
        }
        let children = a.screen(parent, children.to_vec(), sid).await?;
        Ok(foreign(own, &children).map(|(node, family)| Refusal::Foreign { node, family }))
    }

    /// Curator: make our lease, then count the leases, ours among them.
    async fn make_then_count(&mut self, a: &mut Attempt<'_>) -> Step<Got> {
        let sid = self.session;
        let (id, CreateAndList { created, listed }) = a.create_and_list(sid).await?;
        let (node, czxid, mut listed) = match created {
            Ok(c) => (c.path, c.czxid, listed.ok()),
            Err(Error::NoNode(_)) => {
                a.cleanup.disarm();
                a.parent_missing()?;
                a.ensure_parents(sid).await?;
                return Ok(Got::Again);
            }
            Err(Error::ConnectionLoss) => {
                a.failed()?;
                match a.recover_queued(id).await? {
                    Some(found) => found,
                    None => return Ok(Got::Again),
                }
            }
            Err(e) => return Err(e.into()),
        };
        a.count(Count::Create);
        let node: Arc<str> = node.into();
        a.cleanup.state = Pending::Created(node.clone(), id.attempt, sid, czxid);
        let name = node.rsplit('/').next().unwrap_or_default().to_owned();
        // The semaphore's own path, listed after our lease is made: another recipe's or layout's nodes there do not
        // count our leases, nor we theirs. (Our `leases` is there before our lease, and stays while it does: a
        // contender of another family that lists the path after its own create sees it.)
        let root = self.root.as_str();
        let beside = a.list_at(root, sid).await?;
        if let Some(r) = Self::foreign_beside(a, Family::CuratorSemaphore, root, &beside, sid).await? {
            return a.refuse(r).await;
        }
        loop {
            let children = match listed.take() {
                Some(c) => c,
                None => a.list(sid).await?,
            };
            let own = Family::CuratorLease;
            if let Some(r) = Self::foreign_beside(a, own, a.path.as_str(), &children, sid).await? {
                return a.refuse(r).await;
            }
            if !children.contains(&name) {
                a.vanished(&node).await?;
                return Ok(Got::Again);
            }
            if children.len() <= self.permits as usize {
                return Ok(Got::Held(Box::new(a.held(node, czxid, id))));
            }
            if a.try_once {
                return Ok(Got::Busy);
            }
            // Every lease, ours too (deleted by someone else, it is made again), as Curator watches them all; a child
            // that is no Curator lease (a lock path nested here) counts as one, as Curator counts it, but is not
            // watched (see `wait_for_room`).
            wait_for_room(a, &children, Family::CuratorLease, None, sid).await?;
        }
    }

    /// kazoo: count the leases; fewer than the permits, make ours, and list again in the same round trip: another
    /// recipe's or layout's node there refuses (it may have come between the count and the create), and more leases
    /// than permits (possible only when the mutex was broken from outside) take ours back.
    async fn count_then_make(&mut self, a: &mut Attempt<'_>) -> Step<Got> {
        let sid = self.session;
        let children = a.list(sid).await?;
        if children.len() >= self.permits as usize {
            if let Some(r) = Self::foreign_beside(a, Family::KazooLease, a.path.as_str(), &children, sid).await? {
                return a.refused(r);
            }
            if a.try_once {
                return Ok(Got::Busy);
            }
            wait_for_room(a, &children, Family::KazooLease, None, sid).await?;
            return Ok(Got::Again);
        }
        let count_only = is_active(Mutant::KazooCountOnly);
        if count_only {
            self.release_mutex(a.release_by()).await;
        }
        let attempt = crate::sim::attempt_id();
        let id = Identity {
            fixed: false,
            attempt,
            session: sid,
            czxid: None,
            marks: None,
        };
        let node: Arc<str> = a
            .path
            .child(attempt.simple().encode_lower(&mut Uuid::encode_buffer()))
            .into();
        let data = NodeInfo::encode_own(attempt, a.recipe.name(), "", false);
        a.cleanup.state = Pending::Sent(attempt, sid);
        let on = a.backend().on(sid);
        let made = a
            .call(async { Ok(on.create_and_list(&node, &data, CreateMode::Ephemeral).await) })
            .await?;
        let (czxid, listed) = match made.created {
            Ok(c) => (c.czxid, made.listed.ok()),
            Err(Error::NoNode(_)) => {
                a.cleanup.disarm();
                a.parent_missing()?;
                peer_count(a, self.peer, self.permits).await?;
                return Ok(Got::Again);
            }
            Err(Error::ConnectionLoss) => {
                a.failed()?;
                match a.recover_queued(id).await? {
                    Some((_, czxid, _)) => (czxid, None),
                    None => return Ok(Got::Again),
                }
            }
            Err(e) => return Err(e.into()),
        };
        a.count(Count::Create);
        a.cleanup.state = Pending::Created(node.clone(), attempt, sid, czxid);
        if count_only {
            return Ok(Got::Held(Box::new(a.held(node, czxid, id))));
        }
        let children = match listed {
            Some(c) => c,
            None => a.list(sid).await?,
        };
        if let Some(r) = Self::foreign_beside(a, Family::KazooLease, a.path.as_str(), &children, sid).await? {
            return a.refuse(r).await;
        }
        if children.len() > self.permits as usize {
            debug!(node = %node, "more leases than permits after ours was made: taking ours back");
            a.clean_up_now().await;
            if a.try_once {
                return Ok(Got::Busy);
            }
            let mine = node.rsplit('/').next().unwrap_or_default();
            wait_for_room(a, &children, Family::KazooLease, Some(mine), sid).await?;
            return Ok(Got::Again);
        }
        Ok(Got::Held(Box::new(a.held(node, czxid, id))))
    }
}

/// Waits for one of `children` of the semaphore's path (but `mine`), the leases of `family`, to go, as the peers wait
/// for a change. A child of no lease family (Curator's `locks` or `leases` left empty, a nested lock path) may never
/// go, and may come to hold another layout's semaphore without a deletion (a Curator lease made under `leases`): with
/// such a child the wait is bounded, and the caller counts (and screens) again. Such a child is not watched: a lock
/// path nested here may be the root of this session's view of its queue, which a one-shot watch there would silence
/// (decision 0085; found by review, helper-114: a kazoo semaphore and the fair lock nested in it, on one session, left
/// the lock's waiters in the view untold).
async fn wait_for_room(
    a: &Attempt<'_>,
    children: &[String],
    family: Family,
    mine: Option<&str>,
    sid: SessionId,
) -> Step<()> {
    let leases = |c: &&String| Family::of(c) == Some(family);
    let watched: Vec<String> = children
        .iter()
        .filter(leases)
        .filter(|c| Some(c.as_str()) != mine)
        .map(|c| a.path.child(c))
        .collect();
    let only_leases = children.iter().all(|c| leases(&c));
    if watched.is_empty() {
        // Nothing to watch: count again a moment later (bounded by the attempt's deadline), or at once when the
        // session is over (found by review, helper-115: the expiry learnt up to that moment late), even when it was
        // over before this wait subscribed (helper-116: an expiry between the count's reply and this wait).
        let until = Instant::now() + RECHECK;
        let mut session = a.backend().session();
        tokio::select! {
            () = tokio::time::sleep_until(a.deadline().map_or(until, |d| d.min(until))) => {}
            () = crate::driver::session::over(&mut session, sid) => {}
        }
        return if a.deadline().is_some_and(|d| d <= Instant::now()) {
            Err(Stop::Deadline)
        } else {
            Ok(())
        };
    }
    if only_leases {
        return a.wait_any_deleted(&watched, sid, None).await.map(drop);
    }
    match tokio::time::timeout(RECHECK, a.wait_any_deleted(&watched, sid, None)).await {
        Ok(r) => r.map(drop),
        Err(_) => Ok(()),
    }
}
