//! The peers' semaphores, on the same paths as the peers: Curator's `InterProcessSemaphoreV2` and kazoo's
//! `Semaphore`. Both take a mutex (a fair lock in the peer's layout) to make and count a lease, then hold the lease
//! without it.
//!
//! - **Curator** (`P/locks`, `P/leases`): under the mutex, the lease `P/leases/_c_<id>-lease-<seq>` is made first,
//!   then the leases are counted, ours among them. At most the permits: it holds. More: it waits, mutex held, for a
//!   lease to go. Curator counts every child of `P/leases`, and so do we.
//! - **kazoo** (`P-__lock__`, `P`): under the mutex, the children of `P` are counted first. Fewer than the permits: the
//!   lease `P/<id hex>` is made (ephemeral, not sequential) and holds. Otherwise it waits, mutex held, for a child to
//!   go. The count is stored in `P`'s data, in decimal, and checked as kazoo checks it.
//!
//! Why no more than the permits hold (decision 0050):
//! - Curator's rule needs no mutex. Of the current holders, take the one that counted last: every other holder's
//!   lease was made before its own count, and is still there, so that count saw them all.
//! - kazoo's rule counts before it makes, and so needs the mutex. Our count and create run on the session that holds
//!   the mutex node, and the mutex goes only once the create has an outcome. A session that ended meanwhile fails the
//!   create: its mutex node went with it, and so does any lease it made.
//!
//! A lease is one permit; the peers have no claim on several at once (Curator's `acquire(n)` takes n leases one by
//! one, which deadlocks two clients that each got some), so `acquire_many(n > 1)` is refused in these layouts.

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;
use uuid::Uuid;

use super::attempt::{Attempt, PeerLease, Step, Stop};
use super::cleanup::{Identity, Pending};
use super::{acquire_on, Claim, Ctx, HeldNode};
use crate::backend::{BackendExt, CreateAndList, CreateMode, SessionId};
use crate::error::{Error, Result};
use crate::info::NodeInfo;
use crate::info::{decode_permits, encode_permits};
use crate::layout::{Family, Layout, CURATOR_SEMAPHORE_LEASES, CURATOR_SEMAPHORE_MUTEX};
use crate::metrics::Count;
use crate::mutants::{is_active, Mutant};
use crate::path::LockPath;
use crate::patience::Patience;
use crate::protocol::{foreign, Refusal};
use crate::recipe::Recipe;

/// How long a kazoo-layout wait beside children that are no kazoo leases goes before counting again.
const RECHECK: Duration = Duration::from_secs(1);

/// How one try at a lease ended.
enum Got {
    Held(HeldNode),
    /// Full, and a try-once does not wait.
    Busy,
    /// Our lease vanished, or its create failed: make it again (bounded).
    Again,
}

/// The mutex's path and the leases' path of the peer semaphore at `root`.
fn peer_paths(layout: Layout, root: &LockPath) -> Result<(LockPath, LockPath)> {
    match layout {
        Layout::Curator => Ok((
            LockPath::new(root.child(CURATOR_SEMAPHORE_MUTEX))?,
            LockPath::new(root.child(CURATOR_SEMAPHORE_LEASES))?,
        )),
        Layout::Kazoo => Ok((LockPath::new(format!("{root}-__lock__"))?, root.clone())),
        Layout::Native => Err(Error::InvalidArgument(format!(
            "the semaphore at {root} has the native layout, which takes no mutex"
        ))),
    }
}

