//! The explorer's settings (its strategies are in `strategy.rs`, what it reports in `report.rs`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use recipes_core::backend::ChildOrder;
use recipes_core::LocksBuilder;
use recipes_mem::MemCluster;

use crate::process::{Process, Schedule};
use crate::{Builtin, Fault, Step};

pub(crate) type ProgramFn<S> = Arc<dyn Fn(Process<S>) -> BoxFuture<'static, Option<String>> + Send + Sync>;
pub(crate) type CheckFn<S> = Arc<dyn Fn(&Step<'_, S>) -> Result<(), String> + Send + Sync>;
type LocksFn = Arc<dyn Fn(LocksBuilder) -> LocksBuilder + Send + Sync>;
type WantedFn = Arc<dyn Fn(&str) -> bool + Send + Sync>;
type InitFn<S> = Arc<dyn Fn(&Schedule<'_>) -> S + Send + Sync>;
/// Prepares the cluster before the processes start (makes paths, sets sequence counters).
pub type Setup = Arc<dyn Fn(&MemCluster) -> Pin<Box<dyn Future<Output = ()>>> + Send + Sync>;

#[derive(Debug, Clone)]
pub(crate) enum Strategy {
    Exhaustive { max_schedules: u64 },
    Random { seed: u64, runs: u64 },
    Pct { seed: u64, runs: u64, depth: u32 },
}

/// Runs an application's code on several simulated processes, each with its own session and
/// [`Locks`](recipes_core::Locks), under a scheduler that chooses the order of every request, reply, watch event,
/// timer and fault, and checks the oracles after every step. See the [crate's documentation](crate) for an example.
///
/// `S` is a state the processes and the checks of one schedule share (see [`state`](Explorer::state)); `()` by
/// default.
///
/// A check after every step, over a state the processes share: at most one live process inside its critical section
/// (a crashed process stays "inside" for ever, so the check leaves it out).
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use recipes_explore::{Explorer, Fault};
///
/// let report = Explorer::new("critical section")
///     .processes(3)
///     .faults(1, &[Fault::Crash])
///     .paths(&["/jobs/lock"])
///     .random_walks(1, 300)
///     .state(|_| Arc::new([(); 3].map(|_| AtomicBool::new(false))))
///     .check(|step| {
///         let inside = (0..3).filter(|i| step.state()[*i].load(Ordering::SeqCst) && !step.crashed(*i));
///         match inside.count() {
///             0 | 1 => Ok(()),
///             n => Err(format!("{n} processes in the critical section")),
///         }
///     })
///     .run(|p| async move {
///         let guard = p.locks().fair("/jobs/lock")?.acquire().await?;
///         if guard.is_valid() {
///             p.state()[p.id()].store(true, Ordering::SeqCst);
///             p.activity().touch(); // the state changed without a request
///             tokio::time::sleep(std::time::Duration::from_millis(100)).await;
///             p.state()[p.id()].store(false, Ordering::SeqCst);
///         }
///         guard.release().await
///     });
/// report.assert_ok();
/// assert_eq!(report.schedules, 300);
/// ```
pub struct Explorer<S = ()> {
    pub(crate) name: String,
    pub(crate) processes: usize,
    pub(crate) session_timeout: Duration,
    pub(crate) faults: u32,
    pub(crate) store_delays: u32,
    pub(crate) fault_kinds: Vec<Fault>,
    pub(crate) locks: LocksFn,
    pub(crate) setup: Option<Setup>,
    pub(crate) paths: Vec<String>,
    pub(crate) order: Option<ChildOrder>,
    pub(crate) writes_together: bool,
    pub(crate) delete_under: Option<Vec<String>>,
    pub(crate) init: InitFn<S>,
    pub(crate) checks: Vec<CheckFn<S>>,
    pub(crate) end_checks: Vec<CheckFn<S>>,
    pub(crate) disabled: Vec<Builtin>,
    pub(crate) strategy: Strategy,
    pub(crate) time_limit: Duration,
    pub(crate) stop_at: Option<WantedFn>,
    pub(crate) max_events: usize,
    quiet_after: Option<Duration>,
    horizon: Option<Duration>,
}

impl<S> fmt::Debug for Explorer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Explorer")
            .field("name", &self.name)
            .field("processes", &self.processes)
            .field("session_timeout", &self.session_timeout)
            .field("faults", &self.faults)
            .field("fault_kinds", &self.fault_kinds)
            .field("strategy", &self.strategy)
            .field("disabled", &self.disabled)
            .finish_non_exhaustive()
    }
}

