//! The etcd backend of `recipes-core` (issue 27; decisions 0063 and 0065): one etcd lease is the session, a key
//! attached to it is an ephemeral node, and one session's requests are applied in the order they were issued.
//!
//! The queue's order is etcd's create revision: a sequential create makes the name as given, and the children of a
//! path are listed in the order of their creation ([`ChildOrder::Creation`], decision 0068), so the native layout's
//! recipes run here as they do on ZooKeeper, their waiters listing again after every wake-up. Paths are checked as
//! ZooKeeper's client checks them (`Refused` before anything is sent, decision 0091): etcd takes any key, but a key
//! that is no path would break the tree this backend keeps on them.
//!
//! # The order of one session's requests
//! etcd applies concurrent requests of one client in any order (decision 0065 measured 192 of 1,550 pairs
//! inverted). This backend sends one request of a session at a time, in the order they were issued, from a task of
//! its own (a request is queued when its future is first polled, and sent even when the caller has dropped it). And
//! since a request whose reply was lost may still be applied later, every write is a transaction guarded by the
//! session's *sequence key* (`/__recipes/sessions/<lease id in hex>`, attached to the lease): it applies only when
//! that key's version is the one the backend expects, and bumps it. After a lost reply the backend *seals* the
//! sequence (bumps it itself, or finds that the lost write did) before it sends anything else, so a write that
//! lands late finds the version moved and does nothing: no write of a session is ever applied after a later one.

mod ops;
mod options;
mod request;
mod sender;
mod session;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::backend::{
    ChildOrder, CreateAndList, CreateMode, Created, CreationChecks, DeletionWatch, Lease, NodeWatch, SessionId,
    SessionStatus, Stat, Transactions,
};
use recipes_core::{Backend, Error, Result};
use tokio::sync::watch as channel;

use sender::{Op, Reply};
use session::Shared;

pub use options::EtcdOptions;
#[cfg(feature = "tls")]
pub use options::EtcdTls;

/// A connection to etcd holding one session (an etcd lease) at a time: a [`Backend`] for `recipes-core`.
#[derive(Debug, Clone)]
pub struct EtcdBackend {
    shared: Arc<Shared>,
}

impl EtcdBackend {
    /// Connects, grants the session's lease, and starts keeping it alive. The session's tasks run where the options'
    /// [`session_runtime`](EtcdOptions::session_runtime) say: by default on a runtime of the backend's own.
    ///
    /// ```no_run
    /// # async fn f() -> recipes_core::Result<()> {
    /// use std::time::Duration;
    /// use recipes_core::backend::{BackendExt, CreateMode};
    /// use recipes_core::Backend;
    /// use recipes_etcd::{EtcdBackend, EtcdOptions};
    /// let etcd = EtcdBackend::connect(EtcdOptions::new("http://127.0.0.1:2379").session_timeout(Duration::from_secs(6)))
    ///     .await?;
    /// // A key attached to the session's lease: it goes when the session ends.
    /// etcd.current().create("/services/a", b"10.0.0.1:80", CreateMode::Ephemeral).await?;
    /// etcd.close().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Notable errors
    /// [`Error::InvalidArgument`] without an endpoint, for an endpoint that is
    /// not `[http://|https://]host:port`, or for a session timeout etcd refuses as a lease TTL;
    /// [`Error::Unreachable`] when no member granted a lease within the connect
    /// timeout (the last transport error says why: refused, a TLS handshake that failed);
    /// [`Error::AuthenticationFailed`] when etcd refused the user or its
    /// password; [`Error::NotAuthorized`] when the user may not keep a session
    /// (its roles must grant readwrite on `/__recipes/sessions/`).
    pub async fn connect(options: EtcdOptions) -> Result<EtcdBackend> {
        options.urls()?;
        let shared = session::start(options).await?;
        Ok(EtcdBackend { shared })
    }

    /// The session timeout the lease assumes: its TTL as etcd granted it.
    pub fn session_timeout(&self) -> Duration {
        self.shared.lease().session_timeout
    }

    /// Revokes the current session's lease as an operator would (`etcdctl lease revoke`): etcd deletes its keys at
    /// once, and this backend learns of it at its next keep-alive or request. For tests of a session's end.
    pub async fn revoke_session_for_test(&self) -> Result<()> {
        self.shared.revoke_current().await
    }

