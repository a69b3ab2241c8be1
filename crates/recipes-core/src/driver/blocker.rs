//! The wait on the blocker ahead of us, once `wait_in_line` has armed the watches: for its deletion, a change of its
//! data (its `first` mark), its scout's event, or a handoff within the process.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use futures::future::Either;
use tokio::sync::watch;

use super::attempt::{Attempt, Step, Stop};
use super::scout::{scout_event, Scouting};
use super::session;
use super::wait::InLine;
use crate::backend::{BackendExt, NodeEvent, NodeWatch, SessionId, SessionStatus};
use crate::error::Error;
use crate::info::NodeInfo;
use crate::metrics::Count;
use crate::mutants::{is_active, Mutant};

/// Whether node data carries the `first` mark.
pub(super) fn marked_first(data: &[u8]) -> bool {
    NodeInfo::decode(data).is_some_and(|i| i.first)
}

impl Attempt<'_> {
    /// The rest of `wait_in_line`, once both watches are armed and the blocker's data read (`known_first`, and
    /// whether a change of its data says it held): `fired` is set when the watch on our node resolved (it may not
    /// be polled again).
    ///
    /// What woke the wait is decided inside the `select!`, and every wait after it (the read of the blocker's data,
    /// the look at our own node) runs outside: a `select!` whose branches await keeps its futures and its output in
    /// place through those waits, in every waiter's state.
    ///
    /// Not an `async fn`: one keeps each of its arguments twice in its state (as given, and bound in its body), 40
    /// bytes of every waiter's; a block moved out of a plain function keeps them once.
    #[allow(clippy::manual_async_fn)] // a plain function on purpose: see above
    pub(super) fn wait_on_blocker<'s, 'p>(
        &'s self,
        w: Watches<'s>,
        b: &'s mut Blocker<'p>,
    ) -> impl Future<Output = Step<InLine>> + Send + use<'s, 'p> {
        async move {
            let mut rx = self.backend().session();
            // A release of the blocker by a task of this process on this session may hand the lock over at once.
            let mut waiting = self.ctx.handoffs.wait(b.pinned, b.path);
            let mut handing = true;
            loop {
                let woke = tokio::select! {
                    biased;
                    r = &mut *w.own => {
                        *w.fired = true;
                        return own_event(r);
                    },
                    r = &mut waiting.handed, if handing => match r {
                        Ok(marking) if !is_active(Mutant::NoHandoff) => Woke::Handed(marking),
                        // The holder could not hand over: its deletion shows on the watch.
                        _ => {
                            handing = false;
                            continue;
                        }
                    },
                    r = &mut b.watch => match r {
                        Ok(NodeEvent::Deleted) => Woke::Deleted,
                        Ok(_) => Woke::Changed,
                        Err(Error::ConnectionLoss) => return Ok(InLine::Relist),
                        Err(e) => return Err(e.into()),
                    },
                    r = scout_event(b.aside.as_deref_mut().map(|a| &mut a.watch)) => {
                        // Fired: never polled again.
                        if let Some(a) = b.aside.as_deref_mut() {
                            a.watch = None;
                        }
                        match r {
                            Ok(NodeEvent::Deleted) if is_active(Mutant::ScoutMeansFirst) => {
                                b.known_first = true;
                                continue;
                            }
                            // A change of the scout's data: its `first` mark (most often in the transaction of its
                            // release, in a drain whose holders pass the mark on, where the blocker's own mark will
                            // follow), or a request to let go. Listing now would cost every waiter of such a drain a
                            // listing of the queue: the wait goes on without its scout, as a wait without one does.
                            Ok(NodeEvent::DataChanged) => continue,
                            // Deleted, or the connection lost: list again, the blocker's watch kept.
                            _ => return Ok(InLine::Scouted),
                        }
                    },
                    () = session::over(&mut rx, b.pinned) => return Err(Stop::Fail(Error::SessionExpired)),
                    () = self.deadline_passed() => return Err(Stop::Deadline),
                };
                // The blocker's deletion (or the change of its data by the mark sent with it, decision 0080) came
                // first, but its holder, a task of this process, took our registration to hand over: it sent its delete
                // and tells us in the same poll, which another worker thread may not have reached yet. Its word follows
                // at once (sent, or dropped when it could not hand over); heeding the deletion alone would list again,
                // and break a chain of marks (decision 0075), and the change alone would read the blocker again. The
                // deadline and the session's end still count (found by review, helper-71: an await added between the
                // holder's take and its word would otherwise keep us past them).
                let woke = match woke {
                    woke @ (Woke::Deleted | Woke::Changed) if handing && waiting.taken() => tokio::select! {
                        biased;
                        r = &mut waiting.handed => match r {
                            Ok(marking) if !is_active(Mutant::NoHandoff) => Woke::Handed(marking),
                            // The word is spent: never polled again (the loop comes round after a change whose blocker
                            // is still there; a second poll of the spent receiver panics: found by review, helper-92).
                            _ => {
                                handing = false;
                                woke
                            }
                        },
                        () = session::over(&mut rx, b.pinned) => return Err(Stop::Fail(Error::SessionExpired)),
                        () = self.deadline_passed() => return Err(Stop::Deadline),
                    },
                    woke => woke,
                };
                match woke {
                    Woke::Handed(marking) => {
                        // The blocker held the lock, so nothing was ahead of it, and its delete is sent.
                        return match blocker_gone(true, w).await {
                            Ok(InLine::Acquired { .. }) => Ok(InLine::Handed { marking }),
                            next => next,
                        };
                    }
                    Woke::Deleted => {
                        self.count(Count::Wakeup);
                        return blocker_gone(b.known_first, w).await;
                    }
                    Woke::Changed => {
                        // The blocker's data changed: its `first` mark, or a request to let go. When the blocker is a
                        // native node of ours that is not a reader's, either says it held (see the contract) if the
                        // node is gone before we can read the data back, unless others may write lock-node data
                        // (`trust_change` is then false); data read back tells by itself. Watch on. The reply ends in
                        // this block: kept in scope through the wait below, it would take room in every state of this
                        // future.
                        // With the watch of the blocker's deletion alone (decision 0092), its event stands for the
                        // read's answer when it comes first: the server sends a session's events and replies in the
                        // order it applied them, so a read applied before the deletion would have been answered
                        // before the deletion's event, and one applied after it finds the node gone. Already there
                        // (the change of a release's mark and its deletion are events of one write), no read is sent.
                        let (read, told) = self.read_after_change(b).await;
                        let gone = {
                            match read {
                                Ok(Some((data, watch))) => {
                                    // Anything but the mark (an operator's write, a peer's request to let go) may come
                                    // while the node waits: from now on only the mark counts.
                                    let old_rule = b.trust_change && is_active(Mutant::TrustForeignWrites);
                                    let marked =
                                        marked_first(&data) || old_rule || is_active(Mutant::AnyDataChangeIsMark);
                                    b.known_first |= marked;
                                    b.marked |= marked;
                                    b.trust_change = false;
                                    b.watch = watch;
                                    false
                                }
                                Ok(None) => true,
                                Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(InLine::Relist),
                                Err(e) => return Err(e),
                            }
                        };
                        if gone {
                            self.count(Count::Wakeup);
                            // A change that says it held is its mark, most likely (or a request to let go).
                            b.marked |= b.trust_change;
                            let trusted = b.known_first
                                || b.trust_change
                                || (told && is_active(Mutant::GoneWatchUntrusted))
                                || is_active(Mutant::AnyDataChangeIsMark);
                            return blocker_gone(trusted, w).await;
                        }
                    }
                }
            }
        }
    }
}

