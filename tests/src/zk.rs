//! The ZooKeeper harness: the suite on a real server, each client through its own loopback [`Proxy`].
//!
//! The server comes from the environment variable `ZK_CONNECT` (`scripts/test` starts one and sets it). Without
//! it the tests are skipped by name, except when `CI` is set: then a missing server is a hard failure.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::backend::BackendExt;
use recipes_core::Locks;
use recipes_zk::{ZkBackend, ZkOptions};
use tokio::sync::OnceCell;

use crate::harness::{Capabilities, Faults, Harness, TestClient};
use crate::proxy::Proxy;

/// The session timeout of test clients.
pub const CLIENT_SESSION_TIMEOUT: Duration = Duration::from_secs(4);

/// Root of every znode the suite makes.
pub const ROOT: &str = "/conformance-zk";

/// The connect string of the test server, or why there is none. Panics in CI when there is none.
pub fn server() -> Result<String, String> {
    match std::env::var("ZK_CONNECT") {
        Ok(s) if !s.trim().is_empty() => Ok(s),
        _ if std::env::var_os("CI").is_some() => {
            panic!("ZooKeeper is required in CI: ZK_CONNECT is not set (run the tests through scripts/test)")
        }
        _ => Err("no ZooKeeper server (set ZK_CONNECT, or run scripts/test)".into()),
    }
}

/// [`server`], or `None` after printing why the test is skipped (outside CI only: [`server`] panics in CI).
pub fn server_or_skip() -> Option<String> {
    server().map_err(|why| eprintln!("SKIPPED: {why}")).ok()
}

/// A path under `/{area}` that no other test or run uses.
pub fn unique_path(area: &str, name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("/{area}/{name}-{}-{nanos}", std::process::id())
}

/// Runs the suite against the server in `ZK_CONNECT`.
pub struct ZkHarness {
    server: Result<String, String>,
    run: String,
    observer: OnceCell<Arc<ZkBackend>>,
    clients: Mutex<Vec<Arc<ZkBackend>>>,
}

impl ZkHarness {
    /// A harness with a path prefix unique to this process and moment.
    pub fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        ZkHarness {
            server: server(),
            run: format!("{}-{nanos}", std::process::id()),
            observer: OnceCell::new(),
            clients: Mutex::new(Vec::new()),
        }
    }

    fn upstream(&self) -> SocketAddr {
        let s = self.server.as_ref().expect("server");
        let first = s.split(',').next().unwrap_or(s).split('/').next().unwrap_or(s);
        first.parse().expect("ZK_CONNECT must be 127.0.0.1:port for the proxy")
    }

    async fn observer(&self) -> &Arc<ZkBackend> {
        self.observer
            .get_or_init(|| async {
                ZkBackend::connect(ZkOptions::new(self.server.clone().expect("server")))
                    .await
                    .expect("observer connects")
            })
            .await
    }

    /// Every ephemeral node under `path`, recursively.
    async fn ephemerals(&self, path: &str) -> Vec<String> {
        let obs = self.observer().await;
        let mut out = Vec::new();
        let mut stack = vec![path.to_owned()];
        while let Some(p) = stack.pop() {
            if let Ok(Some((_, stat))) = obs.current().get(&p).await {
                if stat.ephemeral_owner != 0 {
                    out.push(p.clone());
                }
            }
            if let Ok(children) = obs.current().children(&p).await {
                stack.extend(children.into_iter().map(|c| format!("{p}/{c}")));
            }
        }
        out
    }
}

impl Default for ZkHarness {
    fn default() -> Self {
        Self::new()
    }
}

struct ZkFaults {
    backend: Arc<ZkBackend>,
    proxy: Proxy,
    upstream: SocketAddr,
}

#[async_trait]
impl Faults for ZkFaults {
    async fn expire_session(&self) {
        // Cut the client off, so that it cannot re-attach to its session while we close it behind its back.
        self.proxy.cut_for(Duration::from_millis(1500));
        let info = self.backend.zk_session().expect("open session");
        let upstream = self.upstream.to_string();
        let killer = recipes_zk::zk::Client::connector()
            .with_session_timeout(self.backend.session_timeout())
            .with_session(info)
            .connect(&upstream);
        match tokio::time::timeout(Duration::from_secs(10), killer).await {
            Ok(Ok(c)) => drop(c), // closes the session on the server
            Ok(Err(recipes_zk::zk::Error::SessionExpired)) => {}
            other => panic!("could not attach to the session to expire it: {other:?}"),
        }
        // Wait until the client itself has seen the expiry, as the in-memory backend reports it at once.
        let old = self.backend.session_id();
        crate::util::until_session_ended(&*self.backend, old).await;
    }
    async fn lose_next_create_replies(&self, n: u32) {
        self.proxy.lose_next_create_replies(n);
    }
    async fn disconnect_for(&self, d: Duration) {
        self.proxy.cut_for(d);
    }
    fn session_timeout(&self) -> Duration {
        self.backend.session_timeout()
    }
}

#[async_trait]
impl Harness for ZkHarness {
    fn name(&self) -> &'static str {
        "zk"
    }
    fn skip_reason(&self) -> Option<String> {
        self.server.as_ref().err().cloned()
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            lose_create_reply: true,
            disconnect: true,
            watch_delay: false,
            latency: false,
            set_sequence: false,
            hierarchy: true,
            watches_rebuilt: true,
        }
    }
    async fn client(&self) -> TestClient {
        self.client_with_timeout(CLIENT_SESSION_TIMEOUT).await
    }
    async fn client_with_timeout(&self, timeout: Duration) -> TestClient {
        let proxy = Proxy::start(self.upstream()).await.expect("proxy");
        let backend = ZkBackend::connect(ZkOptions::new(proxy.addr().to_string()).session_timeout(timeout))
            .await
            .expect("connect through proxy");
        self.clients.lock().unwrap().push(backend.clone());
        TestClient {
            locks: Locks::new(backend.clone()),
            faults: Arc::new(ZkFaults {
                backend,
                proxy,
                upstream: self.upstream(),
            }),
        }
    }
    fn path(&self, name: &str) -> String {
        format!("{ROOT}/{}/{name}", self.run)
    }
    async fn children(&self, path: &str) -> Vec<String> {
        let mut c = self.observer().await.current().children(path).await.unwrap_or_default();
        c.sort();
        c
    }
    fn patience(&self) -> Duration {
        Duration::from_secs(20)
    }
    fn container_reap_delay(&self) -> Option<Duration> {
        // `scripts/zk` starts the suite's servers with `znode.container.checkIntervalMs=1000`, as the in-memory
        // harness's reaper looks.
        Some(crate::mem::REAP_DELAY)
    }
    fn tick(&self) -> Duration {
        Duration::from_millis(25)
    }
    async fn finish(&self) {
        let prefix = format!("{ROOT}/{}", self.run);
        // Clients still alive keep their sessions: nothing ephemeral may remain under the test's prefix.
        let mut left = self.ephemerals(&prefix).await;
        for _ in 0..40 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            left = self.ephemerals(&prefix).await;
        }
        assert!(left.is_empty(), "lock nodes left behind: {left:?}");
        for c in self.clients.lock().unwrap().drain(..) {
            c.close_now();
        }
        if let Some(o) = self.observer.get() {
            o.close_now();
        }
    }
}
