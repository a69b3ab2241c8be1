//! Interoperability with the real peer libraries on one ZooKeeper path: Apache Curator 5.4 (Java, Debian's jars)
//! with the Curator layout, and kazoo (Python, from PyPI) with the kazoo layout. Each test runs peer processes
//! and Rust contenders concurrently; an overlap detector made of marker files spans all processes: an exclusive
//! holder makes the directory `W` and sees no reader file, a reader makes a file under `R/` and sees no `W`.
//!
//! The peers come from `scripts/interop-setup` (run by `scripts/test`), through `INTEROP_JAVA_CP` and
//! `INTEROP_PYTHON`; the server from `ZK_CONNECT`. In CI both are required.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_core::{Backend, Layout, Lock, Locks, Recipe};
use recipes_zk::{ZkBackend, ZkOptions};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Peer {
    Curator,
    Kazoo,
}

pub(super) struct Setup {
    pub(super) zk: String,
    pub(super) java_cp: String,
    pub(super) python: String,
}

pub(super) fn setup() -> Option<Setup> {
    let zk = match recipes_conformance::zk::server() {
        Ok(s) => s,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return None;
        }
    };
    match (std::env::var("INTEROP_JAVA_CP"), std::env::var("INTEROP_PYTHON")) {
        (Ok(java_cp), Ok(python)) => Some(Setup { zk, java_cp, python }),
        _ if std::env::var_os("CI").is_some() => {
            panic!("the interoperability peers are required in CI: run through scripts/test (scripts/interop-setup)")
        }
        _ => {
            eprintln!("SKIPPED: no interop peers (eval \"$(scripts/interop-setup)\")");
            None
        }
    }
}

pub(super) fn workdir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let d = std::env::temp_dir().join(format!("recipes-interop-{}-{name}-{nanos}", std::process::id()));
    std::fs::create_dir_all(d.join("R")).unwrap();
    std::fs::create_dir_all(d.join("S")).unwrap();
    d
}

/// What a contender takes: the lock alone, a share of it beside other readers, or one of a semaphore's permits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Mode {
    Exclusive,
    Shared,
    Permit(u32),
}

/// The overlap detector, Rust side (the same protocol as the peers'): an exclusive holder makes the directory `W`
/// and sees no reader; a reader makes a file under `R/` and sees no `W`; a permit holder makes a file under `S/` and
/// sees at most the permits' number of files there. Returns the overlaps seen, how many were in at once (as seen),
/// and the marker to remove on exit.
pub(super) fn enter(dir: &Path, mode: Mode, tag: &str, log: &mut std::fs::File) -> (u64, u64, Option<PathBuf>) {
    let mut overlaps = 0;
    let mut inside = 1;
    let mine = match mode {
        Mode::Exclusive => {
            if std::fs::create_dir(dir.join("W")).is_err() {
                overlaps += 1;
            }
            if std::fs::read_dir(dir.join("R")).unwrap().next().is_some() {
                overlaps += 1;
            }
            None
        }
        Mode::Shared => {
            let f = dir.join("R").join(format!("rust-{}", uuid_like()));
            std::fs::File::create(&f).unwrap();
            if dir.join("W").exists() {
                overlaps += 1;
            }
            Some(f)
        }
        Mode::Permit(permits) => {
            let f = dir.join("S").join(format!("rust-{}", uuid_like()));
            std::fs::File::create(&f).unwrap();
            inside = std::fs::read_dir(dir.join("S")).unwrap().count() as u64;
            if inside > u64::from(permits) {
                overlaps += 1;
            }
            Some(f)
        }
    };
    log.write_all(format!("{tag}\n").as_bytes()).unwrap();
    (overlaps, inside, mine)
}

pub(super) fn exit(dir: &Path, mine: Option<PathBuf>) {
    // Tolerant: after an overlap the marker may already be gone; the overlap itself was counted.
    let _ = match mine {
        None => std::fs::remove_dir(dir.join("W")),
        Some(f) => std::fs::remove_file(f),
    };
}

/// The command that starts a peer process (its arguments follow).
pub(super) fn peer_command(s: &Setup, peer: Peer) -> Command {
    match peer {
        Peer::Curator => {
            let mut c = Command::new("java");
            c.arg("-cp").arg(&s.java_cp).arg("CuratorPeer");
            c
        }
        Peer::Kazoo => {
            let mut c = Command::new(&s.python);
            c.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/interop/kazoo_peer.py"));
            c
        }
    }
}

