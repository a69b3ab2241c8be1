//! Interoperability with etcd's own election on one prefix (issue 27): `etcdctl elect` (Debian's `etcd-client`, which
//! runs Go's `concurrency.Election`) and Rust candidates in the etcd layout, in one election. Go's candidate keeps its
//! proposal as its key's value, which this library reads as the candidate's id; `etcdctl elect --listen` reads our
//! key's whole value (this library's node data, a few lines) as the proposal, as Curator and kazoo read ours.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use recipes_core::{Backend, Layout, Locks};
use recipes_etcd::{EtcdBackend, EtcdOptions};

use super::interop_etcd::until_no_keys_left;

/// `etcdctl elect ARGS` started, its stdout's lines collected as they come.
fn etcdctl_elect(endpoints: &str, args: &[&str]) -> (Child, Arc<Mutex<Vec<String>>>) {
    let mut child = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoints, "elect"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcdctl (Debian's etcd-client, installed by scripts/etcd)");
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let (out, seen) = (child.stdout.take().unwrap(), lines.clone());
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            seen.lock().unwrap().push(line);
        }
    });
    (child, lines)
}

async fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGTERM: etcdctl closes its session (revokes its lease), so its key goes at once.
fn stop(child: &mut Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `etcdctl elect` leads, a Rust candidate queues behind it and names it (its proposal is the id), leads once
/// etcdctl resigns, `etcdctl elect --listen` reports our candidate, a second `etcdctl elect` queues behind ours and
/// leads when we resign, and no key is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_layout_election_beside_etcdctl_elect() {
    let endpoints = match recipes_conformance::etcd::server() {
        Ok(e) => e,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!("/interop-etcd-elect/{}-{nanos}", std::process::id());
    let backend = Arc::new(
        EtcdBackend::connect(EtcdOptions::new(&endpoints).session_timeout(Duration::from_secs(4)))
            .await
            .unwrap(),
    );
    let locks = Locks::builder(backend.clone()).layout(Layout::Etcd).build();
    let election = locks.election(&prefix).unwrap();

    let (mut go1, go1_out) = etcdctl_elect(&endpoints, &[&prefix, "go-1"]);
    until("etcdctl leads", Duration::from_secs(20), || {
        !go1_out.lock().unwrap().is_empty()
    })
    .await;
    let seen = election.leader().await.unwrap().expect("a leader");
    assert_eq!(seen.id, "go-1", "Go's proposal read as the leader's id");

    let (mut listen, listened) = etcdctl_elect(&endpoints, &["--listen", &prefix]);
    let candidate = election.candidate("rust-1").unwrap();
    let standing = tokio::spawn(async move {
        let l = candidate.leadership().await;
        (candidate, l)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!standing.is_finished(), "the Rust candidate leads beside etcdctl");

    stop(&mut go1);
    let (_candidate, leadership) = tokio::time::timeout(Duration::from_secs(20), standing)
        .await
        .expect("the Rust candidate leads once etcdctl resigned")
        .unwrap();
    let leadership = leadership.unwrap();
    assert!(leadership.is_valid());
    assert_eq!(election.leader().await.unwrap().expect("a leader").id, "rust-1");
    until(
        "etcdctl elect --listen reports our candidate",
        Duration::from_secs(20),
        || listened.lock().unwrap().iter().any(|l| l.contains("rust-1")),
    )
    .await;

    let (mut go2, go2_out) = etcdctl_elect(&endpoints, &[&prefix, "go-2"]);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !go2_out.lock().unwrap().iter().any(|l| l.contains("go-2")),
        "etcdctl leads beside the Rust leader"
    );
    leadership.resign().await.unwrap();
    until("the second etcdctl leads", Duration::from_secs(20), || {
        go2_out.lock().unwrap().iter().any(|l| l.contains("go-2"))
    })
    .await;
    assert_eq!(election.leader().await.unwrap().expect("a leader").id, "go-2");

    stop(&mut go2);
    stop(&mut listen);
    // etcdctl revokes its lease as it exits: polled rather than read once.
    until_no_keys_left(&backend, &prefix).await;
    backend.close().await;
}
