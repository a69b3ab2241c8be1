//! What a backend provides to run the suite.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::Locks;

/// Optional abilities of a backend's test setup; scenarios needing one are skipped where it is missing (and say
/// so on stderr).
#[derive(Debug, Clone, Copy, Default)]
pub struct Capabilities {
    /// [`Faults::lose_next_create_replies`] works.
    pub lose_create_reply: bool,
    /// [`Faults::disconnect_for`] works.
    pub disconnect: bool,
    /// [`Harness::set_watch_delay`] works.
    pub watch_delay: bool,
    /// [`Harness::set_latency`] works.
    pub latency: bool,
    /// [`Harness::set_next_sequence`] works.
    pub set_sequence: bool,
    /// A lock path is a node of its own that stays while anything is under it (ZooKeeper's containers); etcd's flat
    /// keys have none (decision 0065, point 4).
    pub hierarchy: bool,
    /// After a reconnection, a watch set before it reports the node as it is then, not each change in turn
    /// (ZooKeeper's `setWatches`: a change then a deletion is the deletion; a node deleted and made again is a change
    /// of data). etcd's watches resume from a revision, and replay the changes in order.
    pub watches_rebuilt: bool,
}

/// Fault injection on one client.
#[async_trait]
pub trait Faults: Send + Sync {
    /// Expires the client's session now, on the server (as Curator's `KillSession`).
    async fn expire_session(&self);
    /// The next `n` create replies of this client are lost (applied, but the caller sees connection loss).
    async fn lose_next_create_replies(&self, n: u32);
    /// Cuts the client's connection for `d`.
    async fn disconnect_for(&self, d: Duration);
    /// The client's session timeout.
    fn session_timeout(&self) -> Duration;
}

/// One client session (one simulated process) with its locks and its faults.
#[derive(Clone)]
pub struct TestClient {
    /// The entry point on this client's session.
    pub locks: Locks,
    /// Its fault injection.
    pub faults: Arc<dyn Faults>,
}

/// A backend under test.
#[async_trait]
pub trait Harness: Send + Sync {
    /// The backend's name.
    fn name(&self) -> &'static str;
    /// Why this backend cannot run here (the test is then reported as skipped, by name), or `None`.
    fn skip_reason(&self) -> Option<String> {
        None
    }
    /// What it supports.
    fn capabilities(&self) -> Capabilities;
    /// A new client with the default session timeout.
    async fn client(&self) -> TestClient;
    /// A new client with this session timeout.
    async fn client_with_timeout(&self, timeout: Duration) -> TestClient;
    /// A lock path unique to this test run.
    fn path(&self, name: &str) -> String;
    /// Children of `path`, as an independent observer sees them (empty when it does not exist).
    async fn children(&self, path: &str) -> Vec<String>;
    /// How long the suite may wait for any single expected event before failing (time is virtual in memory).
    fn patience(&self) -> Duration;
    /// A short pause for work in flight (real or virtual).
    fn tick(&self) -> Duration;
    /// Delays watch delivery (when [`Capabilities::watch_delay`]).
    fn set_watch_delay(&self, _d: Duration) {}
    /// Adds request latency (when [`Capabilities::latency`]).
    fn set_latency(&self, _d: Duration) {}
    /// Sets the next sequence number the server hands out under `path`, which must exist (when
    /// [`Capabilities::set_sequence`]).
    fn set_next_sequence(&self, _path: &str, _next: i32) {}
    /// How often the container reaper looks for emptied containers, when the harness knows it (an emptied container
    /// goes at its next pass).
    fn container_reap_delay(&self) -> Option<Duration> {
        None
    }
    /// When the container reaper looks next, where [`container_reap_delay`](Harness::container_reap_delay) is known:
    /// it looks every such delay from then on.
    fn next_container_check(&self) -> Option<tokio::time::Instant> {
        None
    }
    /// Why this backend cannot express the scenario or contract check `name` (the suite then reports it as not
    /// expressible, with the reason), or `None`: every backend runs every check it can.
    fn cannot_express(&self, _name: &str) -> Option<&'static str> {
        None
    }
    /// Checks after each scenario that no lock node of the test is left, and releases resources.
    async fn finish(&self);
}
