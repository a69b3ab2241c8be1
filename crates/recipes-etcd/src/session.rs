//! The session: an etcd lease, granted at connect and again after it expires, kept alive by a task of its own; and
//! the lease the recipes compute validity from.
//!
//! The lease's base is the send time of the last keep-alive that etcd answered with a TTL above zero: the leader
//! renewed the lease to its full TTL when it handled that keep-alive, after it was sent, so the lease cannot expire
//! before `base + TTL` (decision 0065, point 6). Only keep-alive answers move it, never a read. A new lease's base is
//! the send time of its grant.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::Client;
use parking_lot::Mutex;
use recipes_core::backend::{Lease, SessionId, SessionState, SessionStatus};
use recipes_core::{Error, Result};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::sender::Sender;
use crate::EtcdOptions;

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

/// The backend's own runtime: every session's connection, keep-alive and sender run here, whatever runtime (or
/// none) the application calls from (as the ZooKeeper backend's, decision 0042).
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

/// Connects (on the backend's own runtime), grants the first lease, and starts the keep-alive task and the sender.
pub(crate) async fn start(options: EtcdOptions) -> Result<Arc<Shared>> {
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
    // With a user, the connect authenticates (a request to a member); without, it only sets the channel up. An
    // authentication that was never sent (a member down), or that etcd could not answer (an election), is asked again
    // within the connect timeout, as the grant is (found by review: with a user, half the connects with one endpoint
    // of two down failed at once).
    let deadline = Instant::now() + options.connect_timeout;
    let client = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = match tokio::time::timeout(left, Client::connect(urls.clone(), Some(connect.clone()))).await {
            Err(_) => {
                return Err(unreachable(format!(
                    "no member answered within {:?}",
                    options.connect_timeout
                )))
            }
            Ok(Ok(c)) => break c,
            Ok(Err(e)) => e,
        };
        if options.has_user() && crate::ops::refused_credentials(&e) {
            return Err(Error::AuthenticationFailed {
                servers: servers.clone(),
                why: crate::ops::message(&e),
            });
        }
        let (never_sent, why) = (crate::ops::never_sent(&e), crate::ops::message(&e));
        let pause = Duration::from_millis(if never_sent { 20 } else { 100 });
        let again = never_sent || matches!(crate::ops::error(e), Error::ConnectionLoss);
        if !again || Instant::now() + pause >= deadline {
            return Err(unreachable(why));
        }
        tokio::time::sleep(pause).await;
    };
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
    if let Err(e) = made {
        let _ = revoke(&shared.client, id).await;
        return Err(match e {
            Error::ConnectionLoss => unreachable("the session key's request went unanswered".to_owned()),
            e => e,
        });
    }
    shared.runtime.spawn(keep_alive(Arc::downgrade(&shared)));
    Ok(shared)
}

/// Revokes lease `id` (sent again when it was not sent, or its token was stale: revoking twice is harmless).
async fn revoke(client: &Client, id: SessionId) -> std::result::Result<(), etcd_client::Error> {
    crate::ops::unless_unsent(client, || {
        let mut c = client.clone();
        async move { c.lease_revoke(id).await }
    })
    .await
    .map(|_| ())
}

/// Why no lease was granted.
#[derive(Debug)]
enum Grant {
    /// No member answered within the patience: the last transport error.
    Unanswered(String),
    /// etcd refused (a TTL it does not take, a user without the right to grant leases).
    Refused(Error),
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Grant::Unanswered(why) => write!(f, "no answer: {why}"),
            Grant::Refused(e) => write!(f, "{e}"),
        }
    }
}

