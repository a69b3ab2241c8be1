//! The session: its client, its published state, its lease, and the two tasks that keep them current (the monitor of
//! the client's state, which opens a new session after an expiry, and the heartbeat).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Weak;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard, RwLock};

use futures::StreamExt;
use recipes_core::backend::{on_drop_unfinished, Lease, SessionId, SessionState, SessionStatus};
use recipes_core::mutants::{is_active, Mutant};
use recipes_core::{Error, Result};
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

use crate::errors::is_answer;
use crate::lease::{LeaseClock, Stamp};
use crate::options::ZkOptions;
use crate::zk;

/// Backoff bounds of the reconnection after an expiry.
const RECONNECT_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));

/// What a request tells the lease when it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evidence {
    /// A read: the server that answered saw the session (it may be a follower cut off from the leader).
    Seen,
    /// A write or a `sync`: it passed through the leader.
    Leader,
}

pub(crate) fn session_id(client: &zk::Client) -> SessionId {
    client.session_id().0
}

/// The state shared by a backend and its tasks.
pub(crate) struct Inner {
    pub options: ZkOptions,
    /// The ACL entries of every node the backend creates (from `options.acl`, made once).
    pub acl: Vec<zk::Acl>,
    client: RwLock<Option<zk::Client>>,
    pub status: watch::Sender<SessionStatus>,
    closed: AtomicBool,
    lease: Mutex<LeaseClock>,
    /// Wakes the heartbeat at once (after a reconnection).
    pub beat_now: Notify,
    /// How many rounds of timeout probes are running.
    pub probing: watch::Sender<u32>,
    /// The runtime the session's tasks run on: the backend's own, or the caller's (`SessionRuntime`) until it ends.
    runtime: RwLock<tokio::runtime::Handle>,
    /// How often the session moved to the backend's own runtime (its tasks on the old one stop).
    moves: AtomicU32,
}

impl Inner {
    /// A backend's state for a session just connected by `client` (its connect request sent at `sent`), on the
    /// runtime the session is to run on (its tasks are spawned there).
    pub fn new(options: ZkOptions, client: zk::Client, sent: Stamp) -> Self {
        let id = session_id(&client);
        let (status, _) = watch::channel(SessionStatus {
            id,
            state: SessionState::Connected,
        });
        let lease = new_lease(&client, sent);
        Inner {
            acl: options.acl.entries(),
            options,
            client: RwLock::new(Some(client)),
            status,
            closed: AtomicBool::new(false),
            lease: Mutex::new(lease),
            beat_now: Notify::new(),
            probing: watch::channel(0).0,
            runtime: RwLock::new(tokio::runtime::Handle::current()),
            moves: AtomicU32::new(0),
        }
    }

    fn lease_clock(&self) -> MutexGuard<'_, LeaseClock> {
        self.lease.lock()
    }

    /// The runtime the session's tasks run on.
    pub fn runtime(&self) -> tokio::runtime::Handle {
        self.runtime.read().clone()
    }

    /// How often the session moved to the backend's own runtime.
    pub fn moves(&self) -> u32 {
        self.moves.load(Ordering::SeqCst)
    }

    pub fn client(&self) -> Result<zk::Client> {
        self.client.read().clone().ok_or(Error::Closed)
    }

    /// The client of session `session`: requests are bound to the session they name, and fail rather than run on
    /// the session opened after it.
    pub fn client_for(&self, session: SessionId) -> Result<zk::Client> {
        let client = self.client()?;
        if session_id(&client) != session {
            // That session ended (a client is replaced only after its session expired).
            return Err(Error::SessionExpired);
        }
        Ok(client)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Records what an answered request of `session`, sent at `sent`, proves.
    pub fn record<T>(
        &self,
        session: SessionId,
        sent: Stamp,
        evidence: Evidence,
        r: &std::result::Result<T, zk::Error>,
    ) {
        if !is_answer(r) {
            return;
        }
        let mut lease = self.lease_clock();
        if lease.session() != session {
            return;
        }
        match evidence {
            Evidence::Seen if !is_active(Mutant::LeaseFromReads) => lease.answered(sent),
            Evidence::Seen => lease.created_at(sent),
            Evidence::Leader => lease.leader_confirmed(sent),
        }
    }

    pub fn lease(&self) -> Lease {
        self.lease_clock().lease(Stamp::now())
    }

    /// Whether a server answered a request of the session sent within `within` (heartbeats go out every eighth of
    /// the timeout, so a server that answers has answered one lately).
    pub fn answered_lately(&self, within: Duration) -> bool {
        let last = self.lease_clock().last_answered();
        last.is_some_and(|s| Stamp::now().boot.saturating_sub(s.boot) < within.as_nanos())
    }

    /// The session timeout the lease assumes: the shortest any server grants.
    pub fn session_timeout(&self) -> Duration {
        self.lease_clock().timeout()
    }

    /// A server grants `granted`: the lease of `session` assumes it from now on when it is shorter, and whoever watches
    /// the session is woken to look at the lease again.
    fn shorten_timeout(&self, session: SessionId, granted: Duration) {
        if is_active(Mutant::FirstTimeoutOnly) {
            return;
        }
        let mut lease = self.lease_clock();
        if lease.session() == session && granted < lease.timeout() {
            lease.shorten_timeout(granted);
            drop(lease);
            if !is_active(Mutant::LostSleepsToLeaseEnd) {
                self.lease_moved_back();
            }
        }
    }

    /// The lease ends earlier than it did (a shorter timeout, time spent suspended): wakes every watcher of the session
    /// (such as `lost()`, which sleeps until the end of the lease it last read).
    fn lease_moved_back(&self) {
        self.status.send_modify(|_| {});
    }

    /// Marks the backend closed and takes its client (dropping it closes the session).
    pub fn close(&self) -> Option<zk::Client> {
        self.closed.store(true, Ordering::SeqCst);
        let id = self.status.borrow().id;
        self.status.send_replace(SessionStatus {
            id,
            state: SessionState::Closed,
        });
        self.client.write().take()
    }
}