    /// Every key under `prefix` (at any depth), with the lease it is attached to (`0`: none), sorted: what a
    /// tool or a test looks at to find keys left behind.
    pub async fn keys_with_leases(&self, prefix: &str) -> Result<Vec<(String, i64)>> {
        let resp = ops::kv(&self.shared.client)
            .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
            .await
            .map_err(ops::error)?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| (String::from_utf8_lossy(kv.key()).into_owned(), kv.lease()))
            .collect())
    }

    async fn call(&self, session: SessionId, op: Op) -> Result<Reply> {
        op.check_paths()?;
        self.shared.sender.call(session, op).await
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    async fn create(&self, session: SessionId, path: &str, data: &[u8], mode: CreateMode) -> Result<Created> {
        match self.call(session, Op::create(path, data, mode)?).await? {
            Reply::Created(c) => Ok(c),
            other => Err(sender::unexpected(&other)),
        }
    }

    async fn create_and_list(&self, session: SessionId, path: &str, data: &[u8], mode: CreateMode) -> CreateAndList {
        // One transaction: the put, then the range of the parent's children, which sees it (decision 0065, point 1).
        let op = match Op::create(path, data, mode) {
            Ok(op) => op.and_list(),
            Err(e) => {
                return CreateAndList {
                    created: Err(e.clone()),
                    listed: Err(e),
                }
            }
        };
        match self.call(session, op).await {
            Ok(Reply::CreatedListed(c, names)) => CreateAndList {
                created: Ok(c),
                listed: Ok(names),
            },
            Ok(Reply::Created(c)) => {
                // A container: nothing was written; list as a second request.
                let listed = self.children(session, recipes_core::backend::parent_path(path)).await;
                CreateAndList { created: Ok(c), listed }
            }
            Ok(other) => {
                let e = sender::unexpected(&other);
                CreateAndList {
                    created: Err(e.clone()),
                    listed: Err(e),
                }
            }
            // The list would have been sent behind the create, on the same session: it fails as the create did.
            Err(e) => CreateAndList {
                created: Err(e.clone()),
                listed: Err(e),
            },
        }
    }

    async fn children(&self, session: SessionId, path: &str) -> Result<Vec<String>> {
        match self.call(session, Op::Children(path.to_owned())).await? {
            Reply::Children(c) => Ok(c),
            other => Err(sender::unexpected(&other)),
        }
    }

    async fn get(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        match self.call(session, Op::Get(path.to_owned())).await? {
            Reply::Node(n, _) => Ok(n.map(|n| (n.data, n.stat))),
            other => Err(sender::unexpected(&other)),
        }
    }

    async fn sync(&self, session: SessionId, path: &str) -> Result<()> {
        recipes_core::backend::check_path(path)?;
        // Every read is linearizable (decision 0065, point 5): a read sent after this sees every write committed
        // before it. The call still goes through the session's queue, so that it fails on an ended session.
        match self.call(session, Op::Sync).await? {
            Reply::Done => Ok(()),
            other => Err(sender::unexpected(&other)),
        }
    }

    async fn watch_deletion(&self, session: SessionId, path: &str) -> Result<Option<(Stat, DeletionWatch)>> {
        recipes_core::backend::check_path(path)?;
        watch::deletion(self.shared.clone(), session, path).await
    }

    async fn get_and_watch(&self, session: SessionId, path: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
        recipes_core::backend::check_path(path)?;
        watch::node(self.shared.clone(), session, path).await
    }

    async fn set_data(&self, session: SessionId, path: &str, data: &[u8]) -> Result<()> {
        match self.call(session, Op::set(path, data, None)).await? {
            Reply::Done => Ok(()),
            other => Err(sender::unexpected(&other)),
        }
    }

    fn set_data_unacked(&self, session: SessionId, path: &str, data: &[u8], version: Option<i32>) {
        let op = Op::set(path, data, version);
        // A malformed path is refused as every request's is: nothing is sent, and nobody waits for an answer.
        if op.check_paths().is_ok() {
            self.shared.sender.send(session, op);
        }
    }

    async fn delete(&self, session: SessionId, path: &str) -> Result<()> {
        match self.call(session, Op::delete(vec![path.to_owned()], None)).await? {
            Reply::Done => Ok(()),
            other => Err(sender::unexpected(&other)),
        }
    }

    fn child_order(&self) -> ChildOrder {
        ChildOrder::Creation
    }

    fn transactions(&self) -> Option<&dyn Transactions> {
        Some(self)
    }

    fn creation_checks(&self) -> Option<&dyn CreationChecks> {
        Some(self)
    }

    fn session(&self) -> channel::Receiver<SessionStatus> {
        self.shared.status.subscribe()
    }

    async fn close(&self) {
        self.shared.close().await;
    }

    fn lease(&self) -> Lease {
        self.shared.lease()
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        Some(self.shared.runtime.clone())
    }
}

#[async_trait]
impl CreationChecks for EtcdBackend {
    async fn delete_if_created(&self, session: SessionId, path: &str, czxid: i64) -> Result<bool> {
        // One transaction: the key's create revision compared, then the delete.
        match self.call(session, Op::delete_created(path, czxid)).await {
            Ok(Reply::Done) => Ok(true),
            Ok(other) => Err(sender::unexpected(&other)),
            Err(Error::NodeExists(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl Transactions for EtcdBackend {
    async fn delete_all(&self, session: SessionId, paths: &[String]) -> Result<()> {
        match self.call(session, Op::delete(paths.to_vec(), None)).await? {
            Reply::Done => Ok(()),
            other => Err(sender::unexpected(&other)),
        }
    }

    async fn set_data_and_delete(&self, session: SessionId, path: &str, data: &[u8]) -> Result<()> {
        // etcd commits the transaction as one revision: no read sees the data; a watcher sees the put and the delete
        // at one revision, the put first.
        match self
            .call(session, Op::delete(vec![path.to_owned()], Some(data.to_vec())))
            .await?
        {
            Reply::Done => Ok(()),
            other => Err(sender::unexpected(&other)),
        }
    }
}
