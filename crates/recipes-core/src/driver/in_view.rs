//! Waiting in line through the session's view of the queue (`view`, decision 0085): the wait of `wait_in_line` and
//! `wait_on_blocker` for a session with many waiters in line on the lock path (`VIEW_FROM`, 128, and a quarter of the
//! queue, `VIEW_SHARE`), without a one-shot watch of its own.

use std::future::Future;
use std::sync::Arc;

use super::attempt::{Attempt, Step, Stop};
use super::blocker::{marked_first, Woke};
use super::queue::Queued;
use super::scout::Armed;
use super::session;
use super::view::{seen, Slot, View};
use super::wait::{written_by_us, InLine, InLineOn};
use crate::backend::BackendExt;
use crate::error::Error;
use crate::metrics::Count;
use crate::mutants::{is_active, Mutant};

/// Every change a waiter's slot tells.
const EVERY: u8 = !0;
/// What the view tells of our own node.
const OWN: u8 = seen::OWN_DELETED | seen::OWN_CHANGED;

/// How a wait ends once its blocker is gone (or handed the lock over): it holds when nothing was known ahead of the
/// blocker, the session's state has not changed since the wait began, the view has not ended, and the view has
/// said nothing of our own node. The view's events come in one order, so a deletion of our node before the
/// blocker's was told before the blocker's (the rule the one-shot watches keep by polling our node's first).
///
/// The view's watch is drained first: its task may not have run since the events that came before the replies this
/// decision rests on (found by review, helper-110).
fn gone(
    known_first: bool,
    view: &View,
    slot: &Slot,
    moved: &tokio::sync::watch::Receiver<crate::backend::SessionStatus>,
) -> InLine {
    if !is_active(Mutant::ViewLags) {
        view.drain();
    }
    let reconnected = moved.has_changed().unwrap_or(true) && !is_active(Mutant::TrustAcrossReconnection);
    let now = slot.now() & if is_active(Mutant::ViewIgnoresOwn) { !OWN } else { !0 };
    if now & seen::OWN_DELETED != 0 {
        return InLine::Missing;
    }
    if !known_first || reconnected || now & (seen::OWN_CHANGED | seen::ENDED) != 0 {
        return InLine::Relist;
    }
    InLine::Acquired { through_mark: false }
}

