//! Deleting our node: at release (marked `first` in the same transaction where the release marks, handing the lock to
//! a task of this process where one waits on it), and the node of an acquire that did not complete.
//!
//! Every delete runs on the session that made the node, or not at all: a request of a session that is over fails,
//! and never runs on the session the backend opened after it.

use tokio::sync::oneshot;
use tracing::debug;
use uuid::Uuid;

use super::session::{self, reports_end, Tries};
use super::Ctx;
use crate::backend::{BackendExt, SessionId, SessionState};
use crate::error::{Error, Result};
use crate::info::NodeInfo;
use crate::mutants::{is_active, Mutant};
use crate::recipe::Recipe;

/// Whose node a delete may remove.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity {
    /// A fixed-name node (exclusive) must be checked to be ours before deleting: after a loss, it may be another
    /// holder's node of the same name.
    pub fixed: bool,
    pub attempt: Uuid,
    /// The node's creation id, when known (a held node): a fixed-name node is ours when it has it, whatever its data
    /// (another client may write its data: a revocation request).
    pub czxid: Option<i64>,
    /// The session that made the node: every request of the delete runs on it, or not at all.
    pub session: SessionId,
    /// The recipe of a held queue node whose delete also marks it `first`, in one transaction (see `HeldNode`'s
    /// `marks_on_release`); `None` for every other delete.
    pub marks: Option<Recipe>,
}

impl Identity {
    /// Whether a node of our fixed name, with this data, owner and creation id, is ours: by its creation id when we
    /// know it, else by the attempt id in its data.
    fn owns(&self, data: &[u8], owner: SessionId, czxid: i64) -> bool {
        match self.czxid {
            Some(c) => owner == self.session && czxid == c,
            None => is_ours(data, owner, self.attempt, self.session),
        }
    }
}

/// What a delete of our node found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deleted {
    /// Our node was there, and is deleted.
    Ours,
    /// No node was there.
    Absent,
    /// A node of our fixed name was there, but another holder's: it was left alone.
    NotOurs,
}

/// Whether the node's data and stat say it is the node of this attempt, made by this session.
pub(crate) fn is_ours(data: &[u8], stat_owner: SessionId, attempt: Uuid, session: SessionId) -> bool {
    stat_owner == session && NodeInfo::decode(data).is_some_and(|i| i.attempt == attempt)
}

/// The data a release writes over its node with its delete, in one transaction: the `first` mark. A candidate's lines
/// are left out: no read ever sees this data (it is deleted in the same transaction).
fn mark_data(attempt: Uuid, recipe: Recipe) -> Vec<u8> {
    NodeInfo::encode_own(attempt, recipe.name(), "", true)
}

/// Deletes `node` on its own session. A fixed-name node is read first and deleted only if it is ours (both requests
/// on that session, so an expiry in between fails the delete instead of letting it run elsewhere).
pub(super) async fn delete_once(ctx: &Ctx, node: &str, id: Identity) -> Result<Deleted> {
    let on = ctx.backend.on(id.session);
    if let (Some(recipe), false) = (id.marks, id.fixed) {
        // The mark and the delete in one transaction: the node behind sees the change of data, then the deletion, and
        // holds (docs/algorithm.md, optimisation 3). Only over a queue's node, whose name is never another's.
        match on.set_data_and_delete(node, &mark_data(id.attempt, recipe)).await {
            None => {}
            Some(Ok(())) => return Ok(Deleted::Ours),
            Some(Err(Error::NoNode(_))) => return Ok(Deleted::Absent),
            // Lost (the retry deletes without the mark), or the session is over: as a delete's.
            Some(Err(e)) if matches!(e, Error::ConnectionLoss) || reports_end(&e) => return Err(e),
            // Refused for the mark alone (an ACL that lets us delete the node but not write it, a quota): the mark
            // is never needed, and the node must go (found by review: the release failed and left it).
            Some(Err(e)) if !is_active(Mutant::MarkRefusalKeepsNode) => {
                debug!(%node, error = %e, "the mark was refused with the release; deleting the node without it");
            }
            Some(Err(e)) => return Err(e),
        }
    }
    if id.fixed {
        // A shared name: ours only if our write made it. Where the backend can condition a delete on that, in one
        // request; else read, then delete by name (the window between the two is ZooKeeper's: docs/algorithm.md,
        // "releasing a shared name"). Found by review (helper-49): an operator's delete and a session-mate's create of
        // the name between a read and a delete let the release delete the mate's key, and another session hold.
        let checks = ctx
            .backend
            .creation_checks()
            .filter(|_| !is_active(Mutant::ReleaseByNameAlone));
        let czxid = match (id.czxid, checks) {
            (Some(c), Some(_)) => c,
            _ => match on.get(node).await? {
                None => return Ok(Deleted::Absent),
                Some((data, stat)) if !id.owns(&data, stat.ephemeral_owner, stat.czxid) => return Ok(Deleted::NotOurs),
                Some((_, stat)) => stat.czxid,
            },
        };
        if let Some(checks) = checks {
            return match checks.delete_if_created(id.session, node, czxid).await {
                Ok(true) => Ok(Deleted::Ours),
                Ok(false) => Ok(Deleted::NotOurs),
                Err(Error::NoNode(_)) => Ok(Deleted::Absent),
                Err(e) => Err(e),
            };
        }
    }
    match on.delete(node).await {
        Ok(()) => Ok(Deleted::Ours),
        Err(Error::NoNode(_)) => Ok(Deleted::Absent),
        Err(e) => Err(e),
    }
}

