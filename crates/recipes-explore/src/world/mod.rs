//! One schedule: a fresh world, run to its end under the chooser's choices.

mod checks;
mod faults;
mod time;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use recipes_core::backend::{BackendExt, CreateMode, SessionState};
use recipes_core::{Backend, Locks};
use recipes_mem::{Controller, MemClient, MemCluster, NetEvent};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::choice::{Choice, Touch};
use crate::chooser::Chooser;
use crate::explorer::{Explorer, ProgramFn};
use crate::process::{Activity, Counted, Process, ProcessInner, Schedule};
use crate::store::Store;
use crate::tracked::Tracker;
use crate::Builtin;

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

pub(crate) struct Proc {
    inner: Arc<ProcessInner>,
    task: JoinHandle<Option<String>>,
    /// The task's end was looked at (a panic reported, an error noted).
    reaped: bool,
    /// The process closed its session.
    closed: bool,
}

impl Proc {
    fn client(&self) -> &Arc<MemClient> {
        &self.inner.client
    }

    pub(crate) fn crashed(&self) -> bool {
        self.inner.crashed.load(Ordering::SeqCst)
    }

    /// Whether its program or a task it spawned still runs.
    fn running(&self) -> bool {
        !self.crashed() && (!self.task.is_finished() || self.inner.tasks.lock().iter().any(|t| !t.is_finished()))
    }
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
        ctl.events_of_a_write_together(ex.writes_together);
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

    fn collect_notes(&mut self) {
        if self.traced {
            let notes = self.activity.take_notes();
            self.trace.extend(notes.into_iter().map(|n| format!("    {n}")));
        }
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
        let delivery = net.iter().find_map(|e| match e {
            NetEvent::Deliver(s) => Some(*s),
            _ => None,
        });
        let mut out: Vec<Choice> = match delivery {
            // Deliveries commute with every other network event: make them first, one at a time. Not with the
            // store's answer to the same process, which may come first.
            Some(s) => std::iter::once(Choice::Net(NetEvent::Deliver(s)))
                .chain(
                    stores
                        .iter()
                        .filter(|p| self.procs[**p].client().session_id() == s)
                        .map(|p| Choice::Store(*p)),
                )
                .collect(),
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
        self.fault_choices(&mut out, in_flight);
        (out, ordinary)
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
                let what = match self.traced {
                    true => format!("{} ({})", self.store.describe(p), self.tracker.lock().describe(p)),
                    false => String::new(),
                };
                let outcome = self.store.apply(p, self.ex.on(Builtin::WritesInLockOrder));
                self.note(|w| format!("{} {what}: {outcome}", w.elapsed()));
            }
            Choice::Tick if !self.store.senders().is_empty() => {
                self.store_delays_left -= 1;
                self.tick("tick, with a store request in flight;").await;
            }
            Choice::Tick => self.tick("tick").await,
            Choice::Delay | Choice::Delete(_) | Choice::Write(_) | Choice::Fault(..) => self.apply_fault(choice).await,
        }
    }
}
