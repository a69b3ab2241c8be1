//! A model checker over the real code: the recipes and the driver of `recipes-core`, run against the in-memory
//! backend in its controlled mode, while an explorer decides the order of every event that ZooKeeper and the
//! network could reorder.
//!
//! # What is explored
//! One *schedule* is one run of a [`Config`]: a few clients (each its own session, running a small [`Program`] on
//! one lock path) on a fresh cluster, on a current-thread tokio runtime with a paused clock, so that a run is
//! deterministic. After every event the explorer lets every task run until nothing moves ("settles"), checks the
//! oracles, lists the enabled events and picks one:
//!
//! - `Apply`: the server applies the oldest in-flight request of a session (one session's requests stay in order;
//!   sessions interleave freely), including requests orphaned by a broken connection, which may also be lost;
//! - `Deliver`: a reply or watch event reaches its client (in order per session; with
//!   [`Config::with_events_of_a_write_together`], every event of one write at once). Deliveries to different clients
//!   commute with each other and with other sessions' requests, so a pending delivery is made before any other
//!   network event (a reduction that keeps every reachable state);
//! - timers when due: a reconnection, the server expiring a session it has not heard from;
//! - `Tick`: when nothing is in flight, virtual time runs until some task acts (a deadline, a lease's end, a hold
//!   ending) or the next timer;
//! - faults, within a budget, at every point: session expiry at the server with the client told at once
//!   (Curator's KillSession), a partition past the session timeout (the server expires the session, the client
//!   learns later), a short connection loss (replies in flight lost, requests in flight may still land: a lost
//!   create reply is one case), a client crash (SIGKILL: its process never acts again, the server expires it after
//!   the timeout), an operator deleting a lock node, and a delay (time runs while requests are in flight: a caller
//!   gives up with its request still on the wire).
//!
//! # Oracles
//! At every step: among the guards of live clients whose own `is_valid()` is true, at most one client holds
//! exclusively, and never beside a reader of another client, and a semaphore's permits held add up to at most its
//! count; the node of every such guard exists with its creation id; an acquire never returns a guard that is not
//! valid; fencing tokens increase from one hold to the next (a permit's, held beside others, only above exclusive
//! holds'); `lost()` resolves once the node is gone, and never claims a deletion that did not happen; a timed
//! acquire ends within its deadline (plus the cleanup's grace). At the end: every live client finished (no deadlock,
//! no hang), and no lock node of a live session is left.
//!
//! # Strategies
//! [`explore`] walks every schedule of a configuration depth-first (replaying a prefix of choices and branching on
//! the next one), and [`random_walks`] runs seeded random schedules for larger configurations. A failure carries the
//! choices that replay it exactly ([`replay`]) and a readable trace.

pub mod configs;
mod programs;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use recipes_core::{Layout, Recipe};
use recipes_explore::{Explorer, Process};

use programs::{Ctx, Oracle};
pub use programs::{Patience, Program};

/// The lock path of every configuration. Not `…/lock`: a lock path named as a lock node gets no view of the queue
/// (decision 0085), and `views-one-session` explores the views.
pub(crate) const PATH: &str = "/model/line";

/// A fault the explorer may inject: the public explorer's ([`recipes_explore::Fault`]).
pub use recipes_explore::Fault as FaultKind;

/// Every fault kind.
pub const ALL_FAULTS: &[FaultKind] = FaultKind::ALL;

