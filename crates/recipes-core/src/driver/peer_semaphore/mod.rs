//! The peers' semaphores, on the same paths as the peers: Curator's `InterProcessSemaphoreV2` and kazoo's
//! `Semaphore`. Both take a mutex (a fair lock in the peer's layout, acquired as any fair lock is) to make and count a
//! lease, then hold the lease without it. The lease is the engine's attempt with a
//! [`Procedure`](crate::driver::Procedure) of its own, `LeaseUnderMutex` (`lease.rs`): the layouts' answers (where
//! the mutex and leases live, which order) are [`PeerSemaphore`]'s.
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

mod lease;

use std::sync::Arc;

use tokio::time::Instant;

use super::attempt::{Attempt, Stop};
use super::{acquire_on, release_by, Claim, Ctx, HeldNode, CLEANUP_GRACE};
use crate::error::{Error, Result};
use crate::mutants::{is_active, Mutant};
use crate::path::LockPath;
use crate::patience::Patience;
use crate::protocol::PeerSemaphore;
use crate::recipe::Recipe;
use lease::{peer_count, LeaseUnderMutex};

/// Acquires one lease of the peer semaphore `peer` at `root`: the count checked (or stored), the mutex, the lease,
/// and the mutex released again whatever the lease's outcome.
pub(crate) async fn acquire(
    ctx: &Arc<Ctx>,
    peer: PeerSemaphore,
    root: &LockPath,
    claim: Claim,
    patience: Patience,
) -> Result<Option<HeldNode>> {
    peer.check_weight(root, claim.weight)?;
    let (mutex_path, leases_path) = peer.paths(root)?;
    // Before the mutex, whose path-making would make our path without the count.
    let first = Attempt::new(ctx, root, claim, patience);
    match peer_count(&first, peer, claim.permits).await {
        Ok(()) => {}
        Err(Stop::Deadline) if first.try_once => return Err(Error::ConnectionLoss),
        Err(Stop::Deadline) => return Ok(None),
        Err(Stop::Fail(e)) => return Err(e),
    }
    drop(first);
    let Some(mutex) = acquire_on(ctx, &mutex_path, Claim::lock(Recipe::Fair), patience, None, "").await? else {
        return Ok(None);
    };
    let mut lease = LeaseUnderMutex {
        peer,
        root: root.clone(),
        permits: claim.permits,
        session: mutex.session,
        mutex: Some(mutex),
        // Set when the lease's attempt begins (a try's bound is counted from there).
        deadline: None,
    };
    if peer.checks_count_under_mutex() && !is_active(Mutant::CountCheckedBeforeMutex) {
        // Checked again now that the mutex's node keeps the path (and, after it, our lease does): a client of another
        // count is refused.
        let again = Attempt::new(ctx, root, claim, patience);
        // On the mutex's session: once it is over, the mutex is gone, and a check on the next session could make the
        // path again, with a count that nothing would ever take back.
        let checked = match again.reconnected(lease.session).await {
            Ok(()) => peer_count(&again, peer, claim.permits).await,
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
            lease.release_mutex(Instant::now() + CLEANUP_GRACE).await;
            return out;
        }
    }
    // The lease releases the mutex once it holds, before it is confirmed; otherwise the mutex goes here, once the
    // lease's create has its outcome and what it made is cleaned up.
    let outcome = acquire_on(ctx, &leases_path, claim, patience, Some(&mut lease), "").await;
    lease.release_mutex(release_by(lease.deadline)).await;
    outcome
}
