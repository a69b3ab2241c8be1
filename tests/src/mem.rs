//! The in-memory harness.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::backend::ChildOrder;
use recipes_core::Locks;
use recipes_mem::{MemClient, MemCluster};

use crate::harness::{Capabilities, Faults, Harness, TestClient};

/// Runs the suite on a fresh [`MemCluster`] per test, under tokio's paused clock.
#[derive(Debug, Clone)]
pub struct MemHarness {
    cluster: MemCluster,
}

impl Default for MemHarness {
    fn default() -> Self {
        Self::new()
    }
}

/// How often the container reaper looks: as on the suite's ZooKeeper server (`znode.container.checkIntervalMs`).
pub const REAP_DELAY: Duration = Duration::from_secs(1);

impl MemHarness {
    /// A harness on a new cluster whose containers are reaped as the suite's ZooKeeper server reaps them.
    pub fn new() -> Self {
        let cluster = MemCluster::new();
        cluster.set_container_reap_delay(REAP_DELAY);
        MemHarness { cluster }
    }

    /// As [`new`](MemHarness::new), on a cluster that orders children by creation, as etcd does
    /// ([`MemCluster::ordered_by`]): every scenario runs on that order in memory too.
    pub fn by_creation() -> Self {
        let harness = Self::new();
        let cluster = harness.cluster.clone().ordered_by(ChildOrder::Creation);
        MemHarness { cluster }
    }

    fn by_creation_mode(&self) -> bool {
        self.cluster.child_order() == ChildOrder::Creation
    }

    /// The cluster.
    pub fn cluster(&self) -> &MemCluster {
        &self.cluster
    }
}

struct MemFaults(Arc<MemClient>);

#[async_trait]
impl Faults for MemFaults {
    async fn expire_session(&self) {
        self.0.expire_session();
    }
    async fn lose_next_create_replies(&self, n: u32) {
        self.0.lose_next_create_replies(n);
    }
    async fn disconnect_for(&self, d: Duration) {
        self.0.disconnect_for(d);
    }
    fn session_timeout(&self) -> Duration {
        self.0.session_timeout()
    }
}

#[async_trait]
impl Harness for MemHarness {
    fn name(&self) -> &'static str {
        if self.by_creation_mode() {
            "mem-by-creation"
        } else {
            "mem"
        }
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            lose_create_reply: true,
            disconnect: true,
            watch_delay: true,
            latency: true,
            // No sequences when children are ordered by creation.
            set_sequence: !self.by_creation_mode(),
            hierarchy: true,
            watches_rebuilt: true,
        }
    }
    async fn client(&self) -> TestClient {
        self.client_with_timeout(recipes_mem::DEFAULT_SESSION_TIMEOUT).await
    }
    async fn client_with_timeout(&self, timeout: Duration) -> TestClient {
        let c = self.cluster.client_with_timeout(timeout);
        TestClient {
            locks: Locks::new(c.clone()),
            faults: Arc::new(MemFaults(c)),
        }
    }
    fn path(&self, name: &str) -> String {
        format!("/conformance/{name}")
    }
    async fn children(&self, path: &str) -> Vec<String> {
        self.cluster.children(path)
    }
    fn patience(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn tick(&self) -> Duration {
        Duration::from_millis(10)
    }
    fn set_watch_delay(&self, d: Duration) {
        self.cluster.set_watch_delay(d);
    }
    fn set_latency(&self, d: Duration) {
        self.cluster.set_latency(d);
    }
    fn set_next_sequence(&self, path: &str, next: i32) {
        self.cluster.set_next_sequence(path, next).expect("the path exists");
    }
    fn container_reap_delay(&self) -> Option<Duration> {
        Some(REAP_DELAY)
    }
    fn next_container_check(&self) -> Option<tokio::time::Instant> {
        self.cluster.next_container_check()
    }
    fn cannot_express(&self, name: &str) -> Option<&'static str> {
        if name == "a_runtime_dropped_with_a_guard_and_a_waiter_on_it_leaves_no_node" {
            return Some(
                "it drives the lock from a second runtime, on the real clock, which this harness's paused clock does \
                 not share (its waits run out at once); recipes-core's tests `runtimes::*` run it on the real clock",
            );
        }
        let peers_only = self.by_creation_mode() && crate::scenarios::PEER_LAYOUTS_ONLY.contains(&name);
        peers_only.then_some(crate::scenarios::PEER_LAYOUTS_ONLY_WHY)
    }
    async fn finish(&self) {
        // Background cleanups run on the (paused) clock: give them time, then nothing ephemeral may remain
        // except nodes of clients still alive in the scenario (all are dropped by now), and the reaper must have
        // removed the emptied containers.
        let ours = |c: &MemCluster| c.paths().into_iter().any(|p| p.starts_with("/conformance/"));
        for _ in 0..200 {
            if self.cluster.ephemerals().is_empty() && !ours(&self.cluster) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let left = self.cluster.ephemerals();
        assert!(left.is_empty(), "lock nodes left behind: {left:?}");
        let leftover: Vec<_> = self
            .cluster
            .paths()
            .into_iter()
            .filter(|p| p.starts_with("/conformance/"))
            .collect();
        assert!(
            leftover.is_empty(),
            "lock paths not cleaned up (containers should vanish): {leftover:?}"
        );
    }
}