/// Sets a path up before the clients start (in the automatic mode).
pub type Setup = fn(&recipes_mem::MemCluster) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// One configuration to explore.
#[derive(Clone)]
pub struct Config {
    /// Its name, in reports and replays.
    pub name: &'static str,
    /// The layout every client uses.
    pub layout: Layout,
    /// The program of each client (one session each).
    pub clients: Vec<Program>,
    /// How many faults one schedule may inject.
    pub faults: u32,
    /// Which faults.
    pub fault_kinds: Vec<FaultKind>,
    /// The clients' session timeout.
    pub session_timeout: Duration,
    /// Run before the clients start (e.g. to set the sequence counter).
    pub setup: Option<Setup>,
    /// Cohorts of at most this many holds of one node for every client's fair locks
    /// ([`LocksBuilder::cohorts`](recipes_core::LocksBuilder::cohorts)), checked by the oracle of the bound.
    pub cohorts: Option<u32>,
    /// Every client's `Locks` built with [`foreign_writes`](recipes_core::LocksBuilder::foreign_writes): for the
    /// operator's writes ([`FaultKind::OperatorWrite`]).
    pub foreign_writes: bool,
    /// Every watch event of one write delivered to a client at once
    /// ([`Explorer::events_of_a_write_together`](recipes_explore::Explorer::events_of_a_write_together)).
    pub writes_together: bool,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("name", &self.name)
            .field("layout", &self.layout)
            .field("clients", &self.clients)
            .field("faults", &self.faults)
            .field("fault_kinds", &self.fault_kinds)
            .field("cohorts", &self.cohorts)
            .field("foreign_writes", &self.foreign_writes)
            .field("writes_together", &self.writes_together)
            .finish()
    }
}

impl Config {
    /// Clients running `programs`, with up to one fault of the usual kinds.
    pub fn new(name: &'static str, programs: Vec<Program>) -> Self {
        Config {
            name,
            layout: Layout::Native,
            clients: programs,
            faults: 1,
            fault_kinds: FaultKind::USUAL.to_vec(),
            session_timeout: Duration::from_secs(4),
            setup: None,
            cohorts: None,
            foreign_writes: false,
            writes_together: false,
        }
    }

    /// This configuration with a fault budget and kinds.
    pub fn with_faults(mut self, n: u32, kinds: &[FaultKind]) -> Self {
        self.faults = n;
        self.fault_kinds = kinds.to_vec();
        self
    }

    /// This configuration in another layout.
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// This configuration with cohorts of at most `k` holds of one node.
    pub fn with_cohorts(mut self, k: u32) -> Self {
        self.cohorts = Some(k);
        self
    }

    /// This configuration with every client's `Locks` built for others' writes of lock-node data.
    pub fn with_foreign_writes(mut self) -> Self {
        self.foreign_writes = true;
        self
    }

    /// This configuration with every watch event of one write delivered to a client at once.
    pub fn with_events_of_a_write_together(mut self) -> Self {
        self.writes_together = true;
        self
    }

    /// This configuration with a setup step.
    pub fn with_setup(mut self, setup: Setup) -> Self {
        self.setup = Some(setup);
        self
    }
}

/// The plain program: `recipe`, waiting as long as it takes.
pub fn plain(recipe: Recipe) -> Program {
    Program::Plain {
        recipe,
        patience: Patience::Forever,
    }
}

/// What an exploration found: the public explorer's report, named after the configuration.
pub use recipes_explore::{Failure, Report};

/// How to replay `failure` from the environment (`MODEL_REPLAY`), for a failing test's message.
pub fn replay_hint(failure: &Failure) -> String {
    let choices: Vec<String> = failure.choices.iter().map(|c| c.to_string()).collect();
    format!("replay: MODEL_REPLAY={}:{}", failure.explorer, choices.join(","))
}

/// Bounds of an exhaustive exploration.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Stop after this many schedules.
    pub max_schedules: u64,
    /// Stop after this much wall time.
    pub time: Duration,
}

type Shared = Arc<Mutex<Oracle>>;

