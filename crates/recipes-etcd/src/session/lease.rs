//! The lease's life: granted (asked again while etcd cannot answer), kept alive every quarter of its TTL, revoked,
//! and granted again after it expired.

use std::sync::Weak;
use std::time::Duration;

use etcd_client::Client;
use recipes_core::backend::{on_drop_unfinished, Lease, SessionId, SessionState};
use recipes_core::Error;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::Shared;

/// Revokes lease `id` (sent again when it was not sent, or its token was stale: revoking twice is harmless).
pub(crate) async fn revoke(client: &Client, id: SessionId) -> std::result::Result<(), etcd_client::Error> {
    crate::ops::unless_unsent(client, || {
        let mut c = client.clone();
        async move { c.lease_revoke(id).await }
    })
    .await
    .map(|_| ())
}

/// Why no lease was granted.
#[derive(Debug)]
pub(super) enum Grant {
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
pub(super) async fn grant(
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

/// Keeps the current lease alive (see [`keep_alive_loop`]). Dropped unfinished, it closes the backend: its runtime
/// was shut down (a session on the caller's runtime, `SessionRuntime::Caller`), and the client's connection with
/// it (or the task panicked, and nothing keeps the lease alive any more), so that whoever waits on the session on
/// another runtime learns that it is over (a waiter's watch retried for ever on the dead connection: found by
/// review, helper-154).
pub(super) fn keep_alive(shared: Weak<Shared>) -> impl std::future::Future<Output = ()> {
    // Not an `async fn`: the guard is made now, so that a task dropped before its first poll closes the backend too.
    let closing = shared.clone();
    on_drop_unfinished(keep_alive_loop(shared), move || {
        if let Some(shared) = closing.upgrade() {
            shared.closed_with_its_runtime();
        }
    })
}

/// Keeps the current lease alive, a keep-alive every quarter of the TTL; on expiry, grants a new lease (a new
/// session). Ends when the backend is dropped or closed.
async fn keep_alive_loop(shared: Weak<Shared>) {
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
                        if l.session == lease.session && l.answered_send.is_none_or(|t| t < sent) {
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
        .is_none_or(|t| Instant::now() > t + lease.session_timeout);
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
