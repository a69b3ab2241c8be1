//! The watchdog is stopped (`pkill -STOP zkl`, a debugger), then the lock is lost (its node deleted by an operator, so
//! the next waiter holds at once). Found by an adversarial review: zklock ordered `kill` to the stopped watchdog and
//! waited 10 s for a confirmation that could not come before it killed its descendants itself, while the command
//! (which ignores SIGTERM) wrote inside the next holder's hold. Now zklock kills the command's processes itself at the
//! kill deadline.
//!
//! No lock can keep A's command from writing at B's very start here: the operator's delete lets B in at once, and A
//! learns of it at the same moment, from its own watch. (Fencing tokens are for that.) The test bounds the overlap by
//! what zklock controls: A's command is dead within [`NOTICE`] of B's start, where the bug let it write for 10 s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use recipes_zk::{ZkBackend, ZkOptions};

mod common;
use common::{children_of, inspect_json, server, ZKLOCK};

/// How long after B's start A's command may still write: A's watch event and its kill, on a loaded CI machine.
const NOTICE: Duration = Duration::from_secs(1);

fn ns(s: &str) -> u64 {
    let (a, b) = s.split_once('.').unwrap();
    a.parse::<u64>().unwrap() * 1_000_000_000 + b.parse::<u64>().unwrap() * 1_000
}

#[test]
fn stopped_watchdog_then_loss() {
    let Some(connect) = server() else {
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let path = format!("/review-stopped-watchdog/p-{}-{nanos}", std::process::id());
    // Removed on drop, whatever the test's outcome.
    let log = tempfile::Builder::new()
        .prefix("review-stopped-watchdog-")
        .suffix(".log")
        .tempfile()
        .unwrap()
        .into_temp_path();
    let a_cmd = format!(
        "trap '' TERM; while :; do echo \"a $EPOCHREALTIME\" >> {}; sleep 0.05; done",
        log.display()
    );
    let mut a = Command::new(ZKLOCK)
        .args([
            "-s",
            &connect,
            "--session-timeout",
            "4s",
            &path,
            "--",
            "bash",
            "-c",
            &a_cmd,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !std::fs::read_to_string(&log).unwrap().contains("a ") {
        assert!(t0.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    let wd: Vec<i32> = children_of(a.id() as i32)
        .into_iter()
        .filter(|(_, name, _)| name == "zkl-watchdog")
        .map(|(pid, _, _)| pid)
        .collect();
    assert_eq!(wd.len(), 1, "one watchdog");
    assert!(Command::new("kill")
        .args(["-STOP", &wd[0].to_string()])
        .status()
        .unwrap()
        .success());

    let b_cmd = format!(
        "echo \"b-start $EPOCHREALTIME\" >> {0}; sleep 3; echo \"b-end $EPOCHREALTIME\" >> {0}",
        log.display()
    );
    let mut b = Command::new(ZKLOCK)
        .args([
            "-s",
            &connect,
            "--session-timeout",
            "4s",
            &path,
            "--",
            "bash",
            "-c",
            &b_cmd,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let holder = loop {
        let v = inspect_json(&connect, &path);
        if v["participants"].as_array().map_or(0, |a| a.len()) == 2 {
            break v["participants"][0]["node"].as_str().unwrap().to_owned();
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "B never queued");
        std::thread::sleep(Duration::from_millis(20));
    };
    // An operator deletes the holder's node (`zkCli delete`): the lock is lost, B holds at once.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let zk = ZkBackend::connect(ZkOptions::new(connect.clone())).await.unwrap();
        recipes_core::backend::BackendExt::current(&*zk)
            .delete(&format!("{path}/{holder}"))
            .await
            .unwrap();
        recipes_core::Backend::close(&*zk).await;
    });
    let a_status = a.wait().unwrap();
    let b_status = b.wait().unwrap();
    let lines = std::fs::read_to_string(&log).unwrap();
    let at = |prefix: &str| -> Vec<u64> { lines.lines().filter_map(|l| l.strip_prefix(prefix)).map(ns).collect() };
    let b_start = at("b-start ")[0];
    let b_end = at("b-end ")[0];
    let a_inside: Vec<u64> = at("a ").into_iter().filter(|t| *t >= b_start && *t <= b_end).collect();
    let notice = NOTICE.as_nanos() as u64;
    let a_late: Vec<u64> = a_inside.iter().copied().filter(|t| *t > b_start + notice).collect();
    let a_last = *at("a ").iter().max().unwrap();
    eprintln!(
        "A exit {a_status:?}, B exit {b_status:?}; A wrote {} lines inside B's hold; A's last line {:.2} s after B began",
        a_inside.len(),
        (a_last as f64 - b_start as f64) / 1e9
    );
    assert!(
        a_late.is_empty(),
        "A's command wrote {} lines inside B's hold, {} of them more than {NOTICE:?} after B began",
        a_inside.len(),
        a_late.len()
    );
}
