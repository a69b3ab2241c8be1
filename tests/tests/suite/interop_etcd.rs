//! Interoperability with etcd's own lock on one prefix (issue 27): Go's `concurrency.Mutex` (a Go peer built from
//! etcd 3.4's sources by `scripts/interop-setup`, `INTEROP_ETCD_PEER`) and `etcdctl lock` (Debian's `etcd-client`,
//! which runs the same Mutex), beside Rust contenders in the etcd layout, all at the same moment. The overlap detector
//! of the ZooKeeper interop tests spans every process (marker files: `W` made by each holder).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use recipes_core::{Backend, Layout, Locks};
use recipes_etcd::{EtcdBackend, EtcdOptions};

use super::interop::{enter, exit, workdir, Mode};

/// The etcd endpoints and the Go peer, or `None` (skipped, said on stderr) outside CI; in CI both are required.
fn setup() -> Option<(String, String)> {
    let endpoints = match recipes_conformance::etcd::server() {
        Ok(e) => e,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return None;
        }
    };
    match std::env::var("INTEROP_ETCD_PEER") {
        Ok(peer) => Some((endpoints, peer)),
        _ if std::env::var_os("CI").is_some() => {
            panic!("the Go peer is required in CI: run through scripts/test (scripts/interop-setup)")
        }
        _ => {
            eprintln!("SKIPPED: no Go peer (eval \"$(scripts/interop-setup)\")");
            None
        }
    }
}

/// The language of a log line's tag: `go0`, `rust-1`, `etcdctl`.
fn language(tag: &str) -> &str {
    ["go", "rust", "etcdctl"]
        .into_iter()
        .find(|l| tag.starts_with(l))
        .unwrap_or(tag)
}

/// Two Go peers, two Rust sessions in the etcd layout and a loop of `etcdctl lock` take one prefix's lock at the same
/// moment: every hold counted by the detector that spans them, no overlap, handoffs between the languages, no key
/// left. `INTEROP_ETCD_HOLDS` sets the holds per Go peer and Rust session (default 250).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_layout_beside_go_mutex_and_etcdctl_lock() {
    let Some((endpoints, peer)) = setup() else { return };
    let count: usize = std::env::var("INTEROP_ETCD_HOLDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(250);
    let ctl_holds = 10;
    let dir = workdir("etcd-mutex");
    let prefix = format!("/interop-etcd/{}", dir.file_name().unwrap().to_string_lossy());
    let started = Instant::now();

    let go: Vec<_> = (0..2)
        .map(|i| {
            Command::new(&peer)
                .args([&endpoints, &prefix, &count.to_string(), "1"])
                .arg(&dir)
                .arg(format!("go{i}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start the Go peer")
        })
        .collect();

    let ctl = {
        let (endpoint, prefix, dir) = (
            endpoints.split(',').next().unwrap().to_owned(),
            prefix.clone(),
            dir.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let script = "mkdir \"$D/W\" 2>/dev/null || echo o >> \"$D/overlaps\"; \
                          [ -z \"$(ls -A \"$D/R\")\" ] || echo o >> \"$D/overlaps\"; \
                          echo etcdctl >> \"$D/log\"; sleep 0.005; rmdir \"$D/W\" 2>/dev/null; true";
            for _ in 0..ctl_holds {
                let status = Command::new("etcdctl")
                    .env("ETCDCTL_API", "3")
                    .env("D", &dir)
                    .args(["--endpoints", &endpoint, "lock", &prefix, "--", "sh", "-c", script])
                    .stdout(Stdio::null())
                    .status()
                    .expect("run etcdctl lock");
                assert!(status.success(), "etcdctl lock failed: {status}");
            }
        })
    };

    let mut rust = Vec::new();
    for i in 0..2 {
        let (endpoints, prefix, dir) = (endpoints.clone(), prefix.clone(), dir.clone());
        rust.push(tokio::spawn(async move {
            let backend = Arc::new(EtcdBackend::connect(EtcdOptions::new(&endpoints)).await.unwrap());
            let locks = Locks::builder(backend.clone()).layout(Layout::Etcd).build();
            let lock = locks.fair(&prefix).unwrap();
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("log"))
                .unwrap();
            let mut overlaps = 0;
            for _ in 0..count {
                let g = tokio::time::timeout(Duration::from_secs(60), lock.acquire())
                    .await
                    .expect("a Rust acquire waited a minute")
                    .unwrap();
                assert!(g.node().ends_with(&Layout::session_name(backend.session_status().id)));
                let (seen, _, mine) = enter(&dir, Mode::Exclusive, &format!("rust-{i}"), &mut log);
                overlaps += seen;
                tokio::time::sleep(Duration::from_millis(1)).await;
                exit(&dir, mine);
                g.release().await.unwrap();
            }
            locks.close().await;
            overlaps
        }));
    }

    let mut overlaps = 0;
    for r in rust {
        overlaps += r.await.unwrap();
    }
    for child in go {
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the Go peer failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find(|l| l.starts_with("holds="))
            .expect("the Go peer's report");
        let nums: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| w.split('=').nth(1)?.parse().ok())
            .collect();
        assert_eq!(nums[0], count as u64, "{line}");
        overlaps += nums[1];
    }
    ctl.await.unwrap();
    overlaps += std::fs::read_to_string(dir.join("overlaps")).map_or(0, |s| s.lines().count() as u64);

    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    let entries: Vec<&str> = log.lines().collect();
    let handoffs = entries.windows(2).filter(|w| language(w[0]) != language(w[1])).count();
    eprintln!(
        "etcd interop: {} holds (Go {}, Rust {}, etcdctl {ctl_holds}) in {:?}, {handoffs} handoffs between languages, \
         {overlaps} overlaps",
        entries.len(),
        2 * count,
        2 * count,
        started.elapsed()
    );
    assert_eq!(overlaps, 0, "overlapping critical sections");
    assert_eq!(entries.len(), 4 * count + ctl_holds, "every hold is in the log");
    assert!(handoffs > 0, "the lock never passed between languages");

    // Every session has ended or closed: no key of theirs is left under the prefix.
    let observer = EtcdBackend::connect(EtcdOptions::new(&endpoints)).await.unwrap();
    until_no_keys_left(&observer, &prefix).await;
    observer.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Waits (15 s at most, then fails) until no key is left under `prefix`: a session's keys go with its lease, which a
/// peer revokes as it exits or the server ends after its time to live.
pub(super) async fn until_no_keys_left(backend: &EtcdBackend, prefix: &str) {
    let t0 = Instant::now();
    loop {
        let left = backend.keys_with_leases(&format!("{prefix}/")).await.unwrap();
        if left.is_empty() {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "keys left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
