//! One schedule: a fresh world, run to its end under the chooser's choices.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use parking_lot::Mutex;
use recipes_core::backend::{BackendExt, CreateMode, SessionId, SessionState};
use recipes_core::{Backend, Locks};
use recipes_mem::{Access, Controller, MemClient, MemCluster, NetEvent};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::chooser::Chooser;
use crate::explorer::{Explorer, ProgramFn};
use crate::oracles;
use crate::process::{Activity, Counted, Process, ProcessInner, Schedule, Tracker};
use crate::store::Store;
use crate::{Builtin, Fault, Step};

/// Yields without any change before the world counts as settled.
const SETTLED_AFTER: u32 = 2;

pub(crate) struct Outcome {
    pub trace: Vec<String>,
    pub violation: Option<String>,
    /// Events chosen (the schedule's length).
    pub events: usize,
}

/// Runs one schedule on a fresh current-thread runtime with a paused clock. Its trace is written only when `traced`:
/// formatting every event costs more than a fifth of an untraced run, and a failure's schedule is replayed with its
/// trace.
pub(crate) fn run<S: Clone + Send + Sync + 'static>(
    ex: &Explorer<S>,
    program: &ProgramFn<S>,
    chooser: &mut Chooser<Choice>,
    traced: bool,
) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    // Attempt ids name nodes, and order the waits on several: the same schedule must make the same ones. Random
    // again after the schedule, however it ends.
    struct CountedIds;
    impl Drop for CountedIds {
        fn drop(&mut self) {
            recipes_core::sim::count_attempt_ids(None);
        }
    }
    recipes_core::sim::count_attempt_ids(Some(1));
    let _ids = CountedIds;
    let outcome = rt.block_on(async {
        let mut world = World::new(ex, program, traced).await;
        world.run(chooser).await
    });
    // Tasks still running (of crashed processes, stuck ones) are dropped with the runtime.
    drop(rt);
    outcome
}

/// Makes `paths` and their parents as persistent nodes, through a session that ends before the processes start.
async fn make_paths(cluster: &MemCluster, paths: &[String]) {
    let admin = cluster.client();
    for path in paths {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            // An error here (a bad path) shows again, typed, when a process uses it.
            let _ = admin.current().create(&at, b"", CreateMode::Persistent).await;
        }
    }
    admin.close_now();
}

struct Proc {
    inner: Arc<ProcessInner>,
    task: JoinHandle<Option<String>>,
    crashed: bool,
    /// The task's end was looked at (a panic reported, an error noted).
    reaped: bool,
    /// The process closed its session.
    closed: bool,
}

impl Proc {
    fn client(&self) -> &Arc<MemClient> {
        &self.inner.client
    }

    /// Whether its program or a task it spawned still runs.
    fn running(&self) -> bool {
        !self.crashed && (!self.task.is_finished() || self.inner.tasks.lock().iter().any(|t| !t.is_finished()))
    }
}

/// Runs a check, a panic in it made a violation.
fn checked(check: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    std::panic::catch_unwind(AssertUnwindSafe(check)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_owned());
        Err(format!("a check panicked: {message}"))
    })
}

/// What a choice touches, for the search's sleep sets: two choices commute when neither touches what the other does.
#[derive(Debug, Clone)]
pub(crate) enum Touch {
    /// A network event of the in-memory cluster; a delivery wakes its session's process.
    Net {
        access: Access,
        delivers_to: Option<SessionId>,
    },
    /// The store applies a request of the process on `session`, and wakes it with the answer: it commutes with the
    /// events of other sessions that do not wake this process (a watch event the cluster queues for it is woken
    /// by its own delivery, which the search orders against the store's answer), and with requests on other keys.
    Store {
        session: SessionId,
        key: String,
        write: bool,
    },
    /// Time, faults: everything.
    Global,
}

impl Touch {
    /// The session whose process the event belongs to, for PCT's priorities (`None`: time, faults).
    pub(crate) fn owner(&self) -> Option<SessionId> {
        match self {
            Touch::Net { access, delivers_to } => delivers_to.or(access.session),
            Touch::Store { session, .. } => Some(*session),
            Touch::Global => None,
        }
    }

