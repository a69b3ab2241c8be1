//! Watches from a known revision: the read that finds the key says at which revision it did, and the watch starts
//! at the next one, so no event falls between the read and the watch (decision 0065, point 3). A watch fails when its
//! session ends, as ZooKeeper's do.

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
    let Some((kv, revision)) = read(&shared, session, path).await? else {
        return Ok(None);
    };
    let stat = crate::sender::stat(&kv);
    let w = watch(shared, session, path.to_owned(), revision, Until::Deleted);
    Ok(Some((stat, Box::pin(async move { w.await.map(|_| ()) }))))
}

/// `get_and_watch`: the key's data and a watch of its next change or deletion, or `None` when it does not exist.
pub(crate) async fn node(shared: Arc<Shared>, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
    let Some((kv, revision)) = read(&shared, session, path).await? else {
        return Ok(None);
    };
    let w = watch(shared, session, path.to_owned(), revision, Until::Changed);
    Ok(Some((kv.value().to_vec(), Box::pin(w))))
}

/// Reads the key through the session's queue (in order with its writes): the key and the revision of the read.
async fn read(shared: &Shared, session: SessionId, path: &str) -> Result<Option<(etcd_client::KeyValue, i64)>> {
    match shared
        .sender
        .call(session, crate::sender::Op::Get(path.to_owned()))
        .await?
    {
        crate::sender::Reply::Node(None) => Ok(None),
        crate::sender::Reply::Node(Some(_)) => {
            // The queue's read answers the node without its revision: read it again with the header, in order after
            // it (nothing of this session's can come between, and another's change is what the watch reports).
            let mut c = shared.client.clone();
            let resp = c.get(path, None).await.map_err(crate::ops::error)?;
            let revision = resp.header().map_or(0, |h| h.revision());
            Ok(resp.kvs().first().map(|kv| (kv.clone(), revision)))
        }
        other => Err(crate::sender::unexpected(&other)),
    }
}

/// Watches `path` from the revision after `revision` until `until` happens, or the session ends.
async fn watch(
    shared: Arc<Shared>,
    session: SessionId,
    path: String,
    revision: i64,
    until: Until,
) -> Result<NodeEvent> {
    let mut status = shared.status.subscribe();
    let mut from = revision + 1;
    loop {
        let mut c = shared.client.clone();
        let options = WatchOptions::new().with_start_revision(from);
        let mut stream = match c.watch(path.as_str(), Some(options)).await {
            Ok(s) => s,
            Err(_) => {
                ended(&shared, session)?;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        loop {
            tokio::select! {
                m = stream.message() => match m {
                    Ok(Some(resp)) => {
                        if resp.canceled() || resp.compact_revision() > 0 {
                            // Compacted past our revision: what happened is read from the store.
                            return compacted(&shared, session, &path, until).await;
                        }
                        for e in resp.events() {
                            match e.event_type() {
                                EventType::Delete => return Ok(NodeEvent::Deleted),
                                EventType::Put if until == Until::Changed => return Ok(NodeEvent::DataChanged),
                                EventType::Put => {}
                            }
                            if let Some(kv) = e.kv() {
                                from = from.max(kv.mod_revision() + 1);
                            }
                        }
                    }
                    // The stream broke: watch again from where it was (no event is lost: it starts at `from`).
                    _ => break,
                },
                changed = status.changed() => {
                    if changed.is_err() {
                        return Err(Error::Closed);
                    }
                    ended(&shared, session)?;
                }
            }
        }
        ended(&shared, session)?;
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

/// After a compaction hid the events: the key gone is a deletion; a key still there has changed (a data watch) or
/// is watched again from now (a deletion watch cannot tell, so it reports a change no caller of it expects: it reads
/// the key again instead).
async fn compacted(shared: &Arc<Shared>, session: SessionId, path: &str, until: Until) -> Result<NodeEvent> {
    match read(shared, session, path).await? {
        None => Ok(NodeEvent::Deleted),
        Some(_) if until == Until::Changed => Ok(NodeEvent::DataChanged),
        Some((_, revision)) => Box::pin(watch(shared.clone(), session, path.to_owned(), revision, until)).await,
    }
}
