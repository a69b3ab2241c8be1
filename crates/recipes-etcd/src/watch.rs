//! Watches from a known revision: the read that finds the key says at which revision it did, and nothing that happens
//! after it is missed (decision 0065, point 3). A watch fails when its session ends, as ZooKeeper's do.
//!
//! The watch itself starts at the store's current revision, not at the read's: etcd serves a watch that starts in
//! the past ("unsynced") from a loop that runs every 100 ms, so a waiter whose blocker went just after the read heard
//! of it up to 100 ms late (the contended benchmark: 87 handoffs/s at 2 sessions). Whatever happened between the read
//! and the watch's start is read at the revision the watch was created at (etcd says it in the `created` answer):
//! the same key still there (its create revision) and unchanged means nothing happened, anything else is reported
//! as the event itself would have been.

use std::sync::Arc;

use etcd_client::{EventType, WatchOptions};
use recipes_core::backend::{DeletionWatch, NodeEvent, NodeWatch, SessionId, SessionState, Stat};
use recipes_core::{Error, Result};

use crate::session::Shared;

/// What a watch waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    Deleted,
    Changed,
}

/// `watch_deletion`: the key's stat and a watch of its deletion, or `None` when it does not exist.
pub(crate) async fn deletion(
    shared: Arc<Shared>,
    session: SessionId,
    path: &str,
) -> Result<Option<(Stat, DeletionWatch)>> {
    Ok(read_and_watch(shared, session, path, Until::Deleted)
        .await?
        .map(|(node, w)| (node.stat, Box::pin(async move { w.await.map(|_| ()) }) as DeletionWatch)))
}

/// `get_and_watch`: the key's data and a watch of its next change or deletion, or `None` when it does not exist.
pub(crate) async fn node(shared: Arc<Shared>, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
    Ok(read_and_watch(shared, session, path, Until::Changed)
        .await?
        .map(|(node, w)| (node.data, Box::pin(w) as NodeWatch)))
}

/// The key, and a watch from the revision its read saw the store at, or `None` when it does not exist.
async fn read_and_watch(
    shared: Arc<Shared>,
    session: SessionId,
    path: &str,
    until: Until,
) -> Result<
    Option<(
        crate::ops::Node,
        impl std::future::Future<Output = Result<NodeEvent>> + Send + 'static,
    )>,
> {
    let Some((node, revision)) = read(&shared, session, path).await? else {
        return Ok(None);
    };
    let w = watch(
        shared,
        session,
        path.to_owned(),
        (node.stat.czxid, node.stat.ephemeral_owner, revision),
        until,
    );
    Ok(Some((node, w)))
}

/// Reads the key through the session's queue (in order with its writes, guarded by its sequence): the key and the
/// revision the read saw the store at, from which the watch starts (one read: a second one outside the queue could
/// see a later write of the session, which the watch would then never report; found by review).
async fn read(shared: &Shared, session: SessionId, path: &str) -> Result<Option<(crate::ops::Node, i64)>> {
    match shared
        .sender
        .call(session, crate::sender::Op::Get(path.to_owned()))
        .await?
    {
        crate::sender::Reply::Node(node, revision) => Ok(node.map(|n| (n, revision))),
        other => Err(crate::sender::unexpected(&other)),
    }
}

