//! The queued recipes (fair, reentrant, read, write): make our sequential node (`made`), then follow the verdict on
//! each listing until it holds.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::Either;
use tracing::debug;

use super::attempt::{Attempt, Step, Stop};
use super::delete::Identity;
use super::scout::Armed;
use super::wait::{InLine, InLineOn};
use super::{session, HeldNode};
use crate::backend::{BackendExt, SessionId};
use crate::error::Error;
use crate::info::NodeInfo;
use crate::mutants::{is_active, Mutant};
use crate::protocol::{Verdict, Wait};

/// Our node in the queue, just made.
pub(super) struct Queued {
    pub(super) node: Arc<str>,
    pub(super) czxid: i64,
    pub(super) id: Identity,
    /// The children listed right after the create, pipelined with it (`None` when not available).
    pub(super) children: Option<Vec<String>>,
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
                // Boxed: only a try that may not wait checks here, and every waiter would otherwise carry its state.
                Ok(_) => Box::pin(self.check_permits(sid, false)).await?,
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
            // The watch on our node, armed by the first wait in line and kept until it holds, and what a scout needs
            // (see `wait_in_line`).
            let mut armed = Armed::default();
            // Whether a hold through the blocker's mark passes the mark on (decision 0073): asked of every wait in line.
            let mut passes = false;
            // Every local below lives only between two waits, or is taken apart before the next: one kept across
            // several would take room in every state of this future, a waiter's included (each waiter's heap).
            loop {
                // The children listed with the create, pipelined with it, then our own listings.
                let children = self.listed_or_list(q.children.take(), q.id.session).await?;
                let children = self.screen(self.path.as_str(), children, q.id.session).await?;
                if session::is_over(self.backend().session_status(), q.id.session) {
                    self.cleanup.disarm();
                    return Err(Stop::Fail(Error::SessionExpired));
                }
                // Taken apart by plain functions and in a block of its own: a local that was borrowed takes room in
                // this future's state until its scope ends, through every wait after it.
                let wait = {
                    let next = self.judged(children, &q, &mut mark);
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
                            return Ok(Some(self.won(q, mark, armed)));
                        }
                        // Boxed: a refusal, a missing node or a session-named key (etcd's layout, a round trip
                        // of its own) is rare beside a wait, and every waiter would otherwise carry its state.
                        other @ (Verdict::Refuse(_) | Verdict::Acquired | Verdict::Missing) => {
                            if Box::pin(self.not_in_line(other, &q)).await? {
                                return Ok(Some(self.won(q, mark, armed)));
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
                let (passes_mark_on, on) = self.in_line_on(wait, &mut armed, mark);
                // Something was ahead of the blocker in one of our listings, the scout's included (a listing the
                // scout asked for finds the blocker first while the drain's marks still run).
                passes |= passes_mark_on;
                // Bound before it is matched: a scrutinee's temporaries (the `?`'s result) would stay in this future's
                // state through the waits in the arms.
                let waited = self.wait_in_line(&q, &mut armed, &on).await?;
                match waited {
                    held @ (InLine::Acquired { .. } | InLine::Handed { .. }) => {
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
                            InLine::Acquired { through_mark } => through_mark,
                            _ => false,
                        };
                        let mark = mark || (through_mark && self.marks_in_release() && passes);
                        return Ok(Some(self.won(q, mark, armed)));
                    }
                    InLine::Missing => {
                        self.vanished(&q.node).await?;
                        break;
                    }
                    InLine::Relist | InLine::Scouted => {}
                }
            }
        }
    }

    /// `listed`, the children listed with the create, or a listing now. A plain function: a `match` on the first
    /// listing around the wait for the next would keep it (empty) in the queued acquire's state through that wait.
    fn listed_or_list(
        &self,
        listed: Option<Vec<String>>,
        sid: SessionId,
    ) -> impl Future<Output = Step<Vec<String>>> + Send + '_ {
        match listed {
            Some(c) => Either::Left(std::future::ready(Ok(c))),
            None => Either::Right(self.list(sid)),
        }
    }

    /// The verdict on a listing of `ours`, and whether it was long (then we mark ourselves first once we hold the
    /// lock); its length is noted for the session's view (`Views::listed`). Takes the listing: it ends here, not in the
    /// acquire's state.
    fn judged(&self, children: Vec<String>, ours: &Queued, mark: &mut bool) -> Verdict {
        *mark |= self.protocol.marks_when_held(&children);
        // Whether the session's waiters in line are enough of the queue for a view (`VIEW_SHARE`): noted once per
        // session, as a count kept here would take room in every waiter's state.
        self.ctx
            .views
            .listed(ours.id.session, self.path.shared(), children.len());
        self.protocol.judge(&children, ours.name())
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
    /// the mark on (decision 0073). `long`: a listing we judged was long, so the blocker's release most likely marks
    /// (decision 0092: the wait then watches the blocker's deletion alone too, and reads nothing after the mark).
    fn in_line_on(&self, wait: Wait, armed: &mut Armed, long: bool) -> (bool, InLineOn) {
        armed.scout(wait.scout.as_deref().map(|n| self.path.child(n)));
        let on = InLineOn {
            path: self.path.child(&wait.on).into(),
            first: wait.blocker_first,
            change_means_held: wait.change_means_held,
            watch_gone: long && wait.change_means_held && !is_active(Mutant::NoGoneWatch),
        };
        (self.protocol.passes_mark_on(&wait), on)
    }

    /// Our queued node holds the lock: keep it (with the watch on it armed while it waited, if any), and mark it
    /// first when the node behind may need to know: in the transaction of its release where the backend has
    /// transactions (the mark then costs no write of its own), now otherwise.
    ///
    /// Where others may write lock-node data (`foreign_writes`), a mark sent with the release is never read back (its
    /// node goes with it) and its change alone is not trusted: it would only cost the node behind a read of a node
    /// already gone, so none is sent (found by review, helper-97: 3.0 requests per drain handoff, not 2.0). A mark
    /// written while the node holds can be read back, and is written as before.
    fn won(&mut self, q: Queued, mark: bool, armed: Armed) -> HeldNode {
        // The watches kept until the node's end: a watch dropped unfired costs the session a request to remove it. The
        // one of a blocker's deletion alone (decision 0092) has its event on its way when the blocker handed the lock
        // over within the process (its delete sent before its word).
        let (own, gone) = (armed.own, armed.scouting.and_then(|s| s.gone));
        let in_release = mark && self.marks_in_release();
        if mark && !in_release {
            self.mark_first(&q.node, q.id);
        }
        let sent_with_release = in_release && (!self.ctx.foreign_writes || is_active(Mutant::MarkSentUnread));
        self.held(q.node, q.czxid, q.id)
            .watched_by(own, gone)
            .marking_on_release(sent_with_release)
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
        let data = NodeInfo::encode_own(id.attempt, self.data_recipe(), self.candidate(), true);
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
}