/// The public explorer, set up for `config`: one process per client, its oracle checked after every step.
fn explorer(config: &Config) -> Explorer<Shared> {
    let (layout, cohorts, foreign_writes) = (config.layout, config.cohorts, config.foreign_writes);
    let clients = config.clients.len();
    // Whether a hold may be passed within a process, without the server (tasks of one session, a cohort; not tasks
    // whose releases hand nothing over, `Mutant::NoHandoff`, switched on for the walk).
    let handed_over = cohorts.is_some()
        || (config
            .clients
            .iter()
            .any(|c| matches!(c, Program::Tasks(_) | Program::TasksApart(_)))
            && !recipes_core::mutants::is_active(recipes_core::mutants::Mutant::NoHandoff));
    // Whether a node first in its line stays first until it goes: not in the peers' layouts, which sort names as
    // text, so that a node made after the sequence counter's wrap sorts ahead of those made before it (found by
    // review, helper-108).
    let first_stays_first = !matches!(layout, Layout::Curator | Layout::Kazoo);
    let mut explorer = Explorer::new(config.name)
        .processes(clients)
        .session_timeout(config.session_timeout)
        .faults(config.faults, &config.fault_kinds)
        .operator_deletes_under(&[PATH])
        .locks(move |b| {
            let b = b.layout(layout).foreign_writes(foreign_writes);
            match cohorts {
                Some(k) => b.cohorts(k),
                None => b,
            }
        });
    if let Some(setup) = config.setup {
        explorer = explorer.setup(Arc::new(setup));
    }
    if config.writes_together {
        explorer = explorer.events_of_a_write_together();
    }
    explorer
        .state(move |s| {
            Arc::new(Mutex::new(Oracle::new(
                s.activity(),
                cohorts,
                handed_over,
                first_stays_first,
            )))
        })
        .check(move |step| {
            let mut o = step.state().lock().unwrap_or_else(|e| e.into_inner());
            for i in 0..clients {
                if step.crashed(i) {
                    o.crashed.insert(i);
                }
            }
            for (node, czxid) in step.operator_deletes() {
                let deleted = (node.clone(), (*czxid).max(0) as u64);
                if o.deleted.insert(deleted.clone()) && behind_others(step.cluster(), node, *czxid) {
                    o.deleted_behind.insert(deleted);
                }
            }
            o.check(step.cluster());
            match o.violations.first() {
                Some(v) => Err(v.clone()),
                None => Ok(()),
            }
        })
}

/// Whether a lock node of the same parent as the deleted `node` (made at `czxid`), and made before it, is there:
/// checked in the step of the delete, where nothing else changed the tree (every request is an event of its own).
/// Only ephemeral children count: the library's lock nodes are, and what it does not count as one ahead of it (a
/// semaphore's count, a nested lock path that only looks like a lock node) is not (found by review, helper-107).
fn behind_others(cluster: &recipes_mem::MemCluster, node: &str, czxid: i64) -> bool {
    let Some((parent, _)) = node.rsplit_once('/') else {
        return false;
    };
    cluster
        .children(parent)
        .into_iter()
        .filter_map(|n| cluster.stat(&format!("{parent}/{n}")))
        .any(|s| s.czxid < czxid && s.ephemeral_owner != 0)
}

/// The program of each client: its configuration's, on its process.
fn program(
    config: &Config,
) -> impl Fn(Process<Shared>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    let programs = config.clients.clone();
    move |p: Process<Shared>| {
        let ctx = Ctx {
            id: p.id(),
            task: 0,
            locks: p.locks().clone(),
            path: PATH.to_owned(),
            oracle: p.state().clone(),
            cluster: p.cluster().clone(),
            session_timeout: p.session_timeout(),
        };
        Box::pin(programs::run(ctx, programs[p.id()].clone()))
    }
}

/// Explores every schedule of `config` depth-first (with sleep sets: of schedules that differ only in the order of
/// commuting events, one is run), within `bounds`; stops at the first violation.
pub fn explore(config: &Config, bounds: Bounds) -> Report {
    explorer(config)
        .exhaustive(bounds.max_schedules)
        .time_limit(bounds.time)
        .run(program(config))
}

/// As [`explore`], but goes on past violations whose message does not satisfy `wanted` (to show that one kind of
/// violation is reachable).
pub fn explore_for(config: &Config, bounds: Bounds, wanted: impl Fn(&str) -> bool + Send + Sync + 'static) -> Report {
    explorer(config)
        .exhaustive(bounds.max_schedules)
        .time_limit(bounds.time)
        .stop_at(wanted)
        .run(program(config))
}

/// Runs `runs` random schedules of `config` (seeds `seed`, `seed + 1`, …), within `time`; stops at the first
/// violation.
pub fn random_walks(config: &Config, seed: u64, runs: u64, time: Duration) -> Report {
    explorer(config)
        .random_walks(seed, runs)
        .time_limit(time)
        .run(program(config))
}

/// Replays one schedule from its choices: its trace, and its violation if any.
pub fn replay(config: &Config, choices: &[usize]) -> (Vec<String>, Option<String>) {
    explorer(config).replay(choices, program(config))
}
