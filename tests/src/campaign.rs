//! The fault campaign's lock load: clients that lock at random while faults are injected, a history of every hold,
//! and the checks run afterwards (history, progress, no deadlock, no orphan).
//!
//! A hold is recorded the way a careful application would trust it: from a moment after `acquire` returned at which
//! the guard's lease was valid, to the last moment at which its lease was still valid (each step of work checks
//! `is_valid()` *after* taking its timestamp, so the timestamp is covered by the lease). Work stops at the first step
//! that finds the lease invalid. Two such intervals overlapping (where one is exclusive) means two clients trusted
//! the lock at once: the worst bug there is.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use recipes_core::backend::BackendExt;
use recipes_core::{Backend, Error, Locks, Recipe};
use tokio::time::Instant;

use crate::history::{check, Event, Mode};

/// The locks of a campaign: one path per recipe family, each client choosing one at random every round.
pub const LOCKS: [(&str, &[Recipe]); 4] = [
    ("fair", &[Recipe::Fair]),
    ("exclusive", &[Recipe::Exclusive]),
    ("reentrant", &[Recipe::Reentrant]),
    ("rw", &[Recipe::Read, Recipe::Read, Recipe::Write]),
];

/// xorshift64, seeded per client from the campaign's printed seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo))
    }
}

/// A seed from `CAMPAIGN_SEED`, or from the clock.
pub fn seed() -> u64 {
    std::env::var("CAMPAIGN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        })
}

/// What the clients did, for the report.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Holds recorded (lease valid on entry).
    pub holds: u64,
    /// Holds whose lease ran out during the work (the client stopped).
    pub lost_midway: u64,
    /// Acquires that timed out.
    pub timeouts: u64,
    /// Holds passed within a cohort (a fencing token's pass above 0).
    pub cohort_passes: u64,
    /// Acquires or releases that failed, by error.
    pub errors: BTreeMap<String, u64>,
}

/// The shared record of a campaign.
#[derive(Debug)]
pub struct Record {
    t0: Instant,
    prefix: String,
    events: Mutex<BTreeMap<&'static str, Vec<Event>>>,
    tally: Mutex<Tally>,
    holding: Mutex<std::collections::BTreeSet<usize>>,
    stop: AtomicBool,
}

impl Record {
    /// A record for locks under `prefix`.
    pub fn new(prefix: &str) -> Arc<Record> {
        Arc::new(Record {
            t0: Instant::now(),
            prefix: prefix.to_owned(),
            events: Mutex::default(),
            tally: Mutex::default(),
            holding: Mutex::default(),
            stop: AtomicBool::new(false),
        })
    }

    /// Nanoseconds since the record began.
    pub fn now(&self) -> u64 {
        (Instant::now() - self.t0).as_nanos() as u64
    }

