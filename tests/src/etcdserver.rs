//! Private etcd members for tests that kill, pause or cut off a member, through `scripts/etcd` (the counterpart of
//! [`zkserver`](crate::zkserver)).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A member (or a three-member cluster) of this test's own, stopped and removed on drop.
#[derive(Debug)]
pub struct PrivateEtcd {
    dir: PathBuf,
    endpoints: String,
}

fn run(args: &[&str]) -> Result<String, String> {
    crate::zkserver::run_script("etcd", args)
}

/// Whether private members can be started here: `Err(why)` outside CI when etcd is not installed; in CI, always
/// `Ok` (the script installs it, and a failure is a failure).
pub fn available() -> Result<(), String> {
    let installed = Command::new("etcd")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if std::env::var_os("CI").is_some() || installed {
        Ok(())
    } else {
        Err("etcd is not installed (scripts/test installs it)".into())
    }
}

impl PrivateEtcd {
    /// Starts `members` (1 or 3) members on free loopback ports, each behind a peer relay that
    /// [`cut`](PrivateEtcd::cut) freezes.
    pub fn start(members: u32) -> PrivateEtcd {
        let dir = crate::zkserver::private_dir("recipes-etcd-test");
        let d = dir.to_string_lossy().into_owned();
        let n = members.to_string();
        let out = run(&["start", "--dir", &d, "--members", &n, "--peer-relays"]).expect("start private etcd members");
        let endpoints = out.lines().last().unwrap_or_default().to_owned();
        PrivateEtcd { dir, endpoints }
    }

    /// Every member's client endpoint, comma-separated (`http://127.0.0.1:port,...`).
    pub fn endpoints(&self) -> &str {
        &self.endpoints
    }

    /// Member `n`'s client endpoint (1-based).
    pub fn endpoint(&self, n: usize) -> &str {
        self.endpoints.split(',').nth(n - 1).expect("member")
    }

    /// Member `n`'s client address.
    pub fn addr(&self, n: usize) -> std::net::SocketAddr {
        self.endpoint(n).trim_start_matches("http://").parse().expect("address")
    }

    fn signal(&self, what: &str, n: usize) {
        let d = self.dir.to_string_lossy().into_owned();
        run(&[what, &n.to_string(), "--dir", &d]).expect("scripts/etcd");
    }

    /// For each member that answers within a moment, the member (1-based) it names as the leader.
    pub fn leaders_seen(&self) -> Vec<usize> {
        let Ok(out) = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args([
                "--endpoints",
                &self.endpoints,
                "--dial-timeout=300ms",
                "--command-timeout=1s",
            ])
            .args(["endpoint", "status", "-w", "fields"])
            .output()
        else {
            return Vec::new();
        };
        // One block per answering member (blank lines between): its id, the leader's id, its endpoint.
        let text = String::from_utf8_lossy(&out.stdout);
        let mut ids: Vec<(String, u64, u64)> = Vec::new();
        for block in text.split("\n\n") {
            let field = |name: &str| {
                block.lines().find_map(|line| {
                    let (k, v) = line.split_once(" : ")?;
                    (k.trim().trim_matches('"') == name).then(|| v.trim().trim_matches('"').to_owned())
                })
            };
            if let (Some(e), Some(m), Some(l)) = (field("Endpoint"), field("MemberID"), field("Leader")) {
                ids.push((e, m.parse().unwrap_or(0), l.parse().unwrap_or(0)));
            }
        }
        let index = |e: &str| self.endpoints.split(',').position(|x| x == e).map(|i| i + 1);
        ids.iter()
            .filter_map(|(_, _, leader)| ids.iter().find(|(_, m, _)| m == leader).and_then(|(e, _, _)| index(e)))
            .collect()
    }

    /// The leader, as a majority of the members name it, within `limit`.
    pub fn leader(&self, limit: Duration) -> Option<usize> {
        self.leader_other_than(0, limit)
    }

    /// A leader other than member `old` (one just killed or cut off), as a majority of the members name it, within
    /// `limit`.
    pub fn leader_other_than(&self, old: usize, limit: Duration) -> Option<usize> {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < limit {
            let seen = self.leaders_seen();
            if let Some(l) = (1..=3).find(|&l| l != old && seen.iter().filter(|&&s| s == l).count() >= 2) {
                return Some(l);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// SIGKILL member `n`.
    pub fn kill(&self, n: usize) {
        self.signal("kill", n);
    }

    /// Starts member `n` again on its data, and waits until it is healthy.
    pub fn revive(&self, n: usize) {
        self.signal("revive", n);
    }

    /// Freezes member `n`'s peer relay: its messages to the others stop, and nobody is told.
    pub fn cut(&self, n: usize) {
        self.signal("cut", n);
    }

    /// Thaws it.
    pub fn heal(&self, n: usize) {
        self.signal("heal", n);
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        let d = self.dir.to_string_lossy().into_owned();
        let _ = run(&["stop", "--dir", &d]);
    }
}
