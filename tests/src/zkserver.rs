//! Private ZooKeeper servers for tests that stop, pause or restart the server, through `scripts/zk`.

use std::path::PathBuf;
use std::process::Command;

/// A server (or ensemble) of this test's own, stopped and removed on drop.
#[derive(Debug)]
pub struct PrivateZk {
    dir: PathBuf,
    connect: String,
}

/// Runs `scripts/<name> args…`; its standard output, trimmed, or why it failed.
pub(crate) fn run_script(name: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts").join(name))
        .args(args)
        .output()
        .map_err(|e| format!("scripts/{name}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/{name} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn run(args: &[&str]) -> Result<String, String> {
    run_script("zk", args)
}

/// A new path in the temporary directory, `<prefix>-<pid>-<nanoseconds>`, not made yet.
pub(crate) fn private_dir(prefix: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ))
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
        Self::start_with(servers, &[])
    }

    /// Starts `servers` servers with more options of `scripts/zk start` (`--server-opt 3:maxSessionTimeout=1000`,
    /// `--quorum-relay 1`).
    pub fn start_with(servers: u32, options: &[&str]) -> PrivateZk {
        let dir = private_dir("recipes-zk-test");
        let d = dir.to_string_lossy().into_owned();
        let n = servers.to_string();
        let mut args = vec!["start", "--dir", &d, "--ensemble", &n];
        args.extend_from_slice(options);
        let connect = run(&args).expect("start a private ZooKeeper");
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

    /// Freezes the relay between server `n` and the others (started with `--quorum-relay n`): nothing passes, and
    /// nobody is told.
    pub fn cut_quorum(&self, n: u32) {
        self.signal("cut-quorum", n);
    }

    /// Thaws it.
    pub fn heal_quorum(&self, n: u32) {
        self.signal("heal-quorum", n);
    }
}

/// A plain TCP relay on a free loopback port to `target` (`scripts/zk-relay.py`), which [`freeze`](Relay::freeze)
/// stops dead (SIGSTOP: nothing passes, nobody is told) and [`thaw`](Relay::thaw) starts again. Killed on drop.
#[derive(Debug)]
pub struct Relay {
    child: std::process::Child,
    port: u16,
}

impl Relay {
    /// Starts a relay to `target`.
    pub fn start(target: std::net::SocketAddr) -> Relay {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        Self::start_on(port, target)
    }

    /// Starts a relay on `port` (one that was free) to `target`.
    pub fn start_on(port: u16, target: std::net::SocketAddr) -> Relay {
        let child = Command::new("python3")
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/zk-relay.py"))
            .arg(format!("{port}:{}", target.port()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the relay");
        let t0 = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "the relay did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Relay { child, port }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its address, `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill").args([sig, &self.child.id().to_string()]).status();
    }

    /// Nothing passes any more, and nobody is told.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Traffic passes again.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.signal("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateZk {
    fn drop(&mut self) {
        let d = self.dir.to_string_lossy().into_owned();
        let _ = run(&["stop", "--dir", &d]);
    }
}
