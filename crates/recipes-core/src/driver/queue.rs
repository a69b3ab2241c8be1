//! The queued recipes (fair, reentrant, read, write): make our sequential node, then follow the verdict on each
//! listing until it holds.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::debug;
use uuid::Uuid;

use super::attempt::{Attempt, Step, Stop};
use super::cleanup::{is_ours, Identity, Pending};
use super::wait::{InLine, InLineOn};
use super::{session, HeldNode};
use crate::backend::{BackendExt, CreateAndList, NodeWatch, SessionId};
use crate::error::Error;
use crate::info::NodeInfo;
use crate::metrics::Count;
use crate::mutants::{is_active, Mutant};
use crate::protocol::{Verdict, Wait};

/// Our node in the queue, just made.
struct Queued {
    node: Arc<str>,
    czxid: i64,
    id: Identity,
    /// The children listed right after the create, pipelined with it (`None` when not available).
    children: Option<Vec<String>>,
}

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

impl Queued {
    fn name(&self) -> &str {
        self.node.rsplit('/').next().unwrap_or_default()
    }
}

impl Attempt<'_> {
    /// A queued node (fair, reentrant, read, write, the native semaphore): create it, then judge / wait until it
    /// holds.
    pub async fn queued(&mut self) -> Step<Option<HeldNode>> {
        if self.try_once && !self.eager {
            // Give up before writing anything when the queue already says we would wait (or must refuse).
            let sid = self.connected().await?;
            let children = self.list(sid).await?;
            let children = self.screen(self.path.as_str(), children, sid).await?;
            let verdict = self.protocol.newcomer(&children);
            match verdict {
                Err(r) => return self.refused(r),
                Ok(_) => self.check_permits(sid, false).await?,
            }
            if matches!(verdict, Ok(true)) {
                return Ok(None);
            }
        }
        // A key named by the session: the session's tasks take it in turns, first in, first out (see `turns`).
        // Boxed: only the etcd layout waits here, and every waiting acquire would otherwise carry its state.
        if self.protocol.session_named() && !Box::pin(self.take_turn()).await? {
            return Ok(None);
        }
        loop {
            let Some(mut q) = self.create_queued().await? else {
                return Ok(None);
            };
            // Whether a listing we judged was long (then we mark ourselves first once we hold the lock).
            let mut mark = false;
            // A semaphore's count is checked once, after the first verdict's refusals (a lock's nodes on the path
            // say more than its missing count) and before any other: from our create on, the path, and the count it
            // stores, cannot go away while our node is there.
            let mut count_checked = self.protocol.stored_count().is_none();
            // The watch on our node, armed by the first wait in line and kept until it holds (see `wait_in_line`).
            let mut own = None;
            // Every local below lives only between two waits, or is taken apart before the next: one kept across
            // several would take room in every state of this future, a waiter's included (each waiter's heap).
            loop {
                // The children listed with the create, pipelined with it, then our own listings.
                let children = match q.children.take() {
                    Some(c) => c,
                    None => self.list(q.id.session).await?,
                };
                let children = self.screen(self.path.as_str(), children, q.id.session).await?;
                if session::is_over(self.backend().session_status(), q.id.session) {
                    self.cleanup.disarm();
                    return Err(Stop::Fail(Error::SessionExpired));
                }
                // Taken apart by plain functions and in a block of its own: a local that was borrowed takes room in
                // this future's state until its scope ends, through every wait after it.
                let wait = {
                    let next = self.judged(children, q.name(), &mut mark);
                    let next = if !count_checked && !matches!(next, Verdict::Refuse(_)) {
                        count_checked = true;
                        // Boxed, the verdict passed through: only a semaphore checks, once.
                        Box::pin(self.count_checked(next, q.id.session)).await?
                    } else {
                        next
                    };
                    // A verdict whose handling waits is moved whole into its wait (`not_in_line`): a verdict taken
                    // apart in place would stay in this future's state.
                    match next {
                        Verdict::Wait(wait) => wait,
                        Verdict::Acquired if !self.protocol.session_named() => {
                            return Ok(Some(self.won(q, mark, own)));
                        }
                        other @ (Verdict::Refuse(_) | Verdict::Acquired | Verdict::Missing) => {
                            if self.not_in_line(other, &q).await? {
                                return Ok(Some(self.won(q, mark, own)));
                            }
                            break;
                        }
                    }
                };
                if self.try_once {
                    return Ok(None);
                }
                if !wait.in_line {
                    let watched = self.watched(wait);
                    let reused = self.protocol.session_named().then_some(q.czxid);
                    // Boxed: only the readers, the semaphores and the peers' layouts wait here, and every waiter in
                    // line would otherwise carry its state.
                    let stale = Box::pin(self.wait_any_deleted(&watched, q.id.session, reused)).await?;
                    drop(watched);
                    // A stale name ahead: ours may be stale too (an operator deleted our key while we waited, and
                    // another task of the session made it again); waiting on would list again in a loop (found by
                    // review).
                    if stale && !Box::pin(self.still_ours(&q)).await? {
                        self.vanished(&q.node).await?;
                        break;
                    }
                    continue;
                }
                // Whether a hold through the blocker's mark passes the mark on (decision 0073), asked now so that the
                // wait keeps only what it needs of the verdict: the blocker's path and two flags.
                let (passes_mark_on, on) = self.in_line_on(wait);
                match self.wait_in_line(q.name(), &q.id, &mut own, &on).await? {
                    held @ (InLine::Acquired | InLine::Handed { .. }) => {
                        // Held through the blocker's mark (a change of its data), or handed over within the process by
                        // a holder whose release marks: the mark is passed on (decisions 0073, 0075). Not after a
                        // handoff from a holder that does not mark, which would start a chain of marks in a short
                        // queue.
                        let through_mark = match held {
                            InLine::Handed { marking } => {
                                // Counted once the acquire hands the guard out (its lease confirmed).
                                self.handed.store(true, Ordering::Relaxed);
                                marking
                            }
                            _ => true,
                        };
                        let mark = mark || (through_mark && self.marks_in_release() && passes_mark_on);
                        return Ok(Some(self.won(q, mark, own)));
                    }
                    InLine::Missing => {
                        self.vanished(&q.node).await?;
                        break;
                    }
                    InLine::Relist => {}
                }
            }
        }
    }

    /// The verdict on a listing, and whether it was long (then we mark ourselves first once we hold the lock).
    /// Takes the listing: it ends here, not in the acquire's state.
    fn judged(&self, children: Vec<String>, ours: &str, mark: &mut bool) -> Verdict {
        *mark |= self.protocol.marks_when_held(&children);
        self.protocol.judge(&children, ours)
    }

    /// A verdict that is neither a wait nor, where names are not made again, a hold: whether we hold (a
    /// session-named key still ours); `false` once our node, gone from the queue, is deleted (queue again); the
    /// refusal's error.
    async fn not_in_line(&mut self, verdict: Verdict, q: &Queued) -> Step<bool> {
        match verdict {
            Verdict::Refuse(r) => self.refuse(r).await,
            // A session-named key (etcd's own lock) may be another task's of this session by now: made again under
            // our name after ours was deleted (found by review: two tasks of a session both held).
            Verdict::Acquired if !self.protocol.session_named() || Box::pin(self.still_ours(q)).await? => Ok(true),
            // A wait is not sent here.
            Verdict::Acquired | Verdict::Missing | Verdict::Wait(_) => {
                self.vanished(&q.node).await?;
                Ok(false)
            }
        }
    }

    /// `next`, once a semaphore's stored count agrees with ours (our node deleted when it does not).
    async fn count_checked(&mut self, next: Verdict, sid: SessionId) -> Step<Verdict> {
        if let Err(e) = self.check_permits(sid, true).await {
            if matches!(e, Stop::Fail(Error::PermitsMismatch { .. })) {
                self.clean_up_now().await;
            }
            return Err(e);
        }
        Ok(next)
    }

    /// The paths a wait that is not in line watches for a deletion: the blocker's, and a semaphore window's others.
    fn watched(&self, wait: Wait) -> Vec<String> {
        let mut watched = vec![self.path.child(&wait.on)];
        watched.extend(wait.also.iter().map(|n| self.path.child(n)));
        watched
    }

    /// What a wait in line keeps of its verdict: the blocker, and whether a hold through the blocker's mark passes
    /// the mark on (decision 0073).
    fn in_line_on(&self, wait: Wait) -> (bool, InLineOn) {
        let on = InLineOn {
            path: self.path.child(&wait.on).into(),
            first: wait.blocker_first,
            change_means_held: wait.change_means_held,
        };
        (self.protocol.passes_mark_on(&wait), on)
    }

    /// Our queued node holds the lock: keep it (with the watch on it armed while it waited, if any), and mark it
    /// first when the node behind may need to know: in the transaction of its release where the backend has
    /// transactions (the mark then costs no write of its own), now otherwise.
    fn won(&mut self, q: Queued, mark: bool, own: Option<NodeWatch>) -> HeldNode {
        let in_release = mark && self.marks_in_release();
        if mark && !in_release {
            self.mark_first(&q.node, q.id);
        }
        self.held(q.node, q.czxid, q.id)
            .watched_by(own)
            .marking_on_release(in_release)
    }

    /// Whether a mark goes in the release's transaction, at no write of its own (decision 0064): where the backend
    /// has transactions.
    fn marks_in_release(&self) -> bool {
        self.backend().transactions().is_some() && !is_active(Mutant::MarkWhenHeld)
    }

    /// Tells the node behind us that nothing is ahead of us any more (see `wait_in_line`), when the backend has no
    /// transactions to send it with our delete. Not awaited: the request is ordered before our release. Only over the
    /// data the node was made with (version 0): a request to let go written there first (revocation) is not
    /// overwritten, and the node behind lists again instead.
    fn mark_first(&self, node: &str, id: Identity) {
        let data = NodeInfo::encode_own(id.attempt, self.data_recipe(), self.candidate, true);
        self.backend().on(id.session).set_data_unacked(node, &data, Some(0));
    }

    /// The verdict could not find our node among the contenders: it was deleted (by someone), or it has a name the
    /// layout does not read. Either way, delete it by its path (the cleanup knows it) and queue again, bounded.
    pub async fn vanished(&mut self, node: &str) -> Step<()> {
        debug!(%node, "our lock node is not in the queue; deleting it by its path and creating it again");
        if is_active(Mutant::MissingForgetsNode) {
            self.cleanup.disarm();
        } else {
            self.clean_up_now().await;
        }
        self.failed()
    }

    /// Creates our sequential node (protected: recognised by its attempt id after a lost reply); `None` when a try
    /// gives up without one.
    async fn create_queued(&mut self) -> Step<Option<Queued>> {
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
                self.failed()?;
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

    /// Whether the key of our session-named node is still the one we made (its creation id), by a read after the
    /// listing that judged it first. Boxed where it is awaited: only the etcd layout asks, and every waiting acquire
    /// would otherwise carry its state (the future-size test).
    async fn still_ours(&self, q: &Queued) -> Step<bool> {
        let on = self.backend().on(q.id.session);
        loop {
            match self.call(on.get(&q.node)).await {
                Ok(found) => return Ok(found.is_some_and(|(_, stat)| stat.czxid == q.czxid)),
                Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(q.id.session).await?,
                Err(e) => return Err(e),
            }
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