    pub(crate) fn independent(&self, other: &Touch) -> bool {
        match (self, other) {
            (Touch::Global, _) | (_, Touch::Global) => false,
            (Touch::Net { access: a, .. }, Touch::Net { access: b, .. }) => a.independent(b),
            (
                Touch::Store {
                    session: a,
                    key: ka,
                    write: wa,
                },
                Touch::Store {
                    session: b,
                    key: kb,
                    write: wb,
                },
            ) => a != b && (ka != kb || !(*wa || *wb)),
            (Touch::Store { session, .. }, Touch::Net { access, delivers_to })
            | (Touch::Net { access, delivers_to }, Touch::Store { session, .. }) => {
                !access.global && *delivers_to != Some(*session) && access.session != Some(*session)
            }
        }
    }
}

/// A choice, identified the same way in every run of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    Net(NetEvent),
    /// The store applies this process's oldest request.
    Store(usize),
    Tick,
    Fault(Fault, usize),
    /// An operator deletes the lock node with this creation id.
    Delete(i64),
    Delay,
}

struct World<'e, S> {
    ex: &'e Explorer<S>,
    cluster: MemCluster,
    ctl: Controller,
    procs: Vec<Proc>,
    state: S,
    activity: Activity,
    tracker: Arc<Mutex<Tracker>>,
    store: Store,
    faults_left: u32,
    /// Ticks left that may run with a store request in flight.
    store_delays_left: u32,
    /// Nodes an operator deleted: (path, creation id).
    deleted: Vec<(String, i64)>,
    crashed: Vec<bool>,
    traced: bool,
    trace: Vec<String>,
    events: usize,
    start: Instant,
    /// The last tick moved the clock as far as it may without anyone acting: the world is quiet.
    quiet: bool,
}