/// Acquires one lease of the peer semaphore at `root`: the count checked (or stored), the mutex, the lease, and the
/// mutex released again whatever the lease's outcome.
pub(crate) async fn acquire(
    ctx: &Arc<Ctx>,
    root: &LockPath,
    claim: Claim,
    patience: Patience,
) -> Result<Option<HeldNode>> {
    if claim.weight != 1 {
        return Err(Error::InvalidArgument(format!(
            "the {} layout's semaphore (at {root}) grants one permit per lease: acquire_many({}) needs the native \
             layout",
            ctx.layout, claim.weight
        )));
    }
    let (mutex_path, leases_path) = peer_paths(ctx.layout, root)?;
    // Before the mutex, whose path-making would make our path without the count.
    let first = Attempt::new(ctx, root, claim, patience);
    match first.peer_count(claim.permits).await {
        Ok(()) => {}
        Err(Stop::Deadline) if first.try_once => return Err(Error::ConnectionLoss),
        Err(Stop::Deadline) => return Ok(None),
        Err(Stop::Fail(e)) => return Err(e),
    }
    drop(first);
    let Some(mutex) = acquire_on(ctx, &mutex_path, Claim::lock(Recipe::Fair), patience, None).await? else {
        return Ok(None);
    };
    // Curator's mutex lives under the semaphore's path: the container reaper may have removed the emptied path
    // after the count was checked, and the mutex's path-making then made it again without one. Checked again now
    // that the mutex's node keeps the path (and, after it, our lease does): a client of another count is refused.
    if ctx.layout == Layout::Curator && !is_active(Mutant::CountCheckedBeforeMutex) {
        let again = Attempt::new(ctx, root, claim, patience);
        // On the mutex's session: once it is over, the mutex is gone, and a check on the next session could make the
        // path again, with a count that nothing would ever take back.
        let checked = match again.reconnected(mutex.session).await {
            Ok(()) => again.peer_count(claim.permits).await,
            Err(e) => Err(e),
        };
        drop(again);
        let failed = match checked {
            Ok(()) => None,
            Err(Stop::Deadline) if patience.tries_once() => Some(Err(Error::ConnectionLoss)),
            Err(Stop::Deadline) => Some(Ok(None)),
            Err(Stop::Fail(e)) => Some(Err(e)),
        };
        if let Some(out) = failed {
            if let Ok(Err(e)) = tokio::time::timeout(super::CLEANUP_GRACE, mutex.release()).await {
                debug!(path = %mutex_path, error = %e, "the mutex's release failed");
            }
            return out;
        }
    }
    let lease = PeerLease {
        root: root.clone(),
        permits: claim.permits,
        session: mutex.session,
    };
    // The attempt releases the mutex once the lease's create has an outcome: held (before the lease is confirmed),
    // or cleaned up.
    acquire_on(ctx, &leases_path, claim, patience, Some((lease, mutex))).await
}

