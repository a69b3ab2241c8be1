//! Fault campaign, in-process clients on private ZooKeeper servers (the SIGKILL part, on `zklock` processes, is in
//! `crates/recipes-cli/tests/campaign.rs`):
//! - `proxy_campaign`: six clients, each behind its own loopback proxy, lock at random while the proxies drop
//!   connections, refuse reconnects, blackhole traffic past the session timeout (a partition) and lose the replies
//!   to creates;
//! - `ensemble_campaign`: four clients on a 3-server ensemble while the leader is killed, then a follower, then two
//!   servers at once (no quorum), each brought back; recovery is measured against session timeout plus election.
//!
//! Each checks the history of every hold (no overlap, tokens increasing), progress, that every lock can still be
//! taken afterwards (no deadlock), and that no lock node is left once the clients are idle (no orphan), while their
//! sessions are still open. Ignored by default; `scripts/campaign` (and `scripts/test`) run them. Each prints one
//! `CAMPAIGN` line of figures.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // print_stdout: the campaign reports its figures

use std::sync::Arc;
use std::time::{Duration, Instant};

use recipes_conformance::campaign::{
    client_loop_among, every_lock_once, join_clients, orphans, seed, spawn_client, wait_progress, Record, Rng,
    FAIR_ONLY, LOCKS,
};
use recipes_conformance::proxy::Proxy;
use recipes_conformance::require_private_zk;
use recipes_conformance::zkserver::{connect, PrivateZk};
use recipes_core::Locks;
use recipes_zk::ZkBackend;

/// The proxy campaign's clients (sessions).
const CLIENTS: usize = 6;

