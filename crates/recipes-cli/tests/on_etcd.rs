//! `zklock` on etcd (`--servers etcd://host:port`, issue 27), against the member `scripts/test` starts
//! (`ETCD_ENDPOINTS`): the same exit statuses, the fencing token in the environment, `inspect`, etcd's own lock
//! (`--layout etcd`) beside `etcdctl lock`, and the refusals.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{inspect_json, unique, zklock};

/// `etcd://host:port` of the shared member, or `None` with a SKIPPED line (never in CI).
fn etcd() -> Option<String> {
    let endpoints = recipes_conformance::etcd::server()
        .map_err(|why| eprintln!("SKIPPED: {why}"))
        .ok()?;
    let hosts: Vec<&str> = endpoints.split(',').map(|e| e.trim_start_matches("http://")).collect();
    Some(format!("etcd://{}", hosts.join(",")))
}

fn wait_for_file(p: &std::path::Path, limit: Duration) {
    let t0 = Instant::now();
    while !p.exists() {
        assert!(t0.elapsed() < limit, "{} did not appear within {limit:?}", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `etcdctl lock path` holding for 2 s, started, once it holds (it touches `marker` when it does).
fn etcdctl_holding(endpoint: &str, path: &str, marker: &std::path::Path) -> std::process::Child {
    let child = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .env("M", marker)
        .args([
            "--endpoints",
            endpoint,
            "lock",
            path,
            "--",
            "sh",
            "-c",
            "touch \"$M\"; sleep 2",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("etcdctl lock");
    wait_for_file(marker, Duration::from_secs(20));
    child
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("zklock-etcd-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A holder runs its command with the fencing token and the lease's timeout in its environment; a second `zklock`
/// gives up with 75, then takes the lock after the first; `inspect` sees the holder; the tokens increase.
#[test]
fn zklock_holds_on_etcd_with_the_same_statuses() {
    let Some(etcd) = etcd() else { return };
    let path = unique("on-etcd");
    let dir = tempdir("statuses");
    let first = zklock(
        &etcd,
        &[
            "--session-timeout",
            "4s",
            &path,
            "--",
            "sh",
            "-c",
            "echo \"$ZKLOCK_FENCING_TOKEN $ZKLOCK_SESSION_TIMEOUT_MS $ZKLOCK_NODE\" > \"$D/first\"; sleep 2",
        ],
    )
    .env("D", &dir)
    .spawn()
    .unwrap();
    wait_for_file(&dir.join("first"), Duration::from_secs(20));
    let report = inspect_json(&etcd, &path);
    assert_eq!(report["holders"], 1, "{report}");
    let waited = zklock(&etcd, &["-w", "200ms", "-q", &path, "--", "true"])
        .status()
        .unwrap();
    assert_eq!(waited.code(), Some(75), "the wait ran out");
    let second = zklock(
        &etcd,
        &[
            &path,
            "--",
            "sh",
            "-c",
            "echo \"$ZKLOCK_FENCING_TOKEN\" > \"$D/second\"",
        ],
    )
    .env("D", &dir)
    .status()
    .unwrap();
    assert!(second.success());
    assert!(first.wait_with_output().unwrap().status.success());
    let first = std::fs::read_to_string(dir.join("first")).unwrap();
    let fields: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(fields[1], "4000", "the lease's TTL: {first}");
    assert!(fields[2].starts_with(&format!("{path}/L-")), "a native node: {first}");
    let (t1, t2): (u128, u128) = (
        fields[0].parse().unwrap(),
        std::fs::read_to_string(dir.join("second"))
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
    );
    assert!(t2 > t1, "fencing tokens increase: {t1} then {t2}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--layout etcd` is etcd's own lock: a `zklock` waits while `etcdctl lock` holds the prefix, and holds after it.
#[test]
fn zklock_in_the_etcd_layout_waits_for_etcdctl_lock() {
    let Some(etcd) = etcd() else { return };
    let endpoint = format!(
        "http://{}",
        etcd.trim_start_matches("etcd://").split(',').next().unwrap()
    );
    let path = unique("beside-etcdctl");
    let dir = tempdir("etcdctl");
    let ctl = etcdctl_holding(&endpoint, &path, &dir.join("ctl"));
    let waited = zklock(&etcd, &["--layout", "etcd", "-w", "300ms", "-q", &path, "--", "true"])
        .status()
        .unwrap();
    assert_eq!(waited.code(), Some(75), "etcdctl holds the prefix");
    let t0 = Instant::now();
    let after = zklock(&etcd, &["--layout", "etcd", &path, "--", "true"])
        .status()
        .unwrap();
    assert!(after.success());
    assert!(t0.elapsed() > Duration::from_millis(500), "it waited for etcdctl");
    assert!(ctl.wait_with_output().unwrap().status.success());
    // A native lock on the prefix refuses beside etcd's own (exit 76), as on ZooKeeper beside another layout.
    let ctl = etcdctl_holding(&endpoint, &path, &dir.join("ctl2"));
    let native = zklock(&etcd, &["-w", "5s", &path, "--", "true"]).output().unwrap();
    assert_eq!(
        native.status.code(),
        Some(76),
        "{}",
        String::from_utf8_lossy(&native.stderr)
    );
    assert!(ctl.wait_with_output().unwrap().status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bad input on etcd: ZooKeeper's options, a peer layout, an empty or malformed endpoint (64), an endpoint nobody
/// answers (69) — each with a message, none a hang.
#[test]
fn bad_input_on_etcd_is_refused() {
    let Some(etcd) = etcd() else { return };
    let path = unique("bad");
    for (args, code, says) in [
        (vec!["--auth", "a:b", &path, "--", "true"], 64, "--auth is ZooKeeper's"),
        (
            vec!["--acl", "creator", &path, "--", "true"],
            64,
            "--acl is ZooKeeper's",
        ),
        (vec!["--layout", "curator", &path, "--", "true"], 64, "native layout"),
        (
            vec!["--layout", "etcd", "-r", "read", &path, "--", "true"],
            64,
            "etcd's own lock",
        ),
    ] {
        let out = zklock(&etcd, &args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // etcd's --user on ZooKeeper: refused before any connect.
    let out = zklock("127.0.0.1:1", &["--user", "a:b", &path, "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "--user on ZooKeeper: {err}");
    assert!(err.contains("--user is etcd's"), "{err}");
    for servers in ["etcd://", "etcd://host-without-port", "etcd://a:1/b"] {
        let out = zklock(servers, &[&path, "--", "true"]).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(64),
            "{servers}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let t0 = Instant::now();
    let out = zklock("etcd://127.0.0.1:1", &["--connect-timeout", "1s", &path, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "no hang past the connect timeout"
    );
}

/// zklock with etcd's TLS and users (a private member that requires client certificates and has authentication
/// enabled): the lock held with `--tls-*` and `--user` (or `ZKLOCK_USER`); a wrong password 77, a user whose roles
/// forbid the prefix 77, an untrusted CA 69, ZooKeeper's options and a bad `--user` 64; no key left.
#[test]
fn zklock_on_etcd_with_tls_and_users() {
    use recipes_conformance::etcdsecure::{SecureEtcd, APP, PREFIX, READER};
    if let Err(why) = recipes_conformance::etcdserver::available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let etcd = SecureEtcd::start();
    let servers = format!("etcd://{}", etcd.endpoint().trim_start_matches("https://"));
    let (cert, key) = etcd.client_identity();
    let (ca, cert, key) = (
        etcd.ca().display().to_string(),
        cert.display().to_string(),
        key.display().to_string(),
    );
    let untrusted = etcd.untrusted_ca().display().to_string();
    let tls = [
        "--tls-ca",
        ca.as_str(),
        "--tls-cert",
        cert.as_str(),
        "--tls-key",
        key.as_str(),
    ];
    let path = format!("{PREFIX}zklock/lock");
    let app = format!("{}:{}", APP.0, APP.1);
    let reader = format!("{}:{}", READER.0, READER.1);
    let run = |extra: &[&str], env_user: Option<&str>| {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend([
            "--connect-timeout",
            "2s",
            path.as_str(),
            "--",
            "sh",
            "-c",
            "echo \"$ZKLOCK_FENCING_TOKEN\"",
        ]);
        let mut c = zklock(&servers, &args);
        c.env_remove("ZKLOCK_USER");
        if let Some(u) = env_user {
            c.env("ZKLOCK_USER", u);
        }
        let t0 = Instant::now();
        let out = c.output().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(15), "{extra:?}: no hang");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let with = |more: &[&'static str]| -> Vec<&str> { tls.iter().copied().chain(more.iter().copied()).collect() };

    let mut held = with(&[]);
    held.extend(["--user", app.as_str()]);
    let (code, out, err) = run(&held, None);
    assert_eq!(code, Some(0), "held over TLS as app: {err}");
    assert!(
        out.trim().parse::<u128>().is_ok_and(|t| t > 0),
        "a fencing token: {out:?}"
    );
    let (code, _, err) = run(&with(&[]), Some(&app));
    assert_eq!(code, Some(0), "the user from ZKLOCK_USER: {err}");

    let mut wrong = with(&[]);
    wrong.extend(["--user", "app:wrong"]);
    let (code, _, err) = run(&wrong, None);
    assert_eq!(code, Some(77), "a wrong password: {err}");
    assert!(err.contains("refused this client's credentials"), "{err}");
    let (code, _, err) = run(&with(&[]), Some(&reader));
    assert_eq!(code, Some(77), "a reader's lock: {err}");
    assert!(err.contains("permission denied"), "{err}");

    let untrusted_args = ["--tls-ca", untrusted.as_str(), "--user", app.as_str()];
    let (code, _, err) = run(&untrusted_args, None);
    assert_eq!(code, Some(69), "an untrusted CA: {err}");
    for (bad, says) in [
        (vec!["--auth", "a:b"], "--auth is ZooKeeper's"),
        (vec!["--user", "no-colon"], "invalid --user"),
        (
            vec!["--tls-cert", cert.as_str(), "--tls-key", key.as_str()],
            "need --tls-ca",
        ),
    ] {
        let (code, _, err) = run(&bad, None);
        assert_eq!(code, Some(64), "{bad:?}: {err}");
        assert!(err.contains(says), "{bad:?}: {err}");
    }
    assert!(etcd.keys_under(PREFIX).is_empty(), "no key left");
}
