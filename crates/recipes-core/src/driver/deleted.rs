//! Waiting for a deletion outside the line: the exclusive node, a semaphore's window, a reader's or a peer layout's
//! blocker (the wait in line, with its mark and its scout, is `wait`).

use super::attempt::{Attempt, Step, Stop};
use super::session;

use crate::backend::{BackendExt, SessionId};
use crate::error::Error;
use crate::metrics::Count;

impl Attempt<'_> {
    /// Waits for the deletion of `node`: the watch is set before the existence check, so no wake-up is lost.
    pub async fn wait_deleted(&self, node: &str, pinned: SessionId) -> Step<()> {
        self.wait_any_deleted(&[node], pinned, None).await.map(drop)
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
    pub async fn wait_any_deleted<S: AsRef<str>>(
        &self,
        nodes: &[S],
        pinned: SessionId,
        made_before: Option<i64>,
    ) -> Step<bool> {
        let on = self.backend().on(pinned);
        let mut rx = self.backend().session();
        loop {
            let set = futures::future::join_all(nodes.iter().map(|n| self.call(on.watch_deletion(n.as_ref())))).await;
            let mut watches = Vec::with_capacity(set.len());
            let mut failed = None;
            for r in set {
                match r {
                    Ok(None) => return Ok(false),
                    Ok(Some((stat, _))) if made_before.is_some_and(|ours| stat.czxid > ours) => return Ok(true),
                    Ok(Some((_, w))) => watches.push(w),
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            let watched = match failed {
                None => Ok(futures::future::select_all(watches)),
                Some(e) => Err(e),
            };
            match watched {
                Ok(w) => {
                    tokio::select! {
                        biased;
                        (r, _, _) = w => match r {
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
                Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(pinned).await?,
                Err(e) => return Err(e),
            }
        }
    }
}
