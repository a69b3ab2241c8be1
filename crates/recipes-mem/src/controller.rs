//! The controlled mode's handle: the events a model checker picks from, and the one it makes happen.

use std::sync::Arc;

use recipes_core::Result;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::{Access, MemCluster, NetEvent};

/// The controlled mode of a [`MemCluster`] (see [`MemCluster::controlled`]): lists the events that may happen next
/// and makes one happen. Faults are injected through the clients ([`MemClient::disconnect_for`](crate::MemClient::disconnect_for) and the like),
/// whose timers then show up as [`NetEvent::Timer`] events once due.
#[derive(Debug, Clone)]
pub struct Controller {
    pub(crate) cluster: MemCluster,
}

impl Controller {
    /// The events enabled now, in a stable order.
    pub fn events(&self) -> Vec<NetEvent> {
        self.cluster.with(|st, now| st.events(now))
    }

    /// From now on (`true`), a [`NetEvent::Deliver`] that brings its session a watch event brings the events of the
    /// same write queued right behind it too: the change of a node's data and its deletion by one transaction, say,
    /// as ZooKeeper sends them in one go and its client may read both before it acts on the first. (Containers
    /// reaped as the server catches up count with the next write; a tree watch's event between two of them splits
    /// them.) By default each reply or event is a delivery of its own, and the client acts on it before the next
    /// arrives.
    ///
    /// ```
    /// let cluster = recipes_mem::MemCluster::new();
    /// let ctl = cluster.controlled();
    /// ctl.events_of_a_write_together(true);
    /// assert!(ctl.events().is_empty());
    /// ```
    pub fn events_of_a_write_together(&self, on: bool) {
        self.cluster.with(|st, _| st.events_together = on);
    }

    /// Makes `event` happen; `false` when it is not enabled.
    pub fn fire(&self, event: NetEvent) -> bool {
        self.cluster.with(|st, now| st.fire_event(event, now))
    }

    /// What `event` would touch if it happened now (two events commute when independent).
    pub fn access(&self, event: NetEvent) -> Access {
        self.cluster.peek(|st| st.access(event))
    }

    /// A readable description of `event` (what it would do now), for traces.
    pub fn describe(&self, event: NetEvent) -> String {
        self.cluster.peek(|st| st.describe(event))
    }

    /// When the earliest scheduled timer comes due.
    pub fn next_timer(&self) -> Option<Instant> {
        self.cluster.peek(|st| st.next_timer())
    }

    /// A counter of everything that happens on the cluster (sends, applications, deliveries, state changes).
    pub fn activity(&self) -> u64 {
        self.cluster.peek(|st| st.activity)
    }

    /// Notified whenever [`activity`](Controller::activity) moves.
    pub fn activity_notify(&self) -> Arc<Notify> {
        self.cluster.peek(|st| st.activity_notify.clone())
    }

    /// How many requests, replies, events and timers are in flight.
    pub fn in_flight(&self) -> usize {
        self.cluster.peek(|st| st.in_flight())
    }

    /// [`activity`](Controller::activity) and [`in_flight`](Controller::in_flight) at once.
    pub fn progress(&self) -> (u64, usize) {
        self.cluster.peek(|st| (st.activity, st.in_flight()))
    }

    /// Deletes a node as an operator would, from outside every client session (no session is needed).
    ///
    /// # Notable errors
    /// `NoNode`, `NotEmpty`.
    pub fn operator_delete(&self, path: &str) -> Result<()> {
        self.cluster.with(|st, now| st.operator_delete(path, now))
    }

    /// Writes a node's data as an operator would (`zkCli set`), or a peer's tool (Curator's `Revoker`), from outside
    /// every client session.
    ///
    /// # Notable errors
    /// `NoNode`.
    pub fn operator_set_data(&self, path: &str, data: &[u8]) -> Result<()> {
        self.cluster.with(|st, now| st.operator_set_data(path, data, now))
    }
}