impl Attempt<'_> {
    /// The semaphore's path: checked against our count when it stores one, or made with it (Curator's as a container,
    /// as Curator makes it; kazoo's persistent, as kazoo's `ensure_path` does: kazoo expects it to stay). Empty data as
    /// made gets our count; other data that is no count is accepted, as kazoo accepts it.
    pub async fn peer_count(&self, permits: u32) -> Step<()> {
        let sid = self.connected().await?;
        let on = self.backend().on(sid);
        let mode = match self.ctx.layout {
            Layout::Kazoo => CreateMode::Persistent,
            _ => CreateMode::Container,
        };
        // Bounded: made, then reaped or deleted before it was read, a few times over.
        let mut wrote = false;
        for _ in 0..4 {
            match self.call(on.get(self.path.as_str())).await {
                // A path made by another recipe or by a peer without a count (its data as made): ours is written
                // over that data only (version 0), and read back, so that two of our clients with different counts
                // do not both go in there (found by review).
                Ok(Some((data, _))) if data.is_empty() && !wrote => {
                    on.set_data_unacked(self.path.as_str(), &encode_permits(permits), Some(0));
                    wrote = true;
                    continue;
                }
                Ok(Some((data, _))) => {
                    return match decode_permits(&data) {
                        Some(stored) if stored != permits => Err(Stop::Fail(Error::PermitsMismatch {
                            path: self.path.to_string(),
                            asked: permits,
                            stored: Some(stored),
                        })),
                        _ => Ok(()),
                    }
                }
                Ok(None) => {}
                Err(Stop::Fail(Error::ConnectionLoss)) => {
                    self.reconnected(sid).await?;
                    continue;
                }
                Err(e) => return Err(e),
            }
            for a in self.path.ancestors() {
                match self.call(on.create(a, b"", CreateMode::Container)).await {
                    Ok(_) | Err(Stop::Fail(Error::NodeExists(_) | Error::NoNode(_) | Error::ConnectionLoss)) => {}
                    Err(e) => return Err(e),
                }
            }
            match self
                .call(on.create(self.path.as_str(), &encode_permits(permits), mode))
                .await
            {
                Ok(_) => return Ok(()),
                // Made by another meanwhile (read its count), or an ancestor went (make it again).
                Err(Stop::Fail(Error::NodeExists(_) | Error::NoNode(_))) => {}
                Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(sid).await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One lease of a peer semaphore, made under the mutex that `p` holds, on the mutex's session.
    pub async fn peer_lease(&mut self, p: &PeerLease) -> Step<Option<HeldNode>> {
        loop {
            // The mutex's session, or the mutex is gone: the lease must be made where the mutex is held.
            self.reconnected(p.session).await?;
            let got = match self.ctx.layout {
                Layout::Kazoo => self.kazoo_lease(p).await?,
                _ => self.curator_lease(p).await?,
            };
            match got {
                Got::Held(h) => return Ok(Some(h)),
                Got::Busy => return Ok(None),
                Got::Again => {}
            }
        }
    }

    /// A child of another family among `children` of `parent`, whose nodes count as `own`: refuse (a lock, or
    /// another layout's semaphore, on this path). Called on a list made after our lease's create, so that of two
    /// racing contenders of different families at least one sees the other (see [`foreign`]).
    async fn foreign_beside(
        &self,
        own: Family,
        parent: &str,
        children: &[String],
        sid: SessionId,
    ) -> Step<Option<Refusal>> {
        if foreign(own, children).is_none() {
            return Ok(None);
        }
        let children = self.screen(parent, children.to_vec(), sid).await?;
        Ok(foreign(own, &children).map(|(node, family)| Refusal::Foreign { node, family }))
    }

    /// Curator: make our lease, then count the leases, ours among them.
    async fn curator_lease(&mut self, p: &PeerLease) -> Step<Got> {
        let sid = p.session;
        let (id, CreateAndList { created, listed }) = self.create_and_list(sid).await?;
        let (node, czxid, mut listed) = match created {
            Ok(c) => (c.path, c.czxid, listed.ok()),
            Err(Error::NoNode(_)) => {
                self.cleanup.disarm();
                self.failed()?;
                self.ensure_parents(sid).await?;
                return Ok(Got::Again);
            }
            Err(Error::ConnectionLoss) => {
                self.failed()?;
                match self.recover_queued(id).await? {
                    Some(found) => found,
                    None => return Ok(Got::Again),
                }
            }
            Err(e) => return Err(e.into()),
        };
        self.count(Count::Create);
        self.cleanup.state = Pending::Created(node.clone(), id.attempt, sid, czxid);
        let name = node.rsplit('/').next().unwrap_or_default().to_owned();
        // The semaphore's own path, listed after our lease is made: another recipe's or layout's nodes there do not
        // count our leases, nor we theirs. (Our `leases` is there before our lease, and stays while it does: a
        // contender of another family that lists the path after its own create sees it.)
        let root = p.root.clone();
        let beside = self.list_at(root.as_str(), sid).await?;
        if let Some(r) = self
            .foreign_beside(Family::CuratorSemaphore, root.as_str(), &beside, sid)
            .await?
        {
            return self.refuse(r).await;
        }
        loop {
            let children = match listed.take() {
                Some(c) => c,
                None => self.list(sid).await?,
            };
            let own = Family::CuratorLease;
            if let Some(r) = self.foreign_beside(own, self.path.as_str(), &children, sid).await? {
                return self.refuse(r).await;
            }
            if !children.contains(&name) {
                self.vanished(&node).await?;
                return Ok(Got::Again);
            }
            if children.len() <= p.permits as usize {
                return Ok(Got::Held(self.held(node, czxid, id)));
            }
            if self.try_once {
                return Ok(Got::Busy);
            }
            // Every lease, ours too (deleted by someone else, it is made again), as Curator watches them all.
            let all: Vec<String> = children.iter().map(|c| self.path.child(c)).collect();
            self.wait_any_deleted(&all, sid).await?;
        }
    }

    /// kazoo: count the leases; fewer than the permits, make ours, and list again in the same round trip: another
    /// recipe's or layout's node there refuses (it may have come between the count and the create), and more leases
    /// than permits (possible only when the mutex was broken from outside) take ours back.
    async fn kazoo_lease(&mut self, p: &PeerLease) -> Step<Got> {
        let sid = p.session;
        let children = self.list(sid).await?;
        if children.len() >= p.permits as usize {
            if let Some(r) = self
                .foreign_beside(Family::KazooLease, self.path.as_str(), &children, sid)
                .await?
            {
                return self.refused(r);
            }
            if self.try_once {
                return Ok(Got::Busy);
            }
            self.wait_for_room(&children, None, sid).await?;
            return Ok(Got::Again);
        }
        let count_only = is_active(Mutant::KazooCountOnly);
        if count_only {
            self.release_mutex().await;
        }
        let attempt = crate::mutants::attempt_id();
        let id = Identity {
            fixed: false,
            attempt,
            session: sid,
            czxid: None,
        };
        let node = self
            .path
            .child(attempt.simple().encode_lower(&mut Uuid::encode_buffer()));
        let data = NodeInfo::for_this_process(attempt, self.recipe.name()).encode();
        self.cleanup.state = Pending::Sent(attempt, sid);
        let on = self.backend().on(sid);
        let made = self
            .call(async { Ok(on.create_and_list(&node, &data, CreateMode::Ephemeral).await) })
            .await?;
        let (czxid, listed) = match made.created {
            Ok(c) => (c.czxid, made.listed.ok()),
            Err(Error::NoNode(_)) => {
                self.cleanup.disarm();
                self.failed()?;
                self.peer_count(p.permits).await?;
                return Ok(Got::Again);
            }
            Err(Error::ConnectionLoss) => {
                self.failed()?;
                match self.recover_queued(id).await? {
                    Some((_, czxid, _)) => (czxid, None),
                    None => return Ok(Got::Again),
                }
            }
            Err(e) => return Err(e.into()),
        };
        self.count(Count::Create);
        self.cleanup.state = Pending::Created(node.clone(), attempt, sid, czxid);
        if count_only {
            return Ok(Got::Held(self.held(node, czxid, id)));
        }
        let children = match listed {
            Some(c) => c,
            None => self.list(sid).await?,
        };
        if let Some(r) = self
            .foreign_beside(Family::KazooLease, self.path.as_str(), &children, sid)
            .await?
        {
            return self.refuse(r).await;
        }
        if children.len() > p.permits as usize {
            debug!(node = %node, "more leases than permits after ours was made: taking ours back");
            self.clean_up_now().await;
            if self.try_once {
                return Ok(Got::Busy);
            }
            let mine = node.rsplit('/').next().unwrap_or_default();
            self.wait_for_room(&children, Some(mine), sid).await?;
            return Ok(Got::Again);
        }
        Ok(Got::Held(self.held(node, czxid, id)))
    }

    /// kazoo: waits for one of `children` of the semaphore's path (but `mine`) to go, as kazoo waits for a change. A
    /// child that is no kazoo lease (Curator's `locks` or `leases` left empty, a nested path) may never go, and may
    /// come to hold another layout's semaphore without a deletion (a Curator lease made under `leases`): with such a
    /// child the wait is bounded, and the caller counts (and screens) again.
    async fn wait_for_room(&self, children: &[String], mine: Option<&str>, sid: SessionId) -> Step<()> {
        let watched: Vec<String> = children
            .iter()
            .filter(|c| Some(c.as_str()) != mine)
            .map(|c| self.path.child(c))
            .collect();
        if children.iter().all(|c| Family::of(c) == Some(Family::KazooLease)) {
            return self.wait_any_deleted(&watched, sid).await;
        }
        match tokio::time::timeout(RECHECK, self.wait_any_deleted(&watched, sid)).await {
            Ok(r) => r,
            Err(_) => Ok(()),
        }
    }
}