/// A watch of `path`, whose key of create revision `created` on lease `owner` was read at revision `read`, until
/// `until` happens or the session ends. The session's status is subscribed to now, so an end that comes before the
/// first poll is seen (found by review).
///
/// The deletion of a key of the watch's own session is checked against the session (one guarded request): when the
/// lease went, it is the session's end (`SessionExpired`), as ZooKeeper reports it, not a deletion (etcd deletes a
/// revoked lease's keys at once, and the keep-alive learns of it up to a quarter of the TTL later).
fn watch(
    shared: Arc<Shared>,
    session: SessionId,
    path: String,
    (created, owner, read_at): (i64, SessionId, i64),
    until: Until,
) -> impl std::future::Future<Output = Result<NodeEvent>> + Send + 'static {
    let mut status = shared.status.subscribe();
    async move {
        let mut from = read_at + 1;
        let mut cancelled_pause = std::time::Duration::from_millis(100);
        loop {
            ended(&shared, session)?;
            let mut c = shared.client.clone();
            // From now (served at once as events come); the gap since `from` is read when the watch is created.
            let options = WatchOptions::new();
            let mut stream = tokio::select! {
                s = c.watch(path.as_str(), Some(options)) => match s {
                    Ok(s) => s,
                    Err(e) => {
                        if crate::ops::token_stale(&e) {
                            if let Err(e) = shared.client.refresh_token().await {
                                if crate::ops::refused_credentials(&e) {
                                    return Err(refused(&shared, session, &crate::ops::message(&e)));
                                }
                            }
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                },
                changed = status.changed() => {
                    if changed.is_err() {
                        return Err(Error::Closed);
                    }
                    continue;
                }
            };
            loop {
                tokio::select! {
                    m = stream.message() => match m {
                        Ok(Some(resp)) => {
                            if resp.canceled() && resp.compact_revision() == 0 {
                                // Cancelled for another reason: watch again, after a pause (found by review: this took
                                // the compaction's path, in a loop). A watch refused for the user's roles fails; one
                                // refused for a stale token is watched again with a new one (found by review: etcd
                                // refuses a watch opened on an expired token, and etcd-client renews it only for
                                // unary calls, so a waiter whose stream broke after the token's TTL waited forever).
                                let reason = resp.cancel_reason();
                                if reason.contains("permission denied") {
                                    return Err(Error::NotAuthorized(format!(
                                        "a watch of {path} (etcd: {reason}; the user's roles must grant read on the \
                                         lock's prefix)"
                                    )));
                                }
                                if crate::ops::credentials_refused_in(reason) {
                                    return Err(refused(&shared, session, reason));
                                }
                                if reason.contains("invalid auth token") || reason.contains("revision of auth store is old")
                                {
                                    if let Err(e) = shared.client.refresh_token().await {
                                        if crate::ops::refused_credentials(&e) {
                                            return Err(refused(&shared, session, &crate::ops::message(&e)));
                                        }
                                    }
                                }
                                // Anything else, asked again less and less often (up to every 2 s).
                                tokio::time::sleep(cancelled_pause).await;
                                cancelled_pause = (cancelled_pause * 2).min(std::time::Duration::from_secs(2));
                                break;
                            }
                            if resp.created() {
                                cancelled_pause = std::time::Duration::from_millis(100);
                                let Some(at) = resp.header().map(|h| h.revision()) else {
                                    // No revision to read the gap at (etcd always sends one): watch again.
                                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                                    break;
                                };
                                if at >= from {
                                    match between(&shared, session, &path, (created, from), at, until).await {
                                        Ok(Gap::Nothing) => from = at + 1,
                                        Ok(Gap::Deleted) if owner == session => {
                                            return own_deleted(&shared, session).await
                                        }
                                        Ok(Gap::Deleted) => return Ok(NodeEvent::Deleted),
                                        Ok(Gap::Changed) => return Ok(NodeEvent::DataChanged),
                                        // Not read: watch again, after a pause.
                                        Err(_) => {
                                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                                            break;
                                        }
                                    }
                                }
                                continue;
                            }
                            if resp.compact_revision() > 0 {
                                // The events are gone (compacted): what happened is read from the store. The same key
                                // (its create revision) still there has not been deleted; another is a new key.
                                match current(&shared, session, &path).await? {
                                    Some((c, _)) if c != created => return Ok(NodeEvent::Deleted),
                                    None => return Ok(NodeEvent::Deleted),
                                    Some((_, at)) => {
                                        // A data watch cannot tell whether the data changed meanwhile: it says so,
                                        // as a watch that fired for nothing (the caller reads again).
                                        if until == Until::Changed {
                                            return Ok(NodeEvent::DataChanged);
                                        }
                                        from = at + 1;
                                        break;
                                    }
                                }
                            }
                            for e in resp.events() {
                                // A member behind the first read (the channel may open the watch on another) sends
                                // events older than it: those are already in the read (found by review: a holder's
                                // own key, made again under a reused name, was reported deleted by the deletion of
                                // the name's previous key).
                                if e.kv().is_some_and(|kv| kv.mod_revision() < from) {
                                    continue;
                                }
                                match e.event_type() {
                                    EventType::Delete if owner == session => {
                                        return own_deleted(&shared, session).await
                                    }
                                    EventType::Delete => return Ok(NodeEvent::Deleted),
                                    EventType::Put if until == Until::Changed => return Ok(NodeEvent::DataChanged),
                                    EventType::Put => {}
                                }
                                if let Some(kv) = e.kv() {
                                    from = from.max(kv.mod_revision() + 1);
                                }
                            }
                        }
                        // The stream broke: watch again (no event is lost: the next watch reads the gap since
                        // `from`), after a pause, so that a stream that keeps breaking is no busy loop.
                        _ => {
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                            break;
                        }
                    },
                    changed = status.changed() => {
                        if changed.is_err() {
                            return Err(Error::Closed);
                        }
                        ended(&shared, session)?;
                    }
                }
            }
        }
    }
}

/// etcd refuses this client's credentials: the session ends (its lease then lapses within its TTL, and every key
/// with it, as no request of it could delete them; found by review), and the watch fails saying why.
fn refused(shared: &Shared, session: SessionId, why: &str) -> Error {
    shared.gone(session);
    Error::AuthenticationFailed {
        servers: "etcd".to_owned(),
        why: why.to_owned(),
    }
}

/// What happened to a key between two revisions.
enum Gap {
    Nothing,
    Deleted,
    Changed,
}

/// What happened to the key at `path` (of create revision `created`) from revision `from` to revision `at`, read at
/// `at`: gone, or another key of the name (another create revision), is a deletion; the same key modified since
/// `from` a change (for a watch of changes). When `at` was compacted already, the key is read now, through the
/// session's queue, as after a compacted watch; a data watch that cannot tell then says it changed (the caller reads
/// again).
async fn between(
    shared: &Shared,
    session: SessionId,
    path: &str,
    (created, from): (i64, i64),
    at: i64,
    until: Until,
) -> Result<Gap> {
    let got = crate::ops::unless_unsent(&shared.client, || {
        let (mut kv, p) = (crate::ops::kv(&shared.client), path.to_owned());
        async move { kv.get(p, Some(etcd_client::GetOptions::new().with_revision(at))).await }
    })
    .await;
    match got {
        Ok(resp) => Ok(match resp.kvs().first() {
            None => Gap::Deleted,
            Some(kv) if kv.create_revision() != created => Gap::Deleted,
            Some(kv) if until == Until::Changed && kv.mod_revision() >= from => Gap::Changed,
            Some(_) => Gap::Nothing,
        }),
        Err(e) if crate::ops::message(&e).contains("compacted") => Ok(match current(shared, session, path).await? {
            Some((c, _)) if c == created => {
                if until == Until::Changed {
                    Gap::Changed
                } else {
                    Gap::Nothing
                }
            }
            _ => Gap::Deleted,
        }),
        Err(e) => Err(crate::ops::error(e)),
    }
}

/// A key of the watch's own session was deleted: by its session's end (its lease is gone), or by a request.
async fn own_deleted(shared: &Shared, session: SessionId) -> Result<NodeEvent> {
    match shared.sender.call(session, crate::sender::Op::Sync).await {
        Err(e @ (Error::SessionExpired | Error::Closed)) => Err(e),
        _ => Ok(NodeEvent::Deleted),
    }
}

/// The session's end, as the watch's error.
fn ended(shared: &Shared, session: SessionId) -> Result<()> {
    let now = *shared.status.borrow();
    match now.state {
        SessionState::Closed => Err(Error::Closed),
        _ if now.id != session || now.state == SessionState::Expired => Err(Error::SessionExpired),
        _ => Ok(()),
    }
}

/// The key at `path` now: its create revision and the revision of the read.
async fn current(shared: &Shared, session: SessionId, path: &str) -> Result<Option<(i64, i64)>> {
    Ok(read(shared, session, path).await?.map(|(n, at)| (n.stat.czxid, at)))
}
