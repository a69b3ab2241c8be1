//! One client session on a [`MemCluster`]: the [`Backend`] implementation and the client's fault injection.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::{Either, FutureExt};
use recipes_core::backend::{
    parent_path, ChildOrder, CreateAndList, CreateMode, Created, CreationChecks, DeletionWatch, GoneWatches, Lease,
    NodeEvent, NodeWatch, SendNow, SessionId, SessionStatus, Stat, Transactions, TreeWatches,
};
use recipes_core::{Backend, Error, Result};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::server::{ClientShared, Op, Reply, Sent};
use crate::MemCluster;

mod powers;

/// One client session on a [`MemCluster`], standing in for one process's ZooKeeper client.
///
/// It implements [`Backend`]. Dropping the last handle closes the session (its ephemeral nodes go, over a cut
/// connection once the server hears of it), as a process exiting would. After its session expires it opens a new one for later calls, as the ZooKeeper backend does; a
/// request naming the old session fails with [`Error::SessionExpired`] and never runs on the new one.
#[derive(Debug)]
pub struct MemClient {
    cluster: MemCluster,
    shared: Arc<ClientShared>,
}

impl MemClient {
    pub(crate) fn new(cluster: MemCluster, timeout: Duration) -> Arc<MemClient> {
        let (status, _) = watch::channel(SessionStatus {
            id: 0,
            state: recipes_core::backend::SessionState::Suspended,
        });
        let shared = Arc::new(ClientShared { status, timeout });
        cluster.with(|st, now| st.open_session(shared.clone(), now));
        Arc::new(MemClient { cluster, shared })
    }

    /// The cluster this client is connected to.
    pub fn cluster(&self) -> &MemCluster {
        &self.cluster
    }

    /// The current session id.
    pub fn session_id(&self) -> SessionId {
        self.shared.current().id
    }

    /// The session timeout.
    pub fn session_timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// Expires the session now, on the server and in the client (as Curator's `KillSession` does): its ephemeral
    /// nodes are deleted, its watches fail with `SessionExpired`, and a new session is opened for later calls.
    /// Replies the server sent before the expiry still arrive; requests not yet applied fail.
    pub fn expire_session(&self) {
        let sid = self.session_id();
        self.cluster.with(|st, now| st.kill(sid, now));
    }

    /// Cuts the connection for `duration` (virtual time under a paused clock). The session is suspended: replies
    /// on their way are lost (their callers see `ConnectionLoss`), requests already sent may still be applied by
    /// the server, and watch events are held back. New requests are held by the client and sent when the
    /// connection comes back, as zookeeper-client does (they land then, even if their callers gave up, and fail with
    /// `SessionExpired` if the session ended); on a cluster [ordered by creation](MemCluster::ordered_by), which
    /// stands for etcd, they fail at once with `ConnectionLoss`, as etcd's client refuses them. If `duration` is
    /// shorter than the session timeout the client reconnects to the same session, watches intact; otherwise the
    /// server expires the session when the timeout elapses (deleting its ephemeral nodes while the client still
    /// believes it is only disconnected), and the client learns of the expiry when the connection comes back.
    ///
    /// Does nothing when already disconnected.
    pub fn disconnect_for(&self, duration: Duration) {
        let sid = self.session_id();
        self.cluster.with(|st, now| st.partition(sid, duration, now));
    }

    /// The process behind this client stops dead (as with SIGKILL): the client never talks to the server again,
    /// and the server expires the session after its timeout.
    pub fn crash(&self) {
        let sid = self.session_id();
        self.cluster.with(|st, now| st.crash(sid, now));
    }

    /// The replies to the next `n` creates of ephemeral nodes (lock nodes) by this session are lost: each create is
    /// applied on the server, then the connection breaks (the caller sees `ConnectionLoss`) and comes back to the
    /// same session 10 ms later. Creates of parents are not affected, so a test can aim the fault at the lock node.
    pub fn lose_next_create_replies(&self, n: u32) {
        let sid = self.session_id();
        self.cluster.with(|st, _| st.lose_create_replies(sid, n));
    }

    /// Closes the session now: its ephemeral nodes are deleted and later calls fail with `Closed` (what
    /// [`Backend::close`] does, without a future).
    pub fn close_now(&self) {
        let sid = self.session_id();
        self.cluster.with(|st, now| st.close(sid, now));
    }

