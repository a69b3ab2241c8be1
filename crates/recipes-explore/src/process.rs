//! What the application's code gets: one simulated process, its `Locks`, its store client, and the handles that let
//! the oracles see its holds.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use recipes_core::Locks;
use recipes_mem::{MemClient, MemCluster};
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

use crate::store::Store;
use crate::tracked::{Holds, Sharing, Tracked, TrackedEntry, Tracker};

/// Counts what the simulated processes do, so that the explorer knows when the world has settled, and writes their
/// notes into the trace.
///
/// Every [`Process`] has one ([`Process::activity`]); a check's shared state can keep one too
/// ([`Schedule::activity`]). A task that changes what an oracle sees without sending a request (sets a flag in the
/// shared state, say) should [`touch`](Activity::touch) it, or the explorer may choose its next event first.
#[derive(Clone)]
pub struct Activity {
    inner: Arc<ActivityInner>,
}

struct ActivityInner {
    count: AtomicU64,
    /// Polls of the processes' tasks: a task still running its reaction (it yields between steps), for the settling
    /// only (a timer's wake-up that does nothing must not end a tick).
    polls: AtomicU64,
    notify: Arc<Notify>,
    /// The notes of a traced run, collected into the trace after each step.
    notes: Option<Mutex<Vec<String>>>,
}

impl Activity {
    pub(crate) fn new(notify: Arc<Notify>, traced: bool) -> Self {
        Activity {
            inner: Arc::new(ActivityInner {
                count: AtomicU64::new(0),
                polls: AtomicU64::new(0),
                notify,
                notes: traced.then(|| Mutex::new(Vec::new())),
            }),
        }
    }

    /// Something changed.
    pub fn touch(&self) {
        self.inner.count.fetch_add(1, Ordering::Relaxed);
        self.inner.notify.notify_one();
    }

    /// Something changed, and `line` says what (written into the trace of a replayed failure; formatted only then).
    pub fn note(&self, line: impl FnOnce() -> String) {
        if let Some(notes) = &self.inner.notes {
            notes.lock().push(line());
        }
        self.touch();
    }

    pub(crate) fn count(&self) -> u64 {
        self.inner.count.load(Ordering::Relaxed)
    }

    pub(crate) fn polls(&self) -> u64 {
        self.inner.polls.load(Ordering::Relaxed)
    }

    pub(crate) fn take_notes(&self) -> Vec<String> {
        self.inner
            .notes
            .as_ref()
            .map(|n| std::mem::take(&mut *n.lock()))
            .unwrap_or_default()
    }
}

impl fmt::Debug for Activity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Activity").field("count", &self.count()).finish()
    }
}

/// One schedule's world, as the shared state's constructor ([`Explorer::state`](crate::Explorer::state)) sees it.
pub struct Schedule<'a> {
    pub(crate) cluster: &'a MemCluster,
    pub(crate) activity: &'a Activity,
}

impl Schedule<'_> {
    /// The schedule's cluster.
    pub fn cluster(&self) -> &MemCluster {
        self.cluster
    }

    /// The schedule's activity counter (see [`Activity`]).
    pub fn activity(&self) -> Activity {
        self.activity.clone()
    }
}

pub(crate) struct ProcessInner {
    pub id: usize,
    pub locks: Locks,
    pub client: Arc<MemClient>,
    pub cluster: MemCluster,
    pub store: Store,
    pub activity: Activity,
    pub tracker: Arc<Mutex<Tracker>>,
    /// Tasks spawned with [`Process::spawn`]: aborted when the process crashes.
    pub tasks: Mutex<Vec<AbortHandle>>,
    /// Set when the process crashes: nothing of it runs after.
    pub crashed: Arc<AtomicBool>,
    pub session_timeout: Duration,
}

/// One simulated process: a session of its own on the schedule's cluster, with the application's code running on
/// it. Cheap to clone; every clone is the same process.
///
/// `S` is the schedule's shared state ([`Explorer::state`](crate::Explorer::state)), `()` by default.
pub struct Process<S = ()> {
    pub(crate) inner: Arc<ProcessInner>,
    pub(crate) state: S,
}

impl<S: Clone> Clone for Process<S> {
    fn clone(&self) -> Self {
        Process {
            inner: self.inner.clone(),
            state: self.state.clone(),
        }
    }
}

impl<S> fmt::Debug for Process<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Process").field("id", &self.inner.id).finish()
    }
}

impl<S> Process<S> {
    /// Which process this is: 0, 1, … in the order the explorer made them.
    pub fn id(&self) -> usize {
        self.inner.id
    }

    /// The process's `Locks`, on its own session (built as [`Explorer::locks`](crate::Explorer::locks) says).
    pub fn locks(&self) -> &Locks {
        &self.inner.locks
    }