/// A node read back with a new watch on it, or `None` when it is gone.
type ReadBack = Option<(Vec<u8>, NodeWatch)>;

/// What the watch of the blocker's deletion alone (decision 0092) has told when a change of the blocker's data woke
/// the wait.
enum Told {
    /// The deletion, already: the change of a release's mark and its deletion come as two events of one write, and the
    /// second is most often there by the time the first is heeded.
    Deleted,
    /// Nothing yet: the watch, to race the read with.
    Pending(NodeWatch),
    /// No watch (none was armed, or the change is not trusted), or it told something else.
    No,
}

/// Takes the watch of the blocker's deletion alone, when the change of its data is trusted to say it held, and polls
/// it once, unconstrained (a watch that respects tokio's budget answers `Pending` in a task whose budget is spent).
fn gone_told(b: &mut Blocker<'_>) -> Told {
    // Left in place beside a change not trusted: the blocker's deletion fires it later, and a hold keeps it fired
    // (dropped unfired, it would cost the session a request to remove it; found by review, helper-153).
    let trusted = b.trust_change || is_active(Mutant::GoneWatchUntrusted);
    let gone = b.aside.as_deref_mut().filter(|_| trusted).and_then(|a| a.gone.take());
    let Some(mut gone) = gone else {
        return Told::No;
    };
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut once = tokio::task::coop::unconstrained(gone.as_mut());
    match std::pin::Pin::new(&mut once).poll(&mut cx) {
        Poll::Ready(Ok(NodeEvent::Deleted)) => Told::Deleted,
        Poll::Ready(_) => Told::No,
        Poll::Pending => Told::Pending(gone),
    }
}

