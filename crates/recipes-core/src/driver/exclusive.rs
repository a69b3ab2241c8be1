//! The exclusive recipe's node: one fixed ephemeral `P/lock`, made or waited for.

use std::sync::Arc;

use uuid::Uuid;

use super::attempt::{Attempt, Step, Stop};
use super::cleanup::Pending;
use super::delete::is_ours;
use super::HeldNode;
use crate::backend::{BackendExt, ChildOrder, CreateAndList, SessionId};
use crate::error::Error;
use crate::layout::EXCLUSIVE_NODE;
use crate::metrics::Count;
use crate::protocol::Verdict;

impl Attempt<'_> {
    /// The exclusive recipe: create `P/lock` (and list `P` in the same round trip, to refuse beside the nodes of
    /// other recipes); when it exists, wait for its deletion and try again.
    pub async fn exclusive(&mut self) -> Step<Option<HeldNode>> {
        let node: Arc<str> = self.path.child(EXCLUSIVE_NODE).into();
        loop {
            // Each try's replies end in `try_exclusive`: the wait keeps only the node's path and the session.
            let sid = match self.try_exclusive(&node).await? {
                Tried::Held(held) => return Ok(Some(held)),
                Tried::Again => continue,
                Tried::Taken(sid) => sid,
            };
            if self.try_once {
                return Ok(None);
            }
            self.wait_deleted(&node, sid).await?;
        }
    }

    /// One create of `P/lock`: held, taken by another holder (on session `sid`: wait for its deletion), or to be
    /// made again (a vanished parent, a lost reply whose create is not known to be ours).
    async fn try_exclusive(&mut self, node: &Arc<str>) -> Step<Tried> {
        let sid = self.connected().await?;
        let (id, CreateAndList { created, listed }) = self.create_and_list(sid).await?;
        let listed = listed.ok();
        // Consumed whole: a reply kept in scope would stay in this future's state through the waits.
        let (czxid, listed) = match created.map(|c| c.czxid) {
            Ok(czxid) => {
                self.count(Count::Create);
                self.cleanup.state = Pending::Created(node.clone(), id.attempt, sid, czxid);
                (czxid, listed)
            }
            // Boxed: the error and its ways on are not kept in every acquire's state.
            Err(e) => match Box::pin(self.exclusive_not_made(e, listed, node, id.attempt, sid)).await? {
                Ok(czxid) => (czxid, None),
                Err(tried) => return Ok(tried),
            },
        };
        // We made `P/lock`; it holds unless a lock node of another recipe is on the path.
        let children = match listed {
            Some(c) => c,
            None => self.list(sid).await?,
        };
        let children = self.screen(self.path.as_str(), children, sid).await?;
        if let Verdict::Refuse(r) = self.protocol.judge(&children, EXCLUSIVE_NODE) {
            // Boxed: a refusal is rare, and its state would set the size of every acquire's future (a fair lock's too).
            return Box::pin(self.refuse(r)).await;
        }
        Ok(Tried::Held(self.held(node.clone(), czxid, id)))
    }

    /// A create of `P/lock` that failed with `e`: another holder's node is there (refused beside another recipe's
    /// nodes in `listed`), its parent is gone, or its reply was lost (`Ok`: the creation id of the node it made
    /// after all).
    async fn exclusive_not_made(
        &mut self,
        e: Error,
        listed: Option<Vec<String>>,
        node: &Arc<str>,
        attempt: Uuid,
        sid: SessionId,
    ) -> Step<std::result::Result<i64, Tried>> {
        match e {
            Error::NodeExists(_) => {
                self.cleanup.disarm();
                if let Some(c) = listed {
                    let c = self.screen(self.path.as_str(), c, sid).await?;
                    if let Verdict::Refuse(r) = self.protocol.judge(&c, EXCLUSIVE_NODE) {
                        return self.refuse(r).await;
                    }
                }
                self.nested_at_the_node(node, sid).await?;
                self.passed_on();
                Ok(Err(Tried::Taken(sid)))
            }
            Error::NoNode(_) => {
                self.cleanup.disarm();
                self.parent_missing()?;
                self.ensure_parents(sid).await?;
                Ok(Err(Tried::Again))
            }
            Error::ConnectionLoss => {
                self.failed()?;
                match self.recover_exclusive(node, attempt, sid).await? {
                    Some(czxid) => Ok(Ok(czxid)),
                    None => {
                        // Not known to be ours: delete whatever this attempt may have made, then try again.
                        self.clean_up_now().await;
                        Ok(Err(Tried::Again))
                    }
                }
            }
            e => Err(e.into()),
        }
    }

    /// Whether `P/lock`, found there by our create, is no lock node but a persistent node (a lock path nested under that name): on ZooKeeper a container,
    /// which the server reaps once it is empty, so the wait goes on; on a backend without containers (etcd, ordered by
    /// creation), nothing ever deletes it, and the wait would never end: refused (found by review: a drained
    /// semaphore nested at `P/lock` left its count there, and the exclusive lock at `P` waited forever).
    async fn nested_at_the_node(&self, node: &str, sid: SessionId) -> Step<()> {
        if self.backend().child_order() == ChildOrder::Sequence {
            return Ok(());
        }
        match self.call(self.backend().on(sid).get(node)).await {
            Ok(Some((_, stat))) if stat.ephemeral_owner == 0 => {}
            // Ephemeral (another holder: wait for it), gone (try again), or not known now (the wait finds out).
            Ok(_) | Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(()),
            Err(e) => return Err(e),
        }
        Err(Stop::Fail(Error::ForeignLock {
            path: self.path.to_string(),
            node: EXCLUSIVE_NODE.to_owned(),
            found: "a persistent key of the exclusive node's name (a lock path nested there, such as a semaphore's \
                    count), which no container reaper deletes on this backend"
                .to_owned(),
            ours: self.protocol.family().describe().to_owned(),
        }))
    }

    /// After a lost create reply: whether `P/lock` is the node of this attempt, made by session `sid`.
    async fn recover_exclusive(&mut self, node: &Arc<str>, attempt: Uuid, sid: SessionId) -> Step<Option<i64>> {
        if self.connected().await? != sid {
            // The session is over: whatever the create made went with it.
            self.cleanup.disarm();
            return Ok(None);
        }
        // After a reconnection to another server, a read may not show our create yet: catch up with the leader.
        let on = self.backend().on(sid);
        let found = match self
            .call(async {
                on.sync(node).await?;
                on.get(node).await
            })
            .await
        {
            Ok(found) => found,
            Err(Stop::Fail(Error::ConnectionLoss)) => None,
            Err(e) => return Err(e),
        };
        match found {
            Some((data, stat)) if is_ours(&data, stat.ephemeral_owner, attempt, sid) => {
                self.count(Count::Create);
                self.count(Count::CreateRecovery);
                self.cleanup.state = Pending::Created(node.clone(), attempt, sid, stat.czxid);
                Ok(Some(stat.czxid))
            }
            _ => Ok(None),
        }
    }
}

/// How one create of the exclusive node ended (see `try_exclusive`). Returned once and matched at once: the held
/// node is not boxed.
#[allow(clippy::large_enum_variant)]
enum Tried {
    Held(HeldNode),
    /// Another holder's node is there, seen on this session.
    Taken(SessionId),
    Again,
}
