//! Helpers shared by the zklock test files: the binary, the server, paths, signals and the process tree.

#![allow(dead_code)] // each test file uses its own share

use std::process::Command;

pub mod fenced;
pub mod sigkill;

pub const ZKLOCK: &str = env!("CARGO_BIN_EXE_zklock");

/// The shared server of `scripts/test` (`ZK_CONNECT`), or `None` with a SKIPPED line (never in CI).
pub fn server() -> Option<String> {
    recipes_conformance::zk::server()
        .map_err(|why| eprintln!("SKIPPED: {why}"))
        .ok()
}

/// A lock path no other test or run uses.
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/zklock-test/{}-{nanos}/{name}", std::process::id())
}

/// `zklock -s servers args…`, not started.
pub fn zklock(servers: &str, args: &[&str]) -> Command {
    let mut c = Command::new(ZKLOCK);
    c.arg("-s").arg(servers).args(args);
    c
}

/// `zklock inspect --json path` (null when it printed nothing).
pub fn inspect_json(servers: &str, path: &str) -> serde_json::Value {
    let out = zklock(servers, &["inspect", "--json", path]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// `kill sig -- target` (a negative target is a process group); it must succeed.
pub fn signal(target: i32, sig: &str) {
    let st = Command::new("kill")
        .args([sig, "--", &target.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill {sig} {target}");
}

/// The children of `parent`: pid, name and process group of each.
pub fn children_of(parent: i32) -> Vec<(i32, String, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (name) state ppid pgrp ...: the name may itself hold parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let (name, rest) = (stat[open + 1..close].to_owned(), &stat[close + 1..]);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let number = |i: usize| f.get(i).and_then(|p| p.parse::<i32>().ok());
        if number(1) == Some(parent) {
            if let Some(pgrp) = number(2) {
                out.push((pid, name, pgrp));
            }
        }
    }
    out
}
