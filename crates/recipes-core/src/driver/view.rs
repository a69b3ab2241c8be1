//! One view of a lock path's queue per session (decision 0085): a tree watch on the lock path, shared by the
//! session's waiters in line there, in place of the two one-shot watches each kept (issue 26: about 1 KB of every
//! waiter's heap). A task of the view's own takes its events in order and tells each waiter what happened to the
//! nodes it follows (its own, its blocker, its scout); `in_view` is the wait that uses it, `views` the registry that
//! says which waiters wait through which view.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::backend::{Backend, TreeChange, TreeEvent, TreeWatch};

/// What happened to the nodes a waiter follows, as bits of [`Slot::seen`].
pub(crate) mod seen {
    pub const OWN_DELETED: u8 = 1;
    pub const OWN_CHANGED: u8 = 2;
    pub const BLOCKER_DELETED: u8 = 4;
    pub const BLOCKER_CHANGED: u8 = 8;
    pub const SCOUT_DELETED: u8 = 16;
    pub const SCOUT_CHANGED: u8 = 32;
    /// The view ended (its session's state changed): what it said is no longer the whole story.
    pub const ENDED: u8 = 64;
}

/// Which of a waiter's nodes a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Own,
    Blocker,
    Scout,
}

impl Role {
    /// What the slot is told of a change of this node: nothing of its creation (a registered node was there when the
    /// waiter read it; a late event of its creation would only have it list or read again, found by review,
    /// helper-110).
    fn bit(self, change: TreeChange) -> u8 {
        if change == TreeChange::Created {
            return 0;
        }
        let deleted = change == TreeChange::Deleted;
        match (self, deleted) {
            (Role::Own, true) => seen::OWN_DELETED,
            (Role::Own, false) => seen::OWN_CHANGED,
            (Role::Blocker, true) => seen::BLOCKER_DELETED,
            (Role::Blocker, false) => seen::BLOCKER_CHANGED,
            (Role::Scout, true) => seen::SCOUT_DELETED,
            (Role::Scout, false) => seen::SCOUT_CHANGED,
        }
    }
}

/// One waiter's place in a view: the changes seen of its nodes since it registered, and its task's waker.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    seen: AtomicU8,
    waker: AtomicWaker,
}

impl Slot {
    fn tell(&self, bits: u8) {
        if bits == 0 {
            return;
        }
        self.seen.fetch_or(bits, Ordering::AcqRel);
        self.waker.wake();
    }

    /// What was seen so far (without taking it).
    pub fn now(&self) -> u8 {
        self.seen.load(Ordering::Acquire)
    }

    /// Takes the bits of `mask` seen so far.
    pub fn take(&self, mask: u8) -> u8 {
        self.seen.fetch_and(!mask, Ordering::AcqRel) & mask
    }

    /// Waits until something of `mask` was seen; returns it (not taken). Not an `async fn`: it would keep its
    /// arguments twice in every waiter's state.
    pub fn changed(&self, mask: u8) -> impl std::future::Future<Output = u8> + '_ {
        std::future::poll_fn(move |cx| {
            let now = self.now() & mask;
            if now != 0 {
                return Poll::Ready(now);
            }
            self.waker.register(cx.waker());
            let now = self.now() & mask;
            if now != 0 {
                Poll::Ready(now)
            } else {
                Poll::Pending
            }
        })
    }
}

/// The paths of a waiter's nodes: its own, its blocker, its scout if it has one.
pub(crate) type Paths<'a> = [Option<&'a Arc<str>>; 3];

/// Each path with its role.
trait Each<'a> {
    fn each(&self) -> impl Iterator<Item = (Role, &'a Arc<str>)>;
}

impl<'a> Each<'a> for Paths<'a> {
    fn each(&self) -> impl Iterator<Item = (Role, &'a Arc<str>)> {
        [Role::Own, Role::Blocker, Role::Scout]
            .into_iter()
            .zip(*self)
            .filter_map(|(role, p)| p.map(|p| (role, p)))
    }
}

/// The table of registrations is pruned of dropped slots from this length on, then each time it has doubled since.
const PRUNE_FROM: usize = 64;

/// The slots registered on one path, with the role the path plays for each.
type OnPath = Vec<(Role, Weak<Slot>)>;

