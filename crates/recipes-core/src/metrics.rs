//! What the library counts and measures: a snapshot per [`Locks`](crate::Locks) value ([`Metrics`], for tests and
//! benchmarks), and the same events through the [`metrics`](https://docs.rs/metrics) facade, so that any exporter
//! (Prometheus, StatsD, OpenTelemetry) can scrape them.
//!
//! # Through the facade
//! Nothing is recorded until the application installs a recorder (`metrics::set_global_recorder`, or an exporter's
//! `install`). Every series carries the label `recipe`; `path` is added only when
//! [`LocksBuilder::metrics_path_label`](crate::LocksBuilder::metrics_path_label) asks for it (one series per lock
//! path can be many series). [`describe_metrics`] gives each its unit and help text.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `lock_recipes_acquisitions_total` | counter | recipe | acquires that came to hold the lock |
//! | `lock_recipes_wait_seconds` | histogram | recipe | from the call to the guard handed out, for acquires that hold |
//! | `lock_recipes_hold_seconds` | histogram | recipe | from the guard handed out to the release (awaited or on drop) |
//! | `lock_recipes_held` | gauge | recipe | locks held now by this process |
//! | `lock_recipes_timeouts_total` | counter | recipe | timed acquires whose deadline passed |
//! | `lock_recipes_busy_total` | counter | recipe | `try_acquire`s that found the lock held |
//! | `lock_recipes_acquire_errors_total` | counter | recipe, error | acquires that failed, by [`Error::kind`](crate::Error::kind) |
//! | `lock_recipes_lost_total` | counter | recipe, reason | held locks seen lost, by [`LostReason`] |
//! | `lock_recipes_wakeups_total` | counter | recipe | waiters woken to look at the queue again |
//! | `lock_recipes_handoffs_total` | counter | recipe | locks handed to a task of this process on the same session |
//! | `lock_recipes_create_recoveries_total` | counter | recipe | lock nodes whose create reply was lost, found again |
//! | `lock_recipes_cleanups_total` | counter | recipe | nodes deleted after a timeout, an error or a cancelled acquire |
//!
//! The wait and the hold meet at one reading of the clock: the wait includes the confirmation of the lease before the
//! guard is handed out, the hold starts after it.
//!
//! A lost lock is counted once per guard, when the application learns of it: `lost()` resolves, `is_valid()` turns
//! false, or the release finds the node gone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::sync::{Arc, OnceLock};

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, with_recorder, Key, Label, Level, Metadata, Unit,
};
use parking_lot::Mutex;

use crate::error::{Error, LostReason};
use crate::path::LockPath;
use crate::recipe::Recipe;

/// A snapshot of the counters of one [`Locks`](crate::Locks) value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Lock nodes that came to hold a lock.
    pub acquisitions: u64,
    /// Lock nodes released by the application (awaited or on drop).
    pub releases: u64,
    /// Times a waiting acquire was woken by a deletion watch and looked at the queue again.
    pub wakeups: u64,
    /// Locks a release handed to a task of this process waiting in line behind it on the same session, without
    /// waiting for the server (docs/algorithm.md, same-session handoff).
    pub handoffs: u64,
    /// Lock nodes created.
    pub creates: u64,
    /// Creates whose reply was lost and whose node was found again by its attempt id.
    pub create_recoveries: u64,
    /// Lock nodes deleted by cleanup after a timeout, an error or a cancelled acquire.
    pub cleanups: u64,
    /// Timed acquires whose deadline passed.
    pub timeouts: u64,
    /// Held locks seen lost (once per guard).
    pub lost: u64,
}