fn uuid_like() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    (u128::from(std::process::id()) << 64) | u128::from(N.fetch_add(1, Ordering::Relaxed))
}

struct Report {
    per_side: Vec<(String, u64)>,
    overlaps: u64,
    cross_handoffs: usize,
    /// The most holders any side saw in at once (semaphores).
    most_inside: u64,
}

/// Runs `peers` (role per process) and `rust` contenders (recipe, re-enter) on one path, `count` times each.
async fn contend(s: &Setup, layout: Layout, peers: &[(Peer, &str)], rust: &[(Recipe, bool)], count: usize) -> Report {
    let rust: Vec<Rust> = rust.iter().map(|(r, re)| Rust::Lock(*r, *re)).collect();
    contend_with(s, layout, peers, &rust, count).await
}

/// A Rust contender: a lock of a recipe (re-entering it or not), a semaphore of some permits, or an election's
/// candidate (which checks, while it leads, that an observer reads its own id as the leader's).
#[derive(Clone, Copy, Debug)]
enum Rust {
    Lock(Recipe, bool),
    Permit(u32),
    /// A candidate; as `LeaderLatch` when `true`.
    Candidate(bool),
}

/// What a Rust contender takes: a lock, or leadership.
enum Taken {
    Lock(Arc<dyn Lock>),
    Leadership(recipes_core::Candidate, recipes_core::Election),
}

/// Whether a Rust candidate stands as Curator's `LeaderLatch` (`Election::latch`).
const LATCH: bool = true;

