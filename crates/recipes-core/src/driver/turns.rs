//! Turns among the tasks of one session on a key named by the session (etcd's own lock: one key per session and
//! path). The tasks take the key in the order they asked for it: each holds the session's turn from before its create
//! until its key is deleted, and a turn passes first in, first out. Without turns, a task that released and acquired
//! again at once made the key again before its session-mate's watch saw the deletion, and held 24 to 168 times in a
//! row while the mate waited (decision 70).
//!
//! Only fairness rests on the turns, never exclusion: the key's creation id still says whose it is, and a task that
//! finds a session-mate's key (one of another `Locks` on the same backend, which has turns of its own) waits for its
//! deletion as before.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::backend::SessionId;

/// A task's turn on one key: the key is its to make until the turn is dropped.
pub(crate) type Turn = tokio::sync::OwnedMutexGuard<()>;

/// One key's turns: tokio's mutex queues its waiters first in, first out.
type Line = tokio::sync::Mutex<()>;

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
        let line = Arc::new(Line::new(()));
        lines.by_key.insert(key, Arc::downgrade(&line));
        line
    }

    /// The turn on `path` for `session` now, or `None` when another task has it.
    pub fn try_take(&self, session: SessionId, path: &str) -> Option<Turn> {
        self.line(session, path).try_lock_owned().ok()
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
        let first = turns.try_take(1, "/p").expect("free");
        assert!(turns.try_take(1, "/p").is_none(), "taken");
        assert!(turns.try_take(2, "/p").is_some(), "another session's line");
        assert!(turns.try_take(1, "/q").is_some(), "another path's line");
        let line = turns.line(1, "/p");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for i in 0..3 {
            let (line, order) = (line.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _turn = line.lock_owned().await;
                order.lock().push(i);
            }));
            tokio::task::yield_now().await;
        }
        drop(first);
        for w in waiting {
            w.await.unwrap();
        }
        assert_eq!(*order.lock(), [0, 1, 2]);
    }

    #[test]
    fn keys_nobody_waits_on_are_forgotten() {
        let turns = Turns::default();
        for i in 0..1000 {
            drop(turns.try_take(1, &format!("/p{i}")));
        }
        assert!(turns.remembered() <= 2 * PRUNE_FROM, "{}", turns.remembered());
    }
}
