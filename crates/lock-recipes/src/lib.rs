//! Distributed lock recipes in the manner of Apache Curator, in one dependency: the recipes
//! ([`Locks`], re-exported from `recipes-core`), the ZooKeeper backend ([`zookeeper`], feature `zookeeper`), the etcd
//! backend (`etcd`, feature `etcd`, off by default: its client needs `protoc` to build) and the in-memory backend for
//! tests ([`memory`], feature `memory`). `zookeeper` and `memory` are on by default; an application that
//! wants the in-memory backend only in its tests turns `memory` off for its build and on in `dev-dependencies`.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use lock_recipes::{memory::MemCluster, Locks};
//!
//! let locks = Locks::new(MemCluster::new().client()); // lock_recipes::zookeeper::ZkBackend::connect(..) in production
//! let guard = locks.fair("/payments/invoice-17").unwrap().acquire().await.unwrap();
//! assert!(guard.fencing_token() > 0);
//! guard.release().await.unwrap();
//! locks.close().await;
//! # });
//! ```

#![warn(missing_docs)]

pub use recipes_core::*;

/// The ZooKeeper backend (`recipes-zk`): [`ZkBackend`](zookeeper::ZkBackend), [`ZkOptions`](zookeeper::ZkOptions),
/// `ZkTls` (feature `tls`),
/// [`NodeAcl`](zookeeper::NodeAcl).
#[cfg(feature = "zookeeper")]
pub mod zookeeper {
    pub use recipes_zk::*;
}

/// The etcd backend (`recipes-etcd`, feature `etcd`, off by default: building etcd's client needs `protoc`):
/// [`EtcdBackend`](etcd::EtcdBackend), [`EtcdOptions`](etcd::EtcdOptions), [`EtcdTls`](etcd::EtcdTls).
#[cfg(feature = "etcd")]
pub mod etcd {
    pub use recipes_etcd::*;
}

/// The explorer (`recipes-explore`, feature `explore`): runs an application's own use of the locks on several simulated
/// processes under every interleaving and fault, with oracles; see [`Explorer`](explore::Explorer) and the guide's
/// "Testing your application".
#[cfg(feature = "explore")]
pub mod explore {
    pub use recipes_explore::*;
}

/// The in-memory backend (`recipes-mem`): [`MemCluster`](memory::MemCluster) and its clients, with sessions, virtual
/// time and fault injection, behaving as ZooKeeper does wherever a recipe could tell the difference.
#[cfg(feature = "memory")]
pub mod memory {
    pub use recipes_mem::*;
}
