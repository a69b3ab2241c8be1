//! Elections across languages with leaders killed and cut off: candidates of the real peers (Curator's
//! `LeaderSelector` and `LeaderLatch`, kazoo's `Election`) and of this library stand on one path; each leader, once it
//! leads, holds on until it is taken down. A peer leader is killed (`SIGKILL`: its session expires on the server); a
//! Rust leader is cut off from the server by a partition longer than its session (its lease runs out, it must stop
//! before the server expires its session and the next candidate leads). The overlap detector of `interop.rs` spans
//! every process; a dead leader's marker is removed by the test once the process is gone. An observer's stream of
//! changes must see the terms only go up, and no node is left at the end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use recipes_conformance::proxy::Proxy;
use recipes_core::backend::{BackendExt, CreateMode};
use recipes_core::{Backend, Layout, Locks};
use recipes_zk::{ZkBackend, ZkOptions};
use tokio::sync::watch;

use super::interop::{enter, exit, peer_command, setup, workdir, Mode, Peer, Setup};

/// The Rust candidates' sessions: short, so that a cut-off leader's node goes soon.
const SESSION: Duration = Duration::from_millis(2000);
/// The peers' sessions: short, so that a killed leader's node goes soon, and longer than ours, so that a peer whose
/// process stalls while a JVM starts beside it keeps its connection.
const PEER_SESSION: Duration = Duration::from_millis(4000);
/// Leaders taken down of each side before the test ends.
const EACH: usize = 3;
/// At most this many leaders in one test.
const ROUNDS: usize = 16;

/// Starts a peer candidate that holds leadership until killed.
fn spawn_peer(s: &Setup, peer: Peer, role: &str, path: &str, dir: &Path) -> Child {
    let mut c = peer_command(s, peer);
    c.arg(&s.zk).arg(path).arg(role).arg("1").arg(dir);
    c.env("PEER_SESSION_MS", PEER_SESSION.as_millis().to_string());
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c.spawn().expect("start peer")
}

/// The names in `dir` that start with `prefix`, without it.
fn marked(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .strip_prefix(prefix)
                .map(str::to_owned)
        })
        .collect()
}

/// Fails at once when a leader entered beside another (a peer's `overlap-<id>` file, or a Rust candidate's count).
fn no_overlap(dir: &Path, rust: &AtomicU64) {
    assert_eq!(rust.load(Ordering::SeqCst), 0, "a Rust leader entered beside another");
    let peers = marked(dir, "overlap-");
    assert!(peers.is_empty(), "a peer leader entered beside another: {peers:?}");
}

