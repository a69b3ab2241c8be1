//! The model checker in CI (docs/reliability.md): exhaustive within a bound for two clients of every recipe, seeded
//! random walks for larger configurations, and proof that it finds each bug it exists to find.
//!
//! `MODEL_ALL=1` explores every exhaustive configuration exhaustively, the variants CI walks at random
//! ([`WALKED_IN_CI`]) included; `MODEL_DEEP=1` explores deeper (all of them, two faults per schedule, longer random
//! walks; `MODEL_DEEP_SECS` bounds each configuration's time, an hour by default); `MODEL_REPLAY=<config>:<choices>`
//! replays one schedule of a configuration and prints its trace.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Duration;

use recipes_core::mutants;
use recipes_model::configs::{exhaustive, random, sensitivity, switched};
use recipes_model::{explore, explore_for, random_walks, replay, replay_hint, Bounds, Config};

fn deep() -> bool {
    std::env::var_os("MODEL_DEEP").is_some()
}

/// Every exhaustive configuration explored exhaustively: `MODEL_ALL` or `MODEL_DEEP`.
fn all() -> bool {
    deep() || std::env::var_os("MODEL_ALL").is_some()
}

/// Exhaustive configurations that CI (scripts/test) walks at random, bounded by a count, and `MODEL_ALL=1` explores
/// whole (decision 77). Each is a variant of one CI explores whole, one setting apart: a second order of the same
/// queue (`semaphore-by-creation` beside `semaphore` and `fair-by-creation`, `read-write-by-creation` beside
/// `read-write`), another partner or patience (`writer-downgrade` beside `downgrade`, `try` beside `timed` and
/// `abandoned`), more permits (`semaphore-many` beside `semaphore`). 265 s of a core's 818 s of exhaustive exploration,
/// on a quiet machine.
const WALKED_IN_CI: [&str; 5] = [
    "semaphore-by-creation",
    "semaphore-many",
    "writer-downgrade",
    "try",
    "read-write-by-creation",
];

/// The seeded random walks of a configuration in [`WALKED_IN_CI`], in CI: a count, so that every run walks the same
/// schedules (one or two seconds of a core each); the time bound only guards against a runaway.
const CI_WALKS: u64 = 5_000;

/// The time bound per configuration of a deep run: `MODEL_DEEP_SECS`, or an hour.
fn deep_secs() -> u64 {
    std::env::var("MODEL_DEEP_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3600)
}

fn config(name: &str) -> Config {
    exhaustive()
        .into_iter()
        .chain(random())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no configuration {name}"))
}

/// Explores one configuration exhaustively (or, in CI, walks one of [`WALKED_IN_CI`] at random); fails with the
/// violation's trace.
fn exhaustive_run(name: &str) {
    let mut c = config(name);
    if deep() {
        c.faults = 2;
    }
    if !all() && WALKED_IN_CI.contains(&name) {
        let r = random_walks(&c, 1, CI_WALKS, Duration::from_secs(600));
        println!("MODEL {r} (random walks from seed 1; MODEL_ALL=1 explores every schedule)");
        if let Some(v) = &r.failure {
            panic!("{v}{}", replay_hint(v));
        }
        assert!(r.complete, "{name}: the walks did not finish: {r}");
        return;
    }
    // In CI the count bounds the search: every configuration finishes well within it (about 215,000 schedules at
    // most), and one that outgrows it fails below. The time bound is only a guard against a runaway: the checker runs
    // at the lowest priority beside the rest of scripts/test, and on a slow machine a configuration of 177,000
    // schedules took 137 s there, and more than 150 s in CI (stop 47): 1,800 s, four times a slow run's margin again.
    let bounds = Bounds {
        max_schedules: if deep() { 50_000_000 } else { 400_000 },
        time: Duration::from_secs(if deep() { deep_secs() } else { 1800 }),
    };
    let r = explore(&c, bounds);
    println!("MODEL {r}");
    if let Some(v) = &r.failure {
        panic!("{v}{}", replay_hint(v));
    }
    assert!(
        r.complete || deep(),
        "{name}: the bounded exploration did not finish: {r}"
    );
}

macro_rules! exhaustive_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            /// Every schedule of the configuration, with at most one fault (two with MODEL_DEEP); in CI, seeded random
            /// walks of those in `WALKED_IN_CI`.
            #[test]
            #[ignore = "CPU-bound: run alone by scripts/test's model-checker step"]
            fn $test() {
                exhaustive_run($name);
            }
        )*

        /// Every exhaustive configuration has its test, and every name CI walks instead is one of them.
        #[test]
        fn every_configuration_is_explored() {
            let tested = [$($name),*];
            for c in exhaustive() {
                assert!(tested.contains(&c.name), "configuration {} has no test", c.name);
            }
            for name in WALKED_IN_CI {
                assert!(tested.contains(&name), "{name} in WALKED_IN_CI is no exhaustive configuration");
            }
        }
    };
}

exhaustive_tests! {
    exhaustive_exclusive => "exclusive",
    exhaustive_fair => "fair",
    exhaustive_reentrant => "reentrant",
    exhaustive_read_write => "read-write",
    exhaustive_downgrade => "downgrade",
    exhaustive_writer_downgrade => "writer-downgrade",
    exhaustive_timed => "timed",
    exhaustive_try => "try",
    exhaustive_abandoned => "abandoned",
    exhaustive_mixed_recipes => "mixed-recipes",
    exhaustive_curator => "curator",
    exhaustive_kazoo_wrapped => "kazoo-wrapped",
    exhaustive_native_wrapped => "native-wrapped",
    exhaustive_semaphore => "semaphore",
    exhaustive_semaphore_many => "semaphore-many",
    exhaustive_multi => "multi",
    exhaustive_semaphore_counts_reaped => "semaphore-counts-reaped",
    exhaustive_fair_by_creation => "fair-by-creation",
    exhaustive_read_write_by_creation => "read-write-by-creation",
    exhaustive_semaphore_by_creation => "semaphore-by-creation",
    exhaustive_election => "election",
    exhaustive_election_observed => "election-observed",
    exhaustive_curator_latch => "curator-latch",
}

