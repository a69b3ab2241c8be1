//! Making our node: the create every recipe sends (pipelined with a listing; the exclusive recipe's fixed node and a
//! peer semaphore's lease too), and for a queued node what its failures mean (a missing parent, a lost reply, another
//! task's session-named key) and finding it after a lost reply by its attempt id.

use std::sync::Arc;

use tracing::debug;
use uuid::Uuid;

use super::attempt::{Attempt, Step, Stop};
use super::cleanup::Pending;
use super::delete::{is_ours, Identity};
use super::queue::Queued;
use crate::backend::{BackendExt, CreateAndList, CreateMode, SessionId};
use crate::error::Error;
use crate::info::NodeInfo;
use crate::metrics::Count;
use crate::mutants::{is_active, Mutant};

/// What a create of our queued node made: our node (its path, creation id, and the children listed after it when
/// known), nothing yet (create again), or nothing, and a try gives up.
enum Made {
    Ours((String, i64, Option<Vec<String>>)),
    Again,
    GaveUp,
}

/// Our node, from a create's reply (and the listing behind it), or the create's error. Takes the replies whole: they
/// end here.
fn made_queued(made: CreateAndList) -> std::result::Result<(String, i64, Option<Vec<String>>), Error> {
    let CreateAndList { created, listed } = made;
    created.map(|c| (c.path, c.czxid, listed.ok()))
}

impl Attempt<'_> {
    /// Sends the create of our node (a fresh attempt id, in the node's data, and in its name when the protocol's
    /// prefix takes it) with a list of the lock path behind it, in one round trip; the cleanup knows the create is
    /// in flight before it is sent.
    pub async fn create_and_list(&mut self, sid: SessionId) -> Step<(Identity, CreateAndList)> {
        let attempt = crate::sim::attempt_id();
        let fixed = self.protocol.fixed_name();
        let id = Identity {
            fixed: self.protocol.name_is_shared(),
            attempt,
            session: sid,
            czxid: None,
            marks: None,
        };
        let (node, mode) = match fixed {
            Some(name) => (self.path.child(name), CreateMode::Ephemeral),
            None => (
                self.path.child(&self.protocol.prefix(attempt, sid)),
                CreateMode::EphemeralSequential,
            ),
        };
        let data = NodeInfo::encode_own(attempt, self.data_recipe(), self.candidate(), false);
        self.cleanup.state = Pending::Sent(attempt, sid);
        let on = self.backend().on(sid);
        let outcome = self
            .call(async { Ok(on.create_and_list(&node, &data, mode).await) })
            .await?;
        Ok((id, outcome))
    }

    /// Creates our sequential node (protected: recognised by its attempt id after a lost reply); `None` when a try
    /// gives up without one.
    pub(super) async fn create_queued(&mut self) -> Step<Option<Queued>> {
        loop {
            let sid = self.connected().await?;
            let (id, made) = self.create_and_list(sid).await?;
            let made = match made_queued(made) {
                Ok(ours) => Made::Ours(ours),
                // Rare: boxed, its state not in every acquire's future, and the error moved whole into it (taken apart
                // here, the replies would stay in this future's state through the waits).
                Err(e) => Box::pin(self.queued_not_made(e, id, sid)).await?,
            };
            let (node, czxid, children) = match made {
                Made::Ours(ours) => ours,
                Made::Again => continue,
                Made::GaveUp => return Ok(None),
            };
            self.count(Count::Create);
            // One copy of the path, shared by the cleanup, the wait and the hold.
            let node: Arc<str> = node.into();
            self.cleanup.state = Pending::Created(node.clone(), id.attempt, sid, czxid);
            // The backend's contract (`Created::path`): the node is under the lock path, by a name without a `/`.
            // The wait in line watches it by this path (found by review, helper-95: a backend that answered with
            // another would have been broken before, but now the wait relies on it too).
            debug_assert!(
                node.rsplit_once('/')
                    .is_some_and(|(parent, _)| parent == self.path.as_str()),
                "{node} is not a node of {}",
                self.path
            );
            return Ok(Some(Queued {
                node,
                czxid,
                id,
                children,
            }));
        }
    }

    /// A create of our queued node that failed with `e` (its reply lost, its parent gone, a session-named key of
    /// another task of the session there).
    async fn queued_not_made(&mut self, e: Error, id: Identity, sid: SessionId) -> Step<Made> {
        match e {
            Error::NoNode(_) => {
                self.cleanup.disarm();
                self.parent_missing()?;
                self.ensure_parents(sid).await?;
                Ok(Made::Again)
            }
            Error::ConnectionLoss => {
                self.failed()?;
                Ok(self.recover_queued(id).await?.map_or(Made::Again, Made::Ours))
            }
            // A session-named node (etcd's own lock) of another task of this session: wait for it to go, then queue
            // (the create was refused: nothing of ours was made). A try does not wait (found by review: it waited for
            // its bound, then failed).
            Error::NodeExists(node) if self.protocol.session_named() => {
                self.cleanup.disarm();
                if self.try_once {
                    return Ok(Made::GaveUp);
                }
                self.wait_any_deleted(&[node], sid, None).await?;
                Ok(Made::Again)
            }
            e => Err(e.into()),
        }
    }

    /// After a lost create reply: our node, when the create made one (found by its attempt id and owner).
    pub async fn recover_queued(&mut self, id: Identity) -> Step<Option<(String, i64, Option<Vec<String>>)>> {
        if self.connected().await? != id.session {
            // The session is over: whatever the create made went with it.
            self.cleanup.disarm();
            return Ok(None);
        }
        match self.find_ours(id.attempt, id.session).await {
            Ok(Some((node, czxid))) => {
                self.count(Count::CreateRecovery);
                debug!(%node, "create reply was lost; found our node by its attempt id");
                Ok(Some((node, czxid, None)))
            }
            Ok(None) => {
                self.cleanup.disarm();
                Ok(None)
            }
            Err(Stop::Fail(Error::ConnectionLoss)) => {
                self.clean_up_now().await;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Finds the node our create made, by attempt id and ephemeral owner (a queued node, or a kazoo lease).
    async fn find_ours(&self, attempt: Uuid, sid: SessionId) -> Step<Option<(String, i64)>> {
        let on = self.backend().on(sid);
        // After a reconnection to another server, a list may not show our create yet: catch up with the leader.
        let listed = async {
            if !is_active(Mutant::NoSyncAfterLostReply) {
                on.sync(self.path.as_str()).await?;
            }
            on.children(self.path.as_str()).await
        };
        let children = match self.call(listed).await {
            Ok(c) => c,
            Err(Stop::Fail(Error::NoNode(_))) => return Ok(None),
            Err(e) => return Err(e),
        };
        if self.protocol.session_named() {
            // Named by the session: ours only when its data carries our attempt (another task of the session may
            // hold a node of the name).
            let name = self.protocol.prefix(attempt, sid);
            if !children.contains(&name) {
                return Ok(None);
            }
            let node = self.path.child(&name);
            return Ok(match self.call(on.get(&node)).await? {
                Some((data, stat)) if is_ours(&data, stat.ephemeral_owner, attempt, sid) => Some((node, stat.czxid)),
                _ => None,
            });
        }
        for name in children {
            if self.protocol.made_by(&name, attempt) {
                let node = self.path.child(&name);
                if let Some((_, stat)) = self.call(on.get(&node)).await? {
                    if stat.ephemeral_owner == sid {
                        return Ok(Some((node, stat.czxid)));
                    }
                }
            }
        }
        Ok(None)
    }
}