/// Grants a lease of `ttl` seconds: its id, the TTL granted, and the send time of the grant. Asks again while etcd
/// cannot answer (an election under way: "leader changed", "request timed out"; a member down), for up to `patience`
/// (found by the etcd campaign: a zklock started while the leader was being replaced gave up at once). A lease
/// granted by a request whose reply was lost has no key and expires unused.
async fn grant(
    client: &Client,
    ttl: i64,
    patience: Duration,
) -> std::result::Result<(SessionId, Duration, Instant), Grant> {
    let deadline = Instant::now() + patience;
    let mut last = format!("no member answered within {patience:?}");
    loop {
        let sent = Instant::now();
        let call = crate::ops::unless_unsent(client, || {
            let mut c = client.clone();
            async move { c.lease_grant(ttl, None).await }
        });
        let granted = match tokio::time::timeout(deadline.saturating_duration_since(sent), call).await {
            Err(_) => return Err(Grant::Unanswered(last)),
            Ok(Ok(granted)) => granted,
            Ok(Err(e)) => {
                let text = crate::ops::message(&e);
                match crate::ops::error(e) {
                    Error::ConnectionLoss if Instant::now() + Duration::from_millis(100) < deadline => {
                        last = text;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Error::ConnectionLoss => return Err(Grant::Unanswered(text)),
                    Error::Backend(m) if m.contains("TTL") => {
                        return Err(Grant::Refused(Error::InvalidArgument(format!(
                            "etcd refused a lease TTL of {ttl} s (the session timeout): {m}"
                        ))))
                    }
                    e => return Err(Grant::Refused(e)),
                }
            }
        };
        let secs = u64::try_from(granted.ttl()).unwrap_or(0);
        return Ok((granted.id(), Duration::from_secs(secs), sent));
    }
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

    /// Closes the session: revokes the lease (etcd deletes its keys at once), waiting a bounded time, and not at all
    /// when the session was not connected (etcd has not been answering).
    pub async fn close(&self) {
        let was = {
            let _held = self.publishing.lock();
            if self.closed.swap(true, Ordering::AcqRel) {
                return;
            }
            let was = *self.status.borrow();
            self.status.send_replace(SessionStatus {
                id: was.id,
                state: SessionState::Closed,
            });
            was
        };
        if was.state != SessionState::Connected {
            let client = self.client.clone();
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(3), revoke(&client, was.id)).await;
            });
            return;
        }
        let _ = tokio::time::timeout(Duration::from_secs(3), revoke(&self.client, was.id)).await;
    }
}

/// Keeps the current lease alive, a keep-alive every quarter of the TTL; on expiry, grants a new lease (a new
/// session). Ends when the backend is dropped or closed.
async fn keep_alive(shared: Weak<Shared>) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        if s.is_closed() {
            return;
        }
        let lease = s.lease();
        let every = (lease.session_timeout / 4).max(Duration::from_millis(250));
        let client = s.client.clone();
        drop(s);
        let open = crate::ops::unless_unsent(&client, || {
            let mut c = client.clone();
            async move { c.lease_keep_alive(lease.session).await }
        });
        let opened = tokio::time::timeout(every, open).await;
        let (mut keeper, mut stream) = match opened {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) if crate::ops::lease_gone(&e) => {
                // etcd says the lease is gone: the session expired (found by review: this waited for our clock).
                let Some(s) = shared.upgrade() else { return };
                drop(s);
                expired(&shared, lease.session).await;
                continue;
            }
            _ => {
                let Some(s) = shared.upgrade() else { return };
                drop(s);
                suspended_or_expired(&shared, lease.session).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        loop {
            let Some(s) = shared.upgrade() else { return };
            if s.is_closed() {
                return;
            }
            let sent = Instant::now();
            let answer = tokio::time::timeout(every, async {
                keeper.keep_alive().await?;
                stream.message().await
            })
            .await;
            match answer {
                Ok(Ok(Some(r))) if r.ttl() > 0 => {
                    {
                        let mut l = s.lease.lock();
                        if l.session == lease.session && l.answered_send.map_or(true, |t| t < sent) {
                            l.answered_send = Some(sent);
                        }
                    }
                    let state = s.status.borrow().state;
                    match state {
                        SessionState::Suspended => {
                            s.publish_from(lease.session, &[SessionState::Suspended], SessionState::Connected)
                        }
                        // A request found the session over (see `Shared::gone`) while etcd keeps its lease (its
                        // sequence key deleted by hand): no keep-alive undoes that end; the lease is revoked, so that
                        // its keys go, and the next session granted.
                        SessionState::Expired => {
                            drop(s);
                            expired(&shared, lease.session).await;
                            break;
                        }
                        _ => {}
                    }
                }
                Ok(Ok(Some(_))) => {
                    // etcd answered that the lease is gone: the session expired (or was revoked).
                    drop(s);
                    expired(&shared, lease.session).await;
                    break;
                }
                _ => {
                    drop(s);
                    suspended_or_expired(&shared, lease.session).await;
                    break;
                }
            }
            drop(s);
            tokio::time::sleep(every.saturating_sub(sent.elapsed())).await;
        }
    }
}