fn secs(var: &str, default: u64) -> Duration {
    Duration::from_secs(std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or(default))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault campaign: run by scripts/campaign and scripts/test"]
async fn proxy_campaign() {
    require_private_zk!();
    let seed = seed();
    let length = secs("CAMPAIGN_PROXY_SECS", 40);
    let session = Duration::from_secs(2);
    println!("proxy campaign: {length:?}, seed {seed}");
    let zk = PrivateZk::start(1);
    let rec = Record::new("/campaign/proxy");
    let mut proxies = Vec::new();
    let mut backends = Vec::new();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let p = Proxy::start(zk.addr(1)).await.unwrap();
        let b = connect(&p.addr().to_string(), session).await;
        // The last two clients are processes of three tasks each, in cohorts of at most 3 holds of a fair lock's
        // node: one task takes every lock at random, two only the fair one (their ids: the client's plus CLIENTS,
        // plus twice CLIENTS). Passes under faults, in the same history.
        let cohort = c >= CLIENTS - 2;
        let locks = if cohort {
            Locks::builder(b.clone()).cohorts(3).build()
        } else {
            Locks::new(b.clone())
        };
        let tasks_of: &[(usize, &'static [_])] = if cohort {
            &[(c, &LOCKS), (c + CLIENTS, &FAIR_ONLY), (c + 2 * CLIENTS, &FAIR_ONLY)]
        } else {
            &[(c, &LOCKS)]
        };
        for &(id, among) in tasks_of {
            let rng = Rng(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            tasks.push(tokio::spawn(client_loop_among(
                among,
                id,
                locks.clone(),
                rec.clone(),
                rng,
                Duration::from_secs(3),
            )));
        }
        proxies.push(p);
        backends.push(b);
    }

    // The faults.
    let mut rng = Rng(seed);
    let (mut drops, mut refusals, mut partitions, mut long_partitions, mut lost_replies) = (0, 0, 0, 0, 0);
    let t0 = Instant::now();
    while t0.elapsed() < length {
        tokio::time::sleep(rng.millis(300, 1200)).await;
        // Half the faults are aimed at a client holding a lock, the rest at anyone.
        let holders = rec.holders();
        let target = if !holders.is_empty() && rng.below(2) == 0 {
            // A task of a cohort client (id + CLIENTS) is aimed at through its client's proxy.
            holders[rng.below(holders.len() as u64) as usize] % CLIENTS
        } else {
            rng.below(proxies.len() as u64) as usize
        };
        let p = &proxies[target];
        match rng.below(4) {
            0 => {
                p.cut_now();
                drops += 1;
            }
            1 => {
                p.cut_for(rng.millis(200, 1500));
                refusals += 1;
            }
            2 => {
                let d = rng.millis(300, 3500);
                if d > session {
                    long_partitions += 1;
                }
                p.blackhole_for(d);
                partitions += 1;
            }
            _ => {
                p.lose_next_create_replies(1);
                lost_replies += 1;
            }
        }
    }
    rec.stop();
    // Let the last partition heal and the clients finish their rounds (each waits at most 3 s, then releases).
    let mut failures = join_clients(tasks, Duration::from_secs(30)).await;
    for p in &proxies {
        p.lose_next_create_replies(0);
    }

    let orphan_count = final_checks(&zk, &backends, &rec, &mut failures).await;

    let tally = rec.tally();
    println!(
        "CAMPAIGN proxy: {:.0} s, 6 clients (two of them three tasks in a cohort), seed {seed}: holds {} ({} passed within a cohort), lost midway {}, timeouts {}, errors {:?}; \
         faults: {drops} drops, {refusals} refused reconnects, {partitions} partitions ({long_partitions} past the \
         session timeout), {lost_replies} lost create replies; overlaps and token errors {}, orphans {}, deadlocks {}",
        length.as_secs_f64(),
        tally.holds,
        tally.cohort_passes,
        tally.lost_midway,
        tally.timeouts,
        tally.errors,
        rec.violations().len(),
        orphan_count,
        failures.iter().filter(|f| f.contains("deadlock")).count(),
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // At least one hold a second (a full run makes about three).
    assert!(
        tally.holds >= length.as_secs(),
        "too little progress: {} holds in {length:?}",
        tally.holds
    );
}

/// Polls until some live server is leader (or `limit`); the time it took.
async fn wait_for_leader(zk: &PrivateZk, alive: &[usize], limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        for &n in alive {
            if zk.mode(n).as_deref() == Some("leader") {
                return Some(t0.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

fn leader(zk: &PrivateZk) -> Option<usize> {
    (1..=3).find(|&n| zk.mode(n).as_deref() == Some("leader"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault campaign: run by scripts/campaign and scripts/test"]
async fn ensemble_campaign() {
    require_private_zk!();
    let seed = seed();
    let session = Duration::from_secs(4);
    println!("ensemble campaign: seed {seed}");
    let zk = tokio::task::spawn_blocking(|| PrivateZk::start(3)).await.unwrap();
    let rec = Record::new("/campaign/ensemble");
    let mut backends = Vec::new();
    let mut tasks = Vec::new();
    for c in 0..4 {
        let b = connect(zk.connect(), session).await;
        tasks.push(spawn_client(
            c,
            Locks::new(b.clone()),
            &rec,
            seed,
            Duration::from_secs(5),
        ));
        backends.push(b);
    }
    let zk = Arc::new(zk);
    let mut failures = Vec::new();
    let mut report = Vec::new();
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Phases: the leader, then a follower, then two servers at once (quorum lost for a while).
    let rounds = std::env::var("CAMPAIGN_ENSEMBLE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let phases = ["leader", "follower", "two servers"];
    for (i, phase) in (0..rounds).flat_map(|_| phases).enumerate() {
        let phase = format!("{phase} (round {})", i / phases.len() + 1);
        let Some(l) = leader(&zk) else {
            failures.push(format!("{phase}: no leader before the kill"));
            break;
        };
        let victims: Vec<usize> = match i % phases.len() {
            0 => vec![l],
            1 => vec![(1..=3).find(|&n| n != l).unwrap()],
            _ => (1..=3).filter(|&n| n != l).collect(),
        };
        let killed_at = rec.now();
        let t_kill = Instant::now();
        for &v in &victims {
            let zk = zk.clone();
            tokio::task::spawn_blocking(move || zk.kill(v as u32)).await.unwrap();
        }
        let alive: Vec<usize> = (1..=3).filter(|n| !victims.contains(n)).collect();
        let election = if victims.len() == 1 {
            wait_for_leader(&zk, &alive, Duration::from_secs(30)).await
        } else {
            // No quorum: nothing to elect until the servers return.
            tokio::time::sleep(Duration::from_secs(3)).await;
            None
        };
        if victims.len() == 1 {
            // Progress resumes with one server down.
            let limit = session + election.unwrap_or(Duration::from_secs(30)) + Duration::from_secs(5);
            let resumed = wait_progress(&rec, killed_at, limit).await;
            match resumed {
                Some(r) => report.push(format!(
                    "{phase} killed: election {:.2} s, first hold after {:.2} s",
                    election.map(|e| e.as_secs_f64()).unwrap_or(f64::NAN),
                    r.as_secs_f64()
                )),
                None => failures.push(format!("{phase} killed: no hold within {limit:?}")),
            }
        }
        let revived_at = rec.now();
        let t_revive = Instant::now();
        for &v in &victims {
            let zk = zk.clone();
            tokio::task::spawn_blocking(move || zk.revive(v as u32)).await.unwrap();
        }
        if victims.len() > 1 {
            let quorum = wait_for_leader(&zk, &[1, 2, 3], Duration::from_secs(30))
                .await
                .map(|_| t_revive.elapsed());
            let limit = session + quorum.unwrap_or(Duration::from_secs(30)) + Duration::from_secs(5);
            match wait_progress(&rec, revived_at, limit).await {
                Some(r) => report.push(format!(
                    "{phase} killed for {:.1} s: a leader again {:.2} s after the restart began, first hold \
                     after {:.2} s",
                    (t_revive - t_kill).as_secs_f64(),
                    quorum.map(|e| e.as_secs_f64()).unwrap_or(f64::NAN),
                    r.as_secs_f64()
                )),
                None => failures.push(format!("{phase}: no hold within {limit:?} of the restart")),
            }
        }
        // Settle with every server up before the next phase.
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    rec.stop();
    failures.extend(join_clients(tasks, Duration::from_secs(60)).await);
    let orphan_count = final_checks(&zk, &backends, &rec, &mut failures).await;
    let tally = rec.tally();
    println!(
        "CAMPAIGN ensemble: 3 servers, 4 clients, session timeout {session:?}, seed {seed}: holds {}, lost midway {}, \
         timeouts {}, errors {:?}; {}; overlaps and token errors {}, orphans {}",
        tally.holds,
        tally.lost_midway,
        tally.timeouts,
        tally.errors,
        report.join("; "),
        rec.violations().len(),
        orphan_count,
    );
    drop(zk);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// After the clients stopped: every lock once more per client (no deadlock), the history, progress of every client,
/// and orphans with the sessions open, then closed. Failures are added to `failures`; returns the orphans found.
async fn final_checks(
    zk: &PrivateZk,
    backends: &[Arc<ZkBackend>],
    rec: &Arc<Record>,
    failures: &mut Vec<String>,
) -> usize {
    let clients: Vec<Locks> = backends.iter().map(|b| Locks::new(b.clone())).collect();
    failures.extend(every_lock_once(&clients, rec, Duration::from_secs(10)).await);
    let observer = connect(zk.connect(), Duration::from_secs(10)).await;
    let open = orphans(observer.as_ref(), rec, Duration::from_secs(10)).await;
    failures.extend(open.iter().map(|n| format!("orphan (sessions open): {n}")));
    failures.extend(rec.violations());
    let idle = rec.idle_clients(backends.len());
    if !idle.is_empty() {
        failures.push(format!("clients that never held a lock: {idle:?}"));
    }
    for b in backends {
        b.shutdown(Duration::from_secs(2)).await;
    }
    let closed = orphans(observer.as_ref(), rec, Duration::from_secs(10)).await;
    failures.extend(closed.iter().map(|n| format!("orphan (sessions closed): {n}")));
    observer.shutdown(Duration::from_secs(2)).await;
    open.len() + closed.len()
}
