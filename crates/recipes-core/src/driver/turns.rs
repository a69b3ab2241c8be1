//! Turns among the tasks of one session on a key named by the session (etcd's own lock: one key per session and
//! path). The tasks take the key in the order they asked for it: each holds the session's turn from before its create
//! until its key is deleted, and a turn passes first in, first out. Without turns, a task that released and acquired
//! again at once made the key again before its session-mate's watch saw the deletion, and held 24 to 168 times in a
//! row while the mate waited (decision 70).
//!
//! Only fairness rests on the turns, never exclusion: the key's creation id still says whose it is, and a task that
//! finds a session-mate's key (one of another `Locks` on the same backend, which has turns of its own) waits for its
//! deletion as before. Nor may a turn outlive its key: a holder whose key an operator deleted keeps its turn until its
//! guard goes, so a waiter also watches the holder's key, and stops waiting for the turn once that key is gone (found
//! by review, helper-50: a task that acquired again while its lost guard lived waited forever).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use futures::future::{BoxFuture, FutureExt, Shared};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::backend::SessionId;

/// A task's turn on one key: the key is its to make until the turn is dropped. Dropping it forgets the key it held.
#[derive(Debug)]
pub(crate) struct Turn {
    line: Arc<Line>,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Turn {
    /// The turn's key is held, made by the write `czxid`: waiters watch it from now on.
    pub fn holds(&self, czxid: i64) {
        *self.line.holder.lock() = Some(czxid);
        self.line.held.notify_waiters();
    }

    /// The key is about to be deleted by its holder (a release): waiters that see it go wait for the turn, which
    /// comes once the delete has an outcome. Called before the delete is sent.
    pub fn releasing(&self) {
        *self.line.holder.lock() = None;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        // Before the mutex passes on (the guard is dropped after this).
        *self.line.holder.lock() = None;
        *self.line.gone.lock() = None;
    }
}

/// The one watch of a line's waiters on its holder's key: `true` once the key is gone (or another write's), `false`
/// when the watch could not be kept (a connection loss, the session's end: ask again).
pub(crate) type Gone = Shared<BoxFuture<'static, bool>>;

/// One key's turns: tokio's mutex queues its waiters first in, first out.
#[derive(Debug, Default)]
pub(crate) struct Line {
    turn: Arc<tokio::sync::Mutex<()>>,
    /// The creation id of the key the turn's holder holds, once it holds.
    holder: Mutex<Option<i64>>,
    /// Told when the turn's holder comes to hold.
    held: Notify,
    /// The waiters' one watch on the holder's key, with that key's creation id (found by review, helper-51: a watch
    /// per waiter cost a request per waiter and handoff, a drain of N tasks N² requests).
    gone: Mutex<Option<(i64, Gone)>>,
}

impl Line {
    /// The turn, now, or `None` when another task has it.
    pub fn try_take(self: &Arc<Self>) -> Option<Turn> {
        let guard = self.turn.clone().try_lock_owned().ok()?;
        Some(Turn {
            line: self.clone(),
            _guard: guard,
        })
    }

    /// The turn, when it comes.
    pub async fn take(self: &Arc<Self>) -> Turn {
        let guard = self.turn.clone().lock_owned().await;
        Turn {
            line: self.clone(),
            _guard: guard,
        }
    }

    /// The creation id of the key the turn's holder holds; `None` when nobody holds one (yet, or any more: it is
    /// being released).
    pub fn holder(&self) -> Option<i64> {
        *self.holder.lock()
    }

    /// The watch on the holder's key made by `czxid`, shared by every waiter: made by `watch` for the first.
    pub fn gone(&self, czxid: i64, watch: impl FnOnce() -> BoxFuture<'static, bool>) -> Gone {
        let mut gone = self.gone.lock();
        match &*gone {
            Some((c, g)) if *c == czxid => g.clone(),
            _ => {
                let g = watch().shared();
                *gone = Some((czxid, g.clone()));
                g
            }
        }
    }

    /// Forgets the watch `failed` (it could not be kept), so that the next waiter that asks makes another.
    pub fn forget_gone(&self, failed: &Gone) {
        let mut gone = self.gone.lock();
        if gone.as_ref().is_some_and(|(_, g)| g.ptr_eq(failed)) {
            *gone = None;
        }
    }

    /// Resolves when the turn's holder comes to hold; enable it before reading [`holder`](Self::holder), so that no
    /// change is missed.
    pub fn when_held(&self) -> tokio::sync::futures::Notified<'_> {
        self.held.notified()
    }
}

/// The turns of this process's tasks, by session and lock path.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    lines: Mutex<Lines>,
}

#[derive(Debug, Default)]
struct Lines {
    by_key: HashMap<(SessionId, Arc<str>), Weak<Line>>,
    /// The length at which the keys nobody waits on are pruned next (doubling: O(1) amortised per key).
    prune_at: usize,
}

/// Below this many keys, none is pruned.
const PRUNE_FROM: usize = 16;

impl Turns {
    /// The line of turns on `path` for `session`, made when nobody is in it.
    pub fn line(&self, session: SessionId, path: &str) -> Arc<Line> {
        let mut lines = self.lines.lock();
        let key = (session, Arc::<str>::from(path));
        if let Some(line) = lines.by_key.get(&key).and_then(Weak::upgrade) {
            return line;
        }
        if lines.by_key.len() >= lines.prune_at.max(PRUNE_FROM) {
            lines.by_key.retain(|_, w| w.strong_count() > 0);
            lines.prune_at = 2 * lines.by_key.len();
        }
        let line = Arc::new(Line::default());
        lines.by_key.insert(key, Arc::downgrade(&line));
        line
    }

    /// How many keys are remembered (for tests).
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.lines.lock().by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_pass_in_the_order_they_were_asked_for() {
        let turns = Turns::default();
        let first = turns.line(1, "/p").try_take().expect("free");
        assert!(turns.line(1, "/p").try_take().is_none(), "taken");
        assert!(turns.line(2, "/p").try_take().is_some(), "another session's line");
        assert!(turns.line(1, "/q").try_take().is_some(), "another path's line");
        let line = turns.line(1, "/p");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for i in 0..3 {
            let (line, order) = (line.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _turn = line.take().await;
                order.lock().push(i);
            }));
            tokio::task::yield_now().await;
        }
        first.holds(7);
        assert_eq!(line.holder(), Some(7));
        drop(first);
        for w in waiting {
            w.await.unwrap();
        }
        assert_eq!(*order.lock(), [0, 1, 2]);
        assert_eq!(line.holder(), None, "a turn passed on forgets its key");
    }

    #[test]
    fn keys_nobody_waits_on_are_forgotten() {
        let turns = Turns::default();
        for i in 0..1000 {
            drop(turns.line(1, &format!("/p{i}")).try_take());
        }
        assert!(turns.remembered() <= 2 * PRUNE_FROM, "{}", turns.remembered());
    }
}