impl<S> Explorer<S> {
    /// Whether a built-in oracle is on.
    pub(crate) fn on(&self, oracle: Builtin) -> bool {
        !self.disabled.contains(&oracle)
    }

    pub(crate) fn quiet_limit(&self) -> Duration {
        self.quiet_after.unwrap_or(self.session_timeout * 10)
    }

    pub(crate) fn horizon_limit(&self) -> Duration {
        self.horizon.unwrap_or(self.session_timeout * 100)
    }
}

impl Explorer<()> {
    /// An explorer named `name` (in reports): two processes, a session timeout of 4 s, at most one fault per
    /// schedule of the kinds in [`Fault::USUAL`], every built-in oracle on, and an exhaustive search of at most
    /// 100,000 schedules or 60 s.
    pub fn new(name: impl Into<String>) -> Self {
        Explorer {
            name: name.into(),
            processes: 2,
            session_timeout: Duration::from_secs(4),
            faults: 1,
            store_delays: 1,
            fault_kinds: Fault::USUAL.to_vec(),
            locks: Arc::new(|b| b),
            setup: None,
            paths: Vec::new(),
            order: None,
            writes_together: false,
            delete_under: None,
            init: Arc::new(|_| ()),
            checks: Vec::new(),
            end_checks: Vec::new(),
            disabled: Vec::new(),
            strategy: Strategy::Exhaustive { max_schedules: 100_000 },
            time_limit: Duration::from_secs(60),
            stop_at: None,
            max_events: 2_000,
            quiet_after: None,
            horizon: None,
        }
    }
}