/// As [`contend`], for any Rust contenders.
async fn contend_with(s: &Setup, layout: Layout, peers: &[(Peer, &str)], rust: &[Rust], count: usize) -> Report {
    let dir = workdir(&format!("{layout}"));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let path = format!("/interop/{}-{nanos}/lock", std::process::id());
    // kazoo's Lock makes its path once per Lock object and never again: a path made as a container (as this library
    // and Curator make it) may be reaped while the queue is empty, and kazoo's next create then fails with
    // NoNodeError, which kazoo does not retry (found by a CI run). So the path is made persistent first, as kazoo's own
    // `ensure_path` makes it, and deleted at the end (docs/interop.md).
    let keeper = if peers.iter().any(|(p, _)| matches!(p, Peer::Kazoo)) {
        let keeper = ZkBackend::connect(ZkOptions::new(&s.zk)).await.unwrap();
        let on = keeper.current();
        let parent = path.rsplit_once('/').map_or("/", |(p, _)| p).to_owned();
        recipes_conformance::contract::containers(on, &parent).await;
        // And the mutex path of kazoo's semaphore, whose Lock is made once too.
        for p in [path.clone(), format!("{path}-__lock__")] {
            on.create(&p, b"", CreateMode::Persistent).await.unwrap();
        }
        Some(keeper)
    } else {
        None
    };
    let mut children = Vec::new();
    for (peer, role) in peers {
        let mut c = peer_command(s, *peer);
        c.arg(&s.zk).arg(&path).arg(role).arg(count.to_string()).arg(&dir);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        children.push((
            format!("{peer:?}-{role}").to_lowercase(),
            c.spawn().expect("start peer"),
        ));
    }
    // Connect the Rust contenders while the peers start, then start everyone at once.
    let mut rust_side = Vec::new();
    for side in rust {
        let backend = ZkBackend::connect(ZkOptions::new(&s.zk)).await.unwrap();
        let locks = Locks::builder(backend).layout(layout).build();
        let (tag, mode, reenter, lock): (String, Mode, bool, Taken) = match *side {
            Rust::Lock(recipe, reenter) => {
                let mode = if recipe == Recipe::Read {
                    Mode::Shared
                } else {
                    Mode::Exclusive
                };
                (
                    format!("rust-{recipe}"),
                    mode,
                    reenter,
                    Taken::Lock(locks.lock(&path, recipe).unwrap()),
                )
            }
            Rust::Permit(n) => (
                "rust-semaphore".to_owned(),
                Mode::Permit(n),
                false,
                Taken::Lock(Arc::new(locks.semaphore(&path, n).unwrap())),
            ),
            Rust::Candidate(latch) => {
                let mut election = locks.election(&path).unwrap();
                if latch {
                    election = election.latch().unwrap();
                }
                let candidate = election.candidate(format!("rust-{}", rust_side.len())).unwrap();
                (
                    "rust-election".to_owned(),
                    Mode::Exclusive,
                    false,
                    Taken::Leadership(candidate, election),
                )
            }
        };
        rust_side.push((tag, mode, reenter, lock, locks));
    }
    let t0 = Instant::now();
    loop {
        let ready = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("ready-"))
            .count();
        if ready == peers.len() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "peers not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::File::create(dir.join("go")).unwrap();
    // Whether any Rust holder of a semaphore has seen another holder inside with it (below).
    let two_seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (tag, mode, reenter, lock, locks) in rust_side {
        let dir = dir.clone();
        let two_seen = two_seen.clone();
        tasks.push(tokio::spawn(async move {
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("log"))
                .unwrap();
            let (mut overlaps, mut most, mut holds) = (0, 0, 0u64);
            if let Taken::Leadership(candidate, election) = &lock {
                // Leaders of the peer seen by this observer, by the id the peer wrote in its node.
                let mut peers_seen = 0;
                for _ in 0..count {
                    if let Some(l) = election.leader().await.unwrap() {
                        let peer = l.id.starts_with("python-") || l.id.starts_with("java-");
                        assert!(peer || l.id.starts_with("rust-"), "a leader of no contender: {l:?}");
                        peers_seen += usize::from(peer);
                    }
                    let leading = tokio::time::timeout(Duration::from_secs(60), candidate.leadership())
                        .await
                        .expect("rust leadership timed out")
                        .unwrap();
                    let (o, _, mine) = enter(&dir, mode, &tag, &mut log);
                    overlaps += o;
                    holds += 1;
                    let seen = election.leader().await.unwrap().expect("a leader while leading");
                    assert_eq!((seen.id.as_str(), seen.term), (candidate.id(), leading.term()));
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    exit(&dir, mine);
                    leading.resign().await.unwrap();
                }
                assert!(peers_seen > 0, "the observer never read a peer's leader");
                drop(locks);
                return (tag, overlaps, 1, holds);
            }
            let Taken::Lock(lock) = lock else { unreachable!() };
            let mut long_holds = 0;
            for _ in 0..count {
                let g = tokio::time::timeout(Duration::from_secs(60), lock.acquire())
                    .await
                    .expect("rust acquire timed out")
                    .unwrap();
                let inner = if reenter {
                    Some(lock.acquire().await.unwrap())
                } else {
                    None
                };
                let (o, inside, mine) = enter(&dir, mode, &tag, &mut log);
                overlaps += o;
                holds += 1;
                most = most.max(inside);
                if let Mode::Permit(_) = mode {
                    // Semaphore holders stay a little longer, so that several are in at once. Until one holder has
                    // seen another inside with it, its first holds stay until a second holder comes in (250 ms at
                    // most, ten holds per task): on a slow disk the peers' internal mutex and two committed writes
                    // can take longer than a 5 ms hold, and a CI run once saw one holder at a time in all 500 holds
                    // of a working semaphore. A semaphore that lets only one in still fails `most_inside >= 2`.
                    most = most.max(hold_a_permit(&dir, inside, &two_seen, long_holds < 10).await);
                    long_holds += 1;
                } else {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                exit(&dir, mine);
                if let Some(i) = inner {
                    i.release().await.unwrap();
                }
                g.release().await.unwrap();
            }
            drop(locks);
            (tag, overlaps, most, holds)
        }));
    }
    let mut per_side = Vec::new();
    let (mut overlaps, mut most_inside) = (0, 0);
    for t in tasks {
        let (tag, o, most, holds) = t.await.unwrap();
        overlaps += o;
        most_inside = most_inside.max(most);
        // The holds the task counted, not the count it was asked for.
        per_side.push((tag, holds));
    }
    for (name, child) in children {
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("acquisitions"))
            .unwrap_or_else(|| {
                panic!(
                    "{name} failed ({:?}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let nums: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        per_side.push((name.clone(), nums[0]));
        overlaps += nums[1];
        most_inside = most_inside.max(nums.get(2).copied().unwrap_or(1));
        assert!(out.status.success(), "{name}: {line}");
    }
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    let entries: Vec<&str> = log.lines().collect();
    let cross_handoffs = entries
        .windows(2)
        .filter(|w| w[0].split('-').next() != w[1].split('-').next())
        .count();
    std::fs::remove_dir_all(&dir).unwrap();
    if let Some(keeper) = keeper {
        // Every contender has gone (its session closed or its process ended); its nodes went with it.
        let on = keeper.current();
        let t0 = Instant::now();
        for p in [path.clone(), format!("{path}-__lock__")] {
            while let Err(recipes_core::Error::NotEmpty(_)) = on.delete(&p).await {
                assert!(t0.elapsed() < Duration::from_secs(30), "{p} never emptied");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        keeper.close().await;
    }
    Report {
        per_side,
        overlaps,
        cross_handoffs,
        most_inside,
    }
}

/// Holds a semaphore's permit for 5 ms or, while no Rust holder has yet seen another holder inside with it and
/// `may_wait`, until a second holder's file appears under `DIR/S` (250 ms at most). Returns the most holders seen.
async fn hold_a_permit(dir: &Path, inside: u64, two_seen: &std::sync::atomic::AtomicBool, may_wait: bool) -> u64 {
    use std::sync::atomic::Ordering;
    let mut most = inside;
    if most >= 2 {
        two_seen.store(true, Ordering::Relaxed);
    }
    if !may_wait || two_seen.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        return most;
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(250) {
        tokio::time::sleep(Duration::from_millis(1)).await;
        most = most.max(std::fs::read_dir(dir.join("S")).unwrap().count() as u64);
        if most >= 2 {
            two_seen.store(true, Ordering::Relaxed);
            break;
        }
    }
    most
}

fn check(name: &str, r: &Report, count: usize) {
    let total: u64 = r.per_side.iter().map(|(_, n)| n).sum();
    eprintln!(
        "{name}: {total} acquisitions ({}), {} handoffs between languages, {} overlaps",
        r.per_side
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        r.cross_handoffs,
        r.overlaps
    );
    assert_eq!(r.overlaps, 0, "{name}: overlapping critical sections");
    assert!(total >= 500, "{name}: only {total} handoffs");
    for (side, n) in &r.per_side {
        assert_eq!(*n, count as u64, "{name}: {side} made no full progress");
    }
    assert!(
        r.cross_handoffs >= 20,
        "{name}: the sides hardly contended ({} cross handoffs)",
        r.cross_handoffs
    );
}

/// Curator InterProcessMutex against the Rust fair lock (Curator layout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_mutex_vs_rust_fair() {
    let Some(s) = setup() else { return };
    let r = contend(
        &s,
        Layout::Curator,
        &[(Peer::Curator, "mutex")],
        &[(Recipe::Fair, false)],
        250,
    )
    .await;
    check("curator mutex vs rust fair", &r, 250);
}

/// Curator InterProcessMutex against the Rust reentrant lock, re-entering (Curator layout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_mutex_vs_rust_reentrant() {
    let Some(s) = setup() else { return };
    let r = contend(
        &s,
        Layout::Curator,
        &[(Peer::Curator, "mutex")],
        &[(Recipe::Reentrant, true)],
        250,
    )
    .await;
    check("curator mutex vs rust reentrant", &r, 250);
}

/// Curator InterProcessReadWriteLock against the Rust read/write lock, readers and writers on both sides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_read_write_vs_rust_read_write() {
    let Some(s) = setup() else { return };
    let r = contend(
        &s,
        Layout::Curator,
        &[(Peer::Curator, "read"), (Peer::Curator, "write")],
        &[(Recipe::Read, false), (Recipe::Write, false)],
        150,
    )
    .await;
    check("curator read/write vs rust read/write", &r, 150);
}

/// kazoo Lock against the Rust fair lock (kazoo layout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_lock_vs_rust_fair() {
    let Some(s) = setup() else { return };
    let r = contend(
        &s,
        Layout::Kazoo,
        &[(Peer::Kazoo, "mutex")],
        &[(Recipe::Fair, false)],
        250,
    )
    .await;
    check("kazoo lock vs rust fair", &r, 250);
}

