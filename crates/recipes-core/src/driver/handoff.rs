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
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::backend::SessionId;

/// The waiters on one blocker: a registration id and where to tell it (whether the holder's release marks: see
/// [`Waiting::handed`]).
type Waiters = Vec<(u64, oneshot::Sender<bool>)>;

/// The tasks of this process waiting in line, by session and blocker node.
#[derive(Debug, Default)]
pub(crate) struct Handoffs {
    next: AtomicU64,
    /// By session, then by the blocker's path: the path is shared with the waiter's registration, one allocation per
    /// waiter in line (each waiter keeps its registration for as long as it waits). A blocker has one waiter in line
    /// but for a moment (a cancelled waiter's follower may come to wait on the same node): room for one is made, not
    /// the four a `Vec` grows to first (48 bytes of every waiter's heap).
    waiting: Mutex<HashMap<SessionId, HashMap<Arc<str>, Waiters>>>,
}

impl Handoffs {
    /// Registers a waiter in line on `blocker` (a node path) of `session`; the registration ends when the returned
    /// value is dropped.
    pub fn wait<'a>(&'a self, session: SessionId, blocker: &'a Arc<str>) -> Waiting<'a> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .entry(session)
            .or_default()
            .entry(blocker.clone())
            .or_insert_with(|| Vec::with_capacity(1))
            .push((id, tx));
        Waiting {
            board: self,
            session,
            blocker,
            id,
            handed: rx,
        }
    }

    /// Whether a task waits in line on `node` of `session`.
    pub fn has(&self, session: SessionId, node: &str) -> bool {
        let waiting = self.waiting.lock();
        waiting.get(&session).is_some_and(|w| w.contains_key(node))
    }

    /// Takes every waiter in line on `node` of `session`.
    pub fn take(&self, session: SessionId, node: &str) -> Vec<oneshot::Sender<bool>> {
        let mut waiting = self.waiting.lock();
        let Some(of_session) = waiting.get_mut(&session) else {
            return Vec::new();
        };
        let taken = of_session
            .remove(node)
            .map(|ws| ws.into_iter().map(|(_, tx)| tx).collect())
            .unwrap_or_default();
        if of_session.is_empty() {
            waiting.remove(&session);
        }
        taken
    }
}

/// A waiter's registration: `handed` resolves `Ok` when the blocker's holder released it to us, `Err` when the
/// holder took us but could not hand over (then the watch tells). `Ok(true)` when the holder's release marks its node
/// `first` (a chain of marks runs through it: the waiter passes the mark on, decision 0075).
pub(crate) struct Waiting<'a> {
    board: &'a Handoffs,
    session: SessionId,
    /// Lent by the waiter, which keeps it for as long as it waits.
    blocker: &'a Arc<str>,
    id: u64,
    pub handed: oneshot::Receiver<bool>,
}

impl Waiting<'_> {
    /// Whether a releasing holder took this registration (to hand over, or to say it could not): it is no longer on
    /// the board, and `handed` resolves in the holder's same poll.
    pub fn taken(&self) -> bool {
        let waiting = self.board.waiting.lock();
        !waiting
            .get(&self.session)
            .and_then(|w| w.get(&**self.blocker))
            .is_some_and(|ws| ws.iter().any(|(id, _)| *id == self.id))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut waiting = self.board.waiting.lock();
        let Some(of_session) = waiting.get_mut(&self.session) else {
            return;
        };
        if let Some(ws) = of_session.get_mut(&**self.blocker) {
            ws.retain(|(id, _)| *id != self.id);
            if ws.is_empty() {
                of_session.remove(&**self.blocker);
            }
        }
        if of_session.is_empty() {
            waiting.remove(&self.session);
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
        let a: Arc<str> = Arc::from("/p/a");
        let mut w = h.wait(s, &a);
        let other = h.wait(8, &a);
        assert!(h.take(s, "/p/b").is_empty());
        assert!(!w.taken() && !other.taken());
        let taken = h.take(s, "/p/a");
        assert_eq!(taken.len(), 1);
        assert!(w.taken() && !other.taken(), "only the taken session's waiter");
        assert!(h.take(s, "/p/a").is_empty());
        for tx in taken {
            tx.send(true).unwrap();
        }
        assert_eq!(w.handed.try_recv(), Ok(true));
        drop(w);
        drop(other);
        assert!(h.waiting.lock().is_empty());
    }
}
