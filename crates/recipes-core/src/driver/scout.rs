//! The scout of a wait in line (decision 0079, docs/decisions/0079-a-scout-ahead-of-the-blocker.md): the
//! watches a queued acquire keeps from one wait to the next, the scout's, and the blocker's watch kept through the
//! list the scout's deletion asks for. `wait.rs` and `blocker.rs` decide what they mean.

use std::sync::Arc;
use std::task::Poll;

use tokio::sync::watch;

use crate::backend::{NodeEvent, NodeWatch, SessionStatus};

/// The watches a queued acquire keeps from one wait in line to the next: the one on our own node (armed by the first
/// wait, kept until the node holds), and what a scout needs, boxed (only waits behind a blocker that is not first
/// have a scout, and every waiter's state would otherwise carry it).
#[derive(Default)]
pub(crate) struct Armed {
    pub own: Option<NodeWatch>,
    pub(super) scouting: Option<Box<Scouting>>,
}

impl Armed {
    /// The next wait's scout: the node just ahead of its blocker (see [`Wait::scout`](crate::protocol::Wait::scout)).
    pub fn scout(&mut self, path: Option<String>) {
        match (path, &mut self.scouting) {
            (path, Some(s)) => s.path = path.map(Arc::from),
            (Some(path), None) => {
                self.scouting = Some(Box::new(Scouting {
                    path: Some(Arc::from(path)),
                    ..Scouting::default()
                }))
            }
            (None, None) => {}
        }
    }

    /// Keeps the blocker's watch on `path` for the next wait (see `wait_in_line`), with what was known of the blocker
    /// (`known_first`, `marked`, `trust_change`) and the session's state as of the watch's arming.
    pub(super) fn keep(
        &mut self,
        path: &Arc<str>,
        watch: NodeWatch,
        (known_first, marked, trust_change): (bool, bool, bool),
        moved: watch::Receiver<SessionStatus>,
    ) {
        let kept = KeptBlocker {
            path: path.clone(),
            watch,
            known_first,
            marked,
            trust_change,
            moved,
        };
        self.scouting.get_or_insert_with(Box::default).kept = Some(kept);
    }
}

/// A scout's path, the watch on it while the wait is armed, and the blocker's watch kept through the list it asked for;
/// or, in a wait without a scout, the watch of the blocker's deletion alone (decision 0092), this wait's only.
#[derive(Default)]
pub(crate) struct Scouting {
    /// Shared with the wait's registration in its session's view, when it waits through one.
    pub(super) path: Option<Arc<str>>,
    pub(super) watch: Option<NodeWatch>,
    pub(super) kept: Option<KeptBlocker>,
    pub(super) gone: Option<NodeWatch>,
}

/// The blocker's watch, kept through the list its scout asked for (see `wait_in_line`), to be used by the next wait
/// when it is on the same blocker: the watch, what the wait knew of the blocker, and the session's state as it was
/// when the watch was armed.
pub(super) struct KeptBlocker {
    pub(super) path: Arc<str>,
    pub(super) watch: NodeWatch,
    pub(super) known_first: bool,
    pub(super) marked: bool,
    pub(super) trust_change: bool,
    pub(super) moved: watch::Receiver<SessionStatus>,
}

/// The event of the watch on the scout, if there is one (pending for ever otherwise).
pub(super) fn scout_event(
    scout: Option<&mut Option<NodeWatch>>,
) -> impl std::future::Future<Output = crate::Result<NodeEvent>> + '_ {
    let mut watch = scout.and_then(Option::as_mut);
    std::future::poll_fn(move |cx| match watch.as_mut() {
        Some(w) => w.as_mut().poll(cx),
        None => Poll::Pending,
    })
}