    fn send(&self, session: SessionId, op: Op<'_>) -> Result<Sent> {
        self.send_at(Instant::now(), session, op)
    }

    fn send_at(&self, now: Instant, session: SessionId, op: Op<'_>) -> Result<Sent> {
        self.cluster
            .with_at(now, |st, now| st.send(&self.shared, session, op, now))
    }

    /// Waits for the reply to a request sent (or fails as the send did).
    ///
    /// Not an `async fn`: one keeps the sent request and its reply side by side in its state, and every request's
    /// future (boxed by the backend trait, so moved whole into its box) carries it; this one is as large as a reply.
    fn reply(sent: Result<Sent>) -> impl Future<Output = Result<Reply>> {
        match sent {
            Err(e) => Either::Left(Either::Left(std::future::ready(Err(e)))),
            // Answered at once, yet a request is a yield point, as one that waits on a socket is: a task that loops
            // on requests still lets the others of its runtime run (tokio's budget), timeouts around it included.
            Ok(Sent::Done(reply)) => {
                Either::Left(Either::Right(tokio::task::coop::consume_budget().map(move |()| reply)))
            }
            // Every reply channel is answered or failed; a dropped one can only mean the connection went.
            Ok(Sent::Later(rx)) => Either::Right(rx.map(|r| r.unwrap_or(Err(Error::ConnectionLoss)))),
        }
    }

    /// Sends a request now and waits for its reply.
    fn request(&self, session: SessionId, op: Op<'_>) -> impl Future<Output = Result<Reply>> {
        Self::reply(self.send(session, op))
    }
}

impl Drop for MemClient {
    fn drop(&mut self) {
        self.close_now();
    }
}

/// The event a watch saw; `Closed` when the cluster went away with the watch.
async fn watch_event(rx: oneshot::Receiver<Result<NodeEvent>>) -> Result<NodeEvent> {
    rx.await.unwrap_or(Err(Error::Closed))
}

/// What a deletion watch needs to set itself again after a change of its node's data: ZooKeeper's exists watch is a
/// data watch, used up by the change.
struct SetAgain {
    cluster: MemCluster,
    shared: Arc<ClientShared>,
    session: SessionId,
    path: String,
    czxid: i64,
}

impl SetAgain {
    /// The deletion watch of `session` on the node made at `czxid`, as the ZooKeeper backend's: a change of data sets
    /// it again with an existence check on the same session (a request of its own, which may fail with the
    /// connection), and a node of the name found then with another creation id means the one watched was deleted.
    fn deletion_watch(self, first: oneshot::Receiver<Result<NodeEvent>>) -> DeletionWatch {
        Box::pin(async move {
            let mut rx = first;
            loop {
                match watch_event(rx).await? {
                    NodeEvent::Deleted => return Ok(()),
                    _ => {
                        let (watch, next) = oneshot::channel();
                        let op = Op::Exists {
                            path: self.path.as_str().into(),
                            watch,
                        };
                        let sent = self
                            .cluster
                            .with(|st, now| st.send(&self.shared, self.session, op, now));
                        match MemClient::reply(sent).await {
                            Ok(reply) => match reply.exists() {
                                Some(stat) if stat.czxid == self.czxid => rx = next,
                                _ => return Ok(()),
                            },
                            Err(Error::SessionExpired) => return Err(Error::SessionExpired),
                            Err(Error::Closed) => return Err(Error::Closed),
                            Err(_) => return Err(Error::ConnectionLoss),
                        }
                    }
                }
            }
        })
    }
}

#[async_trait]
impl Backend for MemClient {
    fn child_order(&self) -> recipes_core::backend::ChildOrder {
        self.cluster.child_order()
    }

    async fn create(&self, session: SessionId, path: &str, data: &[u8], mode: CreateMode) -> Result<Created> {
        self.request(session, Op::create(path, data, mode))
            .await
            .map(Reply::created)
    }

    async fn create_and_list(&self, session: SessionId, path: &str, data: &[u8], mode: CreateMode) -> CreateAndList {
        // Both sent now, back to back: the server applies them in order, so the list follows the create.
        let now = Instant::now();
        let create = Self::reply(self.send_at(now, session, Op::create(path, data, mode)));
        let parent = parent_path(path).into();
        let list = Self::reply(self.send_at(now, session, Op::Children { path: parent }));
        let created = create.await.map(Reply::created);
        let listed = list.await.map(Reply::names);
        CreateAndList { created, listed }
    }