    /// The process's session on the in-memory cluster.
    pub fn client(&self) -> &Arc<MemClient> {
        &self.inner.client
    }

    /// The schedule's cluster (to read the tree; the explorer injects the faults). A process that branches on what
    /// it reads here directly, rather than through its session's requests, may have orders the exhaustive search
    /// never runs.
    pub fn cluster(&self) -> &MemCluster {
        &self.inner.cluster
    }

    /// The process's client of the simulated data store (see [`Store`]).
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The session timeout of every process of the schedule.
    pub fn session_timeout(&self) -> Duration {
        self.inner.session_timeout
    }

    /// The schedule's shared state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The process's activity counter (see [`Activity`]).
    pub fn activity(&self) -> &Activity {
        &self.inner.activity
    }

    /// Writes a line into the trace of a failing schedule, as `process N: line`.
    pub fn note(&self, line: impl fmt::Display) {
        let id = self.inner.id;
        self.inner.activity.note(|| format!("process {id}: {line}"));
    }

    /// Hands `guard` to the oracles as an exclusive hold: no other valid guard may hold its lock beside it, and the
    /// process's writes to the [`Store`] are ordered by its fencing token.
    pub fn track<G: Holds>(&self, guard: G) -> Tracked<G> {
        self.track_as(guard, Sharing::Exclusive)
    }

    /// Hands `guard` to the oracles as a shared hold (a read lock, a semaphore's permit): others may share its lock,
    /// but no exclusive hold may be valid beside it.
    pub fn track_shared<G: Holds>(&self, guard: G) -> Tracked<G> {
        self.track_as(guard, Sharing::Shared)
    }

    fn track_as<G: Holds>(&self, guard: G, sharing: Sharing) -> Tracked<G> {
        let id = self.inner.id;
        self.inner.activity.note(|| {
            let mut views = Vec::new();
            guard.views(&mut views);
            let holds: Vec<String> = views
                .iter()
                .map(|h| {
                    format!(
                        "{} (token {:#x}{})",
                        h.node,
                        h.token,
                        if h.valid { "" } else { ", not valid" }
                    )
                })
                .collect();
            format!("process {id}: holds {}", holds.join(", "))
        });
        let guard = Arc::new(guard);
        let weak: Weak<dyn Holds> = Arc::downgrade(&guard) as Weak<dyn Holds>;
        self.inner.tracker.lock().guards.push(TrackedEntry {
            process: self.inner.id,
            sharing,
            guard: weak,
        });
        Tracked::new(guard)
    }

    /// Runs `step`, which must end within `limit` of virtual time: the oracle of deadlines
    /// ([`Builtin::Deadlines`](crate::Builtin::Deadlines)) reports it if it runs past. Leave room for the faults (a
    /// delay lets time run with requests in flight) and the library's cleanup (an `acquire_timeout` may take up to
    /// 500 ms past its deadline to delete what it made).
    pub async fn within<F: Future>(&self, limit: Duration, what: impl fmt::Display, step: F) -> F::Output {
        let id = {
            let mut t = self.inner.tracker.lock();
            t.next_deadline += 1;
            let id = t.next_deadline;
            t.deadlines
                .push((self.inner.id, what.to_string(), Instant::now() + limit, id));
            id
        };
        struct Done<'a>(&'a Mutex<Tracker>, u64);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                let mut t = self.0.lock();
                let now = Instant::now();
                // A step that overran and ended within one tick is reported too.
                if let Some(i) = t.deadlines.iter().position(|d| d.3 == self.1) {
                    let (p, what, due, _) = t.deadlines.remove(i);
                    if now > due {
                        t.overruns.push((p, what, now.duration_since(due)));
                    }
                }
            }
        }
        let _done = Done(&self.inner.tracker, id);
        step.await
    }

    /// Spawns a task of this process: it runs under the explorer like the process's own code, and is aborted when
    /// the process crashes.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = tokio::spawn(Counted::new(Box::pin(task), self.inner.activity.clone()));
        let mut tasks = self.inner.tasks.lock();
        if self.inner.crashed.load(Ordering::SeqCst) {
            // Spawned by a crashed process's drop: it never runs.
            handle.abort();
        }
        tasks.push(handle.abort_handle());
        drop(tasks);
        self.inner.activity.touch();
        handle
    }
}

/// A process's task, whose polls are counted: a task that runs several polls in a row (yields between steps) is not
/// taken to have settled before its next request.
pub(crate) struct Counted<F> {
    inner: Pin<Box<F>>,
    activity: Activity,
}

impl<F> Counted<F> {
    pub(crate) fn new(inner: Pin<Box<F>>, activity: Activity) -> Self {
        Counted { inner, activity }
    }
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.activity.inner.polls.fetch_add(1, Ordering::Relaxed);
        self.inner.as_mut().poll(cx)
    }
}