/// kazoo's Election against the Rust election (kazoo layout): one leader at a time across the languages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_election_vs_rust_election() {
    let Some(s) = setup() else { return };
    let r = contend_with(
        &s,
        Layout::Kazoo,
        &[(Peer::Kazoo, "election")],
        &[Rust::Candidate(!LATCH)],
        250,
    )
    .await;
    check("kazoo election vs rust election", &r, 250);
}

/// Curator's LeaderSelector against the Rust election (Curator layout): one leader at a time across the languages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_leader_selector_vs_rust_election() {
    let Some(s) = setup() else { return };
    let r = contend_with(
        &s,
        Layout::Curator,
        &[(Peer::Curator, "selector")],
        &[Rust::Candidate(!LATCH)],
        250,
    )
    .await;
    check("curator leader selector vs rust election", &r, 250);
}

/// Curator's LeaderLatch against the Rust election held as a latch (Curator layout, `latch()`): one leader at a time
/// across the languages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_leader_latch_vs_rust_latch() {
    let Some(s) = setup() else { return };
    let r = contend_with(
        &s,
        Layout::Curator,
        &[(Peer::Curator, "latch")],
        &[Rust::Candidate(LATCH)],
        250,
    )
    .await;
    check("curator leader latch vs rust latch", &r, 250);
}