    async fn children(&self, session: SessionId, path: &str) -> Result<Vec<String>> {
        let op = Op::Children { path: path.into() };
        self.request(session, op).await.map(Reply::names)
    }

    async fn get(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        self.request(session, Op::Get { path: path.into() })
            .await
            .map(Reply::node)
    }

    async fn sync(&self, session: SessionId, path: &str) -> Result<()> {
        let op = Op::Sync { path: path.into() };
        self.request(session, op).await.map(|r| r.done("sync"))
    }

    async fn watch_deletion(&self, session: SessionId, path: &str) -> Result<Option<(Stat, DeletionWatch)>> {
        let (watch, rx) = oneshot::channel();
        let op = Op::Exists {
            path: path.into(),
            watch,
        };
        let stat = self.request(session, op).await?.exists();
        Ok(stat.map(|stat| {
            let again = SetAgain {
                cluster: self.cluster.clone(),
                shared: self.shared.clone(),
                session,
                path: path.to_owned(),
                czxid: stat.czxid,
            };
            (stat, again.deletion_watch(rx))
        }))
    }

    async fn get_and_watch(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
        let (watch, rx) = oneshot::channel();
        let op = Op::GetWatch {
            path: path.into(),
            watch,
        };
        let node = self.request(session, op).await?.node();
        Ok(node.map(|(data, _)| {
            let w: NodeWatch = Box::pin(watch_event(rx));
            (data, w)
        }))
    }

    async fn set_data(&self, session: SessionId, path: &str, data: &[u8]) -> Result<()> {
        let op = Op::SetData {
            path: path.into(),
            data: data.into(),
            version: None,
        };
        self.request(session, op).await.map(|r| r.done("set"))
    }

    fn set_data_unacked(&self, session: SessionId, path: &str, data: &[u8], version: Option<i32>) {
        // Sent now (held until the reconnection while disconnected); nobody waits for the reply. Not sent at all when
        // the session is over, or while disconnected where the cluster stands for etcd.
        let op = Op::SetData {
            path: path.into(),
            data: data.into(),
            version,
        };
        let _ = self.send(session, op);
    }

    async fn delete(&self, session: SessionId, path: &str) -> Result<()> {
        let op = Op::Delete { path: path.into() };
        self.request(session, op).await.map(|r| r.done("delete"))
    }

    fn transactions(&self) -> Option<&dyn Transactions> {
        Some(self)
    }

    fn send_now(&self) -> Option<&dyn SendNow> {
        Some(self)
    }

    fn tree_watches(&self) -> Option<&dyn TreeWatches> {
        // ZooKeeper's, where the cluster stands for ZooKeeper; etcd's backend has none yet.
        (self.cluster.child_order() == ChildOrder::Sequence).then_some(self as &dyn TreeWatches)
    }

    fn gone_watches(&self) -> Option<&dyn GoneWatches> {
        // ZooKeeper's, where the cluster stands for ZooKeeper: its waits in line are the only ones to use them.
        (self.cluster.child_order() == ChildOrder::Sequence).then_some(self as &dyn GoneWatches)
    }

    fn creation_checks(&self) -> Option<&dyn CreationChecks> {
        // etcd's, where the cluster stands for etcd (ordered by creation); ZooKeeper has none, and a kinder backend
        // would hide the window its recipes keep.
        (self.cluster.child_order() == ChildOrder::Creation).then_some(self as &dyn CreationChecks)
    }

    fn session_status(&self) -> SessionStatus {
        self.shared.current()
    }

    fn session(&self) -> watch::Receiver<SessionStatus> {
        self.shared.status.subscribe()
    }

    async fn close(&self) {
        self.close_now();
    }

    fn lease(&self) -> Lease {
        let status = self.shared.current();
        let timeout = self.shared.timeout;
        // Only what the client can know: a session the server expired behind a cut connection keeps its frozen
        // lease until the client learns of the expiry.
        self.cluster.peek_now(|st, now| {
            let rec = st.sessions.get(&status.id);
            Lease {
                session: status.id,
                answered_send: rec.and_then(|rec| rec.answered_send(now)),
                session_timeout: rec.map_or(timeout, |rec| rec.timeout),
            }
        })
    }
}
