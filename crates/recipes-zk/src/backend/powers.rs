//! The ZooKeeper backend's optional powers: transactions (`multi`), requests sent before the call returns, tree
//! watches (persistent recursive), and watches of a deletion alone (a child watch on a lock node).

use std::sync::Arc;

use async_trait::async_trait;
use recipes_core::backend::{
    tree_watch_until_moved, GoneWatches, NodeWatch, ReplyFuture, SendNow, SessionId, Transactions, TreeWatch,
    TreeWatches,
};
use recipes_core::{Backend, Result};

use super::ZkBackend;
use crate::convert::settle;
use crate::lease::Stamp;
use crate::session::Evidence;
use crate::watches::{node_watch, tree_events};
use crate::zk;

#[async_trait]
impl Transactions for ZkBackend {
    async fn delete_all(&self, session: SessionId, paths: &[String]) -> Result<()> {
        let first = paths.first().map_or("/", String::as_str);
        self.request(session, first, Evidence::Leader, |c| async move {
            let mut txn = c.new_multi_writer();
            for p in paths {
                txn.add_delete(p, None)?;
            }
            txn.commit().await.map(drop).map_err(zk::Error::from)
        })
        .await
    }

    async fn set_data_and_delete(&self, session: SessionId, path: &str, data: &[u8]) -> Result<()> {
        self.request(session, path, Evidence::Leader, |c| async move {
            set_data_and_delete(&c, path, data).await
        })
        .await
    }
}

/// `data` written over `path`, then `path` deleted, in one transaction (a `multi`), sent at the future's first poll.
async fn set_data_and_delete(c: &zk::Client, path: &str, data: &[u8]) -> std::result::Result<(), zk::Error> {
    let mut txn = c.new_multi_writer();
    txn.add_set_data(path, data, None)?;
    txn.add_delete(path, None)?;
    txn.commit().await.map(drop).map_err(zk::Error::from)
}

impl SendNow for ZkBackend {
    fn delete_sent(&self, session: SessionId, path: &str) -> Option<ReplyFuture> {
        // Not sent at all (the session is not the current one): nothing to hand over.
        let client = self.inner.client_for(session).ok()?;
        let sent = Stamp::now();
        // zookeeper-client sends at call time: the server applies it before every later request of the session.
        let reply = client.delete(path, None);
        let inner = self.inner.clone();
        let path = path.to_owned();
        Some(Box::pin(async move {
            let r = reply.await;
            settle(&inner, session, sent, Evidence::Leader, r, &path, &client)
        }))
    }

    fn set_data_and_delete_sent(&self, session: SessionId, path: &str, data: &[u8]) -> Option<ReplyFuture> {
        let client = self.inner.client_for(session).ok()?;
        let sent = Stamp::now();
        let inner = self.inner.clone();
        let (path, data) = (path.to_owned(), data.to_owned());
        let mut reply: ReplyFuture = Box::pin(async move {
            // zookeeper-client's transaction borrows its client: made in this future, which owns the client, and
            // sent at its first poll, below.
            let r = set_data_and_delete(&client, &path, &data).await;
            settle(&inner, session, sent, Evidence::Leader, r, &path, &client)
        });
        // Polled once now: the transaction is sent at call time (the commit sends before it returns its future), so
        // it is on its way before this returns, as `delete_sent`'s delete. The first poll ends waiting for the reply
        // (or with it), and every later poll registers the caller's waker.
        let waker = futures::task::noop_waker_ref();
        match reply.as_mut().poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(r) => Some(Box::pin(std::future::ready(r))),
            std::task::Poll::Pending => Some(reply),
        }
    }
}

#[async_trait]
impl TreeWatches for ZkBackend {
    async fn watch_tree(&self, session: SessionId, path: &str) -> Result<TreeWatch> {
        // Marked seen before the request is sent: any change of the session's state from here on ends the watch.
        let mut armed = self.session();
        armed.borrow_and_update();
        let watcher = self
            .request(session, path, Evidence::Seen, |c| async move {
                c.watch(path, zk::AddWatchMode::PersistentRecursive).await
            })
            .await?;
        Ok(tree_watch_until_moved(
            tree_events(watcher, Arc::downgrade(&self.inner)),
            armed,
        ))
    }
}

#[async_trait]
impl GoneWatches for ZkBackend {
    /// A watch on the node's children: ZooKeeper fires it at the node's deletion (after a change of data that used the
    /// session's data watch up, as a release's `multi` makes, with the deletion's own event) and at a change of the
    /// node's children, which an ephemeral lock node cannot have (reported as a change: look again).
    async fn watch_gone(&self, session: SessionId, path: &str) -> Result<Option<NodeWatch>> {
        let r = self
            .request(session, path, Evidence::Seen, |c| async move {
                match c.list_and_watch_children(path).await {
                    Ok((_, w)) => Ok(Some(w)),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(r.map(|w| node_watch(w, Arc::downgrade(&self.inner))))
    }
}
