//! The session: an etcd lease, granted at connect and again after it expires, kept alive by a task of its own; and
//! the lease the recipes compute validity from.
//!
//! The lease's base is the send time of the last keep-alive that etcd answered with a TTL above zero: the leader
//! renewed the lease to its full TTL when it handled that keep-alive, after it was sent, so the lease cannot expire
//! before `base + TTL` (decision 0065, point 6). Only keep-alive answers move it, never a read. A new lease's base is
//! the send time of its grant.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use parking_lot::Mutex;
use recipes_core::backend::{Lease, SessionId, SessionState, SessionStatus};
use recipes_core::{Error, Result};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::sender::Sender;
use crate::EtcdOptions;

mod connect;
mod lease;
pub(crate) use lease::revoke;
use lease::{grant, keep_alive, Grant};

/// The longest a close waits for the requests queued before it and for its revoke (which tries for three seconds).
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// What the backend's handles share.
pub(crate) struct Shared {
    pub client: Client,
    pub status: watch::Sender<SessionStatus>,
    pub sender: Sender,
    pub runtime: tokio::runtime::Handle,
    lease: Mutex<Lease>,
    ttl: i64,
    closed: AtomicBool,
    /// Held while a state is published, so that nothing is published after a close.
    publishing: Mutex<()>,
}

/// The backend's own runtime: the connection, keep-alive and sender of every session that does not run on the
/// caller's (`SessionRuntime`, decision 0094) run here, whatever runtime (or none) the application calls from (as the
/// ZooKeeper backend's, decision 0042).
fn io_runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RT: std::sync::OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("recipes-etcd")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Error::Backend(format!("could not start the etcd backend's runtime: {e}")))
}

/// Connects (on the runtime the session is to run on: the caller's or the backend's own, as `SessionRuntime` says),
/// grants the first lease, and starts the keep-alive task and the sender.
pub(crate) async fn start(options: EtcdOptions) -> Result<Arc<Shared>> {
    if let Some(here) = options.runtime.callers() {
        return start_here(options, here).await;
    }
    let rt = io_runtime()?;
    let task = rt.spawn(start_here(options, rt.handle().clone()));
    task.await
        .map_err(|e| Error::Backend(format!("the etcd backend's connect task failed: {e}")))?
}

