//! An in-memory backend for `recipes-core` with ZooKeeper's behaviour, for applications' own tests.
//!
//! A [`MemCluster`] is the shared tree, standing in for a ZooKeeper ensemble; each [`MemClient`] is one client
//! session on it, standing in for one process. `MemCluster` is `Clone`; clones share the tree.
//!
//! What it reproduces of ZooKeeper, wherever a recipe could tell the difference:
//! - persistent, container, ephemeral and ephemeral-sequential nodes; sequence numbers from the parent's
//!   child-change counter (`%010d` of a signed 32-bit value, so they skip and can wrap; ZooKeeper moves it at each
//!   create only, this backend at each delete too: its numbers advance faster and wrap sooner, never kinder);
//!   strictly increasing creation ids (czxid); lists of children in no order (ZooKeeper's come from a hash set;
//!   here a shuffle, the same for the same names, so that code that takes a listing's order for the creates' fails
//!   here too: decision 0089), while [`MemCluster::children`], a test's view, is sorted;
//! - one-shot watches registered before the existence check, delivered in order with the session's replies;
//! - **requests bound to their session**: a request of an ended session fails, and never runs on its successor;
//! - paths checked as ZooKeeper's client checks them, on every request (`Refused`, at once: decision 0091);
//! - **the network**: a request is sent, applied and answered in three separate steps; one session's requests are
//!   applied in order; a request already sent is applied even if its caller gave up, or its session is then closed
//!   (before the close, as ZooKeeper's `closeSession` follows it), and a watch still armed at a close ends with
//!   `Closed`, as the application's doing, not with `SessionExpired`; a broken connection loses the replies in flight,
//!   while the requests it carried may still land;
//! - **containers reaped by a periodic reaper** (ZooKeeper's runs about once a minute; see
//!   [`MemCluster::set_container_reap_delay`]): an emptied container goes at its next pass, not at once, and sometimes
//!   right after it was emptied;
//! - sessions suspended while disconnected, which the server expires after their timeout whether or not the client
//!   knows; a close over a cut connection reaches the server only when the connection comes back within the timeout
//!   (the nodes stay until then, or until the expiry); a request made while the connection is cut is held by the
//!   client and sent once it is back (zookeeper-client's way: it lands then, even if its caller gave up on it), or
//!   fails if the session ended meanwhile (decision 0090);
//! - **watches set again at a reconnection**: no watch of a cut-off session fires, and the events on their way at the
//!   cut are lost with it; when it reconnects, each watch is answered from its node as it is then (ZooKeeper's
//!   `setWatches`: a change then a deletion is the deletion, a node made again under its name is a change), last-set
//!   first, which is not the order of the changes.
//! - **tree watches** (ZooKeeper's persistent recursive watch, see
//!   [`TreeWatches`](recipes_core::backend::TreeWatches)): every create, change of data and delete below the watched
//!   node, in the session's one stream of replies and events; lost with the connection, which ends the watch.
//!
//! Time is tokio's clock, so tests may run under `tokio::time::pause` (`#[tokio::test(start_paused = true)]`).
//!
//! Fault injection: [`MemClient::expire_session`], [`MemClient::disconnect_for`], [`MemClient::crash`],
//! [`MemClient::lose_next_create_replies`], [`MemCluster::set_watch_delay`], [`MemCluster::set_latency`]. For a
//! model checker that picks the order of every event, see [`MemCluster::controlled`].
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use recipes_core::{Locks, LostReason};
//! use recipes_mem::MemCluster;
//!
//! let cluster = MemCluster::new();
//! let a = cluster.client();
//! let locks = Locks::new(a.clone());
//! let guard = locks.fair("/jobs/etl").unwrap().acquire().await.unwrap();
//! a.expire_session();
//! assert_eq!(guard.lost().await, LostReason::SessionExpired);
//! assert_eq!(cluster.children("/jobs/etl"), Vec::<String>::new());
//! # });
//! ```

#![warn(missing_docs)]

mod client;
mod controller;
mod inspect;
mod server;
mod tree;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use recipes_core::Result;
use tokio::sync::Notify;
use tokio::time::Instant;

pub use client::MemClient;
pub use controller::Controller;
use server::State;
pub use server::{Access, NetEvent};
use tree::ReapChecks;

/// The default session timeout of a client.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    /// Whether the automatic mode's pump task is running.
    pump_running: AtomicBool,
    /// Wakes the pump when something new is due.
    wake: Arc<Notify>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Let the pump notice that the cluster is gone.
        self.wake.notify_one();
    }
}

