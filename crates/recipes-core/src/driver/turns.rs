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
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::attempt::{Attempt, Step, Stop};
use super::session;
use crate::backend::{BackendExt, SessionId};
use crate::error::Error;
use crate::Backend;

/// How long a waiter for a turn waits before it watches its holder's key (see [`Attempt::take_turn`]): a key an
/// operator deleted under a lost guard that lives on is found this much later, and a quick handoff costs no request.
const WATCH_HOLDER_AFTER: Duration = Duration::from_secs(1);
/// How long a waiter for a turn pauses before it watches its holder's key again after that watch failed.
const WATCH_RETRY_PAUSE: Duration = Duration::from_millis(50);

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

/// How a wait for a turn ended.
enum Waited {
    /// The turn came.
    Turn(Turn),
    /// The holder's key went while its holder had not begun to release it: no turn to wait for.
    KeyGone,
    /// The session ended: the next session has a line of its own.
    SessionOver,
}

impl Attempt<'_> {
    /// Waits for this task's turn on the key its session names, on the session that is current when the turn comes.
    /// `false`: a try found the turn taken (and its key there), and gives up at once. `true` without a turn: the key
    /// of the turn's holder is gone (see [`Waited::KeyGone`]); the task goes on without one (exclusion never rested on
    /// turns).
    pub(super) async fn take_turn(&mut self) -> Step<bool> {
        loop {
            let sid = self.connected().await?;
            let line = self.ctx.turns.line(sid, self.path.as_str());
            if let Some(turn) = line.try_take() {
                self.keep_turn(turn);
                return Ok(true);
            }
            let key = self.path.child(&self.protocol.prefix(Uuid::nil(), sid));
            if self.try_once {
                return self.holders_key_gone_now(&line, &key, sid).await;
            }
            match self.wait_for_turn(&line, &key, sid).await? {
                Waited::Turn(turn) => {
                    self.keep_turn(turn);
                    return Ok(true);
                }
                Waited::KeyGone => return Ok(true),
                Waited::SessionOver => {}
            }
        }
    }

    /// For a try: whether the key of the turn's holder is gone while its holder has not begun to release it (one read).
    async fn holders_key_gone_now(&self, line: &Line, key: &str, sid: SessionId) -> Step<bool> {
        let Some(czxid) = line.holder() else { return Ok(false) };
        let on = self.backend().on(sid);
        let there = loop {
            match self.call(on.get(key)).await {
                Ok(found) => break found.is_some_and(|(_, stat)| stat.czxid == czxid),
                Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(sid).await?,
                Err(e) => return Err(e),
            }
        };
        Ok(!there && line.holder() == Some(czxid))
    }

    /// Waits in `line` (of session `sid`) for the turn, keeping its place for the whole wait (the wait for the mutex
    /// is never dropped meanwhile). Once the wait is longer than [`WATCH_HOLDER_AFTER`], it also joins the line's one
    /// watch of the holder's key.
    async fn wait_for_turn(&self, line: &Arc<Line>, key: &str, sid: SessionId) -> Step<Waited> {
        let take = line.take();
        tokio::pin!(take);
        let mut status = self.backend().session();
        let watch_from = Instant::now() + WATCH_HOLDER_AFTER;
        loop {
            let held = line.when_held();
            tokio::pin!(held);
            held.as_mut().enable();
            let holder = line.holder();
            let watching = Instant::now() >= watch_from;
            let gone = holder
                .filter(|_| watching)
                .map(|czxid| line.gone(czxid, || holders_key_gone(self.ctx.backend.clone(), sid, key, czxid)));
            // Biased (the session's end, then the deadline, then the turn): one outcome when several are ready, so
            // that a run repeats under a simulation.
            tokio::select! {
                biased;
                () = session::over(&mut status, sid) => return Ok(Waited::SessionOver),
                () = self.deadline_passed() => return Err(Stop::Deadline),
                turn = &mut take => {
                    // A turn of a line whose session ended meanwhile is no turn on the next session's.
                    if session::is_over(self.backend().session_status(), sid) {
                        return Ok(Waited::SessionOver);
                    }
                    return Ok(Waited::Turn(turn));
                }
                () = &mut held, if holder.is_none() => {}
                () = tokio::time::sleep_until(watch_from), if holder.is_some() && !watching => {}
                went = async { gone.clone()?.await.then_some(()) }, if gone.is_some() => match went {
                    Some(()) if line.holder() == holder => return Ok(Waited::KeyGone),
                    // Its holder released it: the turn comes.
                    Some(()) => {}
                    None => {
                        if let Some(g) = &gone {
                            line.forget_gone(g);
                        }
                        session::connected(self.backend(), self.deadline()).await?.ok_or(Stop::Deadline)?;
                        // Not at once: a watch that failed on a live connection would fail again at once.
                        tokio::time::sleep(WATCH_RETRY_PAUSE).await;
                    }
                },
            }
        }
    }
}

/// The line's one watch on the key `key` of its turn's holder, made by the write `czxid` (see [`Gone`]).
fn holders_key_gone(backend: Arc<dyn Backend>, sid: SessionId, key: &str, czxid: i64) -> BoxFuture<'static, bool> {
    let key = key.to_owned();
    Box::pin(async move {
        match backend.watch_deletion(sid, &key).await {
            Ok(Some((stat, watch))) if stat.czxid == czxid => watch.await.is_ok(),
            Ok(_) => true,
            Err(_) => false,
        }
    })
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