/// No answer: the session is suspended, or expired when its lease has run out on our clock too.
async fn suspended_or_expired(shared: &Weak<Shared>, id: SessionId) {
    let Some(s) = shared.upgrade() else { return };
    let lease = s.lease();
    let over = lease
        .answered_send
        .map_or(true, |t| Instant::now() > t + lease.session_timeout);
    if over {
        drop(s);
        expired(shared, id).await;
    } else {
        debug!(
            session = format!("{id:#x}"),
            "etcd keep-alive unanswered: session suspended"
        );
        s.publish_from(id, &[SessionState::Connected], SessionState::Suspended);
    }
}

/// The lease `id` is gone: says so, then grants a new one (retrying until it gets one, the backend is closed, or
/// every handle of it is dropped: the loops hold it weakly between tries, found by review).
async fn expired(shared: &Weak<Shared>, id: SessionId) {
    let Some(s) = shared.upgrade() else { return };
    if s.lease().session != id || s.is_closed() {
        return;
    }
    warn!(session = format!("{id:#x}"), "etcd session expired");
    s.publish(id, SessionState::Expired);
    // Our clock may say the lease ran out while etcd still holds it (keep-alives whose answers were lost renewed it;
    // a leader change resets it): revoke it before a new session's writes begin, so that none of its own can land
    // after them and its keys go now (found by review).
    let lease = s.lease();
    let patience = lease.session_timeout.max(Duration::from_secs(1));
    drop(s);
    loop {
        let Some(s) = shared.upgrade().filter(|s| !s.is_closed()) else {
            return;
        };
        let client = s.client.clone();
        drop(s);
        match tokio::time::timeout(patience, revoke(&client, id)).await {
            Ok(Ok(_)) => break,
            Ok(Err(e)) if crate::ops::lease_gone(&e) => break,
            Ok(Err(e)) if crate::ops::refused(&e) => {
                // etcd refuses this client's revoke (its credentials went bad; found by review: this looped forever).
                // No keep-alive renews the lease any more: it is gone on the server within its TTL of the last
                // keep-alive it answered, and with it every key and the sequence key (so no late write of the old
                // session can land). Wait that long before a new session begins.
                let lapsed = lease
                    .answered_send
                    .map_or(Instant::now(), |t| t + lease.session_timeout);
                tokio::time::sleep_until(lapsed + Duration::from_secs(1)).await;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    // Refused credentials or roles are asked again less and less often (up to every 30 s): each try costs etcd a
    // bcrypt of the password (found by review: 34 a second); anything else every 200 ms.
    let mut refused_pause = Duration::from_millis(200);
    loop {
        let Some(s) = shared.upgrade().filter(|s| !s.is_closed()) else {
            return;
        };
        match grant(&s.client, s.ttl, patience).await {
            Ok((new, granted, base)) => {
                let made = s.sender.new_session(new).await;
                if made.is_ok() && !s.is_closed() {
                    *s.lease.lock() = Lease {
                        session: new,
                        answered_send: Some(base),
                        session_timeout: granted,
                    };
                    s.publish(new, SessionState::Connected);
                    if !s.is_closed() {
                        return;
                    }
                }
                // Not usable, or closed meanwhile: the lease must not outlive this.
                let _ = revoke(&s.client, new).await;
                if let Err(e @ (Error::AuthenticationFailed { .. } | Error::NotAuthorized(_))) = made {
                    warn!(%e, "etcd refuses this client its session key; asking again in {refused_pause:?}");
                    drop(s);
                    tokio::time::sleep(refused_pause).await;
                    refused_pause = (refused_pause * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
            Err(Grant::Refused(e @ (Error::AuthenticationFailed { .. } | Error::NotAuthorized(_)))) => {
                warn!(%e, "etcd refuses this client a new session; asking again in {refused_pause:?}");
                drop(s);
                tokio::time::sleep(refused_pause).await;
                refused_pause = (refused_pause * 2).min(Duration::from_secs(30));
                continue;
            }
            Err(e) => debug!(%e, "etcd lease grant failed; retrying"),
        }
        drop(s);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
