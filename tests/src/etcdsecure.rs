//! A private etcd member that speaks TLS only (client certificates required, made here by `rcgen`) with etcd's
//! authentication enabled, for the tests of `EtcdOptions::tls`, `EtcdOptions::user` and zklock's `--tls-*` and
//! `--user` on etcd.
//!
//! Its users: `root` (etcd requires it before `auth enable`), [`APP`] whose role may read and write under
//! [`PREFIX`] and the session keys, [`READER`] whose role may only read under [`PREFIX`] (and keep its session
//! key), and [`STRANGER`] without a role.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::secure::{free_port, write, Ca};

/// The user that may lock under [`PREFIX`]: `(name, password)`.
pub const APP: (&str, &str) = ("app", "app-secret");
/// A user that may only read under [`PREFIX`] (and keep its session key).
pub const READER: (&str, &str) = ("reader", "reader-secret");
/// A user without any role.
pub const STRANGER: (&str, &str) = ("stranger", "stranger-secret");
/// Where the users' roles apply.
pub const PREFIX: &str = "/secure/";

/// The kind of token the member hands its users.
#[derive(Debug, Clone, Copy)]
pub enum Tokens {
    /// etcd's simple tokens, expiring after `ttl_secs` without use.
    Simple {
        /// `--auth-token-ttl`.
        ttl_secs: u32,
    },
    /// JWTs (ES256), which carry the auth store's revision they were issued at.
    Jwt,
}

/// The member, stopped and its files removed on drop.
#[derive(Debug)]
pub struct SecureEtcd {
    child: Child,
    files: PathBuf,
    port: u16,
}

impl SecureEtcd {
    /// Makes a CA, the member's certificate, a client certificate (and one of another CA), starts the member on
    /// free loopback ports, and sets its users up.
    pub fn start() -> SecureEtcd {
        Self::start_with(Tokens::Simple { ttl_secs: 300 })
    }

    /// As [`start`](Self::start), with tokens of a kind and a lifetime of the test's choosing.
    pub fn start_with(tokens: Tokens) -> SecureEtcd {
        let files = crate::zkserver::private_dir("recipes-secure-etcd");
        std::fs::create_dir_all(&files).expect("a directory for the test's files");
        let ca = Ca::new("recipes etcd test CA");
        write(&files, "ca.pem", &ca.cert.pem());
        let (cert, key) = ca.issue("etcd");
        write(&files, "server.crt", &cert);
        write(&files, "server.key", &key);
        let (cert, key) = ca.issue("client");
        write(&files, "client.crt", &cert);
        write(&files, "client.key", &key);
        let stranger = Ca::new("another CA");
        write(&files, "untrusted-ca.pem", &stranger.cert.pem());

        let (port, peer) = (free_port(), free_port());
        let f = |name: &str| files.join(name).to_string_lossy().into_owned();
        let token_flags = match tokens {
            Tokens::Simple { ttl_secs } => {
                vec!["--auth-token=simple".to_owned(), format!("--auth-token-ttl={ttl_secs}")]
            }
            Tokens::Jwt => {
                // ES256: rcgen's default key is ECDSA P-256 (PKCS#8), which etcd's JWT signer reads.
                let key = rcgen::KeyPair::generate().expect("JWT key");
                write(&files, "jwt.key", &key.serialize_pem());
                write(&files, "jwt.pub", &key.public_key_pem());
                vec![format!(
                    "--auth-token=jwt,pub-key={},priv-key={},sign-method=ES256,ttl=10m",
                    f("jwt.pub"),
                    f("jwt.key")
                )]
            }
        };
        let child = Command::new("etcd")
            .env_remove("ETCD_NAME")
            .env_remove("ETCD_DATA_DIR")
            .args(["--name", "secure", "--data-dir", &f("data")])
            .args(["--listen-client-urls", &format!("https://127.0.0.1:{port}")])
            .args(["--advertise-client-urls", &format!("https://127.0.0.1:{port}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-cluster", &format!("secure=http://127.0.0.1:{peer}")])
            .args(["--cert-file", &f("server.crt"), "--key-file", &f("server.key")])
            .args(["--trusted-ca-file", &f("ca.pem"), "--client-cert-auth"])
            .args(["--log-level", "warn", "--logger", "zap"])
            .args(&token_flags)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(files.join("etcd.log")).expect("log file"))
            .spawn()
            .expect("etcd (Debian's etcd-server, installed by scripts/etcd)");
        let member = SecureEtcd { child, files, port };
        let t0 = Instant::now();
        while !member.etcdctl(false, &["endpoint", "health"]) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the TLS member did not become healthy (its log: {})",
                member.files.join("etcd.log").display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let [app, reader, stranger] = [APP, READER, STRANGER].map(|(u, p)| format!("{u}:{p}"));
        let end = "/secure0"; // the end of the range of PREFIX (its last byte, plus one)
        for args in [
            &["user", "add", "root:root-secret"][..],
            &["user", "add", &app],
            &["user", "add", &reader],
            &["user", "add", &stranger],
            &["role", "add", "locker"],
            &["role", "grant-permission", "locker", "readwrite", PREFIX, end],
            &[
                "role",
                "grant-permission",
                "locker",
                "--prefix=true",
                "readwrite",
                "/__recipes/sessions/",
            ],
            &["role", "add", "reading"],
            &["role", "grant-permission", "reading", "read", PREFIX, end],
            &[
                "role",
                "grant-permission",
                "reading",
                "--prefix=true",
                "readwrite",
                "/__recipes/sessions/",
            ],
            &["user", "grant-role", APP.0, "locker"],
            &["user", "grant-role", READER.0, "reading"],
            &["auth", "enable"],
        ] {
            assert!(member.etcdctl(false, args), "etcdctl {args:?} failed");
        }
        member
    }

