//! Same-session handoff: a release hands the lock to the tasks of this process that wait in line on the released
//! node on the same session, as soon as the delete is sent, instead of their waiting for its watch event
//! (docs/algorithm.md, "Optimisation 7").
//!
//! A waiter in line claims the lock when its blocker is deleted and nothing was ahead of the blocker. A releasing
//! holder of the native queue that held as the first contender (fair, reentrant, write) knows both: nothing is ahead
//! of it, and its delete is on its way. Every other session still sees one of this session's nodes ahead of its own
//! until that delete commits, and the new holder's node is then first; if the session ends meanwhile, both nodes go
//! with it and the new holder's `lost()` says so.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::backend::SessionId;

type Key = (SessionId, String);
/// The waiters on one blocker: a registration id and where to tell it.
type Waiters = Vec<(u64, oneshot::Sender<()>)>;

/// The tasks of this process waiting in line, by session and blocker node.
#[derive(Debug, Default)]
pub(crate) struct Handoffs {
    next: AtomicU64,
    waiting: Mutex<HashMap<Key, Waiters>>,
}

impl Handoffs {
    /// Registers a waiter in line on `blocker` (a node path) of `session`; the registration ends when the returned
    /// value is dropped.
    pub fn wait(&self, session: SessionId, blocker: &str) -> Waiting<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let key = (session, blocker.to_owned());
        self.waiting.lock().entry(key.clone()).or_default().push((id, tx));
        Waiting {
            board: self,
            key,
            id,
            handed: rx,
        }
    }

    /// Whether a task waits in line on `node` of `session`.
    pub fn has(&self, session: SessionId, node: &str) -> bool {
        let waiting = self.waiting.lock();
        !waiting.is_empty() && waiting.contains_key(&(session, node.to_owned()))
    }

    /// Takes every waiter in line on `node` of `session`.
    pub fn take(&self, session: SessionId, node: &str) -> Vec<oneshot::Sender<()>> {
        let mut waiting = self.waiting.lock();
        if waiting.is_empty() {
            return Vec::new();
        }
        waiting
            .remove(&(session, node.to_owned()))
            .map(|ws| ws.into_iter().map(|(_, tx)| tx).collect())
            .unwrap_or_default()
    }
}

/// A waiter's registration: `handed` resolves `Ok` when the blocker's holder released it to us, `Err` when the
/// holder took us but could not hand over (then the watch tells).
pub(crate) struct Waiting<'a> {
    board: &'a Handoffs,
    key: Key,
    id: u64,
    pub handed: oneshot::Receiver<()>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut waiting = self.board.waiting.lock();
        if let Some(ws) = waiting.get_mut(&self.key) {
            ws.retain(|(id, _)| *id != self.id);
            if ws.is_empty() {
                waiting.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_is_handed_over_once_and_leaves_no_entry() {
        let h = Handoffs::default();
        let s: SessionId = 7;
        let mut w = h.wait(s, "/p/a");
        let other = h.wait(8, "/p/a");
        assert!(h.take(s, "/p/b").is_empty());
        let taken = h.take(s, "/p/a");
        assert_eq!(taken.len(), 1);
        assert!(h.take(s, "/p/a").is_empty());
        for tx in taken {
            tx.send(()).unwrap();
        }
        assert!(w.handed.try_recv().is_ok());
        drop(w);
        drop(other);
        assert!(h.waiting.lock().is_empty());
    }
}
