//! One schedule: a fresh world, run to its end under the chooser's choices.

use std::sync::{Arc, Mutex};

use recipes_core::backend::SessionState;
use recipes_core::{Backend, Locks};
use recipes_mem::{Access, Controller, MemClient, MemCluster, NetEvent};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::programs::{self, Ctx, Oracle};
use super::{Chooser, Config, FaultKind};

/// The lock path of every configuration.
pub(crate) const PATH: &str = "/model/lock";
/// No schedule may be longer than this many events (a livelock otherwise).
const MAX_EVENTS: usize = 2_000;
/// Yields without any change before the world counts as settled.
const SETTLED_AFTER: u32 = 2;
/// How far one tick may move the clock (in session timeouts) without anyone acting: longer than every timer of
/// the library (the 30 s reconnection wait of a release included).
const MAX_STEP_TIMEOUTS: u32 = 10;
/// No schedule runs longer than this, in session timeouts of virtual time.
const HORIZON_TIMEOUTS: u32 = 100;

pub(crate) struct Outcome {
    pub trace: Vec<String>,
    pub violation: Option<String>,
    /// Events chosen (the schedule's length).
    pub events: usize,
}

/// Runs one schedule of `config` on a fresh current-thread runtime with a paused clock. Its trace is written only
/// when `traced`: formatting every event costs more than a fifth of an untraced run, and a violation's schedule is
/// replayed with its trace.
pub(crate) fn run(config: &Config, chooser: &mut Chooser<Choice>, traced: bool) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    // Attempt ids name nodes, and order the waits on several: the same schedule must make the same ones.
    recipes_core::mutants::counted_ids(Some(1));
    let outcome = rt.block_on(async {
        let mut world = World::new(config, traced).await;
        world.run(chooser).await
    });
    // Tasks still running (of crashed clients, stuck ones) are dropped with the runtime.
    drop(rt);
    recipes_core::mutants::counted_ids(None);
    outcome
}

struct Client {
    mem: Arc<MemClient>,
    task: JoinHandle<()>,
    crashed: bool,
}

/// A choice, identified the same way in every run of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    Net(NetEvent),
    Tick,
    Fault(FaultKind, usize),
    /// An operator deletes the lock node with this creation id.
    Delete(i64),
    Delay,
}

struct World<'c> {
    config: &'c Config,
    cluster: MemCluster,
    ctl: Controller,
    clients: Vec<Client>,
    oracle: Arc<Mutex<Oracle>>,
    faults_left: u32,
    /// Whether the events are written to `trace`.
    traced: bool,
    trace: Vec<String>,
    events: usize,
    notes_seen: usize,
    start: Instant,
    /// The last tick moved the clock as far as it may without anyone acting: the world is quiet.
    quiet: bool,
}

