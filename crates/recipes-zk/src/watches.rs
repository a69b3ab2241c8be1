//! The watches a session hands the recipes: a data-or-deletion watch, a deletion watch that a data change re-arms on
//! the same session, and the events of a tree watch.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Weak};

use futures::{FutureExt, Stream};

use recipes_core::backend::{DeletionWatch, NodeEvent, NodeWatch, SessionId, TreeChange, TreeEvent};
use recipes_core::Error;

use crate::errors::session_event_error;
use crate::session::Inner;
use crate::zk;

/// A data-or-deletion watch of `session`, as the recipes see it.
///
/// The client's future mapped, not awaited in an `async` block of ours: a block would keep the watcher it moved into
/// the future in its own state beside it (48 bytes more per watch: the watcher's 40 and the block's own state tag),
/// and every waiter in line keeps two (issue 26).
pub(crate) fn node_watch(watcher: zk::OneshotWatcher, inner: Weak<Inner>) -> NodeWatch {
    Box::pin(caught(watcher.changed()).map(move |event| {
        let Ok(event) = event else {
            return Err(gone(&inner));
        };
        match event.event_type {
            zk::EventType::NodeDeleted => Ok(NodeEvent::Deleted),
            zk::EventType::NodeDataChanged | zk::EventType::NodeCreated | zk::EventType::NodeChildrenChanged => {
                Ok(NodeEvent::DataChanged)
            }
            zk::EventType::Session => Err(session_event_error(
                event.session_state,
                inner.upgrade().is_none_or_closed(),
            )),
        }
    }))
}

/// A watcher's event, or `Err` when the connection's task went with its runtime before it sent one (a session on the
/// caller's runtime, `SessionRuntime::Caller`, whose runtime was dropped before the backend was closed): the client's
/// watchers then panic (zookeeper-client unwraps their channel), which is caught here (found by review, helper-154),
/// and answered as [`gone`] says. (No map of its own: a second `Map` made every node watch 8 bytes larger.)
fn caught<F: std::future::Future>(event: F) -> futures::future::CatchUnwind<AssertUnwindSafe<F>> {
    AssertUnwindSafe(event).catch_unwind()
}

/// What a watcher that panicked (see [`caught`]) answers. The backend's monitor, dropped with the same runtime,
/// closes the backend: `Closed` once it has, `ConnectionLoss` before (the runtime's tasks are dropped in no set order),
/// which a waiter meets as a disconnection, its cleanup still armed: a panic of the watcher while the session lives
/// (zookeeper-client 0.11 has no way to cause one: helper-155) is not taken for the session's end.
fn gone(inner: &Weak<Inner>) -> Error {
    if inner.upgrade().is_none_or_closed() {
        Error::Closed
    } else {
        Error::ConnectionLoss
    }
}

trait ClosedExt {
    fn is_none_or_closed(&self) -> bool;
}

impl ClosedExt for Option<Arc<Inner>> {
    fn is_none_or_closed(&self) -> bool {
        self.as_ref().is_none_or(|i| i.is_closed())
    }
}

/// A deletion watch of `session` on the node made at `czxid`: a data change re-arms it on the same session (never on a
/// later one), and a node of the name found then with another creation id means the one watched was deleted.
///
/// ZooKeeper consumes an exists watch at a change of data, and reports a node deleted and made again while the client
/// was disconnected as a change of data (`setWatches`): a re-arm that looked at the name alone took the new node for
/// the one watched, and waited on it (found by review, helper-103: the exclusive recipe's holder, its `P/lock`
/// deleted by an operator and made again by the next contender, never learnt that it had lost the lock).
pub(crate) fn deletion_watch(
    watcher: zk::OneshotWatcher,
    inner: Weak<Inner>,
    session: SessionId,
    path: String,
    czxid: i64,
) -> DeletionWatch {
    Box::pin(async move {
        let mut watcher = watcher;
        loop {
            let event = caught(watcher.changed()).await.map_err(|_| gone(&inner))?;
            match event.event_type {
                zk::EventType::NodeDeleted => return Ok(()),
                zk::EventType::Session => {
                    return Err(session_event_error(
                        event.session_state,
                        inner.upgrade().is_none_or_closed(),
                    ))
                }
                _ => {
                    let client = match inner.upgrade().map(|i| i.client_for(session)) {
                        Some(Ok(c)) => c,
                        Some(Err(e)) => return Err(e),
                        None => return Err(Error::Closed),
                    };
                    match client.check_and_watch_stat(&path).await {
                        Ok((None, _)) => return Ok(()),
                        Ok((Some(s), w)) if s.czxid == czxid => watcher = w,
                        Ok((Some(_), _)) => return Ok(()),
                        Err(zk::Error::SessionExpired) => return Err(Error::SessionExpired),
                        Err(_) => return Err(Error::ConnectionLoss),
                    }
                }
            }
        }
    })
}

/// The events of a persistent recursive watch of a session, as a tree watch reports them, until its first session
/// event (a disconnection, the expiry, the close), reported as an error that ends it: ZooKeeper loses a persistent
/// watch's events across a reconnection (ZOOKEEPER-4698), and zookeeper-client's watcher may not be polled after a
/// terminal event. Child-list events (none come in the recursive mode) are skipped.
pub(crate) fn tree_events(
    watcher: zk::PersistentWatcher,
    inner: Weak<Inner>,
) -> impl Stream<Item = Result<TreeEvent, Error>> + Send + Unpin + 'static {
    Box::pin(futures::stream::unfold(Some(watcher), move |watcher| {
        let inner = inner.clone();
        async move {
            let mut watcher = watcher?;
            loop {
                let Ok(event) = caught(watcher.changed()).await else {
                    return Some((Err(gone(&inner)), None));
                };
                let change = match event.event_type {
                    zk::EventType::NodeCreated => TreeChange::Created,
                    zk::EventType::NodeDataChanged => TreeChange::DataChanged,
                    zk::EventType::NodeDeleted => TreeChange::Deleted,
                    zk::EventType::NodeChildrenChanged => continue,
                    zk::EventType::Session => {
                        let e = session_event_error(event.session_state, inner.upgrade().is_none_or_closed());
                        return Some((Err(e), None));
                    }
                };
                let event = TreeEvent {
                    path: event.path,
                    change,
                };
                return Some((Ok(event), Some(watcher)));
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns, without a watcher to call it with.
    fn size_of_return<F, Fut>(_: F) -> usize
    where
        F: FnOnce(zk::OneshotWatcher) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// Catching the watcher's panic (`caught`) costs a node watch no byte: every waiter in line keeps two (issue 26's
    /// live heap per waiter). A first draft that mapped the caught panic in a closure of its own took 8 bytes more.
    #[test]
    fn a_watch_that_catches_the_clients_panic_is_no_larger() {
        let plain = size_of_return(|w: zk::OneshotWatcher| {
            let inner: Weak<Inner> = Weak::new();
            w.changed().map(move |e| (e.session_state, inner.upgrade().is_none()))
        });
        let caught = size_of_return(|w: zk::OneshotWatcher| {
            let inner: Weak<Inner> = Weak::new();
            caught(w.changed()).map(move |e| (e.is_ok(), inner.upgrade().is_none()))
        });
        assert!(caught <= plain, "{caught} bytes against {plain}");
    }
}
