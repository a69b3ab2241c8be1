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
//! - `Deliver`: a reply or watch event reaches its client (in order per session). Deliveries to different clients
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

mod chooser;
pub mod configs;
mod programs;
mod run;

use std::fmt;
use std::time::{Duration, Instant};

use recipes_core::{Layout, Recipe};

use chooser::Chooser;
pub use programs::{Patience, Program};

/// A fault the explorer may inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The server expires the session and its client learns at once (Curator's `KillSession`).
    Kill,
    /// The client is cut off past its session timeout: the server expires it, the client learns on reconnecting.
    Partition,
    /// The connection breaks for a moment: replies in flight are lost, requests in flight may still land.
    Blip,
    /// The client process dies (SIGKILL); the server expires its session after the timeout.
    Crash,
    /// An operator deletes a lock node.
    OperatorDelete,
    /// Time runs while requests are in flight (a caller's deadline passes with its request on the wire).
    Delay,
}

/// Every fault kind.
pub const ALL_FAULTS: &[FaultKind] = &[
    FaultKind::Kill,
    FaultKind::Partition,
    FaultKind::Blip,
    FaultKind::Crash,
    FaultKind::OperatorDelete,
    FaultKind::Delay,
];

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
            fault_kinds: vec![
                FaultKind::Kill,
                FaultKind::Partition,
                FaultKind::Blip,
                FaultKind::Crash,
                FaultKind::Delay,
            ],
            session_timeout: Duration::from_secs(4),
            setup: None,
            cohorts: None,
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

/// A violation found in one schedule.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The configuration.
    pub config: &'static str,
    /// What went wrong.
    pub message: String,
    /// The choices that replay the schedule ([`replay`]).
    pub choices: Vec<usize>,
    /// The events of the schedule, readable.
    pub trace: Vec<String>,
    /// The seed of a random walk (`None` for an exhaustive run).
    pub seed: Option<u64>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "model checker: {} in configuration {:?}", self.message, self.config)?;
        if let Some(seed) = self.seed {
            writeln!(f, "seed: {seed}")?;
        }
        let choices: Vec<String> = self.choices.iter().map(|c| c.to_string()).collect();
        writeln!(f, "replay: MODEL_REPLAY={}:{}", self.config, choices.join(","))?;
        writeln!(f, "trace:")?;
        for (i, line) in self.trace.iter().enumerate() {
            writeln!(f, "  {:>3}. {line}", i + 1)?;
        }
        Ok(())
    }
}

/// What an exploration found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The configuration.
    pub config: &'static str,
    /// Distinct schedules run.
    pub schedules: u64,
    /// Whether every schedule within the bounds was explored (`false`: stopped at the schedule limit or the time
    /// budget).
    pub complete: bool,
    /// The longest schedule, in events.
    pub longest: usize,
    /// The first violation found, if any.
    pub violation: Option<Violation>,
    /// Wall time spent.
    pub elapsed: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MODEL {}: {} schedules{}, longest {} events, {:.1} s, {}",
            self.config,
            self.schedules,
            if self.complete { " (all)" } else { " (bounded)" },
            self.longest,
            self.elapsed.as_secs_f64(),
            match &self.violation {
                None => "no violation".to_owned(),
                Some(v) => format!("VIOLATION: {}", v.message),
            }
        )
    }
}

impl Violation {
    /// A violation found by the schedule of `choices`, replayed for its trace (runs are untraced).
    fn found(config: &Config, message: String, choices: &[usize], seed: Option<u64>) -> Violation {
        Violation {
            config: config.name,
            message,
            trace: replay(config, choices).0,
            choices: choices.to_vec(),
            seed,
        }
    }
}

impl Report {
    /// Nothing explored yet.
    fn new(config: &Config) -> Report {
        Report {
            config: config.name,
            schedules: 0,
            complete: false,
            longest: 0,
            violation: None,
            elapsed: Duration::ZERO,
        }
    }
}

/// Bounds of an exhaustive exploration.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Stop after this many schedules.
    pub max_schedules: u64,
    /// Stop after this much wall time.
    pub time: Duration,
}

/// Explores every schedule of `config` depth-first (with sleep sets: of schedules that differ only in the order of
/// commuting events, one is run), within `bounds`; stops at the first violation.
pub fn explore(config: &Config, bounds: Bounds) -> Report {
    explore_for(config, bounds, |_| true)
}

/// As [`explore`], but goes on past violations whose message does not satisfy `wanted` (to show that one kind of
/// violation is reachable).
pub fn explore_for(config: &Config, bounds: Bounds, wanted: impl Fn(&str) -> bool) -> Report {
    let start = Instant::now();
    let mut chooser = Chooser::search();
    let mut report = Report::new(config);
    loop {
        chooser.restart();
        let outcome = run::run(config, &mut chooser, false);
        report.schedules += 1;
        report.longest = report.longest.max(outcome.events);
        let message = if chooser.nondeterministic {
            Some("a replayed schedule met different choices: the run is not deterministic".to_owned())
        } else {
            outcome.violation.filter(|m| wanted(m))
        };
        if let Some(message) = message {
            report.violation = Some(Violation::found(config, message, &chooser.made, None));
            break;
        }
        if !chooser.advance() {
            report.complete = true;
            break;
        }
        if report.schedules >= bounds.max_schedules || start.elapsed() >= bounds.time {
            break;
        }
    }
    report.elapsed = start.elapsed();
    report
}

/// Runs `runs` random schedules of `config` (seeds `seed`, `seed + 1`, …), within `time`; stops at the first
/// violation.
pub fn random_walks(config: &Config, seed: u64, runs: u64, time: Duration) -> Report {
    let start = Instant::now();
    let mut report = Report::new(config);
    for s in seed..seed.saturating_add(runs) {
        let mut chooser = Chooser::random(s);
        let outcome = run::run(config, &mut chooser, false);
        report.schedules += 1;
        report.longest = report.longest.max(outcome.events);
        if let Some(message) = outcome.violation {
            report.violation = Some(Violation::found(config, message, &chooser.made, Some(s)));
            break;
        }
        if start.elapsed() >= time {
            break;
        }
    }
    report.complete = report.violation.is_none() && report.schedules == runs;
    report.elapsed = start.elapsed();
    report
}

/// Replays one schedule from its choices: its trace, and its violation if any.
pub fn replay(config: &Config, choices: &[usize]) -> (Vec<String>, Option<String>) {
    let mut chooser = Chooser::replay(choices.to_vec());
    let outcome = run::run(config, &mut chooser, true);
    (outcome.trace, outcome.violation)
}