/// A view: the waiters registered on each node path, and whether its tree watch has ended.
pub(crate) struct View {
    inner: Mutex<ViewInner>,
    /// The tree watch (`None` once it ended), read by the view's task and drained by a waiter about to decide.
    events: Mutex<Option<TreeWatch>>,
    /// The view's task's waker, which the watch keeps whoever drains it.
    task: Mutex<Option<Waker>>,
    /// Tells the view's task to stop when the view is dropped.
    stop: Arc<Notify>,
}

#[derive(Debug, Default)]
struct ViewInner {
    ended: bool,
    /// The table's length at which the entries of dropped slots are pruned next.
    prune_at: usize,
    on: HashMap<Arc<str>, OnPath>,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.stop.notify_one();
    }
}

impl View {
    /// Whether its tree watch has ended.
    pub fn ended(&self) -> bool {
        self.inner.lock().ended
    }

    /// Registers `slot` on the paths of a waiter's nodes (its own, its blocker, its scout); `false` when the view has
    /// ended (nothing registered). A registration lasts as long as its slot: a waiter that drops its slot is told
    /// nothing more, and its entries go at the next registration on the path, with the node's deletion, or when the
    /// table has doubled since it was last pruned (a path registered after its node's deletion was told has no event
    /// to come: found by review, helper-111). The registration keeps no copy of the paths: every waiter's heap.
    ///
    /// The watch is drained first: the waiter registers the nodes a listing named, and every event that came before
    /// that listing goes to those registered before, not to this slot. Otherwise a late event of a node deleted
    /// before the listing, one whose name was then made again (the lock path deleted and made anew restarts its
    /// sequence numbers), would tell this slot the new node gone (found by review, helper-117).
    pub fn register(&self, slot: &Arc<Slot>, paths: &Paths<'_>) -> bool {
        self.drain();
        let mut inner = self.inner.lock();
        if inner.ended {
            return false;
        }
        if inner.on.len() >= inner.prune_at.max(PRUNE_FROM) {
            inner.on.retain(|_, on| on.iter().any(|(_, s)| s.strong_count() > 0));
            inner.prune_at = 2 * inner.on.len();
        }
        for (role, path) in paths.each() {
            let on = inner
                .on
                .entry(Arc::clone(path))
                .or_insert_with(|| Vec::with_capacity(2));
            on.retain(|(_, s)| s.strong_count() > 0);
            on.push((role, Arc::downgrade(slot)));
        }
        true
    }

    /// Tells the waiters on the event's path, in the order the events come; a deleted node's registrations go with it
    /// (a lock node's name is never made again).
    fn dispatch(&self, e: &TreeEvent) {
        let tell = |on: &OnPath| {
            for (role, slot) in on {
                if let Some(slot) = slot.upgrade() {
                    slot.tell(role.bit(e.change));
                }
            }
        };
        let mut inner = self.inner.lock();
        if e.change == TreeChange::Deleted {
            if let Some(on) = inner.on.remove(e.path.as_str()) {
                tell(&on);
            }
        } else if let Some(on) = inner.on.get(e.path.as_str()) {
            tell(on);
        }
    }

    /// Tells the waiters of every event the watch has received, in order, without waiting (`cx`: whose waker the
    /// watch keeps for the next); `Ready` once the watch has ended.
    fn drain_with(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.drain_locked(&mut self.events.lock(), cx)
    }

