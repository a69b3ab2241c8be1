//! The ZooKeeper backend for `recipes-core`, on the `zookeeper-client` crate.
//!
//! One [`ZkBackend`] is one ZooKeeper session, shared by every lock made from it. It reports the session's state
//! to the recipes (Disconnected → suspended, reconnected → connected, Expired → expired) and, after an expiry,
//! opens a new session for later calls.
//!
//! ```no_run
//! # async fn f() -> Result<(), recipes_core::Error> {
//! use std::time::Duration;
//! use recipes_core::Locks;
//! use recipes_zk::{ZkBackend, ZkOptions};
//!
//! let zk = ZkBackend::connect(
//!     ZkOptions::new("zk1:2181,zk2:2181,zk3:2181/myapp").session_timeout(Duration::from_secs(10)),
//! )
//! .await?;
//! let locks = Locks::new(zk);
//! let guard = locks.fair("/orders/42")?.acquire().await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Work-arounds for the client
//! - A connection timeout reaches calls as `Error::Custom` or `Error::Timeout`, not `ConnectionLoss`: both, and
//!   any error while disconnected, are reported as [`Error::ConnectionLoss`](recipes_core::Error::ConnectionLoss).
//! - After `Expired` a `zookeeper_client::Client` is dead: a new one is connected, with a new session id.
//! - The client's own lock helper is not used.
//! - The client declares `Expired` on its own only about 7/5 of the session timeout after losing the server; the
//!   server may have expired the session earlier. A holder must not rely on that event alone (see leases).
//! - A reconnection renegotiates the session timeout, and the client does not say what it got: the backend asks
//!   every server which timeout it grants, and the lease assumes the shortest.
//!
//! # The lease
//! Only the leader expires sessions, and a follower cut off from the leader goes on answering reads. So the lease
//! moves forward only on evidence that passed through the leader: a `sync` (the heartbeat, every eighth of the
//! session timeout) or a write. See the `lease` module's documentation and docs/algorithm.md for the bound.

#![warn(missing_docs)]

mod acl;
mod backend;
mod connect;
mod convert;
mod errors;
mod lease;
mod options;
mod runtime;
mod session;
#[cfg(feature = "tls")]
mod tls;
mod watches;

pub use acl::NodeAcl;
pub use backend::ZkBackend;
pub use options::ZkOptions;
#[cfg(feature = "tls")]
pub use tls::ZkTls;
pub use zookeeper_client as zk;
