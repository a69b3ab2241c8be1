//! Private ZooKeeper servers for tests that stop, pause or restart the server, through `scripts/zk`.

use std::path::PathBuf;
use std::process::Command;

/// A server (or ensemble) of this test's own, stopped and removed on drop.
#[derive(Debug)]
pub struct PrivateZk {
    dir: PathBuf,
    connect: String,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/zk")
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .output()
        .map_err(|e| format!("scripts/zk: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/zk {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Whether private servers can be started here: `Err(why)` outside CI when ZooKeeper is not installed;
/// in CI, always `Ok` (the script installs it, and a failure is a failure).
pub fn available() -> Result<(), String> {
    if std::env::var_os("CI").is_some() || std::path::Path::new("/usr/share/java/zookeeper.jar").exists() {
        Ok(())
    } else {
        Err("ZooKeeper is not installed (scripts/test installs it)".into())
    }
}

/// Skips the calling test (with a line saying why) when private servers cannot be started here.
#[macro_export]
macro_rules! require_private_zk {
    () => {
        if let Err(why) = $crate::zkserver::available() {
            eprintln!("SKIPPED {}: {why}", module_path!());
            return;
        }
    };
}

/// A ZooKeeper backend on `servers` with session timeout `timeout`; panics (failing the test) when it cannot connect.
pub async fn connect(servers: &str, timeout: std::time::Duration) -> std::sync::Arc<recipes_zk::ZkBackend> {
    match recipes_zk::ZkBackend::connect(recipes_zk::ZkOptions::new(servers).session_timeout(timeout)).await {
        Ok(b) => b,
        Err(e) => panic!("connect to {servers}: {e}"),
    }
}

impl PrivateZk {
    /// Starts `servers` (1 or 3) servers on free loopback ports.
    pub fn start(servers: u32) -> PrivateZk {
        let dir = std::env::temp_dir().join(format!(
            "recipes-zk-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        let d = dir.to_string_lossy().into_owned();
        let n = servers.to_string();
        let connect = run(&["start", "--dir", &d, "--ensemble", &n]).expect("start a private ZooKeeper");
        let connect = connect.lines().last().unwrap_or_default().to_owned();
        PrivateZk { dir, connect }
    }

    /// The connect string.
    pub fn connect(&self) -> &str {
        &self.connect
    }

    /// The address of server `n` (1-based).
    pub fn addr(&self, n: usize) -> std::net::SocketAddr {
        self.connect
            .split(',')
            .nth(n - 1)
            .expect("server")
            .parse()
            .expect("address")
    }

    fn signal(&self, what: &str, n: u32) {
        let d = self.dir.to_string_lossy().into_owned();
        run(&[what, &n.to_string(), "--dir", &d]).expect("scripts/zk");
    }

    /// Server `n`'s role as it reports it (`leader`, `follower`, `standalone`), or `None` when it does not answer
    /// or is not serving (no quorum).
    pub fn mode(&self, n: usize) -> Option<String> {
        use std::io::{Read, Write};
        let t = std::time::Duration::from_millis(500);
        let mut s = std::net::TcpStream::connect_timeout(&self.addr(n), t).ok()?;
        s.set_read_timeout(Some(t)).ok()?;
        s.write_all(b"srvr").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        out.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_owned())
    }

    /// SIGSTOP server `n`.
    pub fn pause(&self, n: u32) {
        self.signal("pause", n);
    }

    /// SIGCONT server `n`.
    pub fn resume(&self, n: u32) {
        self.signal("resume", n);
    }

    /// SIGKILL server `n`.
    pub fn kill(&self, n: u32) {
        self.signal("kill", n);
    }

    /// Starts server `n` again on its data, and waits until it answers.
    pub fn revive(&self, n: u32) {
        self.signal("revive", n);
    }
}

impl Drop for PrivateZk {
    fn drop(&mut self) {
        let d = self.dir.to_string_lossy().into_owned();
        let _ = run(&["stop", "--dir", &d]);
    }
}
