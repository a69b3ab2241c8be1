//! The strategies: the depth-first search, the seeded walks, and the replay of one schedule.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;

use crate::choice::Choice;
use crate::chooser::Chooser;
use crate::explorer::{Explorer, ProgramFn, Strategy};
use crate::process::Process;
use crate::report::{Failure, Report};
use crate::world;
use crate::Ending;

impl<S: Clone + Send + Sync + 'static> Explorer<S> {
    fn program<F, Fut>(program: F) -> ProgramFn<S>
    where
        F: Fn(Process<S>) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Ending,
    {
        Arc::new(move |p| program(p).map(Ending::describe).boxed())
    }

    /// Explores `program`, run by every process, with the strategy set; stops at the first violation.
    pub fn run<F, Fut>(&self, program: F) -> Report
    where
        F: Fn(Process<S>) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Ending,
    {
        let program = Self::program(program);
        match self.strategy {
            Strategy::Exhaustive { max_schedules } => self.search(&program, max_schedules),
            Strategy::Random { seed, runs } => self.walks(&program, seed, runs, None),
            Strategy::Pct { seed, runs, depth } => self.walks(&program, seed, runs, Some(depth)),
        }
    }

    /// Runs the one schedule `choices` gives (a [`Failure`]'s), traced: its trace, and its violation if any.
    pub fn replay<F, Fut>(&self, choices: &[usize], program: F) -> (Vec<String>, Option<String>)
    where
        F: Fn(Process<S>) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Ending,
    {
        self.replay_with(&Self::program(program), choices)
    }

    fn replay_with(&self, program: &ProgramFn<S>, choices: &[usize]) -> (Vec<String>, Option<String>) {
        let mut chooser = Chooser::replay(choices.to_vec());
        let outcome = world::run(self, program, &mut chooser, true);
        (outcome.trace, outcome.violation)
    }

    fn wanted(&self, message: &str) -> bool {
        self.stop_at.as_ref().is_none_or(|w| w(message))
    }

    fn failure(&self, program: &ProgramFn<S>, message: String, choices: &[usize], seed: Option<u64>) -> Failure {
        let (mut trace, again) = self.replay_with(program, choices);
        if again.as_deref() != Some(message.as_str()) {
            trace.push(format!(
                "(this replay ended with {again:?}, not the failure: the program did not repeat its schedule; \
                 threads, real I/O, randomness or an unbiased `select!` in it?)"
            ));
        }
        Failure {
            explorer: self.name.clone(),
            message,
            trace,
            choices: choices.to_vec(),
            seed,
        }
    }

    fn search(&self, program: &ProgramFn<S>, max_schedules: u64) -> Report {
        let start = Instant::now();
        let mut chooser: Chooser<Choice> = Chooser::search();
        let mut report = Report::new(&self.name);
        loop {
            chooser.restart();
            let outcome = world::run(self, program, &mut chooser, false);
            report.schedules += 1;
            report.longest = report.longest.max(outcome.events);
            let message = if chooser.nondeterministic {
                Some(
                    "a replayed schedule met different choices: the run is not deterministic (threads, real I/O \
                     or randomness in the program?)"
                        .to_owned(),
                )
            } else {
                outcome.violation.filter(|m| self.wanted(m))
            };
            if let Some(message) = message {
                report.failure = Some(self.failure(program, message, &chooser.made, None));
                break;
            }
            if !chooser.advance() {
                report.complete = true;
                break;
            }
            if report.schedules >= max_schedules || start.elapsed() >= self.time_limit {
                break;
            }
        }
        report.elapsed = start.elapsed();
        report
    }

    /// Seeded walks: uniform, or PCT's of `depth` (its change points among the first 100 steps, the length of most
    /// schedules: fixed, so that one seed gives one schedule).
    fn walks(&self, program: &ProgramFn<S>, seed: u64, runs: u64, pct: Option<u32>) -> Report {
        let start = Instant::now();
        let mut report = Report::new(&self.name);
        report.random = true;
        for s in seed..seed.saturating_add(runs) {
            let mut chooser = match pct {
                Some(depth) => Chooser::pct(s, depth, 100),
                None => Chooser::random(s),
            };
            let outcome = world::run(self, program, &mut chooser, false);
            report.schedules += 1;
            report.longest = report.longest.max(outcome.events);
            if let Some(message) = outcome.violation.filter(|m| self.wanted(m)) {
                report.failure = Some(self.failure(program, message, &chooser.made, Some(s)));
                break;
            }
            if start.elapsed() >= self.time_limit {
                break;
            }
        }
        report.complete = report.failure.is_none() && report.schedules == runs;
        report.elapsed = start.elapsed();
        report
    }
}