impl<S: Clone + Send + Sync + 'static> Explorer<S> {
    /// Runs `n` processes (each a session of its own running the same program, told apart by
    /// [`Process::id`]).
    pub fn processes(mut self, n: usize) -> Self {
        self.processes = n;
        self
    }

    /// The session timeout of every process (4 s by default). Virtual time: a schedule takes no wall time waiting.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// At most `budget` faults per schedule, of these kinds (`budget` 0: none).
    pub fn faults(mut self, budget: u32, kinds: &[Fault]) -> Self {
        self.faults = budget;
        self.fault_kinds = kinds.to_vec();
        self
    }

    /// How many times per schedule virtual time may run while a request to the [`Store`](crate::Store) is in flight
    /// (1 by default): a write that lands long after it was sent, while its sender's lease runs out and a successor's
    /// timers fire. Not a fault (the store promises no time), but each one multiplies the schedules.
    pub fn store_delays(mut self, n: u32) -> Self {
        self.store_delays = n;
        self
    }

    /// How each process's [`Locks`](recipes_core::Locks) is built: a layout, cohorts, a lease margin.
    pub fn locks(mut self, configure: impl Fn(LocksBuilder) -> LocksBuilder + Send + Sync + 'static) -> Self {
        self.locks = Arc::new(configure);
        self
    }

    /// Prepares each schedule's cluster before the processes start.
    pub fn setup(mut self, setup: Setup) -> Self {
        self.setup = Some(setup);
        self
    }

    /// Makes these paths (and their parents) as persistent nodes before the processes start, as an application's
    /// lock paths that exist already. Each path made by the locks themselves (as containers) is a few more requests
    /// per process for the search to order: a program that takes several locks explores much faster on paths that
    /// exist.
    pub fn paths(mut self, paths: &[&str]) -> Self {
        self.paths = paths.iter().map(|p| (*p).to_owned()).collect();
        self
    }

    /// Orders each schedule's cluster's children as etcd's backend does ([`MemCluster::ordered_by`]).
    pub fn child_order(mut self, order: ChildOrder) -> Self {
        self.order = Some(order);
        self
    }

    /// Delivers the watch events of one write queued back to back to a process at once, as ZooKeeper sends them in
    /// one go ([`Controller::events_of_a_write_together`](recipes_mem::Controller::events_of_a_write_together)): the
    /// process may then see a node's change of data and its deletion by one transaction before it acts on either. By
    /// default each event is a step of its own, and the process acts on the first before the next arrives; a
    /// configuration that should cover both runs twice.
    pub fn events_of_a_write_together(mut self) -> Self {
        self.writes_together = true;
        self
    }

    /// Limits [`Fault::OperatorDelete`] to the children of these paths (by default: every ephemeral node).
    pub fn operator_deletes_under(mut self, parents: &[&str]) -> Self {
        self.delete_under = Some(parents.iter().map(|p| (*p).to_owned()).collect());
        self
    }

    /// A state the processes ([`Process::state`]) and the checks ([`Step::state`]) of one schedule share, made
    /// fresh for each schedule by `init`. Call it before [`check`](Explorer::check) and
    /// [`check_at_end`](Explorer::check_at_end): it starts new lists of both.
    ///
    /// The search takes processes to interact only through the cluster and the store: a process whose code branches
    /// on what another process wrote here may have orders the exhaustive search never runs (checks may read it
    /// freely). A process that changes it without a request calls [`Activity::touch`](crate::Activity::touch).
    pub fn state<T: Clone + Send + Sync + 'static>(
        self,
        init: impl Fn(&Schedule<'_>) -> T + Send + Sync + 'static,
    ) -> Explorer<T> {
        Explorer {
            name: self.name,
            processes: self.processes,
            session_timeout: self.session_timeout,
            faults: self.faults,
            store_delays: self.store_delays,
            fault_kinds: self.fault_kinds,
            locks: self.locks,
            setup: self.setup,
            paths: self.paths,
            order: self.order,
            writes_together: self.writes_together,
            delete_under: self.delete_under,
            init: Arc::new(init),
            checks: Vec::new(),
            end_checks: Vec::new(),
            disabled: self.disabled,
            strategy: self.strategy,
            time_limit: self.time_limit,
            stop_at: self.stop_at,
            max_events: self.max_events,
            quiet_after: self.quiet_after,
            horizon: self.horizon,
        }
    }

    /// A check run after every step (every event and the tasks' reactions to it): `Err` fails the schedule.
    pub fn check(mut self, check: impl Fn(&Step<'_, S>) -> Result<(), String> + Send + Sync + 'static) -> Self {
        self.checks.push(Arc::new(check));
        self
    }

    /// A check run once, when the schedule has ended (every process finished or crashed, nothing in flight).
    pub fn check_at_end(mut self, check: impl Fn(&Step<'_, S>) -> Result<(), String> + Send + Sync + 'static) -> Self {
        self.end_checks.push(Arc::new(check));
        self
    }

    /// Switches a built-in oracle off.
    pub fn without(mut self, oracle: Builtin) -> Self {
        self.disabled.push(oracle);
        self
    }

    /// Explores every schedule depth-first, up to `max_schedules` (the default strategy). Of schedules that differ
    /// only in the order of events that commute (two sessions' requests on unrelated nodes), one is run.
    pub fn exhaustive(mut self, max_schedules: u64) -> Self {
        self.strategy = Strategy::Exhaustive { max_schedules };
        self
    }

    /// Runs `runs` seeded random schedules instead (seeds `seed`, `seed + 1`, …): for programs too large to explore
    /// whole. Faults are chosen rarely, so that a schedule gets far before its fault.
    pub fn random_walks(mut self, seed: u64, runs: u64) -> Self {
        self.strategy = Strategy::Random { seed, runs };
        self
    }

    /// Runs `runs` seeded walks that choose by PCT's priorities instead of uniformly (probabilistic concurrency
    /// testing, Burckhardt et al., ASPLOS 2010): each session gets a random priority, the highest one's event runs,
    /// and at `depth - 1` random points the running session drops to the bottom. A bug that needs `depth` steps in
    /// one order is found by a walk with a probability that does not fall with the schedule's length; `depth` 2 or 3
    /// finds most.
    pub fn pct_walks(mut self, seed: u64, runs: u64, depth: u32) -> Self {
        self.strategy = Strategy::Pct { seed, runs, depth };
        self
    }

    /// Stops exploring after this much wall time (60 s by default); the report says the search was bounded.
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = limit;
        self
    }

    /// Goes on past violations whose message does not satisfy `wanted` (to show that one kind is reachable). A
    /// schedule ends at its first violation, wanted or not.
    pub fn stop_at(mut self, wanted: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.stop_at = Some(Arc::new(wanted));
        self
    }

    /// At most this many events per schedule (2,000 by default): a longer one is reported as a livelock.
    pub fn max_events(mut self, n: usize) -> Self {
        self.max_events = n;
        self
    }

    /// How long virtual time may run with nothing happening before the world counts as quiet (10 session timeouts
    /// by default: longer than every timer of the library). A schedule whose processes still wait then fails
    /// [`Builtin::AllFinish`]: raise it for a program that sleeps longer.
    pub fn quiet_after(mut self, quiet: Duration) -> Self {
        self.quiet_after = Some(quiet);
        self
    }

    /// How much virtual time one schedule may take in all (100 session timeouts by default).
    pub fn horizon(mut self, horizon: Duration) -> Self {
        self.horizon = Some(horizon);
        self
    }
}
