//! Observing an election without standing in it: who leads now, every candidate in order, and a stream of changes.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::Stream;

use super::{Election, DATA_READ};
use crate::backend::{BackendExt, ChildOrder};
use crate::driver::Ctx;
use crate::error::{Error, Result};
use crate::info::NodeInfo;
use crate::mutants::{is_active, Mutant};
use crate::participants::{is_lock_node, may_be_nested};
use crate::path::LockPath;

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
    /// The term: the fencing token of its node ([`Leadership::term`](super::Leadership::term) of its holder).
    pub term: u128,
    /// The node's name under the election's path.
    pub node: String,
}

impl Election {
    /// How often [`changes`](Election::changes) reads again while nobody stands (there is no node to watch), and
    /// after an error.
    pub const POLL: Duration = Duration::from_millis(250);

    /// The longest [`changes`](Election::changes) trusts its watch of the leader's node before it reads again.
    pub const RECHECK: Duration = Duration::from_secs(2);

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
        let order = self.ctx.backend.child_order();
        if children.iter().any(|c| may_be_nested(c, own, order)) {
            let mut kept = Vec::with_capacity(children.len());
            for c in children {
                if !may_be_nested(&c, own, order) || is_lock_node(&on, path, &c).await? {
                    kept.push(c);
                }
            }
            children = kept;
        }
        if let Some((node, family)) = crate::protocol::foreign_in(own, order, &children) {
            return Err(Error::ForeignLock {
                path: path.to_owned(),
                node,
                found: family.describe().to_owned(),
                ours: own.describe().to_owned(),
            });
        }
        let queue = crate::protocol::contenders_in(self.ctx.layout, self.ctx.backend.child_order(), &children);
        let wrapped =
            crate::protocol::wrapped(self.ctx.layout, &queue).filter(|_| !is_active(Mutant::ObserverIgnoresWrap));
        if let Some(w) = wrapped {
            return Err(Error::SequenceWrapped {
                path: path.to_owned(),
                node: w.name.clone(),
                layout: self.ctx.layout,
            });
        }
        // Where names are made again (etcd's layout: one per session), a node read after the listing may be a new one
        // of a listed name, whose place is at the back: every node is read, and they are put in the order of their
        // creation (found by review: a leader that resigned and stood again between the list and the read was named
        // the leader, ahead of the one leading). Elsewhere a name is never made twice.
        let names_reused = order == ChildOrder::Creation;
        let mut out = Vec::new();
        for c in queue {
            // A node may go between the list and the read: it stands no more.
            let Some((data, stat)) = on.get(&self.path.child(&c.name)).await? else {
                continue;
            };
            // A persistent node with a lock node's name is a contender to the lock too (it waits behind it): reported
            // as the lock sees it, with the id its data gives, not passed over (found by review: the candidate
            // waiting behind it was named the leader).
            let (id, data) = candidate_of(&data);
            out.push(Leader {
                id,
                data,
                term: crate::guard::token(stat.czxid, 0),
                node: c.name,
            });
            if first_only && !names_reused {
                break;
            }
        }
        if names_reused {
            out.sort_by_key(|l| l.term);
            if first_only {
                out.truncate(1);
            }
        }
        Ok(out)
    }

    /// The leader each time it changes: first the leader now (or `None` when nobody stands), then the next one
    /// each time another candidate leads or nobody does. Each item is a read as [`leader`](Election::leader) makes
    /// it, made again when the watch of the leader's node fires (it resigned, its session ended, its data changed),
    /// every [`POLL`](Election::POLL) while nobody stands (there is no node to watch), and at least every
    /// [`RECHECK`](Election::RECHECK) while someone leads. So a leader that came and went between two reads is not
    /// reported, the first leader after nobody stood is seen within a poll, and each read costs a `sync`, a list and
    /// a read on the server.
    ///
    /// The terms of the items never go back while only candidates stand on the path; a node no candidate made,
    /// named like a queue node ahead of the leader (an operator's), is reported as it stands (with an empty id and
    /// its own creation as its term), and the leader behind it again once it goes. A leader asked to let go
    /// ([`Locks::revoke`](crate::Locks::revoke)) keeps the id and data it was reported with.
    ///
    /// A failed read is an item too (the leader may have changed unseen; [`Error::ConnectionLoss`] while the
    /// connection is down), after which the stream reads again every [`POLL`](Election::POLL), and may report the
    /// same leader again. The stream ends after [`Error::Closed`], and when the [`Locks`](crate::Locks) it was made
    /// from is dropped with every election, candidate and guard made from it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use futures::StreamExt;
    /// use recipes_core::Locks;
    /// let cluster = recipes_mem::MemCluster::new();
    /// let (a, observer) = (Locks::new(cluster.client()), Locks::new(cluster.client()));
    /// let mut changes = Box::pin(observer.election("/jobs/leader")?.changes());
    /// assert_eq!(changes.next().await.unwrap()?, None);
    /// let leading = a.election("/jobs/leader")?.candidate("worker-1")?.leadership().await?;
    /// let seen = changes.next().await.unwrap()?.expect("a leader");
    /// assert_eq!((seen.id.as_str(), seen.term), ("worker-1", leading.term()));
    /// leading.resign().await?;
    /// assert_eq!(changes.next().await.unwrap()?, None);
    /// # Ok::<(), recipes_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn changes(&self) -> impl Stream<Item = Result<Option<Leader>>> + Send + 'static + use<> {
        /// The stream's state: the election (its context held weakly: the stream keeps no session alive), what it
        /// reported last, and whether it waits before its next read.
        struct Watching {
            ctx: Weak<Ctx>,
            path: LockPath,
            latch: bool,
            last: Option<Option<Leader>>,
            pause: bool,
            done: bool,
        }
        let start = Watching {
            ctx: Arc::downgrade(&self.ctx),
            path: self.path.clone(),
            latch: self.latch,
            last: None,
            pause: false,
            done: false,
        };
        futures::stream::unfold(start, |mut w| async move {
            if w.done {
                return None;
            }
            if std::mem::take(&mut w.pause) {
                tokio::time::sleep(Election::POLL).await;
            }
            loop {
                let election = Election {
                    ctx: w.ctx.upgrade()?,
                    path: w.path.clone(),
                    latch: w.latch,
                };
                let mut now = match election.leader().await {
                    Ok(now) => now,
                    Err(e) => {
                        w.done = matches!(e, Error::Closed);
                        w.pause = true;
                        w.last = None;
                        return Some((Err(e), w));
                    }
                };
                if let (Some(n), Some(Some(l))) = (&mut now, &w.last) {
                    // A revoked leader's node no longer says who it is: it is still the one reported.
                    if n.node == l.node && n.term == l.term && n.id.is_empty() && n.data.is_empty() {
                        n.id.clone_from(&l.id);
                        n.data.clone_from(&l.data);
                    }
                }
                if w.last.as_ref() != Some(&now) {
                    w.last = Some(now.clone());
                    return Some((Ok(now), w));
                }
                election.until_changed(now.as_ref()).await;
            }
        })
    }

    /// Waits until `leader`'s node changes or goes (a watch, at most [`RECHECK`](Election::RECHECK)), or for
    /// [`POLL`](Election::POLL) when nobody leads or the watch cannot be set. A node whose data already differs
    /// from what was read when the watch is set (it changed in between) ends the wait at once.
    async fn until_changed(&self, leader: Option<&Leader>) {
        if let Some(l) = leader {
            let on = self.ctx.backend.current();
            match on.get_and_watch(&self.path.child(&l.node)).await {
                Ok(Some((data, watch))) => {
                    let (id, data) = candidate_of(&data);
                    // A revoked node says nobody (the stream reports it as it was reported before it was revoked).
                    let revoked = id.is_empty() && data.is_empty();
                    // Where names are made again, the same lines may be a new node of the name (the candidate
                    // stood again): its creation says (found by review: the next leader was reported 2 s late).
                    if self.ctx.backend.child_order() == ChildOrder::Creation {
                        match on.get(&self.path.child(&l.node)).await {
                            Ok(Some((_, stat))) if crate::guard::token(stat.czxid, 0) == l.term => {}
                            _ => return,
                        }
                    }
                    if revoked || (id == l.id && data == l.data) {
                        let _ = tokio::time::timeout(Election::RECHECK, watch).await;
                    }
                    return;
                }
                Ok(None) => return,
                Err(_) => {}
            }
        }
        tokio::time::sleep(Election::POLL).await;
    }
}

/// The candidate's id and data that a node's data gives: this library's node data says them; a peer's node (Curator's
/// `LeaderSelector` and `LeaderLatch`, kazoo's `Election`) carries its participant id as its whole data.
fn candidate_of(data: &[u8]) -> (String, Vec<u8>) {
    let data = &data[..data.len().min(DATA_READ)];
    match NodeInfo::decode(data) {
        Some(info) => (info.candidate.unwrap_or_default(), info.candidate_data),
        // A leader asked to let go (`Locks::revoke`): its data no longer says who it is.
        None if data == crate::REVOKE_MESSAGE => (String::new(), Vec::new()),
        None => (String::from_utf8_lossy(data).into_owned(), Vec::new()),
    }
}
