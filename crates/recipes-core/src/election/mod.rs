//! Leader election on a fair lock's queue: candidates stand in line with their id in their node, the first one
//! leads, and its fencing token is the term.
//!
//! An election is the fair lock's protocol (the same nodes, the same waiting, the same lease, `lost()` and fencing),
//! with the candidate's id and data written into its node so that anyone may read who leads. In the Curator layout its
//! queue is that of Curator's `LeaderSelector` (which stands in line with an `InterProcessMutex`), and in the kazoo
//! layout that of kazoo's `Election` (a kazoo `Lock`), and in the etcd layout that of Go's `concurrency.Election`
//! (`etcdctl elect`, its proposal in the key): their candidates and ours share one election, and
//! [`Election::leader`] reads their ids (or proposals); they read our nodes' whole data as the id (this library's node
//! data, several lines), so only our side names the other's leader.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::driver::{self, Ctx};
use crate::error::{Error, LostReason, Result};
use crate::guard::LockGuard;
use crate::info::candidate_lines;
use crate::path::LockPath;
use crate::patience::{forever, Patience};

mod blocking;
mod observe;

pub use observe::Leader;

/// The most of a node's data read as a candidate's (this library's nodes carry a few lines; a peer's id is short).
const DATA_READ: usize = 4096;

/// The recipe's name in a candidate's node data.
pub(crate) const RECIPE_NAME: &str = "election";

/// An election at one path (made by [`Locks::election`](crate::Locks::election)): candidates stand with
/// [`candidate`](Election::candidate), and anyone may ask who leads with [`leader`](Election::leader).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use recipes_core::Locks;
/// let cluster = recipes_mem::MemCluster::new();
/// let (a, b) = (Locks::new(cluster.client()), Locks::new(cluster.client()));
/// let leading = a.election("/services/billing/leader")?.candidate("billing-1")?.leadership().await?;
/// let seen = b.election("/services/billing/leader")?.leader().await?.expect("a leader");
/// assert_eq!(seen.id, "billing-1");
/// assert_eq!(seen.term, leading.term());
/// leading.resign().await?;
/// # Ok::<(), recipes_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    ctx: Arc<Ctx>,
    path: LockPath,
    /// Candidates' nodes named as Curator's `LeaderLatch` names them (see [`Election::latch`]).
    latch: bool,
}

/// One who stands in an [`Election`]: an id (one line of at most [`Candidate::MAX_ID_LEN`] bytes) and optional data (at most
/// [`Candidate::MAX_DATA_LEN`] bytes, say the address to reach the leader at), both written into its node.
#[derive(Debug, Clone)]
pub struct Candidate {
    election: Election,
    id: String,
    data: Vec<u8>,
    /// What the node's data says of the candidate, made once.
    lines: String,
}

/// This candidate leads: a held fair lock whose fencing token is the term.
///
/// The term strictly increases from one leader to the next, so a store that keeps the highest term it has seen
/// refuses the writes of a leader that has been replaced (see [`LockGuard::fencing_token`]). Leadership is trusted
/// only while [`is_valid`](Leadership::is_valid); [`lost`](Leadership::lost) resolves when it ends. Dropping it
/// resigns in the background; [`resign`](Leadership::resign) waits until its node is deleted, which lets the next
/// candidate lead as soon as that one sees it.
///
/// A candidate whose leadership was lost does not stand again by itself: it stops acting as the leader, drops (or
/// resigns) the lost `Leadership`, whose node may still be there (a lease run out while the session lives), then calls
/// [`leadership`](Candidate::leadership) again and queues behind the others.
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    id: String,
}

impl Election {
    pub(crate) fn new(ctx: Arc<Ctx>, path: LockPath) -> Self {
        Election {
            ctx,
            path,
            latch: false,
        }
    }

    /// This election as Curator's `LeaderLatch` holds it: its candidates' nodes `_c_<uuid>-latch-<seq>`. Without it,
    /// an election in the Curator layout is Curator's `LeaderSelector`'s (`_c_<uuid>-lock-<seq>`, its
    /// `InterProcessMutex`).
    ///
    /// ```
    /// use recipes_core::{Layout, Locks};
    /// let cluster = recipes_mem::MemCluster::new();
    /// let curator = Locks::builder(cluster.client()).layout(Layout::Curator).build();
    /// assert!(curator.election("/services/leader")?.latch().is_ok());
    /// assert!(Locks::new(cluster.client()).election("/services/leader")?.latch().is_err());
    /// # Ok::<(), recipes_core::Error>(())
    /// ```
    ///
    /// # Notable errors
    /// [`Error::InvalidArgument`] in a layout other than Curator's.
    pub fn latch(self) -> Result<Self> {
        if self.ctx.layout != crate::layout::Layout::Curator {
            return Err(Error::InvalidArgument(format!(
                "LeaderLatch's nodes are Curator's: an election in the {} layout has no latch",
                self.ctx.layout
            )));
        }
        Ok(Election { latch: true, ..self })
    }

