//! The in-memory client's optional powers (`recipes_core::backend::powers`): transactions, creation checks, tree
//! watches, watches of a deletion alone, and requests sent before the call returns.

use async_trait::async_trait;
use futures::future::FutureExt;
use recipes_core::backend::{
    tree_watch_until_moved, CreationChecks, GoneWatches, NodeWatch, ReplyFuture, SendNow, SessionId, Transactions,
    TreeWatch, TreeWatches,
};
use recipes_core::{Backend, Error, Result};
use tokio::sync::oneshot;

use super::MemClient;
use crate::server::{Op, Reply};

#[async_trait]
impl Transactions for MemClient {
    async fn delete_all(&self, session: SessionId, paths: &[String]) -> Result<()> {
        let op = Op::DeleteAll { paths: paths.to_vec() };
        self.request(session, op).await.map(|r| r.done("delete all"))
    }

    async fn set_data_and_delete(&self, session: SessionId, path: &str, data: &[u8]) -> Result<()> {
        let op = Op::SetDataAndDelete {
            path: path.into(),
            data: data.into(),
        };
        self.request(session, op).await.map(|r| r.done("set data and delete"))
    }
}

#[async_trait]
impl CreationChecks for MemClient {
    async fn delete_if_created(&self, session: SessionId, path: &str, czxid: i64) -> Result<bool> {
        let op = Op::DeleteCreated {
            path: path.into(),
            czxid,
        };
        self.request(session, op).await.map(Reply::deleted)
    }
}

#[async_trait]
impl GoneWatches for MemClient {
    async fn watch_gone(&self, session: SessionId, path: &str) -> Result<Option<NodeWatch>> {
        let (watch, rx) = oneshot::channel();
        let op = Op::WatchGone {
            path: path.into(),
            watch,
        };
        let stat = self.request(session, op).await?.exists();
        Ok(stat.map(|_| Box::pin(super::watch_event(rx)) as NodeWatch))
    }
}

#[async_trait]
impl TreeWatches for MemClient {
    async fn watch_tree(&self, session: SessionId, path: &str) -> Result<TreeWatch> {
        // As ZooKeeper's client checks a path before it sends it.
        let bad = !path.starts_with('/')
            || (path != "/" && path[1..].split('/').any(|s| s.is_empty() || s == "." || s == ".."))
            || path.contains('\0');
        if bad {
            return Err(Error::Refused(format!("{path}: not a valid path")));
        }
        // Marked seen before the request is sent: any change of the session's state from here on ends the watch.
        let mut armed = self.session();
        armed.borrow_and_update();
        let (watch, rx) = futures::channel::mpsc::unbounded();
        let op = Op::AddTreeWatch {
            path: path.into(),
            watch,
        };
        self.request(session, op).await?.done("watch tree");
        Ok(tree_watch_until_moved(rx, armed))
    }
}

impl MemClient {
    /// Sends `op` now (held until the reconnection while disconnected): the server applies it before every later
    /// request of the session. Refused at once (the session is over, or disconnected where the cluster stands for
    /// etcd): not sent (`None`), nothing to hand over.
    fn sent_now(&self, session: SessionId, op: Op<'_>, what: &'static str) -> Option<ReplyFuture> {
        let sent = match self.send(session, op) {
            // A malformed path: refused as the ZooKeeper backend's client refuses it, an answer to hand over.
            Err(Error::Refused(why)) => return Some(Box::pin(std::future::ready(Err(Error::Refused(why))))),
            sent => sent.ok()?,
        };
        Some(Box::pin(Self::reply(Ok(sent)).map(move |r| r.map(|r| r.done(what)))))
    }
}

impl SendNow for MemClient {
    fn delete_sent(&self, session: SessionId, path: &str) -> Option<ReplyFuture> {
        self.sent_now(session, Op::Delete { path: path.into() }, "delete")
    }

    fn set_data_and_delete_sent(&self, session: SessionId, path: &str, data: &[u8]) -> Option<ReplyFuture> {
        let op = Op::SetDataAndDelete {
            path: path.into(),
            data: data.into(),
        };
        self.sent_now(session, op, "set data and delete")
    }

    fn delete_if_created_sent(&self, session: SessionId, path: &str, czxid: i64) -> Option<ReplyFuture> {
        let op = Op::DeleteCreated {
            path: path.into(),
            czxid,
        };
        let sent = self.send(session, op).ok()?;
        // Whether it deleted is not said: a node of that name that another write made was left alone, as asked.
        Some(Box::pin(Self::reply(Ok(sent)).map(|r| {
            r.map(|r| {
                let _deleted = r.deleted();
            })
        })))
    }
}
