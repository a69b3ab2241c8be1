//! Fault campaign on a three-member etcd cluster (issue 27), in-process clients (the SIGKILL and SIGSTOP parts, on
//! `zklock` processes, are in `crates/recipes-cli/tests/campaign_etcd.rs`).
//!
//! Six clients lock at random (the campaign's four locks: fair, exclusive, reentrant, read/write) on a private
//! cluster whose members each advertise a peer relay. Three clients are pinned to one member each through a loopback
//! proxy that drops connections, refuses reconnects, blackholes traffic past the lease TTL (a partition) and loses the
//! replies of calls, at random all along; the other three reach every member directly and fail over. Meanwhile the
//! members are attacked in phases: the leader SIGKILLed and brought back, a member holding a pinned holder's
//! requests cut off from the others through its relay past the TTL, the leader cut off the same way, a follower
//! SIGKILLed.
//!
//! Checked as in the ZooKeeper campaign: the history of every hold (no overlap, tokens increasing), progress after
//! each phase, every lock taken again by every client afterwards (no deadlock), no lock key left once the clients are
//! idle (no orphan), with the sessions open and after they closed. Ignored by default; `scripts/campaign` (and
//! `scripts/test`) run it. It prints one `CAMPAIGN` line of figures.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // print_stdout: the campaign reports its figures

use std::sync::Arc;
use std::time::{Duration, Instant};

use recipes_conformance::campaign::{
    every_lock_once, join_clients, orphans, seed, spawn_client, wait_progress, Record, Rng,
};
use recipes_conformance::etcdserver::{available, PrivateEtcd};
use recipes_conformance::proxy::Proxy;
use recipes_core::{Backend, Locks};
use recipes_etcd::{EtcdBackend, EtcdOptions};

/// The leases' TTL: etcd's smallest.
const TTL: Duration = Duration::from_secs(2);

async fn connect(endpoints: &str) -> Arc<EtcdBackend> {
    match EtcdBackend::connect(EtcdOptions::new(endpoints).session_timeout(TTL)).await {
        Ok(b) => Arc::new(b),
        Err(e) => panic!("connect to {endpoints}: {e}"),
    }
}

/// The member a phase attacks.
#[derive(Debug, Clone, Copy)]
enum Whom {
    Leader,
    Follower,
    PinnedHolder,
}

