//! The lease's confirmation before a guard is handed out: a held node is trusted only while its lease is provably
//! valid.

use std::future::Future;

use futures::future::Either;
use tokio::time::Instant;

use super::attempt::{Attempt, Step, Stop};
use super::HeldNode;
use crate::backend::BackendExt;
use crate::error::Error;
use crate::mutants::{is_active, Mutant};

/// Whether the held node's lease is valid now; `None` when its session is over.
fn valid(held: &HeldNode) -> Option<bool> {
    held.valid_until().map(|until| Instant::now() < until)
}

impl Attempt<'_> {
    /// Makes sure the guard about to be handed out is valid. A claim made on a watch event or a listing may come
    /// long after the session last had evidence from the server: its own requests in flight (a release of another
    /// task of this session, say) hold back the heartbeats' evidence, and a stalled connection delivers old events
    /// late. Then `sync`s on the session make the lease current (or find the session over), so that an acquire never
    /// returns a guard that is not valid. On ZooKeeper an answered `sync` moves the lease only to evidence a quarter
    /// of the timeout older (docs/algorithm.md, "The lease's bound"), so right after an outage a few syncs, an eighth
    /// of the timeout apart, may be needed: it keeps trying while the session lives, within the deadline.
    ///
    /// Not an `async fn`: the lease is almost always valid at once, and only the wait for one (rare: after an outage,
    /// or a stalled connection) is boxed, so that every acquire's future, a waiter's included, keeps no room for it.
    pub(super) fn confirm_lease<'s>(&'s self, held: &'s HeldNode) -> impl Future<Output = Step<()>> + Send + 's {
        let now = if is_active(Mutant::NoLeaseConfirm) {
            Some(Ok(()))
        } else {
            match valid(held) {
                None => Some(Err(Stop::Fail(Error::SessionExpired))),
                Some(true) => Some(Ok(())),
                Some(false) => None,
            }
        };
        match now {
            Some(now) => Either::Left(std::future::ready(now)),
            None => Either::Right(Box::pin(self.lease_confirmed(held))),
        }
    }

    /// The rest of [`confirm_lease`](Self::confirm_lease), when the lease was not valid at once: `sync`s until it is.
    async fn lease_confirmed(&self, held: &HeldNode) -> Step<()> {
        // Bounded: 64 turns an eighth of the timeout apart are eight session timeouts, far past any lease's renewal.
        for _ in 0..64 {
            match valid(held) {
                None => return Err(Stop::Fail(Error::SessionExpired)),
                Some(true) => return Ok(()),
                Some(false) => {}
            }
            let on = self.backend().on(held.session);
            match self.call(on.sync(self.path.as_str())).await {
                Ok(()) => {}
                Err(Stop::Fail(Error::ConnectionLoss)) => {
                    self.reconnected(held.session).await?;
                    continue;
                }
                Err(e) => return Err(e),
            }
            if valid(held) == Some(false) {
                let pause = self.backend().lease().session_timeout / 8;
                self.call(async {
                    tokio::time::sleep(pause).await;
                    Ok(())
                })
                .await?;
            }
        }
        match valid(held) {
            Some(true) => Ok(()),
            // A live session whose syncs never earned a lease: no evidence the lock is ours.
            Some(false) => Err(Stop::Fail(Error::ConnectionLoss)),
            None => Err(Stop::Fail(Error::SessionExpired)),
        }
    }
}