/// The lease of a session just connected by `client`: the timeout it negotiated with the server it is connected to
/// (the probes shorten it for the servers it may move to).
fn new_lease(client: &zk::Client, sent: Stamp) -> LeaseClock {
    LeaseClock::created(session_id(client), client.session_timeout(), sent)
}

/// Asks every server which session timeout it grants (see [`ZkOptions::timeout_probes`]) and shortens the lease of
/// `session` as each answer arrives.
pub(crate) async fn probe_timeouts(inner: Weak<Inner>, session: SessionId) {
    let Some(options) = inner.upgrade().map(|i| {
        i.probing.send_modify(|n| *n += 1);
        i.options.clone()
    }) else {
        return;
    };
    let mut probes = options.timeout_probes();
    let mut held_back = Vec::new();
    while let Some(answer) = probes.next().await {
        let Some(strong) = inner.upgrade() else { return };
        match answer {
            Some(granted) if is_active(Mutant::ProbeRoundAtOnce) => held_back.push(granted),
            Some(granted) => strong.shorten_timeout(session, granted),
            None => {}
        }
    }
    if let Some(strong) = inner.upgrade() {
        for granted in held_back {
            strong.shorten_timeout(session, granted);
        }
        strong.probing.send_modify(|n| *n -= 1);
    }
}

pub(crate) fn publish(inner: &Inner, id: SessionId, state: SessionState) {
    set_status(inner, SessionStatus { id, state }, false);
}

/// Sets the status unless the backend is closed; a change for every receiver when it differs, or `always`.
fn set_status(inner: &Inner, new: SessionStatus, always: bool) {
    inner.status.send_if_modified(|s| {
        if s.state == SessionState::Closed || (*s == new && !always) {
            false
        } else {
            *s = new;
            true
        }
    });
}

/// Follows the session's state (see [`follow`]). Dropped unfinished, it ends the session and opens a new one on the
/// backend's own runtime ([`session_runtime_ended`](crate::runtime::session_runtime_ended)): its runtime was shut down
/// (a session on the caller's runtime, `SessionRuntime::Caller`), and the session's connection with it, or the task
/// panicked, and nothing follows the session any more. Whoever waits on the session on another runtime learns that it
/// is over instead of waiting on a connection that no task serves (found by review, helper-154).
pub(crate) fn monitor(inner: Weak<Inner>, watcher: zk::StateWatcher, id: SessionId) -> impl Future<Output = ()> {
    // Not an `async fn`: the guard is made now, so that a task dropped before its first poll ends the session too.
    let ended = inner.clone();
    on_drop_unfinished(follow(inner, watcher, id), move || {
        crate::runtime::session_runtime_ended(&ended)
    })
}