/// Registers the unit and help text of every series with the installed recorder. Call it once, after installing
/// the recorder.
///
/// ```
/// recipes_core::describe_metrics(); // without a recorder, a no-op
/// ```
pub fn describe_metrics() {
    describe_counter!(ACQUISITIONS, "Acquires that came to hold the lock");
    describe_histogram!(
        WAIT,
        Unit::Seconds,
        "Time from the acquire call to the guard handed out"
    );
    describe_histogram!(HOLD, Unit::Seconds, "Time from the guard handed out to its release");
    describe_gauge!(HELD, "Locks held now by this process");
    describe_counter!(TIMEOUTS, "Timed acquires whose deadline passed");
    describe_counter!(BUSY, "try_acquire calls that found the lock held");
    describe_counter!(ERRORS, "Acquires that failed, by error kind");
    describe_counter!(LOST, "Held locks seen lost, by reason");
    describe_counter!(WAKEUPS, "Waiters woken to look at the queue again");
    describe_counter!(
        HANDOFFS,
        "Locks handed to a task of this process on the same session at release"
    );
    describe_counter!(RECOVERIES, "Lock nodes whose create reply was lost, found again");
    describe_counter!(
        CLEANUPS,
        "Lock nodes deleted after a timeout, an error or a cancelled acquire"
    );
}

const ACQUISITIONS: &str = "lock_recipes_acquisitions_total";
const WAIT: &str = "lock_recipes_wait_seconds";
const HOLD: &str = "lock_recipes_hold_seconds";
const HELD: &str = "lock_recipes_held";
const TIMEOUTS: &str = "lock_recipes_timeouts_total";
const BUSY: &str = "lock_recipes_busy_total";
const ERRORS: &str = "lock_recipes_acquire_errors_total";
const LOST: &str = "lock_recipes_lost_total";
const WAKEUPS: &str = "lock_recipes_wakeups_total";
const HANDOFFS: &str = "lock_recipes_handoffs_total";
const RECOVERIES: &str = "lock_recipes_create_recoveries_total";
const CLEANUPS: &str = "lock_recipes_cleanups_total";

/// The series that carry only the lock's labels, in the order of [`Keys`]' slots.
#[derive(Debug, Clone, Copy)]
enum Series {
    Acquisitions,
    Wait,
    Hold,
    Held,
    Wakeups,
    Handoffs,
    Recoveries,
    Cleanups,
    Timeouts,
    Busy,
}

impl Series {
    const NAMES: [&'static str; 10] = [
        ACQUISITIONS,
        WAIT,
        HOLD,
        HELD,
        WAKEUPS,
        HANDOFFS,
        RECOVERIES,
        CLEANUPS,
        TIMEOUTS,
        BUSY,
    ];
}

/// The keys of the series of one recipe (and, with the path label, one lock path), each built at its first event
/// and kept: cloning the labels into a new key on every event was about a tenth of an uncontended in-memory acquire +
/// release.
#[derive(Debug)]
struct Keys {
    /// The labels, for the series that add one of their own (errors, losses).
    labels: Vec<Label>,
    keys: [OnceLock<Key>; 10],
}

impl Keys {
    fn new(labels: Vec<Label>) -> Self {
        Keys {
            labels,
            keys: Default::default(),
        }
    }

    fn get(&self, series: Series) -> &Key {
        let i = series as usize;
        self.keys[i].get_or_init(|| Key::from_parts(Series::NAMES[i], self.labels.clone()))
    }
}

/// The labels of a lock's series (its recipe, and its path when asked for), with their keys: cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Tags(Arc<Keys>);