/// Runs a blocking call of the cluster's (a script) off the runtime.
async fn on<T: Send + 'static>(etcd: &Arc<PrivateEtcd>, f: impl FnOnce(&PrivateEtcd) -> T + Send + 'static) -> T {
    let etcd = etcd.clone();
    tokio::task::spawn_blocking(move || f(&etcd)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault campaign: run by scripts/campaign and scripts/test"]
async fn etcd_cluster_campaign() {
    if let Err(why) = available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let seed = seed();
    println!("etcd cluster campaign: seed {seed}");
    let etcd = Arc::new(tokio::task::spawn_blocking(|| PrivateEtcd::start(3)).await.unwrap());
    let rec = Record::new("/campaign/etcd");
    let mut backends = Vec::new();
    let mut proxies = Vec::new();
    let mut tasks = Vec::new();
    for c in 0..6 {
        let b = if c < 3 {
            let p = Proxy::start_raw(etcd.addr(c + 1)).await.unwrap();
            let b = connect(&format!("http://{}", p.addr())).await;
            proxies.push(p);
            b
        } else {
            connect(etcd.endpoints()).await
        };
        tasks.push(spawn_client(
            c,
            Locks::new(b.clone()),
            &rec,
            seed,
            Duration::from_secs(5),
        ));
        backends.push(b);
    }
    let proxies = Arc::new(proxies);

    // The proxies' faults, all along, aimed at a pinned client holding a lock half the time.
    let faults = {
        let (proxies, rec) = (proxies.clone(), rec.clone());
        tokio::spawn(async move {
            let mut rng = Rng(seed.rotate_left(17) | 1);
            let mut counts = [0u32; 4];
            while !rec.stopped() {
                tokio::time::sleep(rng.millis(400, 1500)).await;
                let pinned: Vec<usize> = rec.holders().into_iter().filter(|&h| h < 3).collect();
                let target = if !pinned.is_empty() && rng.below(2) == 0 {
                    pinned[rng.below(pinned.len() as u64) as usize]
                } else {
                    rng.below(3) as usize
                };
                let p = &proxies[target];
                let kind = rng.below(4) as usize;
                match kind {
                    0 => p.cut_now(),
                    1 => p.cut_for(rng.millis(200, 1500)),
                    2 => p.blackhole_for(rng.millis(300, 3500)),
                    _ => p.lose_next_create_replies(1),
                }
                counts[kind] += 1;
            }
            counts
        })
    };

    let mut failures = Vec::new();
    let mut report = Vec::new();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rounds = std::env::var("CAMPAIGN_ETCD_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for round in 1..=rounds {
        // (name, whom, killed rather than cut off); whom: the leader, a pinned holder's member, a follower.
        for (name, whom, killing) in [
            ("leader killed", Whom::Leader, true),
            ("member cut off", Whom::PinnedHolder, false),
            ("leader cut off", Whom::Leader, false),
            ("follower killed", Whom::Follower, true),
        ] {
            let phase = format!("{name} (round {round})");
            let Some(leader) = on(&etcd, |e| e.leader(Duration::from_secs(20))).await else {
                failures.push(format!("{phase}: no leader before it"));
                break;
            };
            let follower = (1..=3).find(|&n| n != leader).unwrap();
            let victim = match whom {
                Whom::Leader => leader,
                Whom::Follower => follower,
                // The member a pinned client holding a lock talks to (a follower's or the leader's).
                Whom::PinnedHolder => rec.holders().into_iter().find(|&h| h < 3).map_or(follower, |h| h + 1),
            };
            let began = rec.now();
            let t0 = Instant::now();
            if killing {
                on(&etcd, move |e| e.kill(victim)).await;
            } else {
                on(&etcd, move |e| e.cut(victim)).await;
            }
            // A new leader when the leader was attacked.
            let election = if victim == leader {
                match on(&etcd, move |e| e.leader_other_than(victim, Duration::from_secs(20))).await {
                    Some(_) => format!(", a new leader after {:.2} s", t0.elapsed().as_secs_f64()),
                    None => {
                        failures.push(format!("{phase}: no new leader within 20 s"));
                        String::new()
                    }
                }
            } else {
                String::new()
            };
            // Progress while the member is away: the others hold a quorum, and the sessions that depended on the
            // victim expire within a TTL.
            let limit = TTL * 2 + Duration::from_secs(10);
            match wait_progress(&rec, began, limit).await {
                Some(r) => report.push(format!(
                    "{phase} (member {victim}, leader {leader}{election}): first hold after {:.2} s",
                    r.as_secs_f64()
                )),
                None => failures.push(format!("{phase}: no hold within {limit:?}")),
            }
            // Keep it away past the TTL, so that the leases kept through it expire.
            let away = TTL * 2 + Duration::from_millis(500);
            if let Some(rest) = away.checked_sub(t0.elapsed()) {
                tokio::time::sleep(rest).await;
            }
            if killing {
                on(&etcd, move |e| e.revive(victim)).await;
            } else {
                on(&etcd, move |e| e.heal(victim)).await;
            }
            let back = rec.now();
            match wait_progress(&rec, back, limit).await {
                Some(_) => {}
                None => failures.push(format!("{phase}: no hold within {limit:?} of its return")),
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    rec.stop();
    let [drops, refusals, partitions, lost_replies] = faults.await.unwrap();
    failures.extend(join_clients(tasks, Duration::from_secs(60)).await);
    for p in proxies.iter() {
        p.lose_next_create_replies(0);
    }

    // After the faults: every lock once more per client, then no key left, sessions open and closed.
    let clients: Vec<Locks> = backends.iter().map(|b| Locks::new(b.clone())).collect();
    failures.extend(every_lock_once(&clients, &rec, Duration::from_secs(15)).await);
    let observer = connect(etcd.endpoints()).await;
    let open = orphans(observer.as_ref(), &rec, Duration::from_secs(10)).await;
    failures.extend(open.iter().map(|n| format!("orphan (sessions open): {n}")));
    failures.extend(rec.violations());
    let idle = rec.idle_clients(backends.len());
    if !idle.is_empty() {
        failures.push(format!("clients that never held a lock: {idle:?}"));
    }
    for b in &backends {
        b.close().await;
    }
    let closed = orphans(observer.as_ref(), &rec, Duration::from_secs(10)).await;
    failures.extend(closed.iter().map(|n| format!("orphan (sessions closed): {n}")));
    // Whatever else a closed session might have left under the campaign's prefix (its keys are attached to leases
    // that are gone).
    let left: Vec<String> = observer
        .keys_with_leases("/campaign/etcd/")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    failures.extend(left.iter().map(|k| format!("key left after the sessions closed: {k}")));
    observer.close().await;

    let tally = rec.tally();
    println!(
        "CAMPAIGN etcd: 3 members, 6 clients (3 pinned behind proxies, 3 on every member), TTL {TTL:?}, seed {seed}: \
         holds {}, lost midway {}, timeouts {}, errors {:?}; {}; proxy faults: {drops} drops, {refusals} refused \
         reconnects, {partitions} partitions, {lost_replies} lost replies; overlaps and token errors {}, orphans {}",
        tally.holds,
        tally.lost_midway,
        tally.timeouts,
        tally.errors,
        report.join("; "),
        rec.violations().len(),
        open.len() + closed.len() + left.len(),
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
