//! Waiting in line: the watches on our node, the blocker ahead of us and its scout, armed in one round trip (the wait
//! on the blocker once they are armed is in `blocker`; the waits outside the line are in `deleted`).

use std::future::Future;
use std::sync::Arc;

use super::attempt::{Attempt, Step, Stop};
use super::blocker::{blocker_gone, marked_first, Blocker, Watches};
use super::queue::Queued;
use super::scout::Armed;
use crate::backend::BackendExt;
use crate::error::Error;
use crate::info::NodeInfo;
use crate::mutants::{is_active, Mutant};

/// The blocker a wait in line follows, as the verdict named it: its path (shared with this process's handoff
/// registration: one copy per waiter in line), whether nothing is ahead of it, and whether a change of its data says
/// it held (see `wait_in_line`).
pub(crate) struct InLineOn {
    pub path: Arc<str>,
    pub first: bool,
    pub change_means_held: bool,
    /// Whether to watch the blocker's deletion alone too (decision 0092): its release most likely marks it.
    pub watch_gone: bool,
}

/// How a wait in line ended.
pub(crate) enum InLine {
    /// Every blocker ahead has gone: we hold the lock; `through_mark`: we knew it from the blocker's `first` mark (its
    /// data, or a change of it), not from a listing.
    Acquired { through_mark: bool },
    /// The blocker's holder, a task of this process on our session, handed the lock to us as it released; `marking`:
    /// its release would have marked its node `first` (decision 0075).
    Handed { marking: bool },
    /// Our own node was deleted (by someone else).
    Missing,
    /// Look at the queue again.
    Relist,
    /// The scout went (or changed): look at the queue again, the blocker's watch kept (only inside `wait_in_line`,
    /// which hands `Relist` on).
    Scouted,
}

/// Whether node data is what this library writes in a native lock node: its [`NodeInfo`], or a request to let go
/// written over it. Only then does a later change of the data tell anything (see `wait_in_line`): a persistent node
/// with a lock node's name (a lock path nested here, say a semaphore storing its count) is written by others.
pub(super) fn written_by_us(data: &[u8]) -> bool {
    data == crate::REVOKE_MESSAGE || NodeInfo::decode(data).is_some()
}

