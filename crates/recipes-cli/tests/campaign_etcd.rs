//! Fault campaign on `zklock` processes and a private three-member etcd cluster (issue 27; the in-process part,
//! with the members killed and cut off under load, is `tests/tests/suite/campaign_etcd.rs`):
//! - `etcd_sigkill_campaign`: six `zklock` clients SIGKILLed at random for `CAMPAIGN_ETCD_SECS` (20 by default), the
//!   leader SIGKILLed half way and brought back, the history checked as on ZooKeeper (`common/sigkill.rs`);
//! - `etcd_pause_attack`: a holder and its command SIGSTOPped past the lease's TTL, against a store fenced by
//!   `ZKLOCK_FENCING_TOKEN` that must reject every late write (`common/fenced.rs`).
//!
//! Ignored by default; `scripts/campaign` (and `scripts/test`) run them. Each prints one `CAMPAIGN` line of figures.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // print_stdout: the campaign reports its figures

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use recipes_conformance::etcdserver::{available, PrivateEtcd};

mod common;

/// `etcd://host:port,...` of every member.
fn servers(etcd: &PrivateEtcd) -> String {
    let hosts: Vec<&str> = etcd
        .endpoints()
        .split(',')
        .map(|e| e.trim_start_matches("http://"))
        .collect();
    format!("etcd://{}", hosts.join(","))
}

/// The keys under `prefix`, as `etcdctl` lists them.
fn keys_under(endpoints: &str, prefix: &str) -> usize {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoints, "get", "--prefix", "--keys-only", prefix])
        .output()
        .expect("etcdctl (Debian's etcd-client, installed by scripts/etcd)");
    assert!(
        out.status.success(),
        "etcdctl get: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

#[test]
#[ignore = "fault campaign: run by scripts/campaign and scripts/test"]
fn etcd_sigkill_campaign() {
    if let Err(why) = available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let etcd = Arc::new(PrivateEtcd::start(3));
    let endpoints = etcd.endpoints().to_owned();
    let midway = {
        let etcd = etcd.clone();
        move || {
            let Some(leader) = etcd.leader(Duration::from_secs(10)) else {
                return "no leader half way".to_owned();
            };
            let t0 = Instant::now();
            etcd.kill(leader);
            let elected = etcd
                .leader_other_than(leader, Duration::from_secs(20))
                .map(|_| format!("{:.2} s", t0.elapsed().as_secs_f64()))
                .unwrap_or_else(|| "none within 20 s".to_owned());
            std::thread::sleep(Duration::from_secs(4));
            etcd.revive(leader);
            format!(
                "the leader (member {leader}) SIGKILLed half way, a new one after {elected}, brought back after {:.1} s",
                t0.elapsed().as_secs_f64()
            )
        }
    };
    let target = common::sigkill::Target {
        label: "etcd sigkill",
        args: vec!["-s".into(), servers(&etcd), "--session-timeout".into(), "2s".into()],
        session: Duration::from_secs(2),
        paths: ["/campaign/etcd-sigkill/fair", "/campaign/etcd-sigkill/rw"],
        slots: 6,
        orphans: Box::new(move || keys_under(&endpoints, "/campaign/etcd-sigkill/")),
        midway: Some(Box::new(midway)),
    };
    let secs = std::env::var("CAMPAIGN_ETCD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    common::sigkill::run(target, secs);
}

/// A stop-the-world pause of a holder past its lease's TTL, on the cluster (`common/fenced.rs`).
#[test]
#[ignore = "fault campaign: run by scripts/campaign and scripts/test"]
fn etcd_pause_attack() {
    if let Err(why) = available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let etcd = PrivateEtcd::start(3);
    let servers = servers(&etcd);
    let args = ["-s", servers.as_str(), "--session-timeout", "2s"];
    common::fenced::pause_attack("etcd pause", &args, "2 s, the lease's TTL", "/campaign/etcd-pause");
    assert_eq!(
        keys_under(etcd.endpoints(), "/campaign/etcd-pause/"),
        0,
        "a key left behind"
    );
}
