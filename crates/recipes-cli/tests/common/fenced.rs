//! A store fenced by the tokens `zklock` hands its command, the commands that write to it, and the pause attack
//! (for any store: `campaign.rs` runs it on ZooKeeper, `campaign_etcd.rs` on etcd).

#![allow(clippy::print_stdout)] // the campaign reports its figures

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{children_of, signal, ZKLOCK};

/// A store that keeps the highest fencing token it has seen and rejects writes carrying a lower one: what an
/// application puts beside a lock to stop a paused holder from doing damage. Commands write `W <who> <token>` lines
/// to it over TCP; it records each write with its arrival time and verdict.
pub struct FencedStore {
    pub port: u16,
    pub writes: Arc<Mutex<Vec<StoreWrite>>>,
    /// `T <who> <n>` lines: a value a command reports (its session timeout).
    pub reports: Arc<Mutex<Vec<(String, u64)>>>,
}

#[derive(Debug, Clone)]
pub struct StoreWrite {
    pub who: String,
    pub token: u128,
    pub at: Instant,
    pub accepted: bool,
}

impl FencedStore {
    pub fn start() -> FencedStore {
        use std::io::BufRead;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let writes: Arc<Mutex<Vec<StoreWrite>>> = Arc::default();
        let reports: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
        let highest = Arc::new(Mutex::new(0u128));
        let (w, r) = (writes.clone(), reports.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (w, highest, reports) = (w.clone(), highest.clone(), r.clone());
                std::thread::spawn(move || {
                    for line in std::io::BufReader::new(conn).lines().map_while(Result::ok) {
                        let f: Vec<&str> = line.split_whitespace().collect();
                        if f.first() == Some(&"T") {
                            if let (Some(who), Some(t)) = (f.get(1), f.get(2).and_then(|t| t.parse::<u64>().ok())) {
                                reports.lock().unwrap().push((who.to_string(), t));
                            }
                            continue;
                        }
                        let (Some(who), Some(token)) = (f.get(1), f.get(2).and_then(|t| t.parse::<u128>().ok())) else {
                            continue;
                        };
                        // Accept only a token at least as high as any seen: one check-and-set, as a store's
                        // conditional write would do.
                        let accepted = {
                            let mut highest = highest.lock().unwrap();
                            let ok = *highest <= token;
                            *highest = (*highest).max(token);
                            ok
                        };
                        w.lock().unwrap().push(StoreWrite {
                            who: who.to_string(),
                            token,
                            at: Instant::now(),
                            accepted,
                        });
                    }
                });
            }
        });
        FencedStore { port, writes, reports }
    }

    pub fn reported(&self, who: &str) -> Option<u64> {
        self.reports
            .lock()
            .unwrap()
            .iter()
            .find(|(w, _)| w == who)
            .map(|(_, v)| *v)
    }

    pub fn writes(&self) -> Vec<StoreWrite> {
        self.writes.lock().unwrap().clone()
    }

    pub fn count(&self, who: &str) -> usize {
        self.writes().iter().filter(|w| w.who == who).count()
    }
}

/// The command of the pause attack: writes `W <who> <token>` to the store every 20 ms for `$STEPS` steps. It
/// ignores SIGTERM, as a command finishing its work would: only SIGKILL stops it.
pub const WRITER: &str = r#"
trap '' TERM
exec 3<>/dev/tcp/127.0.0.1/$STORE_PORT
i=0
while [ "$i" -lt "$STEPS" ]; do
  echo "W $WHO $ZKLOCK_FENCING_TOKEN" >&3
  sleep 0.02
  i=$((i + 1))
done
"#;

/// `zklock ARGS PATH -- bash -c SCRIPT`, with the store's port, `WHO`, `STEPS` and `WRITER` (the writer loop, for
/// scripts that start several) in the environment.
pub fn writer_with(args: &[&str], path: &str, who: &str, steps: u32, port: u16, script: &str) -> Child {
    Command::new(ZKLOCK)
        .args(args)
        .args([path, "--", "bash", "-c", script])
        .env("STORE_PORT", port.to_string())
        .env("WHO", who)
        .env("STEPS", steps.to_string())
        .env("WRITER", WRITER)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zklock")
}

/// When the old holder's last write and the new holder's first write reached the store: `(old_last, new_first)`.
/// `old` matches every writer whose name starts with it (a command's descendants are `a1`, `a2`, …).
pub fn handover(store: &FencedStore, old: &str, new: &str) -> (Instant, Instant) {
    let writes = store.writes();
    let old_last = writes
        .iter()
        .filter(|w| w.who.starts_with(old))
        .map(|w| w.at)
        .max()
        .unwrap();
    let new_first = writes.iter().filter(|w| w.who == new).map(|w| w.at).min().unwrap();
    (old_last, new_first)
}

/// Seconds from `a` to `b`, negative when `b` came first.
pub fn secs_between(a: Instant, b: Instant) -> f64 {
    if b >= a {
        b.duration_since(a).as_secs_f64()
    } else {
        -a.duration_since(b).as_secs_f64()
    }
}

pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A stop-the-world pause of a holder: `zklock`, its watchdog and its command's whole group are SIGSTOPped past the
/// session timeout, another `zklock` takes the lock and writes, then the first is resumed (its command 100 ms before
/// `zklock` and the watchdog). Measures how long the resumed command, which ignores SIGTERM, goes on writing before `zklock` stops
/// it, and checks that a store fenced by `ZKLOCK_FENCING_TOKEN` rejects every one of those late writes.
///
/// `args` are zklock's options before the path (the store, a session timeout of `session`); `label` names the
/// `CAMPAIGN` line.
pub fn pause_attack(label: &str, args: &[&str], session: &str, path: &str) {
    let store = FencedStore::start();
    let mut a = writer_with(args, path, "a", 100_000, store.port, WRITER);
    wait_until("a writes", Duration::from_secs(20), || store.count("a") >= 5);
    let (watchdog, group) = command_group(a.id());
    // Stop the world of the holder: zklock, its watchdog, then its command's group (a pause hits them all at once).
    signal(a.id() as i32, "-STOP");
    signal(watchdog, "-STOP");
    signal(-group, "-STOP");
    let stopped = Instant::now();
    let a_before = store.count("a");
    // The next holder on a long session: only the paused holder's session is under attack, and 250 writes on a 2 s
    // session would depend on every sync being answered in time to keep its lease (a slow disk may not be).
    let b_args: Vec<&str> = args
        .iter()
        .zip(std::iter::once(&"").chain(args.iter()))
        .map(|(arg, before)| if *before == "--session-timeout" { "10s" } else { *arg })
        .collect();
    let mut b = writer_with(&b_args, path, "b", 250, store.port, WRITER);
    wait_until("b writes", Duration::from_secs(30), || store.count("b") >= 25);
    let b_first = store.writes().iter().find(|w| w.who == "b").map(|w| w.at).unwrap();
    // Resume, the command first: it runs a little before zklock is scheduled again.
    signal(-group, "-CONT");
    let resumed = Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    signal(watchdog, "-CONT");
    signal(a.id() as i32, "-CONT");
    let a_status = wait_child(&mut a, Duration::from_secs(30));
    let b_status = wait_child(&mut b, Duration::from_secs(30));

    let writes = store.writes();
    let late: Vec<&StoreWrite> = writes.iter().filter(|w| w.who == "a" && w.at >= resumed).collect();
    let accepted_late = late.iter().filter(|w| w.accepted).count();
    let a_after_b = writes
        .iter()
        .filter(|w| w.who == "a" && w.at >= b_first && w.accepted)
        .count();
    let worked_for = late.last().map(|w| w.at.duration_since(resumed)).unwrap_or_default();
    let b_token = writes.iter().find(|w| w.who == "b").map(|w| w.token).unwrap();
    let a_token = writes.iter().find(|w| w.who == "a").map(|w| w.token).unwrap();
    println!(
        "CAMPAIGN {label}: holder and its command SIGSTOPped {:.2} s (session timeout {session}); the next holder wrote \
         {:.2} s after the stop; after SIGCONT the old command wrote {} more times for {:.3} s before zklock \
         stopped it (exit {a_status:?}); the fenced store rejected {} of them (tokens {a_token} < {b_token}), accepted \
         {accepted_late} late and {a_after_b} after the next holder's first write",
        resumed.duration_since(stopped).as_secs_f64(),
        b_first.duration_since(stopped).as_secs_f64(),
        late.len(),
        worked_for.as_secs_f64(),
        late.len() - accepted_late,
    );
    assert!(a_before >= 5);
    // What zklock controls: the command, which ignores SIGTERM, is killed soon after the resume (0.09 s here, its
    // 100 ms head start included). A command left to write through a SIGTERM grace (up to 3 s) fails the bound. (The
    // mutant FixedTermGrace reads 0.38 s here: the watchdog's own deadline cuts zklock's fixed grace short;
    // `trapped_sigterm_attack` is what catches it.) The store's two counts below hold by the store's own rule (it
    // rejects any token below the highest it has seen, and the next holder wrote first): they check the store, not
    // zklock.
    assert!(
        worked_for < Duration::from_millis(1500),
        "the resumed command wrote on for {worked_for:?}"
    );
    assert!(b_token > a_token, "the next holder's token is higher");
    assert_eq!(
        a_after_b, 0,
        "the store accepted a write of the paused holder after the next holder wrote"
    );
    assert_eq!(accepted_late, 0, "a late write was accepted");
    assert_eq!(a_status, Some(70), "the resumed zklock reports the lost lock");
    assert_eq!(b_status, Some(0));
}

/// `zklock`'s watchdog, and its command's process group (the watchdog's child that leads its own group).
pub fn command_group(zklock: u32) -> (i32, i32) {
    let t0 = Instant::now();
    loop {
        let watchdog = children_of(zklock as i32)
            .into_iter()
            .find(|(_, name, _)| name == "zkl-watchdog");
        if let Some((w, _, _)) = watchdog {
            if let Some((pid, _, _)) = children_of(w).into_iter().find(|(pid, _, pgrp)| pid == pgrp) {
                return (w, pid);
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no command group under zklock {zklock}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every process of the tree under `root` (itself included) whose name contains `pattern`, as `pkill` matches.
pub fn named_in_tree(root: i32, pattern: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![(
        root,
        std::fs::read_to_string(format!("/proc/{root}/comm")).unwrap_or_default(),
    )];
    let mut seen = 0;
    while let Some((pid, name)) = todo.pop() {
        seen += 1;
        assert!(seen < 10_000, "a process tree too large to walk");
        if name.contains(pattern) {
            out.push(pid);
        }
        todo.extend(children_of(pid).into_iter().map(|(p, n, _)| (p, n)));
    }
    out
}

pub fn wait_child(child: &mut Child, limit: Duration) -> Option<i32> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