/// Deletes our node, retrying through connection loss (bounded: a caller waits; see [`Tries`]). After a lost reply, a
/// node that is absent (or, for the fixed name, another's) counts as ours, deleted by that reply's request.
///
/// After a lost reply the earlier delete may still land (the server it went to may have passed it on), and a server
/// reached after the reconnection may not show it yet: a `sync` first, so that the check of a fixed-name node does not
/// read our node where the next holder's already is (found by the model checker: the stale check let the retried
/// delete remove the next holder's node).
pub(crate) async fn delete_node(ctx: &Ctx, node: &str, id: Identity) -> Result<Deleted> {
    delete_node_after(ctx, node, id, false, Tries::Bounded).await
}

/// [`delete_node`], handing the lock over to `waiters` (tasks of this process waiting in line on `node`, on its
/// session) as soon as the delete is sent. With no waiters, or when the backend cannot send before returning, or the
/// session is not connected now, nothing is handed over (dropping the senders tells the waiters, which go on
/// watching). `lost_reply`: an earlier delete of the node may have been sent without its outcome known (then nothing
/// is handed over either, and the delete is one after a lost reply).
pub(crate) async fn delete_node_handing_over(
    ctx: &Ctx,
    node: &str,
    id: Identity,
    waiters: Vec<oneshot::Sender<bool>>,
    lost_reply: bool,
) -> Result<Deleted> {
    // A shared name is never handed over (its protocol does not hand over): its delete must stay the checked one of
    // `delete_node`, never `delete_sent`'s by name (review, helper-53).
    if waiters.is_empty() || id.fixed || lost_reply {
        // Told now that there is no handoff: a waiter that saw our delete first waits for this word
        // (`wait_on_blocker`).
        drop(waiters);
        return delete_node_after(ctx, node, id, lost_reply, Tries::Bounded).await;
    }
    let status = ctx.backend.session_status();
    let live = status.id == id.session && status.state == SessionState::Connected;
    let on = ctx.backend.on(id.session);
    // Whether our release marks (after a long listing, or passing a mark on): the waiter we hand over to may then pass
    // the mark on (decision 0075), and the mark goes with the delete, in one transaction sent now (decision 0080): a
    // contender further back whose scout is our node sees the mark, not a bare deletion that would send it to list
    // the whole queue. A backend that cannot send the transaction now sends the plain delete.
    let mark = id.marks.filter(|_| live && !is_active(Mutant::HandoffDeletesBare));
    let marked = mark.and_then(|recipe| on.set_data_and_delete_sent(node, &mark_data(id.attempt, recipe)));
    let with_mark = marked.is_some();
    let Some(reply) = marked.or_else(|| live.then(|| on.delete_sent(node)).flatten()) else {
        drop(waiters);
        return delete_node(ctx, node, id).await;
    };
    let marking = id.marks.is_some();
    for w in waiters {
        let _ = w.send(marking);
    }
    match reply.await {
        Ok(()) => Ok(Deleted::Ours),
        Err(Error::NoNode(_)) => Ok(Deleted::Absent),
        // The delete may still land: go on as after any lost reply (which deletes without the mark).
        Err(Error::ConnectionLoss) => delete_node_after(ctx, node, id, true, Tries::Bounded).await,
        // Refused for the mark alone (an ACL that lets us delete the node but not write it): as `delete_once`, the
        // node goes without it, at once. The holder we handed over to holds meanwhile, behind our node: nobody
        // else can hold while a node is ahead of theirs, and none of ours is the holder's any more. Deleted as after
        // a lost reply (a `sync` first, then absent means ours, and no mark): an error whose outcome is unknown may
        // hide an applied transaction (found by review, helper-92).
        Err(e) if with_mark && !reports_end(&e) => {
            debug!(%node, error = %e, "the mark was refused with the handoff's release; deleting the node without it");
            delete_node_after(ctx, node, id, true, Tries::Bounded).await
        }
        Err(e) => Err(e),
    }
}

/// [`delete_node`]; `lost_reply`: an earlier delete of it lost its reply; `tries`: how far it goes on through
/// connection losses (a delete in the background goes on while its session lives).
pub(crate) async fn delete_node_after(
    ctx: &Ctx,
    node: &str,
    id: Identity,
    lost_reply: bool,
    tries: Tries,
) -> Result<Deleted> {
    session::through_losses(ctx, id.session, node, lost_reply, tries, |lost_reply| async move {
        if lost_reply && !is_active(Mutant::NoSyncAfterLostReply) {
            ctx.backend.on(id.session).sync(node).await?;
        }
        // After a lost reply, a plain delete: the node behind lists again when the mark never landed.
        let id = Identity {
            marks: id.marks.filter(|_| !lost_reply),
            ..id
        };
        match delete_once(ctx, node, id).await? {
            // After the sync, our node is gone: deleted by the request whose reply was lost (the fixed name may hold
            // the next holder's node by now).
            Deleted::Absent | Deleted::NotOurs if lost_reply => Ok(Deleted::Ours),
            d => Ok(d),
        }
    })
    .await
}