impl<'e, S: Clone + Send + Sync + 'static> World<'e, S> {
    async fn new(ex: &'e Explorer<S>, program: &ProgramFn<S>, traced: bool) -> World<'e, S> {
        let cluster = match ex.order {
            Some(order) => MemCluster::new().ordered_by(order),
            None => MemCluster::new(),
        };
        cluster.set_container_reap_delay(ex.session_timeout);
        if !ex.paths.is_empty() {
            make_paths(&cluster, &ex.paths).await;
        }
        if let Some(setup) = &ex.setup {
            setup(&cluster).await;
        }
        let ctl = cluster.controlled();
        let activity = Activity::new(ctl.activity_notify(), traced);
        let tracker = Arc::new(Mutex::new(Tracker::default()));
        let store = Store::new(ex.processes, activity.clone(), tracker.clone());
        let state = (ex.init)(&Schedule {
            cluster: &cluster,
            activity: &activity,
        });
        let mut procs = Vec::new();
        for id in 0..ex.processes {
            let client = cluster.client_with_timeout(ex.session_timeout);
            let locks = (ex.locks)(Locks::builder(client.clone())).build();
            let crashed = Arc::new(AtomicBool::new(false));
            let inner = Arc::new(ProcessInner {
                id,
                locks,
                client,
                cluster: cluster.clone(),
                store: store.for_process(id, crashed.clone()),
                activity: activity.clone(),
                tracker: tracker.clone(),
                tasks: Mutex::new(Vec::new()),
                crashed,
                session_timeout: ex.session_timeout,
            });
            let process = Process {
                inner: inner.clone(),
                state: state.clone(),
            };
            let task = tokio::spawn(Counted::new(Box::pin(program(process)), activity.clone()));
            procs.push(Proc {
                inner,
                task,
                crashed: false,
                reaped: false,
                closed: false,
            });
        }
        let trace = match traced {
            true => procs
                .iter()
                .enumerate()
                .map(|(i, p)| format!("process {i} runs on session s{:x}", p.client().session_id()))
                .collect(),
            false => Vec::new(),
        };
        World {
            ex,
            cluster,
            ctl,
            crashed: vec![false; procs.len()],
            procs,
            state,
            activity,
            tracker,
            store,
            faults_left: ex.faults,
            store_delays_left: ex.store_delays,
            deleted: Vec::new(),
            traced,
            trace,
            events: 0,
            start: Instant::now(),
            quiet: false,
        }
    }

    /// Writes a line of the trace, made only when the run is traced.
    fn note(&mut self, line: impl FnOnce(&Self) -> String) {
        if self.traced {
            let line = line(self);
            self.trace.push(line);
        }
    }

    /// What moves when anything happens: the cluster's activity and in-flight count, the processes' activity.
    fn marker(&self) -> (u64, usize, u64) {
        let (activity, in_flight) = self.ctl.progress();
        (activity, in_flight, self.activity.count())
    }

    /// Lets every task run until nothing moves any more, the processes' tasks not even polled.
    async fn settle(&mut self) -> Result<(), String> {
        let mut last = (self.marker(), self.activity.polls());
        let mut stable = 0;
        for _ in 0..100_000 {
            tokio::task::yield_now().await;
            let now = (self.marker(), self.activity.polls());
            if now == last {
                stable += 1;
                if stable >= SETTLED_AFTER {
                    self.collect_notes();
                    return Ok(());
                }
            } else {
                stable = 0;
                last = now;
            }
        }
        Err("the world never settles (a task spins)".into())
    }

    fn collect_notes(&mut self) {
        if self.traced {
            let notes = self.activity.take_notes();
            self.trace.extend(notes.into_iter().map(|n| format!("    {n}")));
        }
    }

    /// Looks at the processes that ended: a panic is a violation; an error is written into the trace.
    fn reap(&mut self) -> Result<(), String> {
        for i in 0..self.procs.len() {
            let p = &mut self.procs[i];
            if p.reaped || p.crashed || !p.task.is_finished() {
                continue;
            }
            p.reaped = true;
            match (&mut p.task).now_or_never() {
                Some(Ok(None)) | None => {}
                Some(Ok(Some(error))) => self.note(|_| format!("    process {i} ended with an error: {error}")),
                Some(Err(e)) if e.is_panic() => {
                    let panic = e.into_panic();
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "(no message)".to_owned());
                    return Err(format!("process {i} panicked: {message}"));
                }
                Some(Err(_)) => {}
            }
        }
        Ok(())
    }

    fn step(&self, at_end: bool) -> Step<'_, S> {
        Step {
            cluster: &self.cluster,
            state: &self.state,
            store: &self.store,
            crashed: &self.crashed,
            deleted: &self.deleted,
            elapsed: Instant::now().duration_since(self.start),
            at_end,
        }
    }

    /// The oracles that run at every step: the built-in ones, then the application's.
    fn check(&mut self) -> Result<(), String> {
        self.reap()?;
        let step = self.step(false);
        oracles::at_step(self.ex, &step, &mut self.tracker.lock())?;
        for check in &self.ex.checks {
            checked(|| check(&step))?;
        }
        Ok(())
    }

    fn unfinished(&self) -> bool {
        self.procs.iter().any(Proc::running)
    }

    /// What a choice touches, for the search's sleep sets.
    fn access(&self, choice: &Choice) -> Touch {
        match choice {
            Choice::Net(e) => Touch::Net {
                access: self.ctl.access(*e),
                delivers_to: match e {
                    NetEvent::Deliver(s) => Some(*s),
                    _ => None,
                },
            },
            Choice::Store(p) => match self.store.touches(*p) {
                Some((key, write)) => Touch::Store {
                    session: self.procs[*p].client().session_id(),
                    key,
                    write,
                },
                None => Touch::Global,
            },
            _ => Touch::Global,
        }
    }

    fn choices(&self) -> (Vec<Choice>, usize) {
        let net = self.ctl.events();
        let stores = self.store.senders();
        let mut out: Vec<Choice> = match net.iter().find(|e| matches!(e, NetEvent::Deliver(_))) {
            // Deliveries commute with every other network event: make them first, one at a time. Not with the
            // store's answer to the same process, which may come first.
            Some(NetEvent::Deliver(s)) => std::iter::once(Choice::Net(NetEvent::Deliver(*s)))
                .chain(
                    stores
                        .iter()
                        .filter(|p| self.procs[**p].client().session_id() == *s)
                        .map(|p| Choice::Store(*p)),
                )
                .collect(),
            Some(d) => vec![Choice::Net(*d)],
            None => net
                .iter()
                .map(|e| Choice::Net(*e))
                .chain(stores.iter().map(|p| Choice::Store(*p)))
                .collect(),
        };
        // Time runs when nothing is in flight, or only requests of a broken connection (they may land much later:
        // a server may have passed them on before the connection broke), or, within the explorer's budget of store
        // delays, requests to the store, which promises no time at all (found by trial, helper-55: a write in
        // flight held time back, so a successor's timer never fired before the write landed without a second
        // fault).
        let net_in_flight = net
            .iter()
            .any(|e| !matches!(e, NetEvent::ApplyOrphan(_) | NetEvent::DropOrphans(_)));
        let in_flight = net_in_flight || !stores.is_empty();
        if !net_in_flight && (stores.is_empty() || self.store_delays_left > 0) && !self.quiet {
            out.push(Choice::Tick);
        }
        let ordinary = out.len();
        if self.faults_left > 0 && self.unfinished() {
            for kind in &self.ex.fault_kinds {
                match kind {
                    Fault::Delay => {
                        if in_flight {
                            out.push(Choice::Delay);
                        }
                    }
                    Fault::OperatorDelete => out.extend(self.deletable().into_iter().map(|(_, c)| Choice::Delete(c))),
                    kind => {
                        for (i, p) in self.procs.iter().enumerate() {
                            // Expire ends a session under a connected client, which learns at once. Behind a cut
                            // connection the server expires a session only after its timeout: that is a partition,
                            // not an expiry (one there would break the lease's promise on purpose).
                            let connected = p.client().session_status().state == SessionState::Connected;
                            if p.running() && (connected || *kind != Fault::Expire) {
                                out.push(Choice::Fault(*kind, i));
                            }
                        }
                    }
                }
            }
        }
        (out, ordinary)
    }

    /// The nodes an operator may delete, by creation id: the children of the explorer's lock paths, or every
    /// ephemeral node.
    fn deletable(&self) -> Vec<(String, i64)> {
        let paths: Vec<String> = match &self.ex.delete_under {
            Some(parents) => parents
                .iter()
                .flat_map(|p| self.cluster.children(p).into_iter().map(move |n| format!("{p}/{n}")))
                .collect(),
            None => self.cluster.ephemerals().into_iter().map(|(p, _)| p).collect(),
        };
        let mut nodes: Vec<(String, i64)> = paths
            .into_iter()
            .filter_map(|p| self.cluster.stat(&p).map(|s| (p, s.czxid)))
            .collect();
        nodes.sort_unstable_by_key(|(_, c)| *c);
        nodes
    }

    async fn run(&mut self, chooser: &mut Chooser<Choice>) -> Outcome {
        let violation = self.explore(chooser).await.err();
        self.collect_notes();
        Outcome {
            trace: std::mem::take(&mut self.trace),
            violation,
            events: self.events,
        }
    }

    /// Whether a process closed its session since the last look (`Locks::close`): the server deleted its nodes and
    /// fired other sessions' watches within a step that did not say so (found by review, helper-56).
    fn newly_closed(&mut self) -> bool {
        let mut any = false;
        for p in &mut self.procs {
            if !p.closed && p.client().session_status().state == SessionState::Closed {
                p.closed = true;
                any = true;
            }
        }
        any
    }

    async fn explore(&mut self, chooser: &mut Chooser<Choice>) -> Result<(), String> {
        for _ in 0..self.ex.max_events {
            self.settle().await?;
            if self.newly_closed() {
                // The step touched everything: what the search put to sleep must be tried again.
                chooser.wake_all();
            }
            self.check()?;
            let (choices, ordinary) = self.choices();
            if choices.is_empty() {
                return self.final_checks();
            }
            let Some(i) = chooser.choose(&choices, ordinary, |c| self.access(c)) else {
                // Every choice is asleep: what follows is explored by another schedule.
                self.note(|_| "(the rest is explored by another schedule)".into());
                return Ok(());
            };
            self.events += 1;
            let choice = choices[i].clone();
            self.apply(choice).await;
        }
        Err(format!("no end after {} events (a livelock?)", self.ex.max_events))
    }

    async fn apply(&mut self, choice: Choice) {
        self.quiet = false;
        match choice {
            Choice::Net(e) => {
                self.note(|w| format!("{} {}", w.elapsed(), w.ctl.describe(e)));
                self.ctl.fire(e);
            }
            Choice::Store(p) => {
                let what = if self.traced {
                    let guards: Vec<String> = self
                        .tracker
                        .lock()
                        .holds(Some(p))
                        .into_iter()
                        .map(|(_, _, h)| format!("{} {}", h.node, if h.valid { "valid" } else { "not valid" }))
                        .collect();
                    let guards = match guards.is_empty() {
                        true => "no tracked guard".to_owned(),
                        false => format!("its guard {}", guards.join(", ")),
                    };
                    format!("{} ({guards})", self.store.describe(p))
                } else {
                    String::new()
                };
                let outcome = self
                    .store
                    .apply(p, !self.ex.disabled.contains(&Builtin::WritesInLockOrder));
                self.note(|w| format!("{} {what}: {outcome}", w.elapsed()));
            }
            Choice::Tick if !self.store.senders().is_empty() => {
                self.store_delays_left -= 1;
                self.tick("tick, with a store request in flight;").await;
            }
            Choice::Tick => self.tick("tick").await,
            Choice::Delay => {
                self.faults_left -= 1;
                self.tick("FAULT delay: time runs with requests in flight;").await;
            }
            Choice::Delete(czxid) => {
                self.faults_left -= 1;
                if let Some((node, _)) = self.deletable().into_iter().find(|(_, c)| *c == czxid) {
                    self.note(|w| format!("{} FAULT an operator deletes {node}", w.elapsed()));
                    if self.ctl.operator_delete(&node).is_ok() {
                        self.deleted.push((node, czxid));
                    }
                }
            }
            Choice::Fault(kind, i) => {
                self.faults_left -= 1;
                let timeout = self.ex.session_timeout;
                let sid = self.procs[i].client().session_id();
                self.note(|w| format!("{} FAULT {kind:?} of process {i} (session s{sid:x})", w.elapsed()));
                let p = &mut self.procs[i];
                match kind {
                    Fault::Expire => p.client().expire_session(),
                    Fault::Partition => p.client().disconnect_for(timeout * 3),
                    Fault::Blip => p.client().disconnect_for(timeout / 10),
                    Fault::Crash => {
                        p.inner.crashed.store(true, Ordering::SeqCst);
                        p.client().crash();
                        p.task.abort();
                        for t in p.inner.tasks.lock().drain(..) {
                            t.abort();
                        }
                        p.crashed = true;
                        self.crashed[i] = true;
                    }
                    Fault::OperatorDelete | Fault::Delay => unreachable!("chosen as their own choices"),
                }
            }
        }
    }

    fn elapsed(&self) -> String {
        format!("[{:>7.3}s]", Instant::now().duration_since(self.start).as_secs_f64())
    }

    /// Lets virtual time run until some task acts, the next timer, or as far as a tick may go (then the world is
    /// quiet).
    async fn tick(&mut self, what: &str) {
        let before = self.marker();
        let t0 = Instant::now();
        let horizon = self.start + self.ex.horizon_limit();
        let mut until = (t0 + self.ex.quiet_limit()).min(horizon);
        if let Some(t) = self.ctl.next_timer() {
            until = until.min(t.max(t0));
        }
        let notify = self.ctl.activity_notify();
        let sleep = tokio::time::sleep_until(until);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                biased;
                () = notify.notified() => {
                    if self.marker() != before {
                        break;
                    }
                }
                () = &mut sleep => break,
            }
        }
        let now = Instant::now();
        let timer_due = self.ctl.next_timer().is_some_and(|t| t <= now);
        self.quiet = (self.marker() == before && !timer_due) || now >= horizon;
        self.note(|w| format!("{} {what} +{:.3}s", w.elapsed(), now.duration_since(t0).as_secs_f64()));
    }

    /// At the end: every live process finished, no lock node of a live session is left, and the application's
    /// checks at the end hold.
    fn final_checks(&mut self) -> Result<(), String> {
        self.reap()?;
        if !self.ex.disabled.contains(&Builtin::AllFinish) {
            let stuck: Vec<usize> = (0..self.procs.len()).filter(|i| self.procs[*i].running()).collect();
            if !stuck.is_empty() {
                let waited = Duration::from_secs_f64(Instant::now().duration_since(self.start).as_secs_f64());
                return Err(format!(
                    "process{} {stuck:?} never finished: a deadlock, or a wait with no end (nothing moved for {:?} \
                     of virtual time, the explorer's quiet_after; {waited:?} in all)",
                    if stuck.len() > 1 { "es" } else { "" },
                    self.ex.quiet_limit(),
                ));
            }
        }
        if !self.ex.disabled.contains(&Builtin::NoNodeLeft) {
            let live: Vec<_> = self
                .procs
                .iter()
                .filter(|p| !p.crashed)
                .map(|p| p.client().session_id())
                .collect();
            let mut left: Vec<String> = self
                .cluster
                .ephemerals()
                .into_iter()
                .filter(|(_, owner)| live.contains(owner))
                .map(|(p, _)| p)
                .collect();
            left.sort();
            if !left.is_empty() {
                return Err(format!("lock nodes left behind by live sessions: {left:?}"));
            }
        }
        let step = self.step(true);
        for check in &self.ex.end_checks {
            checked(|| check(&step))?;
        }
        Ok(())
    }
}
