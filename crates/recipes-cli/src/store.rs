//! The store zklock connects to: ZooKeeper (a connect string), or etcd (`etcd://host:port[,host:port…]`, with the
//! `etcd` feature, on by default).

use std::sync::Arc;
use std::time::Duration;

use recipes_core::Backend;
use recipes_zk::{ZkBackend, ZkOptions};

use crate::Fail;

/// How to reach the store, validated.
#[derive(Clone)]
pub(crate) enum StoreOptions {
    Zk(Box<ZkOptions>),
    #[cfg(feature = "etcd")]
    Etcd(recipes_etcd::EtcdOptions, Duration),
}

/// The etcd endpoints of `--servers etcd://host:port[,host:port…]`, as URLs, or `None` for a ZooKeeper connect
/// string.
pub(crate) fn etcd_endpoints(servers: &str) -> Option<Result<String, Fail>> {
    let rest = servers.trim().strip_prefix("etcd://")?;
    let hosts: Vec<&str> = rest.split(',').map(str::trim).collect();
    if hosts
        .iter()
        .any(|h| h.is_empty() || h.contains('/') || !h.contains(':'))
    {
        return Some(Err(Fail::usage(format!(
            "invalid --servers {servers:?}: expected etcd://host:port[,host:port…]"
        ))));
    }
    Some(Ok(hosts
        .iter()
        .map(|h| format!("http://{h}"))
        .collect::<Vec<_>>()
        .join(",")))
}

/// A connected store.
pub(crate) enum Store {
    Zk(Arc<ZkBackend>),
    #[cfg(feature = "etcd")]
    Etcd(Arc<recipes_etcd::EtcdBackend>, Duration),
}

impl Store {
    pub(crate) async fn connect(options: &StoreOptions) -> Result<Store, Fail> {
        Ok(match options {
            StoreOptions::Zk(o) => Store::Zk(ZkBackend::connect((**o).clone()).await?),
            #[cfg(feature = "etcd")]
            StoreOptions::Etcd(o, asked) => {
                Store::Etcd(Arc::new(recipes_etcd::EtcdBackend::connect(o.clone()).await?), *asked)
            }
        })
    }

    pub(crate) fn backend(&self) -> Arc<dyn Backend> {
        match self {
            Store::Zk(b) => b.clone(),
            #[cfg(feature = "etcd")]
            Store::Etcd(b, _) => b.clone(),
        }
    }

    pub(crate) async fn close(&self) {
        self.backend().close().await;
    }

    /// The session timeout the lease counts on: ZooKeeper's shortest granted by any server asked so far, etcd's lease
    /// TTL as granted.
    pub(crate) fn session_timeout(&self) -> Duration {
        match self {
            Store::Zk(b) => b.session_timeout(),
            #[cfg(feature = "etcd")]
            Store::Etcd(b, _) => b.session_timeout(),
        }
    }

    /// The session timeout asked for.
    pub(crate) fn asked_session_timeout(&self) -> Duration {
        match self {
            Store::Zk(b) => b.options().asked_session_timeout(),
            #[cfg(feature = "etcd")]
            Store::Etcd(_, asked) => *asked,
        }
    }

    /// Waits (at most `wait`) until every ZooKeeper server has said which timeout it grants; etcd's lease has one.
    pub(crate) async fn timeouts_probed(&self, wait: Duration) {
        match self {
            Store::Zk(b) => b.timeouts_probed(wait).await,
            #[cfg(feature = "etcd")]
            Store::Etcd(..) => {}
        }
    }
}