impl Attempt<'_> {
    /// `wait_in_line` through `view`: our node, the blocker and the scout are followed by the view instead of a
    /// one-shot watch each (the contract is `wait_in_line`'s, with these differences):
    /// - the waiter registers on the view first, then reads our node and the blocker (no watch): a change after the
    ///   reads is told to the registration, one before them shows in what they read;
    /// - the view's events come in one order: a deletion of our node before the blocker's is seen first;
    /// - the view ends at any change of the session's state (a tree watch's events are lost across a reconnection):
    ///   the waiter lists again, as a disconnection during its wait makes it do;
    /// - nothing is kept for the next wait (no watch to keep): a scout's deletion lists again at once.
    #[allow(clippy::manual_async_fn)] // a plain function on purpose: see above
    pub(super) fn wait_in_view<'s>(
        &'s self,
        q: &'s Queued,
        armed: &'s mut Armed,
        line: &'s InLineOn,
        view: &'s View,
    ) -> impl Future<Output = Step<InLine>> + Send + 's {
        async move {
            let pinned = q.id.session;
            let mut moved = self.backend().session();
            moved.borrow_and_update();
            // The one-shot watches of an earlier wait are not needed.
            armed.own = None;
            if let Some(s) = armed.scouting.as_deref_mut() {
                s.kept = None;
                s.watch = None;
                s.gone = None;
            }
            let scout = armed.scouting.as_deref().and_then(|s| s.path.as_ref());
            // Registered for as long as the slot lives (this wait).
            let slot = Arc::new(Slot::default());
            if !view.register(&slot, &[Some(&q.node), Some(&line.path), scout]) {
                return Ok(InLine::Relist);
            }
            // Read after the registration: what changes after the reads is told to it. Boxed, as in `wait_in_line`.
            let (known_first, mut marked, mut trust_change) = {
                let on = self.backend().on(pinned);
                let (own, blocker) =
                    Box::pin(async { tokio::join!(self.call(on.get(&q.node)), self.call(on.get(&line.path))) }).await;
                match own {
                    Ok(Some(_)) => {}
                    Ok(None) => return Ok(InLine::Missing),
                    Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(InLine::Relist),
                    Err(e) => return Err(e),
                }
                match blocker {
                    Ok(Some((data, _))) => {
                        let foreign = self.ctx.foreign_writes && !is_active(Mutant::ForeignWritesTrusted);
                        let trust = line.change_means_held && written_by_us(&data) && !foreign;
                        let marked = marked_first(&data);
                        (line.first || marked, marked, trust)
                    }
                    Ok(None) => return Ok(gone(line.first, view, &slot, &moved)),
                    Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(InLine::Relist),
                    Err(e) => return Err(e),
                }
            };
            let mut known_first = known_first;
            let slot = &*slot;
            let mut rx = self.backend().session();
            let mut waiting = self.ctx.handoffs.wait(pinned, &line.path);
            let mut handing = true;
            let mut scouting = scout.is_some();
            loop {
                let woke = tokio::select! {
                    biased;
                    bits = slot.changed(EVERY) => {
                        if is_active(Mutant::ViewIgnoresOwn) && slot.take(OWN) != 0 {
                            continue;
                        }
                        if bits & seen::OWN_DELETED != 0 {
                            return Ok(InLine::Missing);
                        }
                        if bits & (seen::OWN_CHANGED | seen::ENDED) != 0 {
                            return Ok(InLine::Relist);
                        }
                        // A change of the blocker's data comes before its deletion in the view's order (the mark
                        // sent with a release): it is heeded first, as a one-shot data watch would report it.
                        if slot.take(seen::BLOCKER_CHANGED) != 0 {
                            Woke::Changed
                        } else if bits & seen::BLOCKER_DELETED != 0 {
                            Woke::Deleted
                        } else if slot.take(seen::SCOUT_CHANGED) != 0 {
                            // A change of the scout's data retires it (as in `wait_on_blocker`): its mark, most often
                            // sent with its release, whose deletion then follows (a change of a node comes before its
                            // deletion, so it is heeded first).
                            scouting = false;
                            continue;
                        } else {
                            slot.take(seen::SCOUT_DELETED);
                            if scouting && is_active(Mutant::ScoutMeansFirst) {
                                known_first = true;
                                continue;
                            }
                            if scouting {
                                return Ok(InLine::Relist);
                            }
                            continue;
                        }
                    },
                    r = &mut waiting.handed, if handing => match r {
                        Ok(marking) if !is_active(Mutant::NoHandoff) => Woke::Handed(marking),
                        _ => {
                            handing = false;
                            continue;
                        }
                    },
                    () = session::over(&mut rx, pinned) => return Err(Stop::Fail(Error::SessionExpired)),
                    () = self.deadline_passed() => return Err(Stop::Deadline),
                };
                // As in `wait_on_blocker` (inline there and here: a function of its own made every waiter's state
                // larger): a holder of this process that took our registration tells us in its poll.
                let woke = match woke {
                    woke @ (Woke::Deleted | Woke::Changed) if handing && waiting.taken() => tokio::select! {
                        biased;
                        r = &mut waiting.handed => match r {
                            Ok(marking) if !is_active(Mutant::NoHandoff) => Woke::Handed(marking),
                            _ => {
                                handing = false;
                                woke
                            }
                        },
                        () = session::over(&mut rx, pinned) => return Err(Stop::Fail(Error::SessionExpired)),
                        () = self.deadline_passed() => return Err(Stop::Deadline),
                    },
                    woke => woke,
                };
                match woke {
                    Woke::Handed(marking) => {
                        return Ok(match gone(true, view, slot, &moved) {
                            InLine::Acquired { .. } => InLine::Handed { marking },
                            next => next,
                        });
                    }
                    Woke::Deleted => {
                        self.count(Count::Wakeup);
                        return Ok(match gone(known_first, view, slot, &moved) {
                            InLine::Acquired { .. } => InLine::Acquired { through_mark: marked },
                            next => next,
                        });
                    }
                    Woke::Changed => {
                        // As in `wait_on_blocker`: read the blocker's data back; the view goes on telling its changes.
                        // When the view has told its deletion too, the node is gone: nothing to read.
                        let read = if slot.now() & seen::BLOCKER_DELETED != 0 {
                            Ok(None)
                        } else {
                            self.call(self.backend().on(pinned).get(&line.path)).await
                        };
                        match read {
                            Ok(Some((data, _))) => {
                                let old_rule = trust_change && is_active(Mutant::TrustForeignWrites);
                                let mark = marked_first(&data) || old_rule || is_active(Mutant::AnyDataChangeIsMark);
                                known_first |= mark;
                                marked |= mark;
                                trust_change = false;
                            }
                            Ok(None) => {
                                self.count(Count::Wakeup);
                                marked |= trust_change;
                                let trusted = known_first || trust_change || is_active(Mutant::AnyDataChangeIsMark);
                                return Ok(match gone(trusted, view, slot, &moved) {
                                    InLine::Acquired { .. } => InLine::Acquired { through_mark: marked },
                                    next => next,
                                });
                            }
                            Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(InLine::Relist),
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
        }
    }
}