async fn start_here(options: EtcdOptions, runtime: tokio::runtime::Handle) -> Result<Arc<Shared>> {
    // HTTP/2 pings find a connection that died silently (no reset): without them a request would wait for the
    // request timeout, and the connection stay, until the kernel gives up on it.
    let ping = (options.session_timeout / 4).max(Duration::from_millis(250));
    let urls = options.urls()?;
    let servers = urls.join(",");
    let connect = options
        .connect_options()
        .with_connect_timeout(options.connect_timeout)
        .with_timeout(options.connect_timeout)
        .with_keep_alive(ping, ping)
        .with_keep_alive_while_idle(true);
    let unreachable = |why: String| Error::Unreachable {
        servers: servers.clone(),
        why,
    };
    let deadline = Instant::now() + options.connect_timeout;
    let client = connect::client(
        &urls,
        &connect,
        options.has_user(),
        (deadline, options.connect_timeout),
        &unreachable,
    )
    .await?;
    let ttl = options.ttl();
    // The grant and the session key within what is left of the connect timeout (found by review: each had a
    // timeout of its own, so a connect could take two or three times it).
    let (id, granted, base) = match grant(&client, ttl, deadline.saturating_duration_since(Instant::now())).await {
        Ok(g) => g,
        Err(Grant::Unanswered(why)) => return Err(unreachable(why)),
        Err(Grant::Refused(e)) => return Err(e),
    };
    let (status, _) = watch::channel(SessionStatus {
        id,
        state: SessionState::Connected,
    });
    let shared = Arc::new_cyclic(|me| Shared {
        sender: Sender::start(client.clone(), status.subscribe(), me.clone(), &runtime),
        client,
        status,
        runtime,
        lease: Mutex::new(Lease {
            session: id,
            answered_send: Some(base),
            session_timeout: granted,
        }),
        ttl,
        closed: AtomicBool::new(false),
        publishing: Mutex::new(()),
    });
    // The session key within what is left of the connect timeout. A lost reply (a member gone between the grant and
    // this request: a leader SIGKILLed failed a zklock of the etcd campaign with 69, most of its time left) or a lease
    // already gone is tried again, as the grant is, but on a new lease, the old one revoked: a copy of the lost request
    // that lands late then puts the key on a lease nobody uses, or on none (a copy that found the key gone by an
    // operator's hand would make it again on the session's own lease, and the session's writes would read its version:
    // found by review, helper-101).
    let mut id = id;
    loop {
        let made = tokio::time::timeout(
            deadline.saturating_duration_since(Instant::now()),
            shared.sender.new_session(id),
        )
        .await
        .unwrap_or_else(|_| {
            Err(unreachable(format!(
                "no member answered within {:?}",
                options.connect_timeout
            )))
        });
        let e = match made {
            Ok(()) => break,
            Err(e) => e,
        };
        let again = matches!(e, Error::ConnectionLoss | Error::SessionExpired)
            && Instant::now() + Duration::from_millis(100) < deadline;
        if !again {
            let _ = revoke(&shared.client, id).await;
            return Err(match e {
                Error::ConnectionLoss => unreachable("the session key's request went unanswered".to_owned()),
                Error::SessionExpired => unreachable("the session's lease was gone before its key was made".to_owned()),
                e => e,
            });
        }
        // The revoke only cleans up early (the new lease is what makes a late copy harmless; a lease not revoked
        // lapses within its TTL, nobody keeping it alive): in the background, so that the retry keeps its time
        // (found by review, helper-102).
        let client = shared.client.clone();
        shared.runtime.spawn(async move {
            let _ = revoke(&client, id).await;
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (next, granted, base) =
            match grant(&shared.client, ttl, deadline.saturating_duration_since(Instant::now())).await {
                Ok(g) => g,
                Err(Grant::Unanswered(why)) => return Err(unreachable(why)),
                Err(Grant::Refused(e)) => return Err(e),
            };
        id = next;
        *shared.lease.lock() = Lease {
            session: id,
            answered_send: Some(base),
            session_timeout: granted,
        };
        shared.status.send_replace(SessionStatus {
            id,
            state: SessionState::Connected,
        });
    }
    shared.runtime.spawn(keep_alive(Arc::downgrade(&shared)));
    Ok(shared)
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSession")
            .field("status", &*self.status.borrow())
            .field("lease", &self.lease())
            .finish()
    }
}

impl Shared {
    pub fn lease(&self) -> Lease {
        *self.lease.lock()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Publishes a state of session `id`, unless the backend is closed (nothing undoes a close: a keep-alive
    /// answered after it, or a new lease granted during it, is not published; found by review).
    fn publish(&self, id: SessionId, state: SessionState) {
        let _held = self.publishing.lock();
        if self.is_closed() {
            return;
        }
        self.status.send_replace(SessionStatus { id, state });
    }

    /// Publishes `to` for session `id` only while the session is `id` in one of the states `from`, checked under the
    /// same lock as every publication (found by review: a keep-alive that read `Suspended`, then published `Connected`
    /// after a request had published `Expired`, undid the session's end).
    pub fn publish_from(&self, id: SessionId, from: &[SessionState], to: SessionState) {
        let _held = self.publishing.lock();
        let now = *self.status.borrow();
        if self.is_closed() || now.id != id || !from.contains(&now.state) {
            return;
        }
        self.status.send_replace(SessionStatus { id, state: to });
    }

    /// A request of session `id` found the connection broken: the session is suspended until a keep-alive is answered
    /// again, as ZooKeeper's client reports a broken connection at once, so that callers wait for the connection
    /// instead of retrying into it (found on etcd: an acquire used up its retries in milliseconds while cut off).
    pub fn suspend(&self, id: SessionId) {
        self.publish_from(id, &[SessionState::Connected], SessionState::Suspended);
    }

    /// A request of session `id` found its lease gone (the sequence key went with it, or etcd said so): the session
    /// is over now, before the keep-alive notices; the keep-alive then grants the next one.
    pub fn gone(&self, id: SessionId) {
        let live = [SessionState::Connected, SessionState::Suspended];
        self.publish_from(id, &live, SessionState::Expired);
    }

    /// Revokes the current lease (an operator's `etcdctl lease revoke`).
    pub async fn revoke_current(&self) -> Result<()> {
        revoke(&self.client, self.lease().session)
            .await
            .map_err(crate::ops::error)?;
        Ok(())
    }

    /// The keep-alive task was dropped unfinished (its runtime was shut down before the backend was closed, or it
    /// panicked): the backend is closed, and the revoke queued as a close queues it, not awaited (the sender went with
    /// the runtime, or sends it; a lease not revoked lapses within its TTL).
    pub fn closed_with_its_runtime(&self) {
        let _held = self.publishing.lock();
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(
            "the keep-alive of an etcd session ended before the backend was closed (its runtime was shut down?); \
             closing it"
        );
        let id = self.status.borrow().id;
        self.status.send_replace(SessionStatus {
            id,
            state: SessionState::Closed,
        });
        drop(self.sender.close(id));
    }

    /// Closes the session: revokes the lease (etcd deletes its keys at once), waiting a bounded time, and not at all
    /// when the session was not connected (etcd has not been answering). The revoke goes behind the requests already
    /// queued, which run first, as ZooKeeper's `closeSession` follows the requests sent before it (found by the
    /// contract's `requests_sent_before_a_close_are_applied_first`: they failed with `Closed`).
    pub async fn close(&self) {
        let (was, revoked) = {
            let _held = self.publishing.lock();
            if self.closed.swap(true, Ordering::AcqRel) {
                return;
            }
            let was = *self.status.borrow();
            self.status.send_replace(SessionStatus {
                id: was.id,
                state: SessionState::Closed,
            });
            // Queued under the lock that publishes the close: every request issued after it fails with `Closed`.
            (was, self.sender.close(was.id))
        };
        if was.state == SessionState::Connected {
            // The requests ahead of it, and its own try: bounded.
            let _ = tokio::time::timeout(CLOSE_WAIT, revoked).await;
        }
    }
}
