//! The SIGKILL campaign on `zklock` processes, for any store (`crates/recipes-cli/tests/campaign.rs` runs it on
//! ZooKeeper, `campaign_etcd.rs` on a three-member etcd cluster).
//!
//! Client slots (half on a fair lock, half on a read/write lock taking read or write at random) run `zklock` over and
//! over for `secs` while a killer SIGKILLs a random running `zklock`, holding or waiting, every 200–800 ms. Each
//! command does its work in a *background* subshell (so the kill has to reach a grandchild) and appends timestamped
//! lines to a log: `A` on entry with its fencing token, `W` per step, `R` on leaving. The history checker then
//! verifies, over the log:
//! - no two holds overlap (readers may share), a hold spanning from its `A` line to its last line;
//! - fencing tokens increase;
//! - no line was written more than 500 ms after its `zklock` was killed (the group died with it);
//! - every `zklock` ended: none stuck after the campaign (no deadlock);
//! - once the dead sessions expired, no lock node is left (no orphan).

#![allow(clippy::print_stdout)] // the campaign reports its figures

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use recipes_conformance::campaign::{seed, Rng};
use recipes_conformance::history::{check, Event, Mode};

use super::ZKLOCK;

/// Where a SIGKILL campaign runs.
pub struct Target {
    /// What its `CAMPAIGN` line calls it.
    pub label: &'static str,
    /// zklock's options before the recipe: the store and the session timeout.
    pub args: Vec<String>,
    /// The session timeout: a killed holder's node goes within it.
    pub session: Duration,
    /// The two lock paths: the fair one, the read/write one.
    pub paths: [&'static str; 2],
    /// Client slots (half on each path).
    pub slots: usize,
    /// Counts the lock nodes left under the paths.
    pub orphans: Box<dyn Fn() -> usize>,
    /// Run once, half way through, beside the killer (a fault of the store's); says what it did.
    pub midway: Option<Box<dyn FnOnce() -> String + Send>>,
}

/// The campaign's length: `CAMPAIGN_SECS`, or `default` seconds.
pub fn campaign_secs(default: u64) -> u64 {
    std::env::var("CAMPAIGN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// How long after its zklock's death a command's line still counts as written before the group was killed.
const DEATH_MARGIN_NS: u64 = 500_000_000;

const SCRIPT: &str = r#"
work() {
  echo "A $CAMPAIGN_ID $ZKLOCK_FENCING_TOKEN $CAMPAIGN_MODE $EPOCHREALTIME" >> "$CAMPAIGN_LOG"
  i=0
  while [ "$i" -lt "$CAMPAIGN_STEPS" ]; do
    sleep 0.02
    echo "W $CAMPAIGN_ID $EPOCHREALTIME" >> "$CAMPAIGN_LOG"
    i=$((i + 1))
  done
}
work &
wait
echo "R $CAMPAIGN_ID $EPOCHREALTIME" >> "$CAMPAIGN_LOG"
"#;

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    index: usize,
    path: &'static str,
    /// Fair, or read/write chosen per run.
    rw: bool,
}

/// A slot's current zklock run, if any: its id and process (reaped only by the slot's thread, under the lock).
type Running = Mutex<Option<(u64, Child)>>;

/// One zklock run: what the test knows of it.
#[derive(Debug, Default, Clone)]
struct Run {
    slot: usize,
    killed_at: Option<u64>,
    exit: Option<i32>,
    stuck: bool,
}

#[derive(Debug, Default)]
struct Hold {
    slot: usize,
    path_rw: bool,
    token: u128,
    mode: Option<Mode>,
    first: u64,
    last: u64,
    released: bool,
}

/// The runs whose command wrote its `A` line and not yet its `R` line.
fn holding_ids(log: &str) -> Vec<u64> {
    let mut open = std::collections::BTreeSet::new();
    for line in log.lines() {
        let mut f = line.split_whitespace();
        match (f.next(), f.next().and_then(|id| id.parse::<u64>().ok())) {
            (Some("A"), Some(id)) => {
                open.insert(id);
            }
            (Some("R"), Some(id)) => {
                open.remove(&id);
            }
            _ => {}
        }
    }
    open.into_iter().collect()
}

fn parse_time(s: &str) -> u64 {
    // $EPOCHREALTIME: seconds.microseconds
    let (sec, micro) = s.split_once('.').expect("EPOCHREALTIME");
    sec.parse::<u64>().unwrap() * 1_000_000_000 + micro.parse::<u64>().unwrap() * 1_000
}

/// Runs the campaign for `secs` on `target`; panics with every failure found.
pub fn run(target: Target, secs: u64) {
    let Target {
        label,
        args,
        session,
        paths,
        slots: slot_count,
        orphans: count_orphans,
        midway,
    } = target;
    let seed = seed();
    println!("{label} campaign: {secs} s, seed {seed}");
    let dir = std::env::temp_dir().join(format!("zklock-campaign-{}-{}", std::process::id(), now_ns()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log");
    std::fs::write(&log, "").unwrap();

    let half = slot_count / 2;
    let slots: Vec<Slot> = (0..slot_count)
        .map(|index| Slot {
            index,
            path: paths[usize::from(index >= half)],
            rw: index >= half,
        })
        .collect();
    let running: Arc<Vec<Running>> = Arc::new(slots.iter().map(|_| Mutex::new(None)).collect());
    let runs: Arc<Mutex<BTreeMap<u64, Run>>> = Arc::default();
    let next_id = Arc::new(AtomicU64::new(1));
    let start = Instant::now();
    let campaign = Duration::from_secs(secs);
    // After the campaign, every zklock still running must end by then: holds are short and sessions expire.
    let drain_limit = campaign + Duration::from_secs(60);

    let mut threads = Vec::new();
    for slot in slots.clone() {
        let (running, runs, next_id, args, log, dir) = (
            running.clone(),
            runs.clone(),
            next_id.clone(),
            args.clone(),
            log.clone(),
            dir.clone(),
        );
        let mut rng = Rng(seed ^ (slot.index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        threads.push(std::thread::spawn(move || {
            while start.elapsed() < campaign {
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                let (recipe, mode) = match (slot.rw, rng.below(3)) {
                    (false, _) => ("fair", "X"),
                    (true, 0) => ("write", "X"),
                    (true, _) => ("read", "S"),
                };
                let steps = 5 + rng.below(76);
                let stderr = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join(format!("stderr-{}", slot.index)))
                    .unwrap();
                let child = Command::new(ZKLOCK)
                    .args(&args)
                    .args(["-r", recipe, slot.path, "--"])
                    .args(["bash", "-c", SCRIPT])
                    .env("LC_ALL", "C")
                    .env("CAMPAIGN_LOG", &log)
                    .env("CAMPAIGN_ID", id.to_string())
                    .env("CAMPAIGN_MODE", mode)
                    .env("CAMPAIGN_STEPS", steps.to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(stderr)
                    .spawn()
                    .expect("spawn zklock");
                runs.lock().unwrap().insert(
                    id,
                    Run {
                        slot: slot.index,
                        ..Run::default()
                    },
                );
                *running[slot.index].lock().unwrap() = Some((id, child));
                // Reap it here only, under the lock, so that the killer never signals a reaped (reusable) pid.
                loop {
                    {
                        let mut r = running[slot.index].lock().unwrap();
                        let (_, child) = r.as_mut().unwrap();
                        if let Some(st) = child.try_wait().unwrap() {
                            runs.lock().unwrap().get_mut(&id).unwrap().exit = st.code();
                            *r = None;
                            break;
                        }
                        if start.elapsed() > drain_limit {
                            let _ = child.kill();
                            let _ = child.wait();
                            runs.lock().unwrap().get_mut(&id).unwrap().stuck = true;
                            *r = None;
                            break;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }));
    }

    // A fault of the store's, half way through.
    let midway = midway.map(|f| {
        std::thread::spawn(move || {
            std::thread::sleep(campaign / 2);
            f()
        })
    });
    // The killer: half the time at a slot whose command is holding (an `A` line and no `R` yet), else at any slot.
    let mut rng = Rng(seed);
    let mut kills = 0u64;
    while start.elapsed() < campaign {
        std::thread::sleep(Duration::from_millis(200 + rng.below(600)));
        let holding: Vec<usize> = if rng.below(2) == 0 {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let ids = holding_ids(&text);
            let runs = runs.lock().unwrap();
            ids.iter()
                .filter_map(|id| runs.get(id))
                .filter(|r| r.killed_at.is_none() && r.exit.is_none() && !r.stuck)
                .map(|r| r.slot)
                .collect()
        } else {
            Vec::new()
        };
        let i = if holding.is_empty() {
            rng.below(slots.len() as u64) as usize
        } else {
            holding[rng.below(holding.len() as u64) as usize]
        };
        let mut r = running[i].lock().unwrap();
        if let Some((id, child)) = r.as_mut() {
            if child.try_wait().unwrap().is_none() && child.kill().is_ok() {
                runs.lock().unwrap().get_mut(id).unwrap().killed_at = Some(now_ns());
                kills += 1;
            }
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    let midway = midway.map(|t| t.join().unwrap());
    let ran_for = start.elapsed();

    // Analysis.
    let text = std::fs::read_to_string(&log).unwrap();
    let runs = runs.lock().unwrap().clone();
    let mut holds: BTreeMap<u64, Hold> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let id: u64 = f[1].parse().unwrap();
        let h = holds.entry(id).or_default();
        match f[0] {
            "A" => {
                h.slot = runs[&id].slot;
                h.path_rw = slots[h.slot].rw;
                h.token = f[2].parse().unwrap();
                h.mode = Some(if f[3] == "S" { Mode::Shared } else { Mode::Exclusive });
                h.first = parse_time(f[4]);
                h.last = h.first;
            }
            "W" => h.last = h.last.max(parse_time(f[2])),
            "R" => {
                h.last = h.last.max(parse_time(f[2]));
                h.released = true;
            }
            other => panic!("bad log line {other:?}"),
        }
    }
    let mut failures = Vec::new();
    for (label, rw) in [("fair", false), ("rw", true)] {
        let mut events = Vec::new();
        for (&id, h) in holds.iter().filter(|(_, h)| h.path_rw == rw) {
            let Some(mode) = h.mode else {
                failures.push(format!("run {id} wrote without an A line"));
                continue;
            };
            let client = id as usize;
            events.push(Event::Acquired {
                at: h.first,
                client,
                token: h.token,
                mode,
            });
            events.push(Event::Released { at: h.last, client });
        }
        for v in check(&events, &[]) {
            failures.push(format!("{label}: {v}"));
        }
    }
    let mut late_lines = 0;
    for (id, h) in &holds {
        if let Some(k) = runs[id].killed_at {
            if h.last > k + DEATH_MARGIN_NS {
                late_lines += 1;
                failures.push(format!(
                    "run {id} wrote {} ms after its zklock was killed",
                    (h.last - k) / 1_000_000
                ));
            }
        }
    }
    let stuck: Vec<u64> = runs.iter().filter(|(_, r)| r.stuck).map(|(&id, _)| id).collect();
    if !stuck.is_empty() {
        failures.push(format!(
            "zklock runs still waiting {drain_limit:?} after the start: {stuck:?}"
        ));
    }
    let killed_holding = runs
        .iter()
        .filter(|(id, r)| r.killed_at.is_some() && holds.get(id).is_some_and(|h| !h.released))
        .count();
    let lost = runs.values().filter(|r| r.exit == Some(70)).count();
    let odd_exits: Vec<(u64, Option<i32>)> = runs
        .iter()
        .filter(|(_, r)| r.killed_at.is_none() && !r.stuck && !matches!(r.exit, Some(0) | Some(70)))
        .map(|(&id, r)| (id, r.exit))
        .collect();
    if !odd_exits.is_empty() {
        failures.push(format!("zklock runs with unexpected exit statuses: {odd_exits:?}"));
    }
    // The longest pause between one hold's end and the next hold's start, per lock: a killed holder's lock passes
    // on only when its session expires.
    let mut longest_gap = Duration::ZERO;
    for rw in [false, true] {
        let mut spans: Vec<(u64, u64)> = holds
            .values()
            .filter(|h| h.path_rw == rw)
            .map(|h| (h.first, h.last))
            .collect();
        spans.sort();
        let mut end = 0;
        for (a, b) in spans {
            if end > 0 && a > end {
                longest_gap = longest_gap.max(Duration::from_nanos(a - end));
            }
            end = end.max(b);
        }
    }

    // Orphans: once every dead session has expired, both locks are empty.
    std::thread::sleep(session * 2 + Duration::from_secs(1));
    let orphans = count_orphans();
    if orphans > 0 {
        failures.push(format!("{orphans} lock nodes left after the dead sessions expired"));
    }

    let fair_holds = holds.values().filter(|h| !h.path_rw).count();
    let rw_holds = holds.values().filter(|h| h.path_rw).count();
    println!(
        "CAMPAIGN {label}: {secs} s (ran {:.0} s), {slot_count} zklock clients, seed {seed}: {} runs, holds {} (fair {fair_holds}, \
         read/write {rw_holds}), kills {kills} ({killed_holding} while holding), lost {lost}, \
         longest pause between holds {:.2} s, overlaps and token errors {}, late lines {late_lines}, \
         stuck {}, orphans {orphans}{}",
        ran_for.as_secs_f64(),
        runs.len(),
        fair_holds + rw_holds,
        longest_gap.as_secs_f64(),
        failures.iter().filter(|f| f.starts_with("fair:") || f.starts_with("rw:")).count(),
        stuck.len(),
        midway.map(|m| format!("; {m}")).unwrap_or_default(),
    );
    assert!(
        failures.is_empty(),
        "{} failures (logs in {}):\n{}",
        failures.len(),
        dir.display(),
        failures.join("\n")
    );
    // At least one hold per lock every 6 s (a full run makes about one a second).
    let least = (secs / 6).max(1) as usize;
    assert!(
        fair_holds >= least && rw_holds >= least,
        "too little progress: {fair_holds} / {rw_holds} holds"
    );
    assert!(killed_holding >= 3, "the killer hit only {killed_holding} holders");
    std::fs::remove_dir_all(PathBuf::from(&dir)).unwrap();
}