/// What the facade's macros would say of each series here: its target and level.
static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// An event counted both in the snapshot and through the facade.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Wakeup,
    Handoff,
    Create,
    CreateRecovery,
    Cleanup,
    Timeout,
    Busy,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    acquisitions: AtomicU64,
    releases: AtomicU64,
    wakeups: AtomicU64,
    handoffs: AtomicU64,
    creates: AtomicU64,
    create_recoveries: AtomicU64,
    cleanups: AtomicU64,
    timeouts: AtomicU64,
    lost: AtomicU64,
    /// Whether series carry the lock path.
    path_label: bool,
    /// Without the path label, each recipe's tags, built at its first acquire.
    by_recipe: Mutex<Vec<(Recipe, Tags)>>,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub fn new(path_label: bool) -> Self {
        Counters {
            path_label,
            ..Counters::default()
        }
    }

    /// The labels of the series of `recipe` on `path`.
    pub fn tags(&self, path: &LockPath, recipe: Recipe) -> Tags {
        let recipe_label = Label::from_static_parts("recipe", recipe.name());
        if self.path_label {
            return Tags(Arc::new(Keys::new(vec![
                recipe_label,
                Label::new("path", path.to_string()),
            ])));
        }
        let mut cached = self.by_recipe.lock();
        if let Some((_, tags)) = cached.iter().find(|(r, _)| *r == recipe) {
            return tags.clone();
        }
        let tags = Tags(Arc::new(Keys::new(vec![recipe_label])));
        cached.push((recipe, tags.clone()));
        tags
    }

    pub fn count(&self, what: Count, tags: &Tags) {
        // The snapshot's counter, and the series (not every event has both).
        let (mine, series) = match what {
            Count::Wakeup => (Some(&self.wakeups), Some(Series::Wakeups)),
            Count::Handoff => (Some(&self.handoffs), Some(Series::Handoffs)),
            Count::Create => (Some(&self.creates), None),
            Count::CreateRecovery => (Some(&self.create_recoveries), Some(Series::Recoveries)),
            Count::Cleanup => (Some(&self.cleanups), Some(Series::Cleanups)),
            Count::Timeout => (Some(&self.timeouts), Some(Series::Timeouts)),
            Count::Busy => (None, Some(Series::Busy)),
        };
        if let Some(c) = mine {
            bump(c);
        }
        if let Some(series) = series {
            with_recorder(|r| r.register_counter(tags.0.get(series), &METADATA)).increment(1);
        }
    }

    /// An acquire came to hold the lock after `waited`.
    pub fn acquired(&self, tags: &Tags, waited: Duration) {
        bump(&self.acquisitions);
        let keys = &tags.0;
        with_recorder(|r| {
            r.register_counter(keys.get(Series::Acquisitions), &METADATA)
                .increment(1);
            r.register_histogram(keys.get(Series::Wait), &METADATA)
                .record(waited.as_secs_f64());
            r.register_gauge(keys.get(Series::Held), &METADATA).increment(1.0);
        });
    }

    /// A held lock was released (awaited or on drop) after `held`.
    pub fn released(&self, tags: &Tags, held: Duration) {
        bump(&self.releases);
        let keys = &tags.0;
        with_recorder(|r| {
            r.register_histogram(keys.get(Series::Hold), &METADATA)
                .record(held.as_secs_f64());
            r.register_gauge(keys.get(Series::Held), &METADATA).decrement(1.0);
        });
    }

    /// An acquire failed.
    pub fn failed(&self, tags: &Tags, e: &Error) {
        let labels: Vec<Label> = tags
            .0
            .labels
            .iter()
            .cloned()
            .chain([Label::from_static_parts("error", e.kind())])
            .collect();
        counter!(ERRORS, labels).increment(1);
    }

    /// A held lock was seen lost (the caller counts each guard once).
    pub fn lost(&self, tags: &Tags, reason: LostReason) {
        bump(&self.lost);
        let labels: Vec<Label> = tags
            .0
            .labels
            .iter()
            .cloned()
            .chain([Label::from_static_parts("reason", reason.as_str())])
            .collect();
        counter!(LOST, labels).increment(1);
    }

    pub fn snapshot(&self) -> Metrics {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Metrics {
            acquisitions: r(&self.acquisitions),
            releases: r(&self.releases),
            wakeups: r(&self.wakeups),
            handoffs: r(&self.handoffs),
            creates: r(&self.creates),
            create_recoveries: r(&self.create_recoveries),
            cleanups: r(&self.cleanups),
            timeouts: r(&self.timeouts),
            lost: r(&self.lost),
        }
    }
}