/// The one `leader-<id>` file in `dir`, once there is exactly one and the leader's marker is there.
async fn the_leader(dir: &Path, overlaps: &AtomicU64) -> String {
    let t0 = Instant::now();
    loop {
        no_overlap(dir, overlaps);
        let leaders = marked(dir, "leader-");
        if leaders.len() == 1 && dir.join("W").exists() {
            return leaders.into_iter().next().unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no single leader: {leaders:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Rust candidate `k`: stands behind its own proxy, and while it leads holds the detector's marker until its
/// leadership is lost; then stands again, until `stop`.
async fn rust_candidate(
    locks: Locks,
    latch: bool,
    path: String,
    k: usize,
    dir: PathBuf,
    overlaps: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) {
    let mut election = locks.election(&path).unwrap();
    if latch {
        election = election.latch().unwrap();
    }
    let me = election.candidate(format!("rust-{k}")).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
        .unwrap();
    while !*stop.borrow() {
        let leading = tokio::select! {
            l = me.leadership() => match l {
                Ok(l) => l,
                // Cut off while standing: the session ends; stand again once the partition heals.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let (o, _, mine) = enter(&dir, Mode::Exclusive, "rust-election", &mut log);
        overlaps.fetch_add(o, Ordering::SeqCst);
        let file = dir.join(format!("leader-rust-{k}"));
        std::fs::File::create(&file).unwrap();
        tokio::select! {
            _ = leading.lost() => {}
            _ = stop.changed() => {}
        }
        // Stop acting as the leader before anything else: the next leader must not have entered yet.
        std::fs::remove_file(&file).unwrap();
        exit(&dir, mine);
        drop(leading);
    }
}

async fn killed_and_cut_off(peer: Peer, role: &str, latch: bool) {
    let Some(s) = setup() else { return };
    let layout = if peer == Peer::Kazoo {
        Layout::Kazoo
    } else {
        Layout::Curator
    };
    let dir = workdir(&format!("kills-{role}"));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let path = format!("/interop/{}-{nanos}/leader", std::process::id());
    let keeper = ZkBackend::connect(ZkOptions::new(&s.zk)).await.unwrap();
    let on = keeper.current();
    if peer == Peer::Kazoo {
        // kazoo makes an election's path once, persistent (see `contend_with` in interop.rs).
        let parent = path.rsplit_once('/').unwrap().0.to_owned();
        recipes_conformance::contract::containers(on, &parent).await;
        match on.create(&path, b"", CreateMode::Persistent).await {
            Ok(_) | Err(recipes_core::Error::NodeExists(_)) => {}
            Err(e) => panic!("making {path}: {e}"),
        }
    }
    std::fs::File::create(dir.join("go")).unwrap();
    let mut peers: Vec<(u32, Child)> = (0..2)
        .map(|_| {
            let c = spawn_peer(&s, peer, role, &path, &dir);
            (c.id(), c)
        })
        .collect();
    let upstream: SocketAddr = s.zk.parse().unwrap();
    let (stop, stopped) = watch::channel(false);
    let overlaps = Arc::new(AtomicU64::new(0));
    let (mut proxies, mut tasks) = (Vec::new(), Vec::new());
    for k in 0..2 {
        let proxy = Proxy::start(upstream).await.unwrap();
        let options = ZkOptions::new(proxy.addr().to_string()).session_timeout(SESSION);
        let backend = ZkBackend::connect(options).await.unwrap();
        // A partition of two session timeouts must outlast the session the server granted.
        assert_eq!(
            backend.session_timeout(),
            SESSION,
            "the server bounds the session timeout"
        );
        let locks = Locks::builder(backend).layout(layout).build();
        proxies.push(proxy);
        tasks.push(tokio::spawn(rust_candidate(
            locks,
            latch,
            path.clone(),
            k,
            dir.clone(),
            overlaps.clone(),
            stopped.clone(),
        )));
    }
    let observer = Locks::builder(keeper.clone()).layout(layout).build();
    let mut election = observer.election(&path).unwrap();
    if latch {
        election = election.latch().unwrap();
    }
    let watching = tokio::spawn({
        let mut stopped = stopped.clone();
        let mut changes = Box::pin(election.changes());
        async move {
            let mut terms = Vec::new();
            let mut last = None;
            loop {
                tokio::select! {
                    c = changes.next() => match c {
                        // After a failed read the stream may report the same leader again.
                        Some(Ok(Some(l))) if last.as_ref() != Some(&(l.term, l.node.clone())) => {
                            terms.push(l.term);
                            last = Some((l.term, l.node));
                        }
                        Some(_) => {}
                        None => break,
                    },
                    _ = stopped.changed() => break,
                }
            }
            terms
        }
    });
    let (mut killed, mut cut, mut last_term) = (0, 0, 0);
    for _ in 0..ROUNDS {
        if killed >= EACH && cut >= EACH {
            break;
        }
        // The leader as the detector and the observer see it: the same one (a leader may be gone between the two
        // reads under load; read both again).
        let t0 = Instant::now();
        let (who, seen) = loop {
            let who = the_leader(&dir, &overlaps).await;
            let seen = election.leader().await.unwrap();
            match seen {
                Some(l) if l.id == who => break (who, l),
                _ => assert!(
                    t0.elapsed() < Duration::from_secs(30),
                    "the observer names {seen:?}, the detector {who}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            seen.term > last_term,
            "terms went back: {} after {last_term}",
            seen.term
        );
        last_term = seen.term;
        if let Some(k) = who.strip_prefix("rust-") {
            let k: usize = k.parse().unwrap();
            proxies[k].blackhole_for(SESSION * 2);
            cut += 1;
            let file = dir.join(format!("leader-{who}"));
            let t0 = Instant::now();
            while file.exists() {
                no_overlap(&dir, &overlaps);
                assert!(
                    t0.elapsed() < Duration::from_secs(30),
                    "{who} never learned it was cut off"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        } else {
            let pid: u32 = who.rsplit('-').next().unwrap().parse().unwrap();
            let at = peers.iter().position(|(p, _)| *p == pid).expect("a leader of ours");
            let (_, mut child) = peers.swap_remove(at);
            child.kill().unwrap();
            child.wait().unwrap();
            killed += 1;
            // The dead leader's marker, removed for it now that it cannot act.
            if std::fs::remove_file(dir.join(format!("leader-{who}"))).is_ok() {
                std::fs::remove_dir(dir.join("W")).unwrap();
            }
            let c = spawn_peer(&s, peer, role, &path, &dir);
            peers.push((c.id(), c));
        }
    }
    stop.send(true).unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let terms = watching.await.unwrap();
    for (_, mut child) in peers {
        let _ = child.kill();
        let _ = child.wait();
    }
    eprintln!(
        "{role} vs rust: {killed} peer leaders killed, {cut} rust leaders cut off, {} leaders seen by the observer",
        terms.len()
    );
    no_overlap(&dir, &overlaps);
    assert!(
        killed >= EACH && cut >= EACH,
        "only {killed} killed and {cut} cut off in {ROUNDS} rounds"
    );
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "the observer's terms went back: {terms:?}"
    );
    assert!(terms.len() >= killed + cut, "the observer missed leaders: {terms:?}");
    // Every candidate is gone; its node went with its session.
    let t0 = Instant::now();
    loop {
        match on.children(&path).await {
            Ok(c) if !c.is_empty() => {
                assert!(t0.elapsed() < Duration::from_secs(30), "nodes left: {c:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => break,
        }
    }
    if peer == Peer::Kazoo {
        on.delete(&path).await.unwrap();
    }
    keeper.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// kazoo's Election and Rust candidates (kazoo layout), leaders killed and cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_election_leaders_killed_and_cut_off() {
    killed_and_cut_off(Peer::Kazoo, "election-hold", false).await;
}

/// Curator's LeaderSelector and Rust candidates (Curator layout), leaders killed and cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_selector_leaders_killed_and_cut_off() {
    killed_and_cut_off(Peer::Curator, "selector-hold", false).await;
}

/// Curator's LeaderLatch and Rust latch candidates (Curator layout), leaders killed and cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_latch_leaders_killed_and_cut_off() {
    killed_and_cut_off(Peer::Curator, "latch-hold", true).await;
}
