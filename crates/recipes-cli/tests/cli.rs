//! The built `zklock` binary against a real ZooKeeper (`ZK_CONNECT`, started by `scripts/test`), and a private
//! server for the lease test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use recipes_conformance::zkserver::{available, PrivateZk};

mod common;
use common::{inspect_json, server, unique, zklock, ZKLOCK};

fn run(mut c: Command) -> Output {
    c.stdin(Stdio::null());
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zklock");
    wait_output(child, Duration::from_secs(60))
}

fn wait_output(mut child: std::process::Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("zklock did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts zklock holding `path` while it runs `sh -c script`, its output discarded.
fn spawn_holding(zk: &str, path: &str, script: &str) -> std::process::Child {
    zklock(zk, &[path, "--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("zklock-test-{}-{name}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn wait_for_file(p: &Path, limit: Duration) {
    let t0 = Instant::now();
    while !p.exists() {
        assert!(t0.elapsed() < limit, "{} did not appear within {limit:?}", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: i32) -> bool {
    nix_kill0(pid)
}

fn nix_kill0(pid: i32) -> bool {
    Command::new("kill")
        .arg("-0")
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Two to four zklock processes on one path never overlap (a marker directory made and removed by each child).
#[test]
fn processes_never_overlap() {
    let Some(zk) = server() else { return };
    for (recipe, procs) in [("fair", 4), ("exclusive", 3), ("write", 2)] {
        let path = unique(&format!("overlap-{recipe}"));
        let dir = tempdir(recipe);
        let marker = dir.join("marker");
        let log = dir.join("log");
        let script = format!(
            "mkdir {m} || exit 99; echo in >> {l}; sleep 0.05; rmdir {m}",
            m = marker.display(),
            l = log.display()
        );
        let children: Vec<_> = (0..procs)
            .map(|_| {
                let mut c = Command::new("sh");
                c.arg("-c").arg(format!(
                    "for i in 1 2 3 4 5; do {z} -s {zk} -r {recipe} {path} -- sh -c '{script}' || exit $?; done",
                    z = ZKLOCK
                ));
                c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
            })
            .collect();
        for child in children {
            let out = wait_output(child, Duration::from_secs(120));
            assert!(
                out.status.success(),
                "{recipe}: a run failed ({:?}): {}",
                out.status,
                stderr(&out)
            );
        }
        let entries = std::fs::read_to_string(&log).unwrap().lines().count();
        assert_eq!(entries, procs * 5, "{recipe}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The command gets ZKLOCK_PATH, ZKLOCK_NODE and ZKLOCK_FENCING_TOKEN, and zklock exits with its status.
#[test]
fn child_environment_and_exit_status() {
    let Some(zk) = server() else { return };
    let path = unique("env");
    let o = run(zklock(
        &zk,
        &[
            &path,
            "--",
            "sh",
            "-c",
            "echo \"$ZKLOCK_PATH|$ZKLOCK_NODE|$ZKLOCK_FENCING_TOKEN\"; exit 3",
        ],
    ));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    let parts: Vec<&str> = line.split('|').collect();
    assert_eq!(parts[0], path);
    assert!(parts[1].starts_with(&format!("{path}/L-")), "{line}");
    assert!(parts[2].parse::<u128>().unwrap() > 0, "{line}");
    // A second run gets a higher token.
    let o2 = run(zklock(&zk, &[&path, "--", "sh", "-c", "echo $ZKLOCK_FENCING_TOKEN"]));
    assert!(o2.status.success());
    let t2: u128 = String::from_utf8_lossy(&o2.stdout).trim().parse().unwrap();
    assert!(t2 > parts[2].parse::<u128>().unwrap());
    // A command killed by a signal: 128 + the signal, as shells report it.
    let o3 = run(zklock(&zk, &[&path, "--", "sh", "-c", "kill -9 $$"]));
    assert_eq!(o3.status.code(), Some(137));
}

/// --wait gives up with 75; --wait 0 tries once; the command never runs then.
#[test]
fn wait_runs_out_exits_75() {
    let Some(zk) = server() else { return };
    let path = unique("wait");
    let dir = tempdir("wait");
    let started = dir.join("started");
    let holder = spawn_holding(&zk, &path, &format!("touch {}; sleep 30", started.display()));
    wait_for_file(&started, Duration::from_secs(20));
    let ran = dir.join("ran");
    let t0 = Instant::now();
    let o = run(zklock(
        &zk,
        &["--wait", "300ms", &path, "--", "touch", ran.to_str().unwrap()],
    ));
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(t0.elapsed() < Duration::from_secs(5));
    let o = run(zklock(&zk, &["-w", "0", &path, "--", "touch", ran.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "one line on stderr: {}", stderr(&o));
    assert!(!ran.exists(), "the command ran without the lock");
    let mut holder = holder;
    let _ = holder.kill();
    let _ = holder.wait();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A path used by another recipe or layout: exit 76 with one line naming the foreign node, and the command never
/// runs (before the fix, `zklock -r exclusive` and a fair `zklock` both ran their commands at once).
#[test]
fn mixed_recipes_or_layouts_exit_76() {
    let Some(zk) = server() else { return };
    let dir = tempdir("mixed");
    let ran = dir.join("ran");
    for (holder_args, other_args, names) in [
        (&["-r", "exclusive"][..], &[][..], "\"lock\""),
        (&["-r", "exclusive"][..], &["-r", "write"][..], "\"lock\""),
        (&[][..], &["-r", "exclusive"][..], "\"L-"),
        (&[][..], &["--layout", "curator"][..], "\"L-"),
        (&["--layout", "kazoo"][..], &[][..], "__lock__"),
    ] {
        let path = unique("mixed");
        let started = dir.join("started");
        let _ = std::fs::remove_file(&started);
        let mut holder = zklock(&zk, holder_args)
            .args([
                path.as_str(),
                "--",
                "sh",
                "-c",
                &format!("touch {}; sleep 30", started.display()),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_file(&started, Duration::from_secs(20));
        let mut other = zklock(&zk, other_args);
        other.args(["--wait", "0", path.as_str(), "--", "touch", ran.to_str().unwrap()]);
        let o = run(other);
        assert_eq!(
            o.status.code(),
            Some(76),
            "{holder_args:?} then {other_args:?}: {}",
            stderr(&o)
        );
        assert_eq!(stderr(&o).lines().count(), 1, "one line: {}", stderr(&o));
        assert!(stderr(&o).contains(names), "names the foreign node: {}", stderr(&o));
        assert!(!ran.exists(), "the command ran beside another recipe's holder");
        let _ = holder.kill();
        let _ = holder.wait();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bad usage, invalid paths, unknown recipes or layouts: 64, one line, no panic.
#[test]
fn bad_usage_exits_64() {
    let cases: &[&[&str]] = &[
        &[],
        &["/a"],
        &["relative", "--", "true"],
        &["/a/", "--", "true"],
        &["/zookeeper/x", "--", "true"],
        &["-r", "nope", "/a", "--", "true"],
        &["-r", "reentrant", "/a", "--", "true"],
        &["--layout", "nope", "/a", "--", "true"],
        &["--wait", "soon", "/a", "--", "true"],
        &["--session-timeout", "0", "/a", "--", "true"],
        &["--connect-timeout", "0", "/a", "--", "true"],
        &["--wait", "-1", "/a", "--", "true"],
        &["-s", "", "/a", "--", "true"],
        &["-s", " , ", "/a", "--", "true"],
        &["--bogus", "/a", "--", "true"],
        &["inspect"],
        &["inspect", "relative"],
    ];
    for args in cases {
        let o = run(zklock("127.0.0.1:1", args));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(
            err.starts_with("zklock: ") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    // An empty connect string given with -s is bad usage, not "unreachable".
    let mut c = Command::new(ZKLOCK);
    c.args(["-s", "", "/a", "--", "true"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    let o = run(zklock("127.0.0.1:1", &["--help"]));
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("Examples:"));
}

/// The messages of bad usage say what is accepted: a misspelt recipe gets the names zklock takes (not `reentrant`)
/// and the closest one; a negative wait says what 0 and no wait mean.
#[test]
fn bad_usage_says_what_is_accepted() {
    let o = run(zklock("127.0.0.1:1", &["-r", "fiar", "/a", "--", "true"]));
    let err = stderr(&o);
    assert!(
        err.contains("exclusive, fair, read, write")
            && err.contains("did you mean fair?")
            && !err.contains("reentrant"),
        "{err}"
    );
    let o = run(zklock("127.0.0.1:1", &["-r", "wirte", "/a", "--", "true"]));
    assert!(stderr(&o).contains("did you mean write?"), "{}", stderr(&o));
    let o = run(zklock("127.0.0.1:1", &["-r", "banana", "/a", "--", "true"]));
    assert!(!stderr(&o).contains("did you mean"), "{}", stderr(&o));
    let o = run(zklock("127.0.0.1:1", &["--wait", "-1", "/a", "--", "true"]));
    let err = stderr(&o);
    assert!(
        err.contains("--wait") && err.contains("negative") && err.contains("0 tries once"),
        "{err}"
    );
    let o = run(zklock("127.0.0.1:1", &["--layout", "java", "/a", "--", "true"]));
    assert!(stderr(&o).contains("native, curator, kazoo"), "{}", stderr(&o));
}

/// `-q` keeps a skipped run silent (exit 75, nothing on stderr); `-v` says which node holds the lock, its fencing
/// token and the time waited; a session timeout the servers will not grant is reported with the value they grant.
#[test]
fn quiet_verbose_and_the_granted_timeout() {
    let Some(zk) = server() else { return };
    let path = unique("quiet");
    let dir = tempdir("quiet");
    let ready = dir.join("ready");
    let script = format!("touch {}; sleep 3", ready.display());
    let holder = spawn_holding(&zk, &path, &script);
    wait_for_file(&ready, Duration::from_secs(20));
    let o = run(zklock(&zk, &["-q", "-w", "0", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(75));
    assert_eq!(stderr(&o), "", "quiet");
    let o = run(zklock(&zk, &["-w", "0", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(75));
    assert!(stderr(&o).contains("held"), "{}", stderr(&o));
    let _ = wait_output(holder, Duration::from_secs(30));

    let o = run(zklock(&zk, &["-v", &path, "--", "true"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("holding the lock at") && err.contains("fencing token") && err.contains("after waiting"),
        "{err}"
    );
    // No server grants a session of 1000 s (ZooKeeper's default maximum is 20 ticks).
    let o = run(zklock(&zk, &["--session-timeout", "1000s", &path, "--", "true"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("asked for a 1000s session, the servers grant"), "{err}");
    let o = run(zklock(&zk, &["-q", "--session-timeout", "1000s", &path, "--", "true"]));
    assert_eq!(stderr(&o), "", "quiet hides the warning too");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A chroot that does not exist is made, as Curator's namespace is (never "lock lost").
#[test]
fn a_missing_chroot_is_made() {
    if let Err(why) = available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let zk = PrivateZk::start(1);
    let with_chroot = format!("{}/apps/billing", zk.connect());
    let o = run(zklock(&with_chroot, &["/jobs/nightly", "--", "true"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(zklock(&with_chroot, &["inspect", "/jobs/nightly"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `--acl creator` with `--auth`: another identity's zklock cannot contend (77, one line), and cannot delete the
/// holder's node; the same credentials contend as usual. `--acl creator` without credentials is bad usage.
#[test]
fn creator_acl_keeps_other_identities_out() {
    let Some(zk) = server() else { return };
    let path = unique("acl");
    let dir = tempdir("acl");
    let ready = dir.join("ready");
    let mut holder = zklock(
        &zk,
        &[
            "--auth",
            "app:secret",
            "--acl",
            "creator",
            &path,
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 30", ready.display()),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    let o = run(zklock(
        &zk,
        &["--auth", "other:secret", "--wait", "0", &path, "--", "echo", "RAN"],
    ));
    assert_eq!(o.status.code(), Some(77), "{}", stderr(&o));
    assert!(stderr(&o).contains("not authorized"), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("RAN"));
    // The same credentials see it held (75 after no wait), and inspect needs them too.
    let o = run(zklock(
        &zk,
        &["--auth", "app:secret", "--wait", "0", &path, "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    let o = run(zklock(&zk, &["--acl", "creator", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(stderr(&o).contains("--auth"), "{}", stderr(&o));
    let o = run(zklock(&zk, &["--acl", "digest:x:cdrwz", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    let _ = holder.kill();
    let _ = holder.wait();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// No server: 69 within the connect timeout, one line.
#[test]
fn unreachable_exits_69() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t0 = Instant::now();
    let o = run(zklock(&format!("127.0.0.1:{port}"), &["/a", "--", "true"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1);
    // A refused connection fails at once and says so, naming the server.
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        stderr(&o).contains(&format!("127.0.0.1:{port}: connection refused")),
        "{}",
        stderr(&o)
    );
    let t0 = Instant::now();
    let o = run(zklock("no-such-host.invalid:2181", &["/a", "--", "true"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(
        stderr(&o).contains("no-such-host.invalid:2181: its name does not resolve"),
        "{}",
        stderr(&o)
    );
    // Something that accepts connections and never answers: the connect timeout, and what happened.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let t0 = Instant::now();
    let o = run(zklock(&silent_addr, &["--connect-timeout", "1s", "/a", "--", "true"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(
        stderr(&o).contains("accepted the connection but no ZooKeeper session"),
        "{}",
        stderr(&o)
    );
    drop(silent);
    let o = run(zklock(&format!("127.0.0.1:{port}"), &["inspect", "/a"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
}

/// The lock lost while the command runs (its node deleted by someone): the command is stopped and zklock exits 70.
#[test]
fn lost_lock_stops_the_command_and_exits_70() {
    let Some(zk) = server() else { return };
    let path = unique("lost");
    let dir = tempdir("lost");
    let pidfile = dir.join("pid");
    let nodefile = dir.join("node");
    let child = zklock(
        &zk,
        &[
            &path,
            "--",
            "sh",
            "-c",
            &format!(
                "echo $$ > {}; echo $ZKLOCK_NODE > {}; sleep 60 & wait",
                pidfile.display(),
                nodefile.display()
            ),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_for_file(&nodefile, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(100));
    let node = std::fs::read_to_string(&nodefile).unwrap().trim().to_owned();
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    // Someone else deletes the lock node.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let b = recipes_zk::ZkBackend::connect(recipes_zk::ZkOptions::new(zk.clone()))
            .await
            .unwrap();
        recipes_core::backend::BackendExt::current(&*b)
            .delete(&node)
            .await
            .unwrap();
        b.shutdown(Duration::from_secs(2)).await;
    });
    let t0 = Instant::now();
    let o = wait_output(child, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(70), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("lost") && err.lines().count() == 1, "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(!alive(pid), "the command still runs after the lock was lost");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SIGTERM and SIGINT sent to zklock reach the command; the lock is released after it exits.
#[test]
fn signals_are_forwarded_and_the_lock_released() {
    let Some(zk) = server() else { return };
    for (sig, name) in [("TERM", "term"), ("INT", "int")] {
        let path = unique(&format!("signal-{name}"));
        let dir = tempdir(name);
        let ready = dir.join("ready");
        let got = dir.join("got");
        let script = format!(
            "trap 'echo {sig} > {got}; exit 0' {sig}; touch {ready}; while :; do sleep 0.05; done",
            got = got.display(),
            ready = ready.display()
        );
        let child = zklock(&zk, &[&path, "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_file(&ready, Duration::from_secs(20));
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(st.success());
        let o = wait_output(child, Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(0), "{sig}: {}", stderr(&o));
        assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), sig);
        // Released: the next try gets it at once.
        let o = run(zklock(&zk, &["-w", "0", &path, "--", "true"]));
        assert_eq!(o.status.code(), Some(0), "{sig}: lock not released: {}", stderr(&o));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `zklock inspect` lists the holder and the waiters in order, with owner and node.
#[test]
fn inspect_lists_holders_and_waiters() {
    let Some(zk) = server() else { return };
    let path = unique("inspect");
    let dir = tempdir("inspect");
    let ready = dir.join("ready");
    let holder = zklock(
        &zk,
        &[&path, "--", "sh", "-c", &format!("touch {}; sleep 30", ready.display())],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    let waiter = zklock(&zk, &["-r", "write", &path, "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let text = loop {
        let o = run(zklock(&zk, &["inspect", &path]));
        assert!(o.status.success(), "{}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if text.contains("1 waiter(s)") || t0.elapsed() > Duration::from_secs(20) {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains("1 holder(s), 1 waiter(s)"), "{text}");
    assert!(
        lines[2].starts_with("holder") && lines[2].contains(&format!(":{}", holder.id())),
        "{text}"
    );
    assert!(
        lines[3].starts_with("waiter") && lines[3].contains("write") && lines[3].contains(&format!(":{}", waiter.id())),
        "{text}"
    );
    assert!(lines[2].contains(" L-") && lines[3].contains(" W-"), "{text}");
    // The same for scripts, as one JSON object.
    let o = run(zklock(&zk, &["inspect", "--json", &path]));
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("inspect --json prints JSON");
    assert_eq!(j["path"], path.as_str());
    assert_eq!(
        (j["holders"].as_u64(), j["waiters"].as_u64()),
        (Some(1), Some(1)),
        "{j}"
    );
    let (h, w) = (&j["participants"][0], &j["participants"][1]);
    assert_eq!(
        (h["role"].as_str(), h["pid"].as_u64()),
        (Some("holder"), Some(holder.id() as u64)),
        "{j}"
    );
    assert_eq!(
        (w["role"].as_str(), w["recipe"].as_str()),
        (Some("waiter"), Some("write")),
        "{j}"
    );
    assert_eq!(w["waits_on"], h["node"], "{j}");
    assert!(token(&h["fencing_token"]) < token(&w["fencing_token"]), "{j}");
    for mut c in [holder, waiter] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let o = run(zklock(&zk, &["inspect", &unique("nothing-here")]));
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("0 holder(s), 0 waiter(s)"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `--term-grace` that does not fit in the lease's margin (the command could outlive the session) is bad usage, with
/// the largest that fits in the message; one that fits is used.
#[test]
fn term_grace_must_fit_in_the_margin() {
    let Some(zk) = server() else { return };
    let path = unique("grace");
    let o = run(zklock(
        &zk,
        &["--session-timeout", "2s", "--term-grace", "1s", &path, "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not fit") && stderr(&o).contains("200ms"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).lines().count(), 1);
    let o = run(zklock(
        &zk,
        &["--session-timeout", "2s", "--term-grace", "150ms", &path, "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(zklock(&zk, &["--term-grace", "soon", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
}

/// `zklock inspect` prints what other clients wrote into lock nodes escaped (no terminal escape sequence, no carriage
/// return comes through) and cut short (a megabyte of data is not printed).
#[test]
fn inspect_escapes_what_other_clients_wrote() {
    let Some(zk) = server() else { return };
    let path = unique("inspect-hostile");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let b = rt.block_on(recipes_conformance::zkserver::connect(&zk, Duration::from_secs(10)));
    let on = recipes_core::backend::BackendExt::current(&*b);
    let data = format!(
        "recipes-lock 1\nattempt=0123456789abcdef0123456789abcdef\nrecipe=fair\u{1b}[2J\nhost=h\u{1b}]0;pwned\u{7}\rX\npid=1\n{}",
        "A".repeat(1_000_000)
    );
    rt.block_on(async {
        recipes_conformance::contract::containers(on, &path).await;
        on.create(
            &format!("{path}/L-0123456789abcdef0123456789abcdef-"),
            data.as_bytes(),
            recipes_core::backend::CreateMode::EphemeralSequential,
        )
        .await
        .unwrap();
    });
    let o = run(zklock(&zk, &["inspect", &path]));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("1 holder(s)"), "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\r') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(text.contains("\\u{1b}"), "escaped, not dropped: {text}");
    assert!(text.len() < 2000, "{} bytes printed", text.len());
    b.close_now();
}

/// The server paused past the session timeout: the lease runs out, the command is stopped, zklock exits 70.
#[test]
fn lease_elapsed_stops_the_command_and_exits_70() {
    if let Err(why) = available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let zk = PrivateZk::start(1);
    let dir = tempdir("lease");
    let ready = dir.join("ready");
    let child = zklock(
        zk.connect(),
        &[
            "--session-timeout",
            "2s",
            "/lease",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 60 & wait", ready.display()),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    zk.pause(1);
    let t0 = Instant::now();
    let o = wait_output(child, Duration::from_secs(30));
    let elapsed = t0.elapsed();
    zk.resume(1);
    assert_eq!(o.status.code(), Some(70), "{}", stderr(&o));
    assert!(stderr(&o).contains("lease"), "{}", stderr(&o));
    // The lease ends at most 1.6 s into the pause; once the command is stopped, zklock exits at once (it does not
    // wait to close a session that nobody answers, which would take the session's 2 s more). 1.6 s left for the
    // stop, the kill and the exit of a debug build on a slow machine.
    assert!(elapsed < Duration::from_millis(3200), "took {elapsed:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// --layout picks the node names of a peer library; the exclusive recipe exists only in the native layout.
#[test]
fn layouts_name_nodes_like_the_peers() {
    let Some(zk) = server() else { return };
    for (layout, needle) in [("curator", "/_c_"), ("kazoo", "__lock__"), ("native", "/L-")] {
        let path = unique(&format!("layout-{layout}"));
        let o = run(zklock(
            &zk,
            &["--layout", layout, &path, "--", "sh", "-c", "echo $ZKLOCK_NODE"],
        ));
        assert!(o.status.success(), "{layout}: {}", stderr(&o));
        let node = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        assert!(node.contains(needle), "{layout}: {node}");
    }
    let o = run(zklock(
        &zk,
        &["--layout", "curator", "-r", "exclusive", "/x", "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    let o = run(zklock(
        &zk,
        &[
            "--layout",
            "kazoo",
            "-r",
            "read",
            &unique("kz-read"),
            "--",
            "sh",
            "-c",
            "echo $ZKLOCK_NODE",
        ],
    ));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("__rlock__"),
        "{}",
        stderr(&o)
    );
}

/// zklock killed with SIGKILL (which it cannot handle): its command is killed too, and so is what the command
/// started (the watchdog), not left working unprotected.
#[test]
fn sigkill_of_zklock_stops_the_command_and_its_children() {
    let Some(zk) = server() else { return };
    sigkill_stops_the_group(&zk, Path::new(ZKLOCK), false);
}

/// The same when zklock's executable was deleted (an upgrade) while it waited: the watchdog still starts.
#[test]
fn sigkill_stops_the_group_even_after_the_binary_was_replaced() {
    let Some(zk) = server() else { return };
    let dir = tempdir("replaced");
    let copy = dir.join("zklock-copy");
    std::fs::copy(ZKLOCK, &copy).unwrap();
    sigkill_stops_the_group(&zk, &copy, true);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn sigkill_stops_the_group(zk: &str, zklock: &Path, delete_while_waiting: bool) {
    let path = unique("sigkill");
    let dir = tempdir("sigkill");
    let (leader, worker) = (dir.join("leader"), dir.join("worker"));
    let script = format!(
        "sleep 60 & echo $! > {w}.tmp; mv {w}.tmp {w}; echo $$ > {l}.tmp; mv {l}.tmp {l}; wait",
        w = worker.display(),
        l = leader.display()
    );
    // With `delete_while_waiting`, another holder keeps zklock waiting while its executable is deleted.
    let first = delete_while_waiting.then(|| {
        let held = dir.join("first-holds");
        let first = spawn_holding(zk, &path, &format!("touch {}; sleep 2", held.display()));
        wait_for_file(&held, Duration::from_secs(20));
        first
    });
    let child = Command::new(zklock)
        .args(["-s", zk, &path, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if let Some(first) = first {
        std::thread::sleep(Duration::from_millis(300));
        std::fs::remove_file(zklock).unwrap();
        let _ = wait_output(first, Duration::from_secs(20));
    }
    wait_for_file(&leader, Duration::from_secs(20));
    wait_for_file(&worker, Duration::from_secs(5));
    let pids: Vec<i32> = [&leader, &worker]
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap().trim().parse().unwrap())
        .collect();
    assert!(pids.iter().all(|&p| alive(p)));
    let st = Command::new("kill")
        .arg("-KILL")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(st.success());
    let _ = wait_output(child, Duration::from_secs(10));
    let t0 = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the command or its child survived zklock's SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A command that exits leaving a process behind: that process is stopped before the lock is released, so it
/// never works alongside the next holder.
#[test]
fn leftovers_are_stopped_before_the_release() {
    let Some(zk) = server() else { return };
    let path = unique("leftover");
    let dir = tempdir("leftover");
    let worker = dir.join("worker");
    let t0 = Instant::now();
    let o = run(zklock(
        &zk,
        &[
            &path,
            "--",
            "sh",
            "-c",
            &format!("sleep 60 & echo $! > {}; exit 3", worker.display()),
        ],
    ));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(t0.elapsed() < Duration::from_secs(20), "zklock took {:?}", t0.elapsed());
    let pid: i32 = std::fs::read_to_string(&worker).unwrap().trim().parse().unwrap();
    // zklock waited for it to end; only its reaping by init may lag.
    let t1 = Instant::now();
    while alive(pid) {
        assert!(
            t1.elapsed() < Duration::from_secs(2),
            "the background process outlived the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The state letter of `pid` in `/proc` (`T`: stopped).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Ctrl-Z (SIGTSTP) does not stop zklock while its command runs on (the lease would run out under the command):
/// zklock stays running and the command finishes under the lock.
#[test]
fn ctrl_z_does_not_stop_zklock() {
    let Some(zk) = server() else { return };
    let path = unique("ctrl-z");
    let dir = tempdir("ctrl-z");
    let ready = dir.join("ready");
    let script = format!("touch {}; sleep 1", ready.display());
    let child = zklock(&zk, &[&path, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    let st = Command::new("kill")
        .args(["-TSTP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    std::thread::sleep(Duration::from_millis(300));
    assert_ne!(proc_state(child.id()), Some('T'), "zklock was stopped by SIGTSTP");
    let o = wait_output(child, Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("not suspending"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A command that is stopped (as one reading from the terminal in the background is, by SIGTTIN) still acts on a
/// forwarded signal: zklock follows it with SIGCONT, so SIGINT ends the command and zklock instead of leaving both
/// waiting forever with the lock held.
#[test]
fn a_stopped_command_acts_on_a_forwarded_signal() {
    let Some(zk) = server() else { return };
    let path = unique("stopped-command");
    let dir = tempdir("stopped-command");
    let ready = dir.join("ready");
    let script = format!("touch {}; kill -STOP $$; sleep 100", ready.display());
    let child = zklock(&zk, &[&path, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(200));
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = wait_output(child, Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let o = run(zklock(&zk, &["-w", "0", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(0), "lock not released: {}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A server of the connect string that refuses connections neither delays the session nor costs the lease: with a
/// short session timeout, a command that runs for two timeouts keeps its lock (the lease moves on heartbeats from the
/// start, while the dead server's probe is still out).
#[test]
fn a_dead_server_in_the_connect_string_costs_no_lease() {
    let Some(zk) = server() else { return };
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
        // dropped: the port now refuses
    };
    for servers in [format!("{dead},{zk}"), format!("{zk},{dead}")] {
        let path = unique("dead-server");
        let t0 = Instant::now();
        let o = run(zklock(
            &servers,
            &["--session-timeout", "4s", &path, "--", "sleep", "8"],
        ));
        assert_eq!(o.status.code(), Some(0), "{servers}: {}", stderr(&o));
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
}

/// TLS and SASL from the command line, against a server of the test's own with a CA made by the test: zklock
/// runs a command over TLS with a client certificate and inspects the lock; a plain zklock on the secure port
/// fails as unreachable (69) saying TLS; `--acl creator` with a certificate keeps another certificate out (77);
/// SASL users lock on the plain port, and a wrong password is refused (77).
#[test]
fn tls_and_sasl_from_the_command_line() {
    if let Err(why) = available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let zk = recipes_conformance::secure::SecureZk::start();
    let secure = zk.secure_connect();
    let tls = |name: &str| -> Vec<String> {
        let f = zk.client(name);
        vec![
            "--tls-ca".into(),
            f.ca.display().to_string(),
            "--tls-cert".into(),
            f.cert.display().to_string(),
            "--tls-key".into(),
            f.key.display().to_string(),
        ]
    };
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let with = |before: Vec<String>, rest: &[&str]| -> Vec<String> {
        before.into_iter().chain(rest.iter().map(|s| (*s).to_owned())).collect()
    };

    let path = unique("tls");
    let a = with(
        tls("app"),
        &[&path, "--", "sh", "-c", "echo token=$ZKLOCK_FENCING_TOKEN"],
    );
    let o = run(zklock(&secure, &args(&a)));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("token="));
    let a = with(tls("app"), &["inspect", &path]);
    let o = run(zklock(&secure, &args(&a)));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let o = run(zklock(&secure, &["--connect-timeout", "2s", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains("TLS"), "{}", stderr(&o));

    // A certificate is an identity for --acl creator: another certificate cannot contend.
    let dir = tempdir("tls-acl");
    let ready = dir.join("ready");
    let script = format!("touch {}; sleep 30", ready.display());
    let a = with(tls("app"), &["--acl", "creator", &path, "--", "sh", "-c", &script]);
    let mut holder = zklock(&secure, &args(&a))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    let a = with(tls("other"), &["--wait", "0", &path, "--", "echo", "RAN"]);
    let o = run(zklock(&secure, &args(&a)));
    assert_eq!(o.status.code(), Some(77), "{}", stderr(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("RAN"));
    let _ = holder.kill();
    let _ = holder.wait();
    std::fs::remove_dir_all(&dir).unwrap();

    // Under a root of their own: the creator-only run above may have made /zklock-test again (containers are
    // reaped once empty), and its ACL keeps every other identity out of it.
    let sasl_path = || recipes_conformance::zk::unique_path("zklock-sasl-test", "sasl");
    let [(user, password), _] = recipes_conformance::secure::SASL_USERS;
    let good = format!("{user}:{password}");
    let o = run(zklock(
        zk.plain_connect(),
        &["--sasl", &good, &sasl_path(), "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let bad = format!("{user}:wrong");
    let o = run(zklock(
        zk.plain_connect(),
        &["--sasl", &bad, &sasl_path(), "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(77), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("refused this client's credentials"),
        "{}",
        stderr(&o)
    );
}

/// `-r semaphore --permits 2`: two commands hold at once, never three; a different count is refused (exit 64 is
/// usage, a mismatch exits 70 with the stored count named); --permits without the semaphore is bad usage.
#[test]
fn semaphore_lets_permits_commands_in_at_once() {
    let Some(zk) = server() else { return };
    let path = unique("semaphore");
    let dir = tempdir("semaphore");
    let log = dir.join("log");
    // Two slots, taken with mkdir (atomic): a third command in at once finds both taken and exits 99.
    let script = format!(
        "if mkdir {d}/a 2>/dev/null; then s=a; elif mkdir {d}/b 2>/dev/null; then s=b; else exit 99; fi; \
         echo $s >> {l}; sleep 0.3; rmdir {d}/$s",
        d = dir.display(),
        l = log.display()
    );
    let children: Vec<_> = (0..4)
        .map(|_| {
            zklock(
                &zk,
                &["-r", "semaphore", "--permits", "2", &path, "--", "sh", "-c", &script],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let t0 = Instant::now();
    for child in children {
        let out = wait_output(child, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "more than 2 in at once, or a failure: {}",
            stderr(&out)
        );
    }
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 4);
    // Four commands of 0.3 s, two at a time: about 0.6 s, not 1.2 s (one at a time).
    assert!(t0.elapsed() < Duration::from_secs(30));
    let holder = spawn_holding_args(&zk, &["-r", "semaphore", "--permits", "2", &path], "sleep 30");
    wait_holders(&zk, &path, 1);
    let o = run(zklock(
        &zk,
        &["-r", "semaphore", "--permits", "3", "--wait", "0", &path, "--", "true"],
    ));
    assert_eq!(o.status.code(), Some(70), "{}", stderr(&o));
    assert!(stderr(&o).contains("stores 2"), "{}", stderr(&o));
    kill_and_wait(holder);
    let o = run(zklock(&zk, &["-r", "fair", "--permits", "3", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    let o = run(zklock(&zk, &["-r", "semaphore", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `zklock revoke` asks the holder to let go: the holding zklock sends its command SIGTERM and exits with the
/// command's status once it has ended; `inspect` shows the request meanwhile when the command ignores it; with
/// nobody holding, revoke exits 75.
#[test]
fn revoke_asks_the_holding_command_to_stop() {
    let Some(zk) = server() else { return };
    let path = unique("revoke");
    let o = run(zklock(&zk, &["revoke", &path]));
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    let holder = zklock(&zk, &[&path, "--", "sh", "-c", "trap 'exit 42' TERM; sleep 30 & wait"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_holders(&zk, &path, 1);
    let o = run(zklock(&zk, &["revoke", &path]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
    let out = wait_output(holder, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(42), "{}", stderr(&out));
    assert!(stderr(&out).contains("asked to let go"), "{}", stderr(&out));
    // A command that ignores the request keeps the lock; inspect shows the request.
    let holder = zklock(&zk, &["--revoke-signal", "none", &path, "--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_holders(&zk, &path, 1);
    assert!(run(zklock(&zk, &["revoke", &path])).status.success());
    let o = run(zklock(&zk, &["inspect", "--json", &path]));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["participants"][0]["revocation_requested"], true, "{report}");
    kill_and_wait(holder);
    let o = run(zklock(&zk, &["--revoke-signal", "KILL", &path, "--", "true"]));
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
}

fn spawn_holding_args(zk: &str, args: &[&str], script: &str) -> std::process::Child {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--", "sh", "-c", script]);
    zklock(zk, &all)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `zklock inspect` reports `n` holders of `path`.
fn wait_holders(zk: &str, path: &str, n: u64) {
    let t0 = Instant::now();
    loop {
        let o = run(zklock(zk, &["inspect", "--json", path]));
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout) {
            if v["holders"].as_u64() == Some(n) {
                return;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{path} never had {n} holder(s)");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill_and_wait(mut child: std::process::Child) {
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(30), "zklock did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fencing token as `inspect --json` prints it: a string of digits.
fn token(v: &serde_json::Value) -> u128 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a token: {v}"))
}

/// `zklock --elect ID` runs the command only while leading: two candidates never run at once, each command gets
/// ZKLOCK_TERM and ZKLOCK_CANDIDATE, terms increase, `zklock leader` names the leader while one leads (exit 75 when
/// nobody stands), `inspect` marks it, and `--elect` with `-r` is bad usage.
#[test]
fn elect_runs_the_command_while_leading() {
    let Some(zk) = server() else { return };
    let path = unique("elect");
    let dir = tempdir("elect");
    let (marker, log, leading) = (dir.join("marker"), dir.join("log"), dir.join("leading"));
    // The first candidate leads and waits until told to go on, so that the leader can be read meanwhile.
    let first = zklock(
        &zk,
        &[
            "--elect",
            "first",
            "--elect-data",
            "10.0.0.1:80",
            &path,
            "--",
            "sh",
            "-c",
            &format!(
                "mkdir {m} || exit 99; echo \"$ZKLOCK_CANDIDATE $ZKLOCK_TERM\" >> {l}; touch {r}; \
                 while [ ! -e {r}.go ]; do sleep 0.02; done; rmdir {m}",
                m = marker.display(),
                l = log.display(),
                r = leading.display()
            ),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_for_file(&leading, Duration::from_secs(30));
    let second = zklock(
        &zk,
        &[
            "--elect",
            "second",
            &path,
            "--",
            "sh",
            "-c",
            &format!(
                "mkdir {m} || exit 99; echo \"$ZKLOCK_CANDIDATE $ZKLOCK_TERM\" >> {l}; rmdir {m}",
                m = marker.display(),
                l = log.display()
            ),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Both stand; the first leads.
    let t0 = Instant::now();
    while inspect_json(&zk, &path)["participants"].as_array().map_or(0, Vec::len) < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the second candidate never stood"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run(zklock(&zk, &["leader", "--json", &path]));
    assert!(out.status.success(), "{}", stderr(&out));
    let l: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (l["id"].as_str(), l["data"].as_str()),
        (Some("first"), Some("10.0.0.1:80"))
    );
    let report = inspect_json(&zk, &path);
    let candidates: Vec<_> = report["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["role"].as_str().unwrap().to_owned(),
                p["candidate"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        candidates,
        vec![
            ("holder".to_owned(), "first".to_owned()),
            ("waiter".to_owned(), "second".to_owned())
        ]
    );
    std::fs::File::create(dir.join("leading.go")).unwrap();
    for child in [first, second] {
        let out = wait_output(child, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "a candidate failed ({:?}): {}",
            out.status,
            stderr(&out)
        );
    }
    let entries: Vec<(String, u128)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let (id, term) = l.split_once(' ').unwrap();
            (id.to_owned(), term.parse().unwrap())
        })
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!((entries[0].0.as_str(), entries[1].0.as_str()), ("first", "second"));
    assert!(entries[0].1 < entries[1].1, "terms increase: {entries:?}");
    // Nobody stands any more.
    let out = run(zklock(&zk, &["leader", &path]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let out = run(zklock(&zk, &["--elect", "x", "-r", "read", &path, "--", "true"]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `zklock --elect ID --latch` stands as Curator's LeaderLatch (`latch-` nodes) with `--layout curator`, is bad usage
/// in another layout, and `zklock leader --latch` reads it (without `--latch`, the latch's nodes are another family's:
/// exit 76).
#[test]
fn elect_as_a_curator_leader_latch() {
    let Some(zk) = server() else { return };
    let path = unique("latch");
    let dir = tempdir("latch");
    let leading = dir.join("leading");
    let child = zklock(
        &zk,
        &[
            "--layout",
            "curator",
            "--elect",
            "java-like",
            "--latch",
            &path,
            "--",
            "sh",
            "-c",
            &format!(
                "touch {r}; while [ ! -e {r}.go ]; do sleep 0.02; done",
                r = leading.display()
            ),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_for_file(&leading, Duration::from_secs(30));
    let out = run(zklock(&zk, &["--layout", "curator", "inspect", "--json", &path]));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let node = report["participants"][0]["node"].as_str().unwrap().to_owned();
    assert!(node.starts_with("_c_") && node.contains("-latch-"), "{node}");
    assert_eq!(report["participants"][0]["candidate"].as_str(), Some("java-like"));
    let out = run(zklock(&zk, &["--layout", "curator", "leader", "--latch", &path]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("java-like (term "));
    let out = run(zklock(&zk, &["--layout", "curator", "leader", &path]));
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    std::fs::File::create(dir.join("leading.go")).unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(zklock(&zk, &["--elect", "x", "--latch", &path, "--", "true"]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}