/// kazoo ReadLock / WriteLock against the Rust read/write lock, readers and writers on both sides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_read_write_vs_rust_read_write() {
    let Some(s) = setup() else { return };
    let r = contend(
        &s,
        Layout::Kazoo,
        &[(Peer::Kazoo, "read"), (Peer::Kazoo, "write")],
        &[(Recipe::Read, false), (Recipe::Write, false)],
        150,
    )
    .await;
    check("kazoo read/write vs rust read/write", &r, 150);
}

/// Curator's `InterProcessSemaphoreV2` (2 leases) against the Rust semaphore in the Curator layout, two Curator
/// processes and three Rust clients: never more than 2 holders across all five (a holder-counting detector; a
/// driver that let one more in is caught), and more than one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_semaphore_vs_rust_semaphore() {
    let Some(s) = setup() else { return };
    let r = contend_with(
        &s,
        Layout::Curator,
        &[(Peer::Curator, "semaphore2"), (Peer::Curator, "semaphore2")],
        &[Rust::Permit(2), Rust::Permit(2), Rust::Permit(2)],
        100,
    )
    .await;
    check("curator semaphore vs rust semaphore", &r, 100);
    eprintln!(
        "curator semaphore vs rust semaphore: at most {} holders seen at once",
        r.most_inside
    );
    assert!(r.most_inside >= 2, "never more than one holder at once");
}

/// kazoo's `Semaphore` (2 leases) against the Rust semaphore in the kazoo layout, as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_semaphore_vs_rust_semaphore() {
    let Some(s) = setup() else { return };
    let r = contend_with(
        &s,
        Layout::Kazoo,
        &[(Peer::Kazoo, "semaphore2"), (Peer::Kazoo, "semaphore2")],
        &[Rust::Permit(2), Rust::Permit(2), Rust::Permit(2)],
        100,
    )
    .await;
    check("kazoo semaphore vs rust semaphore", &r, 100);
    eprintln!(
        "kazoo semaphore vs rust semaphore: at most {} holders seen at once",
        r.most_inside
    );
    assert!(r.most_inside >= 2, "never more than one holder at once");
}

fn curator_peer(s: &Setup, path: &str, role: &str, dir: &Path) -> std::process::Child {
    Command::new("java")
        .arg("-cp")
        .arg(&s.java_cp)
        .arg("CuratorPeer")
        .arg(&s.zk)
        .arg(path)
        .arg(role)
        .arg("0")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Curator peer")
}

fn wait_peer(child: std::process::Child, limit: Duration) -> std::process::Output {
    let t0 = Instant::now();
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("the Curator peer did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn unique_path(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/interop/{}-{name}-{nanos}/lock", std::process::id())
}

