//! The wait on the blocker ahead of us, once `wait_in_line` has armed the watches: for its deletion, a change of its
//! data (its `first` mark), its scout's event, or a handoff within the process.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use tokio::sync::watch;

use super::attempt::{Attempt, Step, Stop};
use super::scout::scout_event;
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
                    r = scout_event(b.scout.as_deref_mut()) => {
                        // Fired: never polled again.
                        if let Some(s) = b.scout.as_deref_mut() {
                            *s = None;
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
                        let gone = {
                            let read = self.call(self.backend().on(b.pinned).get_and_watch(b.path)).await;
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
                            let trusted = b.known_first || b.trust_change || is_active(Mutant::AnyDataChangeIsMark);
                            return blocker_gone(trusted, w).await;
                        }
                    }
                }
            }
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
    /// The watch on the scout, while it has not fired.
    pub scout: Option<&'p mut Option<NodeWatch>>,
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
