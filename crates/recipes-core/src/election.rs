//! Leader election on a fair lock's queue: candidates stand in line with their id in their node, the first one
//! leads, and its fencing token is the term.
//!
//! An election is the fair lock's protocol (the same nodes, the same waiting, the same lease, `lost()` and fencing),
//! with the candidate's id and data written into its node so that anyone may read who leads. In the Curator layout its
//! queue is that of Curator's `LeaderSelector` (which stands in line with an `InterProcessMutex`), and in the kazoo
//! layout that of kazoo's `Election` (a kazoo `Lock`): their candidates and ours share one election, and
//! [`Election::leader`] reads their ids; they read our nodes' whole data as the id (this library's node data, several
//! lines), so only our side names the other's leader.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::BackendExt;
use crate::driver::{self, Ctx};
use crate::error::{Error, LostReason, Result};
use crate::guard::LockGuard;
use crate::info::{candidate_lines, NodeInfo};
use crate::mutants::{is_active, Mutant};
use crate::participants::{is_lock_node, may_be_nested};
use crate::path::LockPath;
use crate::patience::{forever, Patience};

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

/// Who leads (or stands) in an election, as an observer reads it from the store.
///
/// Ids are the candidates' own and nothing keeps two candidates from giving the same one: to tell one leadership from
/// another, compare `term` (or `node`), not `id`. A node that no candidate made (a fair lock's on the election's path,
/// or a persistent node named like one, which the candidates wait behind too) has an empty id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The candidate's id. A node made by a peer library (Curator's `LeaderSelector`, kazoo's `Election`) carries its
    /// participant id as its whole data: that, read as UTF-8.
    pub id: String,
    /// The candidate's data (empty when it has none, and for a peer's node).
    pub data: Vec<u8>,
    /// The term: the fencing token of its node ([`Leadership::term`] of its holder).
    pub term: u128,
    /// The node's name under the election's path.
    pub node: String,
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

    /// The candidate that leads now, or `None` when nobody stands. Read from the store (a `sync`, so that the server
    /// answering has caught up with the leader of the ensemble, one list, and one read per node until the leader's
    /// is found), so it may be a moment behind: a leader that has just resigned may still be reported, never one
    /// whose node the server had deleted before the `sync`.
    ///
    /// # Notable errors
    /// [`Error::SequenceWrapped`] in the Curator and kazoo layouts when a node's sequence has wrapped: those layouts
    /// order such nodes wrongly (as their peers do), so no leader can be named (the lock refuses to hold so too).
    /// [`Error::ForeignLock`] when the path holds lock nodes of another family (another layout's, another recipe's,
    /// or Curator's `LeaderLatch` beside its `LeaderSelector`): read with the layout (and [`latch`](Election::latch))
    /// the candidates stand with.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.read(true).await?.into_iter().next())
    }

    /// Every candidate standing, the leader first, then in the order they will lead.
    ///
    /// # Notable errors
    /// As [`leader`](Election::leader).
    pub async fn candidates(&self) -> Result<Vec<Leader>> {
        self.read(false).await
    }

    /// The candidates in queue order; only the first when `first_only`.
    async fn read(&self, first_only: bool) -> Result<Vec<Leader>> {
        let on = self.ctx.backend.current();
        let path = self.path.as_str();
        let listed = match on.sync(path).await {
            Ok(()) => on.children(path).await,
            Err(e) => Err(e),
        };
        let mut children = match listed {
            Ok(c) => c,
            Err(Error::NoNode(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        // The family this election's candidates are of: another's nodes on the path are no candidates of it, and its
        // candidates refuse to stand beside them, so no leader can be named (`zklock leader` in the wrong layout).
        let own = if self.latch {
            crate::layout::Family::CuratorLatch
        } else {
            self.ctx.layout.queue_family()
        };
        // A lock path nested here under a lock node's name is no lock node: the candidates stand beside it, as the
        // driver screens it (found by review: the observer refused such a path).
        if children.iter().any(|c| may_be_nested(c, own)) {
            let mut kept = Vec::with_capacity(children.len());
            for c in children {
                if !may_be_nested(&c, own) || is_lock_node(&on, path, &c).await? {
                    kept.push(c);
                }
            }
            children = kept;
        }
        if let Some((node, family)) = crate::protocol::foreign(own, &children) {
            return Err(Error::ForeignLock {
                path: path.to_owned(),
                node,
                found: family.describe().to_owned(),
                ours: own.describe().to_owned(),
            });
        }
        let queue = crate::protocol::contenders(self.ctx.layout, &children);
        let wrapped =
            crate::protocol::wrapped(self.ctx.layout, &queue).filter(|_| !is_active(Mutant::ObserverIgnoresWrap));
        if let Some(w) = wrapped {
            return Err(Error::SequenceWrapped {
                path: path.to_owned(),
                node: w.name.clone(),
                layout: self.ctx.layout,
            });
        }
        let mut out = Vec::new();
        for c in queue {
            // A node may go between the list and the read: it stands no more.
            let Some((mut data, stat)) = on.get(&self.path.child(&c.name)).await? else {
                continue;
            };
            // A persistent node with a lock node's name is a contender to the lock too (it waits behind it): reported
            // as the lock sees it, with the id its data gives, not passed over (found by review: the candidate
            // waiting behind it was named the leader).
            data.truncate(DATA_READ);
            let (id, data) = match NodeInfo::decode(&data) {
                Some(info) => (info.candidate.unwrap_or_default(), info.candidate_data),
                // A leader asked to let go (`Locks::revoke`): its data no longer says who it is.
                None if data == crate::REVOKE_MESSAGE => (String::new(), Vec::new()),
                None => (String::from_utf8_lossy(&data).into_owned(), Vec::new()),
            };
            out.push(Leader {
                id,
                data,
                term: crate::guard::token(stat.czxid, 0),
                node: c.name,
            });
            if first_only {
                break;
            }
        }
        Ok(out)
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
