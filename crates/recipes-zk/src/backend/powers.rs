//! The ZooKeeper backend's optional powers: transactions (`multi`) and requests sent before the call returns.

use async_trait::async_trait;
use recipes_core::backend::{ReplyFuture, SendNow, SessionId, Transactions};
use recipes_core::Result;

use super::ZkBackend;
use crate::convert::settle;
use crate::lease::Stamp;
use crate::session::Evidence;
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
            let mut txn = c.new_multi_writer();
            txn.add_set_data(path, data, None)?;
            txn.add_delete(path, None)?;
            txn.commit().await.map(drop).map_err(zk::Error::from)
        })
        .await
    }
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
}