    /// The election's path.
    pub fn path(&self) -> &LockPath {
        &self.path
    }

    /// A candidate with this id and no data.
    ///
    /// # Notable errors
    /// [`Error::InvalidArgument`] when the id is empty, longer than [`Candidate::MAX_ID_LEN`] bytes, or not one line.
    pub fn candidate(&self, id: impl Into<String>) -> Result<Candidate> {
        let id = id.into();
        if id.is_empty() || id.len() > Candidate::MAX_ID_LEN || id.contains(['\n', '\r']) {
            return Err(Error::InvalidArgument(format!(
                "a candidate id is one line of 1 to {} bytes: {id:?}",
                Candidate::MAX_ID_LEN
            )));
        }
        Ok(Candidate {
            election: self.clone(),
            lines: candidate_lines(&id, &[]),
            id,
            data: Vec::new(),
        })
    }
}

impl Candidate {
    /// The longest candidate id, in bytes.
    pub const MAX_ID_LEN: usize = 256;

    /// The most data a candidate may carry, in bytes.
    pub const MAX_DATA_LEN: usize = 1024;

    /// This candidate with `data` (at most [`Candidate::MAX_DATA_LEN`] bytes), written into its node beside its id.
    ///
    /// # Notable errors
    /// [`Error::InvalidArgument`] when the data is longer than [`Candidate::MAX_DATA_LEN`] bytes.
    pub fn with_data(self, data: impl Into<Vec<u8>>) -> Result<Self> {
        let data = data.into();
        if data.len() > Candidate::MAX_DATA_LEN {
            return Err(Error::InvalidArgument(format!(
                "a candidate's data is at most {} bytes, not {}",
                Candidate::MAX_DATA_LEN,
                data.len()
            )));
        }
        Ok(Candidate {
            lines: candidate_lines(&self.id, &data),
            data,
            ..self
        })
    }

    /// The candidate's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The candidate's data.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    fn stand(&self, p: Patience) -> impl Future<Output = Result<Option<Leadership>>> + Send + '_ {
        let e = &self.election;
        futures::FutureExt::map(driver::stand(&e.ctx, &e.path, p, &self.lines, e.latch), |held| {
            Ok(held?.map(|h| Leadership {
                guard: LockGuard::plain(h),
                id: self.id.clone(),
            }))
        })
    }

    /// Stands in line until this candidate leads.
    ///
    /// # Notable errors
    /// As [`FairLock::acquire`](crate::FairLock::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves no node behind.
    pub fn leadership(&self) -> impl Future<Output = Result<Leadership>> + Send + '_ {
        forever(self.stand(Patience::Forever))
    }

    /// Leads if nobody does now; never queues. `None`: another candidate leads or stands ahead.
    ///
    /// # Cancel safety
    /// As [`leadership`](Candidate::leadership).
    pub fn try_leadership(&self) -> impl Future<Output = Result<Option<Leadership>>> + Send + '_ {
        self.stand(Patience::TryOnce)
    }

    /// Stands at most `timeout`. `None`: the time ran out, and the candidate's node is gone.
    ///
    /// # Cancel safety
    /// As [`leadership`](Candidate::leadership).
    pub async fn leadership_timeout(&self, timeout: Duration) -> Result<Option<Leadership>> {
        self.stand(Patience::from_timeout(timeout)).await
    }
}

impl Leadership {
    /// The term: strictly greater than every earlier leader's (the fencing token of the leader's node).
    pub fn term(&self) -> u128 {
        self.guard.fencing_token()
    }

    /// The candidate's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether leadership can still be trusted: the lease of its session has not run out
    /// ([`LockGuard::is_valid`]).
    pub fn is_valid(&self) -> bool {
        self.guard.is_valid()
    }

    /// Until when leadership can be trusted, if it can now ([`LockGuard::valid_until`]).
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// Resolves when leadership is lost (session expired, node deleted, lease run out), with the reason.
    pub async fn lost(&self) -> LostReason {
        self.guard.lost().await
    }

    /// The held lock under the leadership, for guarded operations ([`LockGuard::guarded`]) and its node.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The held lock under the leadership, as a guard of its own: for code that takes a [`LockGuard`] (the
    /// leadership ends with it).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// Steps down: deletes the node, and the next candidate in line leads as soon as it sees the deletion.
    ///
    /// # Notable errors
    /// As [`LockGuard::release`]: an error when leadership had already been lost.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }
}