    /// `etcdctl` against the member over TLS with the client certificate, as root once `as_root` (after
    /// authentication is enabled), not started.
    fn ctl(&self, as_root: bool) -> Command {
        let f = |name: &str| self.files.join(name).to_string_lossy().into_owned();
        let mut c = Command::new("etcdctl");
        c.env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoint(), "--cacert", &f("ca.pem")])
            .args(["--cert", &f("client.crt"), "--key", &f("client.key")])
            .args(["--dial-timeout=2s", "--command-timeout=5s"]);
        if as_root {
            c.args(["--user", "root:root-secret"]);
        }
        c
    }

    /// Runs `etcdctl args…` (as root once `as_root`); whether it succeeded.
    fn etcdctl(&self, as_root: bool, args: &[&str]) -> bool {
        self.ctl(as_root)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The member's endpoint, `https://127.0.0.1:port`.
    pub fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The CA that signed the member's certificate (PEM file).
    pub fn ca(&self) -> PathBuf {
        self.files.join("ca.pem")
    }

    /// A client certificate and its key signed by that CA (PEM files).
    pub fn client_identity(&self) -> (PathBuf, PathBuf) {
        (self.files.join("client.crt"), self.files.join("client.key"))
    }

    /// A CA that did not sign the member's certificate.
    pub fn untrusted_ca(&self) -> PathBuf {
        self.files.join("untrusted-ca.pem")
    }

    /// TLS options trusting the member's CA, with the client identity.
    pub fn tls(&self) -> recipes_etcd::EtcdTls {
        let (cert, key) = self.client_identity();
        recipes_etcd::EtcdTls::from_ca_file(self.ca())
            .and_then(|t| t.with_identity_files(cert, key))
            .expect("the test's TLS files")
    }

    /// Adds a user as root (a change of the auth store: its revision moves, which makes every JWT issued before it
    /// stale); whether it succeeded.
    pub fn add_user(&self, name: &str) -> bool {
        let user = format!("{name}:{name}-secret");
        self.etcdctl(true, &["user", "add", &user])
    }

    /// Changes user `name`'s password, as root; whether it succeeded.
    pub fn change_password(&self, name: &str, password: &str) -> bool {
        let mut child = self
            .ctl(true)
            .args(["user", "passwd", name, "--interactive=false"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcdctl");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            let _ = writeln!(stdin, "{password}");
        }
        child.wait().is_ok_and(|s| s.success())
    }

    /// Keys under `prefix`, read as root.
    pub fn keys_under(&self, prefix: &str) -> Vec<String> {
        let out = self
            .ctl(true)
            .args(["get", "--prefix", "--keys-only", prefix])
            .output()
            .expect("etcdctl");
        assert!(
            out.status.success(),
            "etcdctl get: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for SecureEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.files);
    }
}
