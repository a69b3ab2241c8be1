//! The registry of the views of the queue (decision 0085): by session and lock path, the waiters in line there, the
//! session's last listing's length, and their view once one is armed; which waiters wait through it (`VIEW_FROM`,
//! `VIEW_SHARE`, `may_root_a_view`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use super::view::View;
use crate::backend::{Backend, ChildOrder, SessionId};
use crate::error::Error;
use crate::layout::Family;
use crate::mutants::{is_active, Mutant};

/// How many waiters of one session must be in line on a path (this one included) for it to wait through the session's
/// view (decision 0085): where the memory of their watches counts. With fewer, the one-shot watches are the quicker
/// (an event reaches a waiter without passing through the view's task): tasks sharing a session handed the lock on
/// 13 – 25% less often through a view at 8 to 64 tasks. From 128 on a waiter's listing is most often long (a scout
/// only comes of one of at most `MARK_FROM_QUEUE_LEN`) and marks pass along the drain.
const VIEW_FROM: usize = 128;

/// A session's waiters in line on a path wait through a view only while they are at least one in `VIEW_SHARE` of the
/// queue as the session last listed it (`Views::listed`: kept once per session and path, as every waiter's state is
/// at the size of its tokio cell). A tree watch reports every change of the queue, so each view costs an event
/// per change, whoever's node it is: with views armed by every session of 128 waiters, a queue of N waiters spread
/// over N / 128 sessions cost N / 128 events per change, a drain quadratic in the queue (found in the thirty-second
/// session, release binaries side by side: 12,000 waiters of 93 sessions drained in 1,377 ms, against 92.6 with this
/// rule; 3,000 of 8 sessions, the smoke run's, in 102.6 against 15.3; docs/performance.md). A session that arms a
/// view holds a quarter of the queue then, so few views are armed on one path at once, and a process whose tasks are
/// most of the queue (where the memory counts) keeps its view.
const VIEW_SHARE: usize = 4;

/// The views of this process's sessions, by session and lock path, with the number of waiters in line on each.
#[derive(Debug, Default)]
pub(crate) struct Views {
    by_key: Mutex<HashMap<Key, Arc<Entry>>>,
    /// The backend refused a tree watch: no view of this `Locks` is armed any more.
    unsupported: std::sync::atomic::AtomicBool,
}

/// A session and a lock path.
type Key = (SessionId, Arc<str>);

/// One session's waiters in line on one lock path, and their view.
#[derive(Debug)]
pub(crate) struct Entry {
    key: Key,
    /// Waiters in line now (changed under the registry's lock).
    in_line: std::sync::atomic::AtomicUsize,
    /// How many children the session's last listing of the path held (see [`Views::listed`]).
    listed: std::sync::atomic::AtomicUsize,
    view: Mutex<Option<Arc<View>>>,
    /// Held by the waiter that arms a view, so that the others wait for it instead of arming their own.
    arming: tokio::sync::Mutex<()>,
}

/// A waiter counted among those in line on a path (see [`Views::in_line`]); uncounted when dropped. Small: every
/// waiter keeps one in its state.
pub(crate) struct Counted<'a> {
    views: &'a Views,
    entry: Arc<Entry>,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        let mut by_key = self.views.by_key.lock();
        if self.entry.in_line.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last waiter goes: so does the view, its watch dropped before the next waiter can arm another.
            by_key.remove(&self.entry.key);
            if let Some(view) = self.entry.view.lock().take() {
                view.close();
            }
        }
    }
}

impl Views {
    /// Counts a waiter of `session` in line on the lock path `path`: its count, and how many are in line now, this
    /// one included.
    pub(crate) fn in_line(&self, session: SessionId, path: &Arc<str>) -> (Counted<'_>, usize) {
        let mut by_key = self.by_key.lock();
        let entry = by_key
            .entry((session, Arc::clone(path)))
            .or_insert_with_key(|key| {
                Arc::new(Entry {
                    key: key.clone(),
                    in_line: Default::default(),
                    listed: Default::default(),
                    view: Mutex::default(),
                    arming: Default::default(),
                })
            })
            .clone();
        let count = entry.in_line.fetch_add(1, Ordering::AcqRel) + 1;
        drop(by_key);
        (Counted { views: self, entry }, count)
    }

    /// Notes how many children a listing of `path` on `session` held, where the session has waiters in line there:
    /// whether they are enough of the queue for a view (`VIEW_SHARE`). Once per session and path, not in each
    /// waiter's state; and only for a listing of `VIEW_FROM` children or more (a shorter one cannot hold that many
    /// waiters of one session), so that an uncontended acquire, or a short queue's, takes no lock here.
    pub(crate) fn listed(&self, session: SessionId, path: &Arc<str>, children: usize) {
        if children < VIEW_FROM && !is_active(Mutant::ViewsFromTwo) {
            return;
        }
        if let Some(entry) = self.by_key.lock().get(&(session, Arc::clone(path))) {
            entry.listed.store(children, Ordering::Relaxed);
        }
    }
}

