//! zklock held up (stopped, starved) between the acquire and the start of its command, past the session timeout,
//! must not start the command: the lock may be the next holder's already. zklock A acquires, then is held up (its
//! `--verbose` line blocks on a full stderr, and A is SIGSTOPped there) past the session timeout; B takes the lock;
//! A resumes. Found by an adversarial review: A started its command anyway, inside B's hold, until the watchdog's
//! first look at the deadline. Now zklock checks the lease before the start, and the watchdog refuses to start the
//! command once the kill deadline has passed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{inspect_json, server, signal, ZKLOCK};

fn holders(connect: &str, path: &str) -> usize {
    inspect_json(connect, path)["holders"].as_u64().unwrap_or(0) as usize
}

#[test]
fn command_started_after_the_lock_was_lost() {
    let Some(connect) = server() else {
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let path = format!("/review-start-after-loss/p-{}-{nanos}", std::process::id());
    // Removed on drop, whatever the test's outcome (the log is printed below).
    let dir = tempfile::Builder::new()
        .prefix("review-start-after-loss-")
        .tempdir()
        .unwrap();
    let log = dir.path().join("log");
    std::fs::write(&log, b"").unwrap();

    // A's stderr: a socket whose buffer is full, so that the `--verbose` line right after the acquire blocks.
    let (theirs, mut ours) = UnixStream::pair().unwrap();
    theirs.set_nonblocking(true).unwrap();
    let mut filler = theirs.try_clone().unwrap();
    let junk = [b'.'; 4096];
    let mut filled = 0usize;
    loop {
        match filler.write(&junk) {
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    theirs.set_nonblocking(false).unwrap();
    drop(filler);
    eprintln!("stderr socket pre-filled with {filled} bytes");

    let a_cmd = format!("echo a >> {}", log.display());
    let mut a = Command::new(ZKLOCK)
        .args([
            "-s",
            &connect,
            "--session-timeout",
            "2s",
            "--verbose",
            &path,
            "--",
            "sh",
            "-c",
            &a_cmd,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(OwnedFd::from(theirs)))
        .spawn()
        .unwrap();

    let t0 = Instant::now();
    while holders(&connect, &path) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "A never held the lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A holds the lock and is blocked on its stderr line, before the watchdog exists.
    std::thread::sleep(Duration::from_millis(200));
    signal(a.id() as i32, "-STOP");
    let stopped = Instant::now();
    assert!(
        std::fs::read_to_string(&log).unwrap().is_empty(),
        "A's command ran before the stop"
    );

    let b_cmd = format!("echo b-start >> {0}; sleep 4; echo b-end >> {0}", log.display());
    let mut b = Command::new(ZKLOCK)
        .args([
            "-s",
            &connect,
            "--session-timeout",
            "2s",
            &path,
            "--",
            "sh",
            "-c",
            &b_cmd,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    while !std::fs::read_to_string(&log).unwrap().contains("b-start") {
        assert!(stopped.elapsed() < Duration::from_secs(60), "B never got the lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "B holds the lock {:.2} s after A was stopped",
        stopped.elapsed().as_secs_f64()
    );

    // Resume A and let its stderr line through.
    signal(a.id() as i32, "-CONT");
    let drain = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = ours.read_to_end(&mut all);
        String::from_utf8_lossy(&all).trim_start_matches('.').to_owned()
    });
    let a_status = a.wait().unwrap();
    let a_err = drain.join().unwrap();
    let b_status = b.wait().unwrap();
    let lines = std::fs::read_to_string(&log).unwrap();
    eprintln!("A exit {a_status:?}; A stderr:\n{a_err}");
    eprintln!("B exit {b_status:?}; log:\n{lines}");
    let order: Vec<&str> = lines.lines().collect();
    assert!(
        !(order.contains(&"a") && order.iter().position(|l| *l == "a") < order.iter().position(|l| *l == "b-end")),
        "A's command ran inside B's hold: {order:?}"
    );
}
