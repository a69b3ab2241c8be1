//! The etcd harness: the backend contract on a real etcd (issue 27), each client through its own loopback [`Proxy`]
//! (passing bytes as they come: etcd speaks gRPC).
//!
//! The members come from the environment variable `ETCD_ENDPOINTS` (`scripts/test` starts one with `scripts/etcd`
//! and sets it). Without it the tests are skipped by name, except when `CI` is set: then a missing server is a hard
//! failure.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::backend::BackendExt;
use recipes_core::{Backend, Locks};
use recipes_etcd::{EtcdBackend, EtcdOptions};
use tokio::sync::OnceCell;

use crate::harness::{Capabilities, Faults, Harness, TestClient};
use crate::proxy::Proxy;

/// The session timeout of test clients (an etcd lease's TTL is whole seconds).
pub const CLIENT_SESSION_TIMEOUT: Duration = Duration::from_secs(4);

/// Root of every key the suite makes.
pub const ROOT: &str = "/conformance-etcd";

/// What etcd cannot express of the suite, and why (`tests/tests/suite/suite_complete.rs` checks that each names a
/// check or scenario of the suite).
pub const CANNOT_EXPRESS: &[(&str, &str)] = &[
    (
        "containers_are_reaped_later_not_at_once",
        "etcd has no hierarchy and so no containers: a path's parents are not made (decision 0065, point 4)",
    ),
    (
        "the_reaper_takes_emptied_containers_at_its_passes",
        "etcd has no hierarchy and so no containers: a path's parents are not made (decision 0065, point 4)",
    ),
    (
        "watch_event_arrives_before_later_reply",
        "etcd orders no watch event against the replies of requests: a waiter waits by revision instead (decision \
         0065, point 3)",
    ),
    (
        "set_data_and_delete_is_one_write",
        "etcd refuses a transaction that writes and deletes one key (\"duplicate key given in txn request\"): the \
         release's mark needs another form on etcd",
    ),
];

/// The client endpoints of the test members, or why there are none. Panics in CI when there are none.
pub fn server() -> Result<String, String> {
    match std::env::var("ETCD_ENDPOINTS") {
        Ok(s) if !s.trim().is_empty() => Ok(s),
        _ if std::env::var_os("CI").is_some() => {
            panic!("etcd is required in CI: ETCD_ENDPOINTS is not set (run the tests through scripts/test)")
        }
        _ => Err("no etcd server (set ETCD_ENDPOINTS, or run scripts/test)".into()),
    }
}

/// Runs the backend contract against the members in `ETCD_ENDPOINTS`.
pub struct EtcdHarness {
    server: Result<String, String>,
    run: String,
    observer: OnceCell<Arc<EtcdBackend>>,
    clients: Mutex<Vec<Arc<EtcdBackend>>>,
}

impl EtcdHarness {
    /// A harness with a key prefix unique to this process and moment.
    pub fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        EtcdHarness {
            server: server(),
            run: format!("{}-{nanos}", std::process::id()),
            observer: OnceCell::new(),
            clients: Mutex::new(Vec::new()),
        }
    }

    fn upstream(&self) -> SocketAddr {
        let s = self.server.as_ref().expect("server");
        let first = s.split(',').next().unwrap_or(s);
        let host = first.trim_start_matches("http://");
        host.parse()
            .expect("ETCD_ENDPOINTS must be http://127.0.0.1:port for the proxy")
    }

    async fn observer(&self) -> &Arc<EtcdBackend> {
        self.observer
            .get_or_init(|| async {
                Arc::new(
                    EtcdBackend::connect(EtcdOptions::new(self.server.as_ref().expect("server")))
                        .await
                        .expect("observer connects"),
                )
            })
            .await
    }
}

impl Default for EtcdHarness {
    fn default() -> Self {
        Self::new()
    }
}

struct EtcdFaults {
    backend: Arc<EtcdBackend>,
    proxy: Proxy,
}

#[async_trait]
impl Faults for EtcdFaults {
    async fn expire_session(&self) {
        // An operator's revocation ends the session at once (etcd deletes its keys); wait until the client has seen
        // it, as the in-memory backend reports it at once.
        let old = self.backend.session_status().id;
        self.backend.revoke_session_for_test().await.expect("revoke the lease");
        crate::util::until_session_ended(&*self.backend, old).await;
    }
    async fn lose_next_create_replies(&self, n: u32) {
        // The raw proxy loses the reply of the next call the client opens: the test's create.
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
impl Harness for EtcdHarness {
    fn name(&self) -> &'static str {
        "etcd"
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
            hierarchy: false,
            watches_rebuilt: false,
        }
    }
    fn cannot_express(&self, name: &str) -> Option<&'static str> {
        if crate::scenarios::PEER_LAYOUTS_ONLY.contains(&name) {
            return Some(crate::scenarios::PEER_LAYOUTS_ONLY_WHY);
        }
        CANNOT_EXPRESS.iter().find(|(n, _)| *n == name).map(|(_, why)| *why)
    }
    async fn client(&self) -> TestClient {
        self.client_with_timeout(CLIENT_SESSION_TIMEOUT).await
    }
    async fn client_with_timeout(&self, timeout: Duration) -> TestClient {
        let proxy = Proxy::start_raw(self.upstream()).await.expect("proxy");
        let options = EtcdOptions::new(&format!("http://{}", proxy.addr())).session_timeout(timeout);
        let backend = Arc::new(EtcdBackend::connect(options).await.expect("connect through proxy"));
        self.clients.lock().unwrap().push(backend.clone());
        TestClient {
            locks: Locks::new(backend.clone()),
            faults: Arc::new(EtcdFaults { backend, proxy }),
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
    fn tick(&self) -> Duration {
        Duration::from_millis(25)
    }
    async fn finish(&self) {
        let prefix = format!("{ROOT}/{}/", self.run);
        let obs = self.observer().await;
        let ephemeral = || async {
            obs.keys_with_leases(&prefix)
                .await
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, lease)| *lease != 0)
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        let mut left = ephemeral().await;
        for _ in 0..40 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            left = ephemeral().await;
        }
        assert!(left.is_empty(), "keys of a session left behind: {left:?}");
        let clients: Vec<_> = self.clients.lock().unwrap().drain(..).collect();
        for c in clients {
            c.close().await;
        }
        if let Some(o) = self.observer.get() {
            o.close().await;
        }
    }
}