/// Revocation both ways with Curator 5.4: `Locks::revoke` asks a Curator `InterProcessMutex` made revocable to let
/// go (its `RevocationListener` fires and it releases, after which a Rust fair lock gets in); Curator's
/// `Revoker.attemptRevoke` on a Rust holder's node resolves `revocation_requested`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_revocation_both_ways() {
    let Some(s) = setup() else { return };
    let dir = workdir("revoke");
    let path = unique_path("revoke");
    let backend = ZkBackend::connect(ZkOptions::new(&s.zk)).await.unwrap();
    let locks = Locks::builder(backend.clone()).layout(Layout::Curator).build();

    let holder = curator_peer(&s, &path, "revocable", &dir);
    let t0 = Instant::now();
    let held_file = loop {
        let found = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("held-"));
        if let Some(f) = found {
            break f;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the Curator peer never held the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let node = held_file.trim_start_matches("held-").to_owned();
    let fair = locks.fair(&path).unwrap();
    assert!(fair.try_acquire().await.unwrap().is_none(), "Curator holds it");
    let asked = locks.revoke(&path).await.unwrap();
    assert_eq!(asked, vec![node], "the Curator holder is asked");
    let out = wait_peer(holder, Duration::from_secs(60));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("revoked"),
        "the Curator holder did not let go: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let g = tokio::time::timeout(Duration::from_secs(30), fair.acquire())
        .await
        .expect("acquired after Curator let go")
        .unwrap();

    let asker = curator_peer(&s, g.node(), "revoke", &dir);
    tokio::time::timeout(Duration::from_secs(60), g.revocation_requested())
        .await
        .expect("Curator's Revoker reaches the Rust holder")
        .unwrap();
    let out = wait_peer(asker, Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(g.is_valid(), "a request to let go is not a loss");
    g.release().await.unwrap();
    backend.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Curator 5.5 and later: the holder of a write lock that takes the read lock makes a plain ephemeral
/// `_c_<uuid>-__READ__<seq>` named with its write node's sequence (made here by hand: only Curator 5.4 is available).
/// Rust orders it as Curator 5.5 does: once the write node is gone, a Rust writer still waits for that reader, and a
/// Rust reader shares with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_5_5_downgraded_reader_keeps_writers_out() {
    use recipes_core::backend::{BackendExt, CreateMode};
    let Some(s) = setup() else { return };
    let path = unique_path("downgrade55");
    let backend = ZkBackend::connect(ZkOptions::new(&s.zk)).await.unwrap();
    let locks = Locks::builder(backend.clone()).layout(Layout::Curator).build();
    let curator = ZkBackend::connect(ZkOptions::new(&s.zk)).await.unwrap();
    let on = curator.current();
    // The Curator 5.5 process: its write node, then its downgraded read node with the same sequence.
    let w = Locks::builder(curator.clone())
        .layout(Layout::Curator)
        .build()
        .read_write(&path)
        .unwrap()
        .write()
        .acquire()
        .await
        .unwrap();
    let seq = w.node().rsplit("__WRIT__").next().unwrap().to_owned();
    let read_node = format!("{path}/_c_{}-__READ__{seq}", "8c2b6b0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e");
    on.create(&read_node, b"", CreateMode::Ephemeral).await.unwrap();
    let reader = locks.read_write(&path).unwrap().read();
    let mut reading = Box::pin(reader.acquire());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut reading)
            .await
            .is_err(),
        "the Rust reader waits behind Curator's writer"
    );
    w.release().await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .expect("the Rust reader shares with the downgraded reader once the writer is gone")
        .unwrap();
    // Another process's writer (this one's would be an upgrade of its read hold).
    let other = ZkBackend::connect(ZkOptions::new(&s.zk)).await.unwrap();
    let writer = Locks::builder(other.clone())
        .layout(Layout::Curator)
        .build()
        .read_write(&path)
        .unwrap()
        .write();
    let mut waiting = Box::pin(writer.acquire());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiting)
            .await
            .is_err(),
        "the Rust writer waits for the readers"
    );
    r.release().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut waiting)
            .await
            .is_err(),
        "the Rust writer must wait for the downgraded reader, which sorts with the writer it came from"
    );
    on.delete(&read_node).await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the Rust writer gets in once the downgraded reader is gone")
        .unwrap();
    g.release().await.unwrap();
    backend.close().await;
    curator.close().await;
    other.close().await;
}