/// Configurations that need a switch (the `first` mark written by every waiter, with three clients): too many
/// schedules to walk them all, so seeded random walks.
#[test]
#[ignore = "CPU-bound: run alone by scripts/test's model-checker step"]
fn random_walks_with_switches() {
    let (runs, time) = if deep() { (200_000, 1800) } else { (3_000, 40) };
    for (switches, c) in switched() {
        for &s in &switches {
            mutants::set(s, true);
        }
        let r = random_walks(&c, 1, runs, Duration::from_secs(time));
        for &s in &switches {
            mutants::set(s, false);
        }
        println!("MODEL {r} (random walks, with {switches:?})");
        if let Some(v) = &r.failure {
            panic!("{v}{}", replay_hint(v));
        }
    }
}

/// Seeded random walks of three and four clients, and of tasks sharing one session, with two faults.
#[test]
#[ignore = "CPU-bound: run alone by scripts/test's model-checker step"]
fn random_walks_of_larger_configurations() {
    // 20,000 walks per configuration take about 85 s in all on a quiet machine; scripts/test runs this test first, in
    // the background beside the workspace's tests, where the walks get a fraction of a core: the time bound leaves
    // them room for most of their count there (about 240,000 walks in all under 240 s). 100 s since the tenth
    // session: the checker had become scripts/test's last step (its tests four at a time left it less of the cores),
    // and the walks' thread is its longest.
    let (runs, time) = if deep() { (400_000, 3600) } else { (20_000, 100) };
    let seed: u64 = std::env::var("MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let configs = random();
    let each = Duration::from_secs(time) / configs.len() as u32;
    for c in configs {
        let r = random_walks(&c, seed, runs, each);
        println!("MODEL {r} (random walks from seed {seed})");
        if let Some(v) = &r.failure {
            panic!("{v}{}", replay_hint(v));
        }
    }
}

/// With each known bug switched back on, the checker finds it; its trace replays it exactly.
#[test]
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches mutants on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
fn the_checker_finds_every_known_bug() {
    // `MODEL_BUG=<words>`: only the bugs whose description contains them (while working on one).
    let only = std::env::var("MODEL_BUG").ok();
    let chosen = sensitivity()
        .into_iter()
        .filter(|s| only.as_deref().is_none_or(|w| s.problem.contains(w)));
    for s in chosen {
        for m in s.mutants {
            mutants::set(*m, true);
        }
        let shows_as = s.shows_as;
        let shows = move |m: &str| shows_as.split('|').any(|part| m.contains(part));
        let r = if s.by_walks {
            random_walks(&s.config, 1, 200_000, Duration::from_secs(60))
        } else {
            let bounds = Bounds {
                max_schedules: 200_000,
                time: Duration::from_secs(60),
            };
            explore_for(&s.config, bounds, shows)
        };
        let replayed = r.failure.as_ref().map(|v| replay(&s.config, &v.choices));
        for m in s.mutants {
            mutants::set(*m, false);
        }
        let v = r
            .failure
            .unwrap_or_else(|| panic!("problem {}: not found in {} schedules", s.problem, r.schedules));
        println!(
            "MODEL finds problem {} after {} schedules: {}",
            s.problem, r.schedules, v.message
        );
        assert!(shows(&v.message), "problem {}: found as {}", s.problem, v.message);
        let (_, again) = replayed.expect("replayed");
        assert_eq!(
            again.as_deref(),
            Some(v.message.as_str()),
            "the trace replays the violation"
        );
        // And without the mutant, the same schedule is fine.
        let (_, fixed) = replay(&s.config, &v.choices);
        assert_eq!(
            fixed, None,
            "problem {}: the fixed code fails the same schedule",
            s.problem
        );
    }
}

/// The exploration is deterministic: the same configuration gives the same number of schedules twice.
#[test]
#[ignore = "CPU-bound: run alone by scripts/test's model-checker step"]
fn exploration_is_deterministic() {
    let c = config("read-write");
    let bounds = Bounds {
        max_schedules: 3_000,
        time: Duration::from_secs(60),
    };
    let (a, b) = (explore(&c, bounds), explore(&c, bounds));
    assert!(a.failure.is_none() && b.failure.is_none());
    assert_eq!((a.schedules, a.longest), (b.schedules, b.longest));
}

/// `MODEL_REPLAY=<config>:<choices>` prints one schedule's trace (a no-op without it).
#[test]
fn replay_from_environment() {
    let Ok(spec) = std::env::var("MODEL_REPLAY") else {
        return;
    };
    let (name, choices) = spec.split_once(':').expect("MODEL_REPLAY=<config>:<choices>");
    let choices: Vec<usize> = choices
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let mut c = config(name);
    if deep() {
        c.faults = 2;
    }
    let (trace, violation) = replay(&c, &choices);
    for (i, line) in trace.iter().enumerate() {
        println!("{:>4}. {line}", i + 1);
    }
    println!("violation: {violation:?}");
}