impl Attempt<'_> {
    /// Native layout: waits for the blocker ahead of us without listing the children again when we can know that
    /// nothing else is ahead of it.
    ///
    /// # Contract
    /// - Nodes made after our list sort behind us (sequence order, across the wrap too), so nothing can appear
    ///   ahead of us. If nothing was ahead of our blocker (it was first in our list, or it marked itself `first`
    ///   in its data after it came to hold the lock), its deletion means we hold the lock: no list, one watch event
    ///   per handoff. Otherwise (a waiter ahead was cancelled or crashed) we list again.
    /// - The data of a native lock node is written by this library at creation and once to mark it first, and by
    ///   whoever asks its holder to let go (revocation: `__REVOKE__`, which `revoke_node` writes only to a holder).
    ///   Both come only once the node holds the lock, so when `change_means_held` (a blocker that is not a reader:
    ///   a holding reader may have readers ahead of it) any change of its data means that nothing is ahead of it,
    ///   even when the node is gone before the new data can be read back. That is the common case in a fast drain,
    ///   where a holder marks itself and lets go at once: listing again there made each handoff cost the length
    ///   of the queue. A change is trusted so only if the blocker's data as first read is ours (its
    ///   [`NodeInfo`], or a request to let go): a persistent node named like a lock node is someone else's to
    ///   write. Otherwise only data read back as the mark counts. And once the waiter reads the data back after a
    ///   change, that data decides, and only the mark counts (decision 0061): someone else's write over a waiting
    ///   node, then its deletion, must not let us in beside the holder. Where others may write lock-node data
    ///   (`Ctx::foreign_writes`), no change is trusted so: only the mark read back counts.
    /// - Our own node is watched as well, registered in the same round trip as the blocker's watch (or earlier: the
    ///   watch armed in an earlier wait of this attempt is kept in `armed` while it has not fired, so that a relist
    ///   costs no new registration and no request to remove the old one). ZooKeeper delivers one session's watch
    ///   events in the order of the changes, and the own-node watch is polled first, so if our node was deleted (by
    ///   someone else) before the blocker went, we never claim the lock.
    /// - `armed` keeps the watch on our node when the wait ends in `Acquired` or `Handed` (the hold keeps it until its
    ///   end) or in `Relist`, unless it fired or was armed on a node of our name whose data is not ours (`attempt`). It
    ///   is a watch on our node's data and deletion, with no hidden re-arm: a change of a waiting node's data (which
    ///   this library never writes, and the contract of `info.rs` forbids others to write) fires it, and the waiter
    ///   lists again, to be safe. That is a defence of our own node only: a blocker whose data someone else writes
    ///   breaks the contract the blocker's rule above relies on (a change means it held). A deletion-only watch that
    ///   re-arms itself on a data change, when polled, could sit unpolled through a relist, then answer `Pending`
    ///   with its re-arm only just sent (found by review).
    /// - `Relist` hands back to the listing path.
    /// - The scout (the node just ahead of the blocker, when the blocker was not first in a short listing) is watched
    ///   too, in the same round trip. Its deletion (or finding it gone, or a lost connection) ends the wait in
    ///   `Relist`, with the blocker's watch kept in `armed`: the list it asks for runs while the blocker may still be
    ///   there, off the handoff's critical path, and shows whether the blocker is first now. The next wait, on the
    ///   same blocker, uses the kept watch (no new registration, none removed) with what was known of the blocker,
    ///   and with the session's state as it was when that watch was armed: a state change since then makes the
    ///   blocker's deletion a reason to list again. The scout's event itself is never trusted: the scout may have
    ///   been cancelled, or its session may have ended, with others still ahead of it. A change of the scout's data
    ///   (its `first` mark, in a drain whose holders pass the mark on, where the blocker's own mark follows; or a
    ///   request to let go) retires the scout: the wait goes on as one without a scout, listing no queue.
    ///
    /// Not an `async fn`, as `wait_on_blocker`: its arguments are kept once in its state. Our node (`q`) is watched by
    /// the path it was made at, not by one built again for each wait.
    #[allow(clippy::manual_async_fn)] // a plain function on purpose: see above
    pub(super) fn wait_in_line<'s>(
        &'s self,
        q: &'s Queued,
        armed: &'s mut Armed,
        line: &'s InLineOn,
    ) -> impl Future<Output = Step<InLine>> + Send + 's {
        async move {
            let (id, pinned) = (&q.id, q.id.session);
            // A session with many waiters in line on the path (`VIEW_FROM`), a quarter of its queue at least
            // (`VIEW_SHARE`), waits through its view of the queue (decision 0085).
            // The view is found (or armed) in a box of its own: once per view, and every waiter's state would
            // otherwise carry the arming's.
            let (in_line, count) = self.ctx.views.in_line(pinned, self.path.shared());
            let view = if in_line.serves(count) {
                let found = Box::pin(self.call(in_line.view(&self.ctx.backend)));
                match found.await {
                    Ok(view) => view,
                    Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(InLine::Relist),
                    Err(e) => return Err(e),
                }
            } else {
                None
            };
            // Boxed: a waiter through a view keeps neither watch nor their futures, and every other waiter's state would
            // otherwise be as large as this wait's.
            if let Some(view) = view {
                return Box::pin(self.wait_in_view(q, armed, line, &view)).await;
            }
            // The replies are judged in a block of their own: what the wait needs from them is small, and a reply kept
            // in scope through the wait below would stay in this future's waiting state (every waiter's heap).
            let (is_ours, mut watch_own, moved, mut b) = {
                // The watches in one round trip (ours unless still armed, the blocker's unless kept, the scout's).
                // Boxed: the requests and their replies side by side are larger than the wait that follows, and would
                // set the size of every waiter's state.
                let (own_armed, watched, scouted, moved, gone) = Box::pin(async {
                    let kept_own = armed.own.take();
                    // A watch of the deletion alone serves the wait that armed it only: its blocker may not be ours.
                    if let Some(s) = armed.scouting.as_deref_mut() {
                        s.gone = None;
                    }
                    let scouting = armed.scouting.as_deref_mut();
                    let any_blocker = is_active(Mutant::KeptWatchOfAnotherBlocker);
                    let reused = scouting
                        .and_then(|s| s.kept.take())
                        .filter(|k| k.path == line.path || any_blocker);
                    // Any change of the session's state from here on (a disconnection) makes a deletion of the blocker
                    // a reason to list again, not to hold (see the contract); from the arming of a reused watch on.
                    let (moved, reused) = match reused {
                        Some(k) if !is_active(Mutant::KeptWatchFreshState) => {
                            (k.moved, Some((k.known_first, k.marked, k.trust_change, k.watch)))
                        }
                        Some(k) => {
                            let mut moved = self.backend().session();
                            moved.borrow_and_update();
                            (moved, Some((k.known_first, k.marked, k.trust_change, k.watch)))
                        }
                        None => {
                            let mut moved = self.backend().session();
                            moved.borrow_and_update();
                            (moved, None)
                        }
                    };
                    let scout = armed.scouting.as_deref().and_then(|s| s.path.as_deref());
                    // The blocker's deletion alone, where its release will most likely mark it (decision 0092): not
                    // beside a scout or a kept watch, nor where a change of the blocker's data is not trusted.
                    let untrusted = self.ctx.foreign_writes && !is_active(Mutant::GoneWatchUntrusted);
                    let watch_gone = line.watch_gone && scout.is_none() && reused.is_none() && !untrusted;
                    let on = self.backend().on(pinned);
                    let (own_armed, watched, scouted, gone) = tokio::join!(
                        async {
                            match kept_own {
                                Some(w) => Ok(Some((true, w))),
                                None => Ok(self.call(on.get_and_watch(&q.node)).await?.map(|(data, w)| {
                                    (NodeInfo::decode(&data).is_some_and(|i| i.attempt == id.attempt), w)
                                })),
                            }
                        },
                        async {
                            match reused {
                                // Whether nothing is known ahead of the blocker (the new listing may say so), and
                                // whether a change of its data says it held.
                                Some((known_first, marked, trust, w)) => {
                                    Ok(Some((line.first || known_first, marked, trust, w)))
                                }
                                None => Ok(self.call(on.get_and_watch(&line.path)).await?.map(|(data, w)| {
                                    let foreign = self.ctx.foreign_writes && !is_active(Mutant::ForeignWritesTrusted);
                                    let trust = line.change_means_held && written_by_us(&data) && !foreign;
                                    let marked = marked_first(&data);
                                    (line.first || marked, marked, trust, w)
                                })),
                            }
                        },
                        async {
                            match scout {
                                Some(s) => self.call(on.get_and_watch(s)).await.map(|r| Some(r.map(|(_, w)| w))),
                                None => Ok(None),
                            }
                        },
                        async {
                            match watch_gone {
                                true => self.call(on.watch_gone(&line.path)).await,
                                false => Ok(None),
                            }
                        }
                    );
                    (own_armed, watched, scouted, moved, gone)
                })
                .await;
                let (is_ours, watch_own) = match own_armed {
                    Ok(Some(own_armed)) => own_armed,
                    Ok(None) => return Ok(InLine::Missing),
                    Err(Stop::Fail(Error::ConnectionLoss)) => return Ok(InLine::Relist),
                    Err(e) => return Err(e),
                };
                // As a wait that ends in `Relist`: our node's watch is kept for the next wait.
                let relist = |armed: &mut Armed, watch_own| {
                    if is_ours {
                        armed.own = Some(watch_own);
                    }
                    Ok(InLine::Relist)
                };
                let blocker = match watched {
                    Ok(blocker) => blocker,
                    Err(Stop::Fail(Error::ConnectionLoss)) => return relist(armed, watch_own),
                    Err(e) => return Err(e),
                };
                // Only an aid: a watch of the deletion alone that failed (the connection, which the others tell too) is
                // waited without. Whether the change it would follow is trusted is asked when it comes (`gone_told`).
                if let Ok(Some(g)) = gone {
                    armed.scouting.get_or_insert_with(Box::default).gone = Some(g);
                }
                // The scout's watch is this wait's alone: one left from an earlier wait (which ended otherwise before
                // it fired) is dropped.
                let scout_watch = armed.scouting.as_deref_mut().map(|s| &mut s.watch);
                match scouted {
                    Ok(Some(Some(w))) => {
                        if let Some(slot) = scout_watch {
                            *slot = Some(w);
                        }
                    }
                    Ok(None) => {
                        if let Some(slot) = scout_watch {
                            *slot = None;
                        }
                    }
                    // The scout is gone already: list again now, the blocker's watch kept (as at the scout's event).
                    Ok(Some(None)) => {
                        if let Some((known_first, marked, trust_change, watch)) = blocker {
                            armed.keep(&line.path, watch, (known_first, marked, trust_change), moved);
                        }
                        return relist(armed, watch_own);
                    }
                    Err(Stop::Fail(Error::ConnectionLoss)) => return relist(armed, watch_own),
                    // The scout is only a way to list sooner: a scout we may not read (an ACL of another client's node,
                    // found by review, helper-91) is no reason to fail the acquire. The wait goes on without it.
                    Err(Stop::Fail(e)) if !matches!(e, Error::SessionExpired | Error::Closed) => {
                        if let Some(slot) = scout_watch {
                            *slot = None;
                        }
                    }
                    Err(e) => return Err(e),
                }
                let b = blocker.map(|(known_first, marked, trust_change, watch)| Blocker {
                    path: &line.path,
                    watch,
                    known_first,
                    marked,
                    trust_change,
                    pinned,
                    aside: armed.scouting.as_deref_mut(),
                });
                (is_ours, watch_own, moved, b)
            };
            let mut fired = false;
            let watches = Watches {
                own: &mut watch_own,
                fired: &mut fired,
                moved: &moved,
            };
            let out = match &mut b {
                Some(b) => self.wait_on_blocker(watches, b).await,
                None => blocker_gone(line.first, watches).await,
            };
            let out = match (out, b) {
                // The blocker's watch is kept for the next wait (see the contract).
                (
                    Ok(InLine::Scouted),
                    Some(Blocker {
                        watch,
                        known_first,
                        marked,
                        trust_change,
                        ..
                    }),
                ) => {
                    armed.keep(&line.path, watch, (known_first, marked, trust_change), moved);
                    Ok(InLine::Relist)
                }
                (Ok(InLine::Scouted), None) => Ok(InLine::Relist),
                (Ok(InLine::Acquired { .. }), Some(b)) => Ok(InLine::Acquired { through_mark: b.marked }),
                (out, _) => out,
            };
            if is_ours
                && !fired
                && matches!(
                    out,
                    Ok(InLine::Acquired { .. } | InLine::Handed { .. } | InLine::Relist)
                )
            {
                armed.own = Some(watch_own);
            }
            out
        }
    }
}
