//! How long an acquire may wait.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;

/// How long an acquire may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patience {
    /// Never queue: give up as soon as someone else holds the lock (listing the path first, so that a busy lock
    /// costs no write).
    TryOnce,
    /// As `TryOnce`, but make the node at once, without listing the path first: a multi-lock's first, all-at-once
    /// tries, so that a free set costs one round trip (a busy member's node is deleted again at once).
    TryEagerly,
    /// Wait until this instant.
    Until(Instant),
    /// Wait as long as it takes.
    Forever,
}

impl Patience {
    /// Whether the acquire never queues.
    pub fn tries_once(self) -> bool {
        matches!(self, Patience::TryOnce | Patience::TryEagerly)
    }

    /// The instant it gives up waiting at, if any.
    pub fn deadline(self) -> Option<Instant> {
        match self {
            Patience::Until(d) => Some(d),
            _ => None,
        }
    }

    /// A timeout as patience: zero never queues; a timeout too long to express as an instant (`Duration::MAX`) is no
    /// deadline at all.
    pub fn from_timeout(timeout: Duration) -> Self {
        if timeout.is_zero() {
            Patience::TryOnce
        } else {
            Instant::now()
                .checked_add(timeout)
                .map_or(Patience::Forever, Patience::Until)
        }
    }
}

/// The outcome of an acquire made with [`Patience::Forever`]: the driver gives up (`None`) only when its deadline
/// passes or a try finds the lock busy, and a forever-acquire has neither, so it ends holding or with an error. The
/// one place every recipe's `acquire()` turns the driver's `Option` into its guard.
pub(crate) fn forever<T>(acquire: impl Future<Output = Result<Option<T>>>) -> impl Future<Output = Result<T>> {
    // Not an `async fn`: one would keep the acquire future twice, as its argument and as its local (the waiting
    // state of every acquire would double).
    futures::FutureExt::map(acquire, |outcome| match outcome? {
        Some(held) => Ok(held),
        None => unreachable!("an acquire without deadline gives up only with an error"),
    })
}