/// The shared tree, standing in for a ZooKeeper ensemble. Clones share state.
#[derive(Debug, Clone, Default)]
pub struct MemCluster {
    inner: Arc<Inner>,
}

impl MemCluster {
    /// An empty tree (just `/`).
    pub fn new() -> Self {
        Self::default()
    }

    /// The server, locked for a short critical section: never held across an `.await`.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock()
    }

    /// Runs `f` on the server brought up to now, then makes sure whatever it left due will happen.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut State, Instant) -> T) -> T {
        self.with_at(Instant::now(), f)
    }

    /// As [`with`](Self::with), at `now`, a time the caller read: two requests sent back to back share one read of the
    /// clock. Another thread's request may have come in since at a later time; the server takes that as it takes two
    /// threads that read the clock in one order and lock it in the other (a request's send time only ever counts as
    /// evidence from the server's side, so an earlier one is the cautious one).
    pub(crate) fn with_at<T>(&self, now: Instant, f: impl FnOnce(&mut State, Instant) -> T) -> T {
        let (out, pending) = {
            let mut st = self.lock();
            st.catch_up(now);
            let out = f(&mut st, now);
            // The pump wakes by itself at `pump_at`: only what comes due before then needs it woken (waking it on
            // every request, while a container waits a minute for the reaper, cost a switch of threads each).
            let wake = |due: Instant| st.pump_at.is_none_or(|at| due < at);
            (out, !st.controlled && st.next_due().is_some_and(wake))
        };
        if pending {
            self.kick();
        }
        out
    }

    /// Reads the server without changing it.
    pub(crate) fn peek<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.lock())
    }

    /// As [`peek`](Self::peek), with the time now (a clock read: only for what depends on it).
    pub(crate) fn peek_now<T>(&self, f: impl FnOnce(&State, Instant) -> T) -> T {
        f(&self.lock(), Instant::now())
    }

    /// Starts (or wakes) the pump that applies, delivers and fires what comes due in the automatic mode.
    fn kick(&self) {
        if self.inner.pump_running.swap(true, Ordering::AcqRel) {
            self.inner.wake.notify_one();
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                // Made here, not in the task: a runtime shutting down drops the task unpolled, and the flag must
                // still be cleared (found by review, helper-59: the cluster's automatic mode stalled for good).
                let running = Running(Arc::downgrade(&self.inner));
                h.spawn(pump(running, Arc::downgrade(&self.inner), self.inner.wake.clone()));
            }
            // No runtime here: what is due waits until a call made inside one.
            Err(_) => self.inner.pump_running.store(false, Ordering::Release),
        }
    }

    /// A new client session with the default timeout ([`DEFAULT_SESSION_TIMEOUT`]).
    pub fn client(&self) -> Arc<MemClient> {
        self.client_with_timeout(DEFAULT_SESSION_TIMEOUT)
    }

    /// A new client session with this session timeout.
    pub fn client_with_timeout(&self, timeout: Duration) -> Arc<MemClient> {
        MemClient::new(self.clone(), timeout)
    }

    /// Delays the delivery of every later watch event by `delay` (replies of the same session stay behind the
    /// events sent before them, as on ZooKeeper).
    pub fn set_watch_delay(&self, delay: Duration) {
        self.with(|st, _| st.watch_delay = delay);
    }

    /// Makes every request take `latency` to reach the server and `latency` again for its reply, so that an
    /// acquire can be cancelled while a request is in flight (the request is applied all the same).
    pub fn set_latency(&self, latency: Duration) {
        self.with(|st, _| st.latency = latency);
    }

    /// How often the container reaper looks for empty container nodes (that once had a child) to delete, from now
    /// on: ZooKeeper's reaper runs every `znode.container.checkIntervalMs`, 60 s by default, which is the default here
    /// too (counted from the cluster's creation). A container is deleted at the first check after it was emptied: at
    /// once when a check comes right after, `delay` later at most, as on ZooKeeper.
    pub fn set_container_reap_delay(&self, delay: Duration) {
        self.with(|st, now| {
            st.reap_checks = ReapChecks {
                origin: now,
                every: delay,
            }
        });
    }

    /// When the container reaper looks next: a container emptied before then is deleted then (a test can place a step
    /// just before or just after it). `None` when the interval set is too long for the clock to count.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// use std::time::Duration;
    /// use recipes_core::backend::{BackendExt, CreateMode};
    /// use recipes_mem::MemCluster;
    ///
    /// let cluster = MemCluster::new();
    /// cluster.set_container_reap_delay(Duration::from_secs(1));
    /// let on = cluster.client();
    /// on.current().create("/p", b"", CreateMode::Container).await.unwrap();
    /// on.current().create("/p/c", b"", CreateMode::Ephemeral).await.unwrap();
    /// let check = cluster.next_container_check().expect("the reaper looks every second");
    /// tokio::time::sleep_until(check - Duration::from_millis(10)).await;
    /// on.current().delete("/p/c").await.unwrap();
    /// assert!(cluster.exists("/p"), "not at once");
    /// tokio::time::sleep_until(check).await;
    /// assert!(!cluster.exists("/p"), "10 ms after it was emptied: the reaper looked");
    /// # }
    /// ```
    pub fn next_container_check(&self) -> Option<Instant> {
        self.with(|st, now| st.reap_checks.after(now))
    }

    /// Sets the next sequence number handed out under `parent` (to test the wrap of ZooKeeper's signed counter).
    ///
    /// # Notable errors
    /// [`Error::NoNode`](recipes_core::Error::NoNode) when `parent` does not exist.
    pub fn set_next_sequence(&self, parent: &str, next: i32) -> Result<()> {
        self.with(|st, _| st.tree.set_next_sequence(parent, next))
    }

    /// Orders children as a backend that orders by creation does (etcd: [`ChildOrder::Creation`]): a sequential
    /// create makes the name as given, with no sequence appended, and lists of children come in the order of creation
    /// (ascending czxid). The default is ZooKeeper's ([`ChildOrder::Sequence`]). Call it before making clients; the
    /// model checker explores the recipes on both orders.
    ///
    /// A cluster ordered by creation stands for etcd in its clients' connections too: a request made while a client's
    /// connection is cut fails at once with `ConnectionLoss`, as etcd's client refuses it, where ZooKeeper's client
    /// holds it until the connection is back ([`MemClient::disconnect_for`], decision 0090).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::backend::ChildOrder;
    /// use recipes_core::Locks;
    /// use recipes_mem::MemCluster;
    ///
    /// let cluster = MemCluster::new().ordered_by(ChildOrder::Creation);
    /// let guard = Locks::new(cluster.client()).fair("/jobs/etl")?.acquire().await?;
    /// // `L-<attempt id>-`: no sequence; the listing's order is the queue's.
    /// assert!(guard.node().ends_with('-'));
    /// # Ok::<(), recipes_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// [`ChildOrder::Creation`]: recipes_core::backend::ChildOrder::Creation
    /// [`ChildOrder::Sequence`]: recipes_core::backend::ChildOrder::Sequence
    pub fn ordered_by(self, order: recipes_core::backend::ChildOrder) -> Self {
        self.with(|st, _| st.tree.order = order);
        self
    }

    /// How this cluster orders children (see [`ordered_by`](MemCluster::ordered_by)).
    pub fn child_order(&self) -> recipes_core::backend::ChildOrder {
        self.peek(|st| st.tree.order)
    }

    /// Switches the cluster to the controlled mode and returns its controller: from now on nothing happens by
    /// itself (no request is applied, no reply delivered, no timer fired) until the controller picks the event.
    /// Call it before making clients. Meant for model checkers that explore the orders of events.
    pub fn controlled(&self) -> Controller {
        self.with(|st, _| st.controlled = true);
        Controller { cluster: self.clone() }
    }
}

/// Clears the pump's running flag and its own wake-up however its task ends: when its runtime shuts down, also
/// before its first poll. Both under the server's lock, where requests decide whether to wake it.
struct Running(Weak<Inner>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(i) = self.0.upgrade() {
            let mut st = i.state.lock();
            st.pump_at = None;
            i.pump_running.store(false, Ordering::Release);
        }
    }
}

/// The automatic mode's pump: applies requests, delivers replies and fires timers when they come due.
async fn pump(_running: Running, inner: Weak<Inner>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(inner) = inner.upgrade() else { return };
            let cluster = MemCluster { inner };
            let mut st = cluster.lock();
            if st.controlled {
                return;
            }
            st.run_due(Instant::now());
            // Set under the lock that computed it: a request that makes something due earlier wakes the pump (a
            // `Notify` keeps the wake-up until the pump waits for it).
            st.pump_at = st.next_due();
            st.pump_at
        };
        match next {
            Some(at) => {
                tokio::select! {
                    biased;
                    () = wake.notified() => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => wake.notified().await,
        }
    }
}
