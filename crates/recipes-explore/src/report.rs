//! What an exploration reports: its counts, and the failure it found with what replays it.

use std::fmt;
use std::time::Duration;

/// A schedule that broke an oracle.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The explorer's name.
    pub explorer: String,
    /// What went wrong.
    pub message: String,
    /// The choices that replay the schedule ([`Explorer::replay`](crate::Explorer::replay)).
    pub choices: Vec<usize>,
    /// The schedule's events, readable: each event the explorer chose, and under it what the processes noted.
    pub trace: Vec<String>,
    /// The seed of a random walk (`None` for an exhaustive search).
    pub seed: Option<u64>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "explorer {:?}: {}", self.explorer, self.message)?;
        if let Some(seed) = self.seed {
            writeln!(
                f,
                "seed: {seed} (the same walks from this seed, one run, give this schedule again)"
            )?;
        }
        let choices: Vec<String> = self.choices.iter().map(|c| c.to_string()).collect();
        writeln!(f, "replay: explorer.replay(&[{}], program)", choices.join(","))?;
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
    /// The explorer's name.
    pub name: String,
    /// Distinct schedules run.
    pub schedules: u64,
    /// Whether every schedule within the bounds was explored (`false`: stopped at the schedule limit or the time
    /// limit, or at a failure).
    pub complete: bool,
    /// The longest schedule, in events.
    pub longest: usize,
    /// The first failure found, if any.
    pub failure: Option<Failure>,
    /// Whether the schedules were random walks (`complete` then means every walk asked for ran, not every schedule).
    pub random: bool,
    /// Wall time spent.
    pub elapsed: Duration,
}

impl Report {
    pub(crate) fn new(name: &str) -> Report {
        Report {
            name: name.to_owned(),
            schedules: 0,
            complete: false,
            longest: 0,
            failure: None,
            random: false,
            elapsed: Duration::ZERO,
        }
    }

    /// Panics with the failure (its message, seed, replay and trace) if there is one. A search stopped by its
    /// bounds passes: see [`assert_complete`](Report::assert_complete).
    #[track_caller]
    pub fn assert_ok(&self) {
        if let Some(f) = &self.failure {
            panic!("{self}\n{f}");
        }
    }

    /// As [`assert_ok`](Report::assert_ok), and panics too when the search stopped at its schedule or time limit
    /// before it had run every schedule (or every walk): the answer does not hang on the machine's speed.
    #[track_caller]
    pub fn assert_complete(&self) {
        self.assert_ok();
        if !self.complete {
            panic!("the exploration stopped at its limits before it was complete: {self}");
        }
    }

    /// The failure's message, panicking when no schedule failed: for tests that show a bug is found.
    #[track_caller]
    pub fn expect_failure(&self) -> &Failure {
        match &self.failure {
            Some(f) => f,
            None => panic!("expected a failing schedule: {self}"),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} schedules{}, longest {} events, {:.1} s, {}",
            self.name,
            self.schedules,
            match (self.complete, self.random) {
                (true, false) => " (all)",
                (true, true) => " (every walk)",
                (false, _) => " (bounded)",
            },
            self.longest,
            self.elapsed.as_secs_f64(),
            match &self.failure {
                None => "no violation".to_owned(),
                Some(v) => format!("VIOLATION: {}", v.message),
            }
        )
    }
}
