//! Waiting for a deletion outside the line: the exclusive node, a semaphore's window, a reader's or a peer layout's
//! blocker (the wait in line, with its mark and its scout, is `wait`).

use std::future::Future;

use super::attempt::{Attempt, Step, Stop};
use super::session;

use crate::backend::{BackendExt, DeletionWatch, SessionId, Stat};
use crate::error::Error;
use crate::metrics::Count;

impl Attempt<'_> {
    /// Waits for the deletion of `node`: the watch is set before the existence check, so no wake-up is lost.
    ///
    /// Not an `async fn`: one keeps its arguments twice in its state, which an exclusive lock's waiter keeps (and
    /// whose size, the largest of every recipe's waiting states, every acquire's future would take).
    #[allow(clippy::manual_async_fn)] // a plain function on purpose: see above
    pub fn wait_deleted<'s>(&'s self, node: &'s str, pinned: SessionId) -> impl Future<Output = Step<()>> + Send + 's {
        async move {
            let nodes = [node];
            self.wait_any_deleted(&nodes, pinned, None).await.map(drop)
        }
    }

    /// Waits for the deletion of any of `nodes` (a semaphore's window), their watches set in one round trip, each
    /// before its existence check, so no wake-up is lost. Returns at once when one is already gone.
    ///
    /// `made_before`: the czxid of our own node, where names are made again (the etcd layout's are the sessions').
    /// A node found under a blocker's name but made after ours is then another node of the name, made after the one
    /// we saw ahead was deleted: that one is gone (found on etcd, where Go's `concurrency.Mutex` deletes and makes
    /// again one key per session: waiting for the new key, which waits for ours, never ended). Returns `true` when it
    /// returned so: a stale name, which may be our own's too (the caller checks that its node is still its own). Not
    /// for names never made again: a Curator 5.5 downgraded reader is made after the writers queued behind it, yet
    /// sorts ahead of them (found by review: a waiting writer listed in a loop while such a reader held).
    ///
    /// Not an `async fn`, and what the replies say is taken apart before the wait: an exclusive lock's waiter keeps
    /// this future, whose size (the largest of every recipe's waiting states until the twenty-seventh session) every
    /// acquire's future takes.
    #[allow(clippy::manual_async_fn)] // a plain function on purpose: see above
    pub fn wait_any_deleted<'s, S: AsRef<str> + Sync>(
        &'s self,
        nodes: &'s [S],
        pinned: SessionId,
        made_before: Option<i64>,
    ) -> impl Future<Output = Step<bool>> + Send + 's {
        async move {
            let on = self.backend().on(pinned);
            let mut rx = self.backend().session();
            loop {
                let set = futures::future::join_all(nodes.iter().map(|n| self.call(on.watch_deletion(n.as_ref()))));
                let watches = match armed(set.await, made_before) {
                    Armed::Gone(stale) => return Ok(stale),
                    Armed::Watching(watches) => futures::future::select_all(watches),
                    Armed::Failed(Stop::Fail(Error::ConnectionLoss)) => {
                        self.reconnected(pinned).await?;
                        continue;
                    }
                    Armed::Failed(e) => return Err(e),
                };
                tokio::select! {
                    biased;
                    (r, _, _) = watches => match r {
                        Ok(()) => {
                            self.count(Count::Wakeup);
                            return Ok(false);
                        }
                        Err(Error::ConnectionLoss) => {}
                        Err(e) => return Err(e.into()),
                    },
                    () = session::over(&mut rx, pinned) => return Err(Stop::Fail(Error::SessionExpired)),
                    () = self.deadline_passed() => return Err(Stop::Deadline),
                }
            }
        }
    }
}

/// What the replies of a wait's watches say (see `wait_any_deleted`).
enum Armed {
    /// A node is gone already; `true`: a stale name (made after ours).
    Gone(bool),
    /// Every node is there, and watched.
    Watching(Vec<DeletionWatch>),
    /// A request failed (the first failure).
    Failed(Stop),
}

/// Takes the replies of a wait's watches apart, in a plain function: kept in the wait's scope, they would take room in
/// its state.
fn armed(set: Vec<Step<Option<(Stat, DeletionWatch)>>>, made_before: Option<i64>) -> Armed {
    let mut watches = Vec::with_capacity(set.len());
    let mut failed = None;
    for r in set {
        match r {
            Ok(None) => return Armed::Gone(false),
            Ok(Some((stat, _))) if made_before.is_some_and(|ours| stat.czxid > ours) => return Armed::Gone(true),
            Ok(Some((_, w))) => watches.push(w),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    match failed {
        None => Armed::Watching(watches),
        Some(e) => Armed::Failed(e),
    }
}