impl Attempt<'_> {
    /// The blocker read back after a change of its data, or what the watch of its deletion alone told (see
    /// `wait_on_blocker`); `true` when the watch told it. A plain function, the watch polled before it returns: a
    /// `match` on it around the read would keep it in every waiter's state.
    fn read_after_change<'s, 'p: 's>(
        &'s self,
        b: &mut Blocker<'p>,
    ) -> impl Future<Output = (Step<ReadBack>, bool)> + Send + 's {
        let (pinned, path) = (b.pinned, b.path);
        match gone_told(b) {
            Told::Deleted => Either::Left(Either::Left(std::future::ready((Ok(None), true)))),
            Told::Pending(gone) => Either::Left(Either::Right(Box::pin(self.read_unless_gone(pinned, path, gone)))),
            Told::No => {
                Either::Right(async move { (self.call(self.backend().on(pinned).get_and_watch(path)).await, false) })
            }
        }
    }

    /// The blocker read back after a change of its data, unless the watch of its deletion alone tells the deletion
    /// first: then `Ok(None)`, as the read would answer (see `wait_on_blocker`); `true` when the watch told it.
    async fn read_unless_gone(&self, pinned: SessionId, path: &str, mut gone: NodeWatch) -> (Step<ReadBack>, bool) {
        let on = self.backend().on(pinned);
        let read = self.call(on.get_and_watch(path));
        tokio::pin!(read);
        tokio::select! {
            biased;
            r = &mut read => (r, false),
            e = &mut gone => match e {
                Ok(NodeEvent::Deleted) => (Ok(None), true),
                _ => (read.await, false),
            },
        }
    }
}

/// What woke a wait on its blocker (see `wait_on_blocker`, and `wait_in_view`).
pub(super) enum Woke {
    /// The blocker's holder, a task of this process, handed the lock over; whether its release marks.
    Handed(bool),
    /// The blocker was deleted.
    Deleted,
    /// The blocker's data changed.
    Changed,
}

/// The blocker a wait in line follows: its path (shared with this process's handoff registration), the watch on it,
/// whether nothing is known ahead of it, and whether a change of its data says it held. Kept by the caller and lent
/// to the wait: an `async fn` keeps each of its arguments twice in its state.
pub(super) struct Blocker<'p> {
    pub path: &'p Arc<str>,
    pub watch: NodeWatch,
    pub known_first: bool,
    /// `known_first` came from the blocker's `first` mark (its data, or a change of it), not from a listing.
    pub marked: bool,
    pub trust_change: bool,
    pub pinned: SessionId,
    /// What the wait keeps aside, boxed (see `Armed`): the watch on the scout, while it has not fired, or the watch
    /// of the blocker's deletion alone (decision 0092).
    pub aside: Option<&'p mut Scouting>,
}

/// What a wait in line watches beside its blocker: our own node (`fired` once its watch resolved), and the session's
/// state since the watches were armed.
pub(super) struct Watches<'a> {
    pub own: &'a mut NodeWatch,
    pub fired: &'a mut bool,
    pub moved: &'a watch::Receiver<SessionStatus>,
}

/// Our blocker is gone: with nothing known ahead of it we hold the lock, unless our own node went first, or the
/// session's state changed since the watches were armed (then the order of their events is not the order of the
/// changes: list again).
pub(super) async fn blocker_gone(known_first: bool, w: Watches<'_>) -> Step<InLine> {
    let Watches { own, fired, moved } = w;
    let reconnected = moved.has_changed().unwrap_or(true) && !is_active(Mutant::TrustAcrossReconnection);
    if !known_first || reconnected {
        return Ok(InLine::Relist);
    }
    // Unconstrained: a watch that respects tokio's budget (the in-memory backend's) answers `Pending` at once in a task
    // whose budget the replies spent, though its event came before them (found by review, helper-111).
    let own_event_now =
        tokio::task::coop::unconstrained(std::future::poll_fn(|cx| Poll::Ready(own.as_mut().poll(cx)))).await;
    match own_event_now {
        Poll::Pending => Ok(InLine::Acquired { through_mark: false }),
        Poll::Ready(r) => {
            *fired = true;
            own_event(r)
        }
    }
}

/// What an event of the watch on our own node says: deleted (by someone else), or changed (by someone else: this
/// library writes a waiting node's data only at its creation), or the connection was lost. Only its deletion is
/// certain; the others list again, which looks at the queue as it is now.
fn own_event(r: crate::Result<NodeEvent>) -> Step<InLine> {
    match r {
        Ok(NodeEvent::Deleted) => Ok(InLine::Missing),
        Ok(_) | Err(Error::ConnectionLoss) => Ok(InLine::Relist),
        Err(e) => Err(e.into()),
    }
}
