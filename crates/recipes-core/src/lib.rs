//! Distributed lock recipes in the manner of Apache Curator, on any ZooKeeper-like [`Backend`].
//!
//! The locks are configurations of one algorithm; the semaphore and the multi-lock are built on it:
//!
//! | recipe | type | nodes | waits on | fair | re-entrant |
//! | --- | --- | --- | --- | --- | --- |
//! | exclusive | [`ExclusiveLock`] | one fixed `P/lock` | that node (every waiter: herd) | no | no |
//! | fair | [`FairLock`] | `P/L-<id>-<seq>` | its predecessor | FIFO | no |
//! | reentrant | [`ReentrantLock`] | as fair | as fair | FIFO | per owner |
//! | read / write | [`ReadWriteLock`] | `P/R-…`, `P/W-…` | nearest earlier writer / predecessor | FIFO | per owner |
//! | semaphore | [`Semaphore`] | `P/S-<id>-<seq>` (one per claim) | the few claims ahead that can let it in | FIFO | no |
//! | multi-lock | [`MultiLock`] | its members' | its members', in path order | as its members | no |
//!
//! In the Curator and kazoo layouts ([`Layout`]) the same recipes use their peers' node names on the same paths, and
//! [`Locks::revoke`] asks holders to let go by Curator's protocol.
//!
//! Start from [`Locks`], which hands out locks on one backend session. Every acquire returns an owned
//! [`LockGuard`] with a [`fencing token`](LockGuard::fencing_token), a [`lost`](LockGuard::lost) signal, and
//! [`release`](LockGuard::release) (or release on drop).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use recipes_core::Locks;
//! use recipes_mem::MemCluster;
//!
//! let cluster = MemCluster::new(); // stands in for a ZooKeeper ensemble
//! let locks = Locks::new(cluster.client()); // one client session
//! let lock = locks.fair("/payments/invoice-17")?;
//! let guard = lock.acquire().await?;
//! // ... work, passing guard.fencing_token() to the store you write to ...
//! guard.release().await?;
//! # Ok::<(), recipes_core::Error>(())
//! # }).unwrap();
//! ```
//!
//! Layering: [`Backend`] (layer 1) is all a backend implements; a [`Protocol`](protocol::Protocol) is the pure
//! decision (how a recipe in a layout names its node and judges the lock path) and one private driver runs
//! create / list / judge / watch / wait around it for every recipe (layer 2); the recipe types and a generic
//! reentrancy layer sit on top (layer 3).

#![warn(missing_docs)]

pub mod backend;
mod blocking;
mod cohort;
mod driver;
mod election;
mod error;
mod guard;
pub mod info;
mod lock;
mod locks;
pub mod metrics;
mod multi;
#[doc(hidden)]
pub mod mutants;
mod owner;
mod participants;
mod path;
mod patience;
pub mod protocol;
pub use protocol::layout;
mod recipe;
mod reentrant;
mod resource;
mod semaphore;
pub mod sim;

pub use backend::Backend;
pub use blocking::{BlockingGuard, BlockingLock};
pub use election::{Candidate, Election, Leader, Leadership};
pub use error::{Error, LostReason, NotHeldReason, PathProblem, Result, RetryReason};
pub use guard::{GuardedError, LockGuard};
pub use layout::{Layout, NodeKind};
pub use lock::{ExclusiveLock, FairLock, Lock, LockFuture, ReadLock, ReadWriteLock, ReentrantLock, WriteLock};
pub use locks::{LeaseMargin, Locks, LocksBuilder, DEFAULT_COHORT_HOLDS};
pub use metrics::{describe_metrics, Metrics};
pub use multi::{MultiGuard, MultiLock};
pub use owner::{Owner, OwnerToken};
pub use participants::{Participant, Participants, Role};
pub use path::LockPath;
pub use recipe::Recipe;
pub use resource::{Access, LockKind, Resource};
pub use semaphore::Semaphore;

/// The data a revoker writes into a holder's lock node to ask it to let go: Curator's `Revoker.REVOKE_MESSAGE`.
pub const REVOKE_MESSAGE: &[u8] = b"__REVOKE__";

/// Compile-time checks: guards and locks are `Send + Sync + 'static`; the backend trait is object safe.
#[allow(dead_code)]
fn _assert_traits() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<LockGuard>();
    send_sync::<Locks>();
    send_sync::<ExclusiveLock>();
    send_sync::<FairLock>();
    send_sync::<ReentrantLock>();
    send_sync::<ReadWriteLock>();
    send_sync::<Semaphore>();
    send_sync::<MultiLock>();
    send_sync::<MultiGuard>();
    send_sync::<std::sync::Arc<dyn Backend>>();
    send_sync::<std::sync::Arc<dyn Lock>>();
}