impl Counted<'_> {
    /// Whether this waiter, one of `count` of its session in line on the path, waits through the session's view: from
    /// `VIEW_FROM` waiters on, while they are a quarter of the session's last listing at least (`VIEW_SHARE`).
    pub(crate) fn serves(&self, count: usize) -> bool {
        (count >= VIEW_FROM || is_active(Mutant::ViewsFromTwo) && count >= 2)
            && count * VIEW_SHARE >= self.entry.listed.load(Ordering::Relaxed)
            && !is_active(Mutant::NoViews)
    }

    /// The view of this waiter's session on its path, armed now if there is none (or the last one ended). `None`
    /// when the backend has no tree watches, or refused one to this `Locks` before.
    pub(crate) async fn view(&self, backend: &Arc<dyn Backend>) -> crate::Result<Option<Arc<View>>> {
        let Some(trees) = backend
            .tree_watches()
            .filter(|_| !self.views.unsupported.load(Ordering::Relaxed))
            .filter(|_| may_root_a_view(&self.entry.key.1, backend.child_order()))
        else {
            return Ok(None);
        };
        let current = || self.entry.view.lock().clone().filter(|v| !v.ended());
        if let Some(v) = current() {
            return Ok(Some(v));
        }
        let _arming = self.entry.arming.lock().await;
        if let Some(v) = current() {
            return Ok(Some(v));
        }
        let (session, path) = &self.entry.key;
        let events = match trees.watch_tree(*session, path).await {
            Ok(events) => events,
            Err(e @ (Error::ConnectionLoss | Error::SessionExpired | Error::Closed)) => return Err(e),
            // A server without tree watches (ZooKeeper before 3.6 answers `addWatch` as unknown, found by review,
            // helper-111): the waiters of this `Locks` keep their one-shot watches from now on. Any other refusal turns
            // the views off too (helper-112): it costs memory, never safety, and is said once.
            Err(e) => {
                tracing::warn!(error = %e, "a tree watch was refused: waiters in line keep one-shot watches");
                self.views.unsupported.store(true, Ordering::Relaxed);
                return Ok(None);
            }
        };
        let view = View::start(events, &**backend);
        if view.ended() {
            // Its task went at once (spawned on a runtime already shut down): this wait keeps one-shot watches, rather
            // than arm and end a view in a loop (helper-118).
            return Ok(None);
        }
        *self.entry.view.lock() = Some(view.clone());
        Ok(Some(view))
    }
}

/// Whether a view may be rooted at the lock path `path`: not where its name is a lock node's, of any family. A waiter
/// of a lock path one level up takes such a child for a lock node and waits on it with a one-shot watch (the exclusive
/// recipe's waiter at `/jobs` on `/jobs/lock`), and a session's one-shot watch on the root of its tree watch silences
/// that tree watch on ZooKeeper (ZOOKEEPER-4466): on 3.8 the view's waiters would be told of deletions only, missing
/// the marks and listing again, and on a server that kept one table of watches, told nothing more, waiting for ever
/// (found by review, helper-113, where the in-memory backend then silenced every event). Such a path's waiters keep
/// their one-shot watches. Every one-shot watch this library arms is on a node of a family (the peer semaphores watch
/// only their leases), so no other lock path can be the root it silences; a watch armed on a lock path by the
/// application itself, on the session of its `Locks`, can (see `TreeWatches`).
fn may_root_a_view(path: &str, order: ChildOrder) -> bool {
    let name = path.rsplit_once('/').map_or(path, |(_, name)| name);
    Family::of_in(name, order).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::view::tests::view_of;

    /// The last waiter of a session on a path drops the view's watch at once, even while the view itself is still held
    /// (its task draining it): a watch dropped later, after the next view on the path was armed, would have the
    /// ZooKeeper client remove the server's one persistent watch of the session there (found by review, helper-117).
    #[test]
    fn the_last_waiter_drops_the_views_watch() {
        let views = Views::default();
        let path: Arc<str> = Arc::from("/l");
        let (counted, count) = views.in_line(7, &path);
        assert_eq!(count, 1);
        let (_tx, rx) = futures::channel::mpsc::unbounded();
        let held = view_of(Box::pin(rx));
        *counted.entry.view.lock() = Some(held.clone());
        drop(counted);
        assert!(held.ended(), "the watch of a view no waiter is counted for");
    }
}