    /// The path of lock `name`.
    pub fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }

    /// Asks the clients to stop after their current round.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Whether [`stop`](Record::stop) was called.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The tally so far.
    pub fn tally(&self) -> Tally {
        self.tally.lock().unwrap().clone()
    }

    /// The clients holding a lock now (to aim a fault at a holder).
    pub fn holders(&self) -> Vec<usize> {
        self.holding.lock().unwrap().iter().copied().collect()
    }

    /// The times (ns since the start) at which holds began.
    pub fn hold_starts(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .events
            .lock()
            .unwrap()
            .values()
            .flatten()
            .filter_map(|e| match e {
                Event::Acquired { at, .. } => Some(*at),
                Event::Released { .. } => None,
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// The first hold that began after `t`, as a delay from `t`.
    pub fn first_hold_after(&self, t: u64) -> Option<Duration> {
        self.hold_starts()
            .into_iter()
            .find(|&a| a > t)
            .map(|a| Duration::from_nanos(a - t))
    }

    /// Checks every lock's history; the violations, as text.
    pub fn violations(&self) -> Vec<String> {
        let events = self.events.lock().unwrap();
        let mut out = Vec::new();
        for (name, evs) in events.iter() {
            for v in check(evs, &[]) {
                out.push(format!("{name}: {v}"));
            }
        }
        out
    }

    /// Clients (of `0..clients`) that never held any lock.
    pub fn idle_clients(&self, clients: usize) -> Vec<usize> {
        let events = self.events.lock().unwrap();
        (0..clients)
            .filter(|c| {
                !events
                    .values()
                    .flatten()
                    .any(|e| matches!(e, Event::Acquired { client, .. } if client == c))
            })
            .collect()
    }

    fn push(&self, lock: &'static str, e: Event) {
        self.events.lock().unwrap().entry(lock).or_default().push(e);
    }

    fn error(&self, e: &Error) {
        let kind = format!("{e:?}");
        let kind = kind.split(['(', ' ', '{']).next().unwrap_or_default().to_owned();
        *self.tally.lock().unwrap().errors.entry(kind).or_default() += 1;
    }
}

/// One round: lock one of [`LOCKS`] at random (waiting up to `patience`), work a few steps while the lease holds,
/// release. Errors are counted, never fatal: faults make them expected.
pub async fn round(client: usize, locks: &Locks, rec: &Record, rng: &mut Rng, patience: Duration) {
    round_among(&LOCKS, client, locks, rec, rng, patience).await;
}

/// The fair lock of [`LOCKS`] alone: what the tasks of a cohort contend for.
pub const FAIR_ONLY: [(&str, &[Recipe]); 1] = [LOCKS[0]];

/// As [`round`], among `among` (a part of [`LOCKS`]).
pub async fn round_among(
    among: &[(&'static str, &[Recipe])],
    client: usize,
    locks: &Locks,
    rec: &Record,
    rng: &mut Rng,
    patience: Duration,
) {
    let (name, recipes) = among[rng.below(among.len() as u64) as usize];
    let recipe = recipes[rng.below(recipes.len() as u64) as usize];
    let mode = if recipe == Recipe::Read {
        Mode::Shared
    } else {
        Mode::Exclusive
    };
    let lock = locks.lock(rec.path(name), recipe).expect("valid lock path");
    let guard = match lock.acquire_timeout(patience).await {
        Ok(Some(g)) => g,
        Ok(None) => {
            rec.tally.lock().unwrap().timeouts += 1;
            return;
        }
        Err(e) => {
            rec.error(&e);
            return;
        }
    };
    let start = rec.now();
    if guard.is_valid() {
        rec.push(
            name,
            Event::Acquired {
                at: start,
                client,
                token: guard.fencing_token(),
                mode,
            },
        );
        {
            let mut tally = rec.tally.lock().unwrap();
            tally.holds += 1;
            tally.cohort_passes += u64::from(guard.fencing_token() & u128::from(u32::MAX) > 0);
        }
        rec.holding.lock().unwrap().insert(client);
        let mut last = start;
        if recipe == Recipe::Reentrant {
            // Re-enter once: the count goes up without a second node.
            match lock.acquire_timeout(Duration::from_secs(1)).await {
                Ok(Some(inner)) => {
                    if let Err(e) = inner.release().await {
                        rec.error(&e);
                    }
                }
                Ok(None) => rec.tally.lock().unwrap().timeouts += 1,
                Err(e) => rec.error(&e),
            }
        }
        // Mostly short holds; one in four works for 1-4 s, long enough to outlast a session lost mid-hold.
        let (steps, pause) = if rng.below(4) == 0 {
            (10 + rng.below(31), (90, 110))
        } else {
            (1 + rng.below(6), (5, 40))
        };
        for _ in 0..steps {
            tokio::time::sleep(rng.millis(pause.0, pause.1)).await;
            let t = rec.now();
            if guard.is_valid() {
                last = t;
            } else {
                rec.tally.lock().unwrap().lost_midway += 1;
                break;
            }
        }
        rec.push(name, Event::Released { at: last, client });
        rec.holding.lock().unwrap().remove(&client);
    }
    if let Err(e) = guard.release().await {
        rec.error(&e);
    }
}

/// Runs rounds until [`Record::stop`].
pub async fn client_loop(client: usize, locks: Locks, rec: Arc<Record>, rng: Rng, patience: Duration) {
    client_loop_among(&LOCKS, client, locks, rec, rng, patience).await;
}

/// Spawns [`client_loop`] for client `c`, its random choices seeded from the campaign's `seed`.
pub fn spawn_client(
    c: usize,
    locks: Locks,
    rec: &Arc<Record>,
    seed: u64,
    patience: Duration,
) -> tokio::task::JoinHandle<()> {
    let rng = Rng(seed ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    tokio::spawn(client_loop(c, locks, rec.clone(), rng, patience))
}

/// As [`client_loop`], among `among` (a part of [`LOCKS`]).
pub async fn client_loop_among(
    among: &'static [(&'static str, &'static [Recipe])],
    client: usize,
    locks: Locks,
    rec: Arc<Record>,
    mut rng: Rng,
    patience: Duration,
) {
    while !rec.stop.load(Ordering::SeqCst) {
        round_among(among, client, &locks, &rec, &mut rng, patience).await;
    }
}

/// After the faults: every client takes every lock once more (`limit` for each; the clients at once), proving that
/// nothing is wedged. Returns the failures, as text.
pub async fn every_lock_once(clients: &[Locks], rec: &Arc<Record>, limit: Duration) -> Vec<String> {
    let mut set = tokio::task::JoinSet::new();
    for (c, locks) in clients.iter().enumerate() {
        let (locks, rec) = (locks.clone(), rec.clone());
        set.spawn(async move {
            let mut out = Vec::new();
            for (name, recipes) in LOCKS {
                let lock = locks
                    .lock(rec.path(name), recipes[recipes.len() - 1])
                    .expect("valid lock path");
                match lock.acquire_timeout(limit).await {
                    Ok(Some(g)) => {
                        if let Err(e) = g.release().await {
                            out.push(format!("client {c} releasing {name}: {e}"));
                        }
                    }
                    Ok(None) => out.push(format!("client {c} could not take {name} within {limit:?}: deadlock?")),
                    Err(e) => out.push(format!("client {c} taking {name}: {e}")),
                }
            }
            out
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.extend(r.expect("client task"));
    }
    out
}

/// Waits for the clients' tasks, all together within `limit`; a task still running then is stuck (deadlock).
pub async fn join_clients(tasks: Vec<tokio::task::JoinHandle<()>>, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    for (c, mut t) in tasks.into_iter().enumerate() {
        match tokio::time::timeout_at(deadline, &mut t).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => out.push(format!("client {c} failed: {e}")),
            Err(_) => {
                t.abort();
                out.push(format!(
                    "client {c} still in its round {limit:?} after the stop: deadlock"
                ));
            }
        }
    }
    out
}

/// Lock nodes under the campaign's locks, polled for up to `limit` (a release's delete may still be on its way):
/// once every client is idle, any node left belongs to nobody, an orphan. Returns the orphans' paths.
pub async fn orphans(observer: &dyn Backend, rec: &Record, limit: Duration) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let mut left = Vec::new();
        for (name, _) in LOCKS {
            let path = rec.path(name);
            match observer.current().children(&path).await {
                Ok(c) => left.extend(c.into_iter().map(|n| format!("{path}/{n}"))),
                Err(Error::NoNode(_)) => {}
                Err(e) => left.push(format!("{path}: listing failed: {e}")),
            }
        }
        if left.is_empty() || t0.elapsed() > limit {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (up to `limit`) for a hold that began after `t`; the delay from `t`.
pub async fn wait_progress(rec: &Record, t: u64, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(d) = rec.first_hold_after(t) {
            return Some(d);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}