    /// `drain_with`, the watch locked by the caller.
    fn drain_locked(&self, events: &mut Option<TreeWatch>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(watch) = events.as_mut() else {
            return Poll::Ready(());
        };
        loop {
            match watch.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(e))) => self.dispatch(&e),
                Poll::Ready(Some(Err(_)) | None) => {
                    *events = None;
                    self.end();
                    return Poll::Ready(());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Tells the waiters of every event the watch has received, now: a waiter about to decide from its slot calls it
    /// first. The view's task may not have run since the events came (found by review, helper-110: a reply that
    /// shows our blocker gone came after the event of our node's deletion, which sat in the watch, and the waiter
    /// held); ZooKeeper hands a session's events over before the replies that follow them, so what a decision's replies
    /// show was told by then.
    ///
    /// The watch keeps the task's waker, so that it still wakes the task for the next: read with the watch locked, as
    /// the task stores it before it takes the watch (found by review, helper-111: read before, a drain between the
    /// task's store and its poll put a waker that wakes nothing in the watch, and the view went silent). And polled
    /// unconstrained: the watch is a `tokio::select!`, which answers `Pending` at once in a task whose budget is spent
    /// (found by review, helper-111: the replies that woke the waiter spent it, the drain passed nothing on, and the
    /// waiter held with its node gone).
    pub fn drain(&self) {
        let mut events = self.events.lock();
        let waker = self.task.lock().clone().unwrap_or_else(futures::task::noop_waker);
        let mut drained = std::pin::pin!(tokio::task::coop::unconstrained(std::future::poll_fn(|cx| {
            Poll::Ready(self.drain_locked(&mut events, cx))
        })));
        let _ = drained.as_mut().poll(&mut Context::from_waker(&waker));
    }

    /// Drops the tree watch now and ends the view (its session's last waiter on the path left, or its task went). The
    /// view itself may outlive this for a moment (its task holds it while it drains), and a watch dropped then, after
    /// the next view on the path was armed, would have the ZooKeeper client remove the server's one persistent watch of
    /// the session on the path, the new view's (found by review, helper-117).
    ///
    /// Ended while the watch is still locked: a waiter deciding (`drain`, then its slot) sees either the events the
    /// watch held or the end, never neither (found by review, helper-118: since a view also ends with its task,
    /// `close` runs while waiters decide, and one that drained between the two steps held with its node gone).
    pub(super) fn close(&self) {
        let mut events = self.events.lock();
        *events = None;
        self.end();
    }

    /// The watch ended: every waiter learns it, and nothing registers any more.
    fn end(&self) {
        let mut inner = self.inner.lock();
        inner.ended = true;
        for (_, slot) in std::mem::take(&mut inner.on).into_values().flatten() {
            if let Some(slot) = slot.upgrade() {
                slot.tell(seen::ENDED);
            }
        }
    }
}

impl View {
    /// A view of the tree watch `events`, its task spawned (on the backend's runtime when it has one).
    pub(super) fn start(events: TreeWatch, backend: &dyn Backend) -> Arc<View> {
        let view = Arc::new(View {
            inner: Mutex::default(),
            events: Mutex::new(Some(events)),
            task: Mutex::default(),
            stop: Arc::new(Notify::new()),
        });
        let task = follow(Arc::downgrade(&view), view.stop.clone());
        match backend.runtime() {
            Some(rt) => drop(rt.spawn(task)),
            None => drop(tokio::spawn(task)),
        }
        view
    }
}

/// Ends the view when its task goes, finished or not. A task is dropped unfinished when its runtime shuts down: the
/// in-memory backend has no runtime of its own, so the task runs on the runtime of the waiter that armed the view, and
/// the session's waiters on other runtimes would wait for events no task passes on (found in the thirty-third session).
/// Ended, the view sends them to list again, and the next of them arms a view whose task runs on its own runtime.
struct EndsWithTask(Weak<View>);

impl Drop for EndsWithTask {
    fn drop(&mut self) {
        if let Some(view) = self.0.upgrade() {
            view.close();
        }
    }
}

/// The view's task: takes the watch's events in order and tells the waiters, until the watch ends (then every
/// waiter learns it) or the view is dropped (then the watch is, with it). The view ends with the task
/// ([`EndsWithTask`]), made before the task's first poll: tokio drops a task unpolled when its runtime goes first, or
/// at once on a runtime already shut down (found by review, helper-118).
fn follow(view: Weak<View>, stop: Arc<Notify>) -> impl Future<Output = ()> + Send + 'static {
    let ends = EndsWithTask(view.clone());
    async move {
        let _ends = ends;
        let run = std::future::poll_fn(|cx| {
            let Some(view) = view.upgrade() else {
                return Poll::Ready(());
            };
            let mut task = view.task.lock();
            if !task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
            drop(task);
            view.drain_with(cx)
        });
        tokio::select! {
            biased;
            () = stop.notified() => {}
            () = run => {}
        }
    }
}

#[cfg(test)]
#[path = "view_tests.rs"]
pub(super) mod tests;
