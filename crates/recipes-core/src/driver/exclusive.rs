//! The exclusive recipe's node: one fixed ephemeral `P/lock`, made or waited for.

use uuid::Uuid;

use super::attempt::{Attempt, Step, Stop};
use super::cleanup::{is_ours, Pending};
use super::HeldNode;
use crate::backend::{BackendExt, CreateAndList, SessionId};
use crate::error::Error;
use crate::layout::EXCLUSIVE_NODE;
use crate::metrics::Count;
use crate::protocol::Verdict;

impl Attempt<'_> {
    /// The exclusive recipe: create `P/lock` (and list `P` in the same round trip, to refuse beside the nodes of
    /// other recipes); when it exists, wait for its deletion and try again.
    pub async fn exclusive(&mut self) -> Step<Option<HeldNode>> {
        let node = self.path.child(EXCLUSIVE_NODE);
        loop {
            let sid = self.connected().await?;
            let (id, CreateAndList { created, listed }) = self.create_and_list(sid).await?;
            let attempt = id.attempt;
            let (czxid, listed) = match created {
                Ok(c) => {
                    self.count(Count::Create);
                    self.cleanup.state = Pending::Created(node.clone(), attempt, sid, c.czxid);
                    (c.czxid, listed.ok())
                }
                Err(Error::NodeExists(_)) => {
                    self.cleanup.disarm();
                    if let Ok(c) = listed {
                        let c = self.screen(self.path.as_str(), c, sid).await?;
                        if let Verdict::Refuse(r) = self.protocol.judge(&c, EXCLUSIVE_NODE) {
                            return self.refuse(r).await;
                        }
                    }
                    if self.try_once {
                        return Ok(None);
                    }
                    self.wait_deleted(&node, sid).await?;
                    continue;
                }
                Err(Error::NoNode(_)) => {
                    self.cleanup.disarm();
                    self.failed()?;
                    self.ensure_parents(sid).await?;
                    continue;
                }
                Err(Error::ConnectionLoss) => {
                    self.failed()?;
                    match self.recover_exclusive(&node, attempt, sid).await? {
                        Some(czxid) => (czxid, None),
                        None => {
                            // Not known to be ours: delete whatever this attempt may have made, then try again.
                            self.clean_up_now().await;
                            continue;
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            };
            // We made `P/lock`; it holds unless a lock node of another recipe is on the path.
            let children = match listed {
                Some(c) => c,
                None => self.list(sid).await?,
            };
            let children = self.screen(self.path.as_str(), children, sid).await?;
            if let Verdict::Refuse(r) = self.protocol.judge(&children, EXCLUSIVE_NODE) {
                return self.refuse(r).await;
            }
            return Ok(Some(self.held(node, czxid, id)));
        }
    }

    /// After a lost create reply: whether `P/lock` is the node of this attempt, made by session `sid`.
    async fn recover_exclusive(&mut self, node: &str, attempt: Uuid, sid: SessionId) -> Step<Option<i64>> {
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
                self.cleanup.state = Pending::Created(node.to_owned(), attempt, sid, stat.czxid);
                Ok(Some(stat.czxid))
            }
            _ => Ok(None),
        }
    }
}