impl<'c> World<'c> {
    async fn new(config: &'c Config, traced: bool) -> World<'c> {
        let cluster = MemCluster::new();
        cluster.set_container_reap_delay(config.session_timeout);
        if let Some(setup) = config.setup {
            setup(&cluster).await;
        }
        let ctl = cluster.controlled();
        let oracle = Arc::new(Mutex::new(Oracle::new(ctl.activity_notify(), config.cohorts)));
        let mut clients = Vec::new();
        for (id, program) in config.clients.iter().enumerate() {
            let mem = cluster.client_with_timeout(config.session_timeout);
            let mut builder = Locks::builder(mem.clone()).layout(config.layout);
            if let Some(k) = config.cohorts {
                builder = builder.cohorts(k);
            }
            let locks = builder.build();
            let ctx = Ctx {
                id,
                task: 0,
                locks,
                path: PATH.to_owned(),
                oracle: oracle.clone(),
                cluster: cluster.clone(),
                session_timeout: config.session_timeout,
            };
            let task = tokio::spawn(programs::run(ctx, program.clone()));
            clients.push(Client {
                mem,
                task,
                crashed: false,
            });
        }
        World {
            config,
            cluster,
            ctl,
            clients,
            oracle,
            faults_left: config.faults,
            traced,
            trace: Vec::new(),
            events: 0,
            notes_seen: 0,
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

    fn oracle(&self) -> std::sync::MutexGuard<'_, Oracle> {
        self.oracle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What moves when anything happens: the cluster's activity and in-flight count, the clients' reports.
    fn marker(&self) -> (u64, usize, u64) {
        let (activity, in_flight) = self.ctl.progress();
        (activity, in_flight, self.oracle().activity)
    }

    /// Lets every task run until nothing moves any more.
    async fn settle(&mut self) -> Result<(), String> {
        let mut last = self.marker();
        let mut stable = 0;
        for _ in 0..100_000 {
            tokio::task::yield_now().await;
            let now = self.marker();
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
        let notes: Vec<String> = {
            let o = self.oracle();
            o.notes[self.notes_seen..].to_vec()
        };
        self.notes_seen += notes.len();
        if self.traced {
            self.trace.extend(notes.into_iter().map(|n| format!("    {n}")));
        }
    }

    fn unfinished(&self) -> bool {
        let finished = self.oracle().finished;
        let crashed = self.clients.iter().filter(|c| c.crashed).count();
        finished + crashed < self.clients.len()
    }

    /// What a choice touches, for the search's sleep sets.
    fn access(&self, choice: &Choice) -> Access {
        match choice {
            Choice::Net(e) => self.ctl.access(*e),
            _ => Access::global(),
        }
    }

    fn choices(&self) -> (Vec<Choice>, usize) {
        let net = self.ctl.events();
        let mut out: Vec<Choice> = match net.iter().find(|e| matches!(e, NetEvent::Deliver(_))) {
            // Deliveries commute with every other network event: make them first, one at a time.
            Some(d) => vec![Choice::Net(*d)],
            None => net.iter().map(|e| Choice::Net(*e)).collect(),
        };
        // Time runs when nothing is in flight, or only requests of a broken connection (they may land much later:
        // a server may have passed them on before the connection broke).
        let in_flight = net
            .iter()
            .any(|e| !matches!(e, NetEvent::ApplyOrphan(_) | NetEvent::DropOrphans(_)));
        if !in_flight && !self.quiet {
            out.push(Choice::Tick);
        }
        let ordinary = out.len();
        if self.faults_left > 0 && self.unfinished() {
            for kind in &self.config.fault_kinds {
                match kind {
                    FaultKind::Delay => {
                        if in_flight {
                            out.push(Choice::Delay);
                        }
                    }
                    FaultKind::OperatorDelete => {
                        let mut nodes: Vec<i64> = self
                            .cluster
                            .children(PATH)
                            .into_iter()
                            .filter_map(|n| self.cluster.stat(&format!("{PATH}/{n}")).map(|s| s.czxid))
                            .collect();
                        nodes.sort_unstable();
                        out.extend(nodes.into_iter().map(Choice::Delete));
                    }
                    kind => {
                        for (i, c) in self.clients.iter().enumerate() {
                            // KillSession expires a session under a connected client, which learns at once. Behind a
                            // cut connection the server expires a session only after its timeout: that is a
                            // partition, not a kill (a kill there would break the lease's promise on purpose).
                            let connected = c.mem.session_status().state == SessionState::Connected;
                            if !c.crashed && !c.task.is_finished() && (connected || *kind != FaultKind::Kill) {
                                out.push(Choice::Fault(*kind, i));
                            }
                        }
                    }
                }
            }
        }
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

    async fn explore(&mut self, chooser: &mut Chooser<Choice>) -> Result<(), String> {
        for _ in 0..MAX_EVENTS {
            self.settle().await?;
            {
                let cluster = self.cluster.clone();
                let mut o = self.oracle();
                o.check(&cluster);
                if let Some(v) = o.violations.first() {
                    return Err(v.clone());
                }
            }
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
        Err(format!("no end after {MAX_EVENTS} events (a livelock?)"))
    }

    async fn apply(&mut self, choice: Choice) {
        self.quiet = false;
        match choice {
            Choice::Net(e) => {
                self.note(|w| format!("{} {}", w.elapsed(), w.ctl.describe(e)));
                self.ctl.fire(e);
            }
            Choice::Tick => self.tick("tick").await,
            Choice::Delay => {
                self.faults_left -= 1;
                self.tick("FAULT delay: time runs with requests in flight;").await;
            }
            Choice::Delete(czxid) => {
                self.faults_left -= 1;
                let node = self
                    .cluster
                    .children(PATH)
                    .into_iter()
                    .map(|n| format!("{PATH}/{n}"))
                    .find(|p| self.cluster.stat(p).is_some_and(|s| s.czxid == czxid));
                if let Some(node) = node {
                    self.note(|w| format!("{} FAULT an operator deletes {node}", w.elapsed()));
                    if self.ctl.operator_delete(&node).is_ok() {
                        self.oracle().deleted.insert((node, czxid.max(0) as u64));
                    }
                }
            }
            Choice::Fault(kind, i) => {
                self.faults_left -= 1;
                let timeout = self.config.session_timeout;
                let sid = self.clients[i].mem.session_id();
                self.note(|w| format!("{} FAULT {kind:?} of client {i} (session s{sid:x})", w.elapsed()));
                let c = &mut self.clients[i];
                match kind {
                    FaultKind::Kill => c.mem.expire_session(),
                    FaultKind::Partition => c.mem.disconnect_for(timeout * 3),
                    FaultKind::Blip => c.mem.disconnect_for(timeout / 10),
                    FaultKind::Crash => {
                        c.mem.crash();
                        c.task.abort();
                        c.crashed = true;
                        self.oracle().crashed.insert(i);
                    }
                    FaultKind::OperatorDelete | FaultKind::Delay => unreachable!("chosen as their own choices"),
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
        let horizon = self.start + self.config.session_timeout * HORIZON_TIMEOUTS;
        let mut until = (t0 + self.config.session_timeout * MAX_STEP_TIMEOUTS).min(horizon);
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

    /// At the end: every live client finished, and no lock node of a live session is left.
    fn final_checks(&mut self) -> Result<(), String> {
        for (i, c) in self.clients.iter().enumerate() {
            if !c.crashed && !c.task.is_finished() {
                return Err(format!("client {i} never finished (deadlock or hang)"));
            }
        }
        // A task that panicked is finished too, without having reported the end of its program.
        let crashed = self.clients.iter().filter(|c| c.crashed).count();
        if self.oracle().finished + crashed < self.clients.len() {
            return Err("a client's task ended without finishing its program (a panic?)".into());
        }
        let live: Vec<_> = self
            .clients
            .iter()
            .filter(|c| !c.crashed)
            .map(|c| c.mem.session_id())
            .collect();
        let mut left: Vec<String> = self
            .cluster
            .ephemerals()
            .into_iter()
            .filter(|(_, owner)| live.contains(owner))
            .map(|(p, _)| programs::short(&p))
            .collect();
        left.sort();
        if !left.is_empty() {
            return Err(format!("lock nodes left behind by live sessions: {left:?}"));
        }
        Ok(())
    }
}
