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

use tracing::debug;
use uuid::Uuid;

use super::attempt::{Attempt, Step, Stop};
use super::cleanup::{Identity, Pending};
use super::{acquire_on, Claim, Ctx, HeldNode, CLEANUP_GRACE};
use crate::backend::{BackendExt, CreateAndList, CreateMode, SessionId};
use crate::decide::{foreign, Refusal};
use crate::error::{Error, Result};
use crate::info::NodeInfo;
use crate::layout::{Layout, NodeKind, CURATOR_SEMAPHORE_LEASES, CURATOR_SEMAPHORE_MUTEX};
use crate::metrics::Count;
use crate::path::LockPath;
use crate::patience::Patience;
use crate::recipe::Recipe;
use crate::semaphore::{decode_permits, encode_permits};

/// A lease acquire's link to its semaphore: its path, and the session of the mutex it is made under.
#[derive(Debug, Clone)]
pub(crate) struct PeerLease {
    pub root: LockPath,
    pub session: SessionId,
}

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
    match first.peer_count().await {
        Ok(()) => {}
        Err(Stop::Deadline) if first.try_once => return Err(Error::ConnectionLoss),
        Err(Stop::Deadline) => return Ok(None),
        Err(Stop::Fail(e)) => return Err(e),
    }
    drop(first);
    let Some(mutex) = acquire_on(ctx, &mutex_path, Claim::lock(Recipe::Fair), patience, None).await? else {
        return Ok(None);
    };
    let lease = PeerLease {
        root: root.clone(),
        session: mutex.session,
    };
    let leased = acquire_on(ctx, &leases_path, claim, patience, Some(lease)).await;
    // Only now that the lease's create has an outcome (held, or cleaned up within the grace) may the next client
    // count. A release that overruns the grace goes on in the background (the mutex node's drop).
    if let Ok(Err(e)) = tokio::time::timeout(CLEANUP_GRACE, mutex.release()).await {
        debug!(error = %e, path = %mutex_path, "the semaphore's mutex was not released cleanly");
    }
    leased
}

impl Attempt<'_> {
    /// The semaphore's path: checked against our count when it stores one, or made with it (Curator's as a container,
    /// as Curator makes it; kazoo's persistent, as kazoo's `ensure_path` does: kazoo expects it to stay). Data that is
    /// no count is accepted, as kazoo accepts it: kazoo writes its count only after making the path, and Curator
    /// writes none.
    pub async fn peer_count(&self) -> Step<()> {
        let sid = self.connected().await?;
        let on = self.backend().on(sid);
        let mode = match self.ctx.layout {
            Layout::Kazoo => CreateMode::Persistent,
            _ => CreateMode::Container,
        };
        // Bounded: made, then reaped or deleted before it was read, a few times over.
        for _ in 0..4 {
            match self.call(on.get(self.path.as_str())).await {
                Ok(Some((data, _))) => {
                    return match decode_permits(&data) {
                        Some(stored) if stored != self.permits => Err(Stop::Fail(Error::PermitsMismatch {
                            path: self.path.to_string(),
                            asked: self.permits,
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
                .call(on.create(self.path.as_str(), &encode_permits(self.permits), mode))
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
                _ => self.curator_lease(p.session).await?,
            };
            match got {
                Got::Held(h) => return Ok(Some(h)),
                Got::Busy => return Ok(None),
                Got::Again => {}
            }
        }
    }

    /// A child of another family among the leases: refuse (a lock, or another layout's semaphore, on this path).
    fn foreign_lease(&self, children: &[String]) -> Option<Refusal> {
        let own = self.ctx.layout.family(NodeKind::Permit);
        foreign(own, children).map(|(node, family)| Refusal::Foreign { node, family })
    }

    /// Curator: make our lease, then count the leases, ours among them.
    async fn curator_lease(&mut self, sid: SessionId) -> Step<Got> {
        let (id, CreateAndList { created, listed }) = self.create_and_list(sid, Some(NodeKind::Permit)).await?;
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
        loop {
            let children = match listed.take() {
                Some(c) => c,
                None => self.list(sid).await?,
            };
            if let Some(r) = self.foreign_lease(&children) {
                return self.refuse(r).await;
            }
            if !children.contains(&name) {
                self.vanished(&node).await?;
                return Ok(Got::Again);
            }
            if children.len() <= self.permits as usize {
                return Ok(Got::Held(self.held(node, czxid, id)));
            }
            if self.try_once {
                return Ok(Got::Busy);
            }
            let others: Vec<String> = children
                .iter()
                .filter(|c| **c != name)
                .map(|c| self.path.child(c))
                .collect();
            self.wait_any_deleted(&others, sid).await?;
        }
    }

    /// kazoo: count the leases; fewer than the permits, make ours.
    async fn kazoo_lease(&mut self, p: &PeerLease) -> Step<Got> {
        let sid = p.session;
        let children = self.list(sid).await?;
        if let Some(r) = self.foreign_lease(&children) {
            return self.refused(r);
        }
        if children.len() >= self.permits as usize {
            if self.try_once {
                return Ok(Got::Busy);
            }
            let all: Vec<String> = children.iter().map(|c| self.path.child(c)).collect();
            self.wait_any_deleted(&all, sid).await?;
            return Ok(Got::Again);
        }
        let attempt = Uuid::new_v4();
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
        let czxid = match self.call(on.create(&node, &data, CreateMode::Ephemeral)).await {
            Ok(c) => c.czxid,
            Err(Stop::Fail(Error::NoNode(_))) => {
                self.cleanup.disarm();
                self.failed()?;
                self.peer_count().await?;
                return Ok(Got::Again);
            }
            Err(Stop::Fail(Error::ConnectionLoss)) => {
                self.failed()?;
                match self.recover_kazoo_lease(&node, id).await? {
                    Some(czxid) => czxid,
                    None => return Ok(Got::Again),
                }
            }
            Err(e) => return Err(e),
        };
        self.count(Count::Create);
        self.cleanup.state = Pending::Created(node.clone(), attempt, sid, czxid);
        Ok(Got::Held(self.held(node, czxid, id)))
    }

    /// After a lost create reply: the creation id of our kazoo lease, when the create made it (its name is known).
    async fn recover_kazoo_lease(&mut self, node: &str, id: Identity) -> Step<Option<i64>> {
        self.reconnected(id.session).await?;
        let on = self.backend().on(id.session);
        let found = async {
            // After a reconnection to another server, a read may not show our create yet: catch up with the leader.
            on.sync(node).await?;
            on.get(node).await
        };
        match self.call(found).await {
            Ok(Some((_, stat))) if stat.ephemeral_owner == id.session => {
                self.count(Count::CreateRecovery);
                Ok(Some(stat.czxid))
            }
            Ok(_) => {
                self.cleanup.disarm();
                Ok(None)
            }
            Err(Stop::Fail(Error::ConnectionLoss)) => {
                self.clean_up_now().await;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