/// Follows the session's state; after a reconnection, asks the servers again which session timeout they grant (a
/// reconnection renegotiates it); after an expiry, connects a new session, retrying with a backoff until the backend
/// goes (it holds the backend only while an attempt runs).
async fn follow(inner: Weak<Inner>, mut watcher: zk::StateWatcher, mut id: SessionId) {
    loop {
        let state = watcher.changed().await;
        let Some(strong) = inner.upgrade() else { return };
        debug!(session = format!("{id:#x}"), ?state, "ZooKeeper session state");
        match state {
            zk::SessionState::SyncConnected => {
                // Always a reconnection (the client reports changes only), published even when the state reads the
                // same as before because this task missed the disconnection: a waiter in line lists again after any
                // change during its wait (the events of re-registered watches come in re-registration order).
                let connected = SessionStatus {
                    id,
                    state: SessionState::Connected,
                };
                set_status(&strong, connected, true);
                strong.beat_now.notify_one();
                tokio::spawn(probe_timeouts(inner.clone(), id));
            }
            zk::SessionState::Disconnected | zk::SessionState::ConnectedReadOnly => {
                publish(&strong, id, SessionState::Suspended)
            }
            zk::SessionState::Expired => {
                warn!(
                    session = format!("{id:#x}"),
                    "ZooKeeper session expired; opening a new one"
                );
                publish(&strong, id, SessionState::Expired);
                drop(strong);
                let Some((client, strong)) = reconnect(&inner).await else {
                    return;
                };
                id = session_id(&client);
                watcher = client.state_watcher();
                if !install(&strong, client, None) {
                    return; // closed meanwhile
                }
                info!(session = format!("{id:#x}"), "new ZooKeeper session");
                publish(&strong, id, SessionState::Connected);
                tokio::spawn(probe_timeouts(inner.clone(), id));
            }
            zk::SessionState::Closed | zk::SessionState::AuthFailed => {
                publish(&strong, id, SessionState::Closed);
                return;
            }
        }
    }
}

/// Puts `client`, a new session's, in place of the session that ended, and its tasks' runtime `moved_to` when they
/// move; false (and nothing done) once the backend is closed. The old client goes: when its connection still runs,
/// that closes its session.
pub(crate) fn install(inner: &Inner, client: zk::Client, moved_to: Option<tokio::runtime::Handle>) -> bool {
    let mut slot = inner.client.write();
    if slot.is_none() {
        return false;
    }
    if let Some(rt) = moved_to {
        *inner.runtime.write() = rt;
        inner.moves.fetch_add(1, Ordering::SeqCst);
    }
    let old = slot.replace(client);
    drop(slot);
    drop(old);
    true
}

/// Connects a new session after an expiry, with a backoff; `None` once the backend is closed or gone.
pub(crate) async fn reconnect(inner: &Weak<Inner>) -> Option<(zk::Client, std::sync::Arc<Inner>)> {
    let mut backoff = RECONNECT_BACKOFF.0;
    loop {
        let options = {
            let strong = inner.upgrade()?;
            if strong.is_closed() {
                return None;
            }
            strong.options.clone()
        };
        let sent = Stamp::now();
        match options.connect().await {
            Ok(c) => {
                let strong = inner.upgrade()?;
                *strong.lease_clock() = new_lease(&c, sent);
                return Some((c, strong));
            }
            Err(e) => {
                debug!(error = %e, "reconnect after expiry failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RECONNECT_BACKOFF.1);
            }
        }
    }
}

/// Keeps the lease fresh on an idle session: a `sync` (it passes through the leader) every eighth of the session
/// timeout, and at once after a reconnection; until the session moves to another runtime (`moves` differs), where
/// another heartbeat starts.
pub(crate) async fn heartbeat(inner: Weak<Inner>, moves: u32) {
    loop {
        let (interval, client) = {
            let Some(strong) = inner.upgrade() else { return };
            if strong.moves() != moves {
                return;
            }
            let Ok(client) = strong.client() else { return };
            ((strong.session_timeout() / 8).max(Duration::from_millis(25)), client)
        };
        let sent = Stamp::now();
        if is_active(Mutant::LeaseFromReads) {
            // The old heartbeat: a read, which a follower cut off from the leader answers.
            let r = tokio::time::timeout(interval * 4, client.check_stat("/")).await;
            if let (Some(strong), Ok(r)) = (inner.upgrade(), r) {
                strong.record(session_id(&client), sent, Evidence::Seen, &r);
            }
        } else {
            let r = tokio::time::timeout(interval * 4, client.sync("/")).await;
            if let (Some(strong), Ok(r)) = (inner.upgrade(), r) {
                strong.record(session_id(&client), sent, Evidence::Leader, &r);
            }
        }
        let Some(strong) = inner.upgrade() else { return };
        drop(client);
        tokio::select! {
            biased;
            () = strong.beat_now.notified() => {}
            () = tokio::time::sleep(interval) => {}
        }
    }
}
