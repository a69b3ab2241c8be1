//! The watches the sessions set on the nodes, and their firing: ZooKeeper's one-shot watches, in the order they were
//! set.

use std::collections::HashMap;

use recipes_core::backend::{NodeEvent, SessionId};
use tokio::time::Instant;

use super::{State, WatchTx};
use crate::tree::Node;

/// What a watch waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WatchKind {
    /// Deletion only (an exists-watch).
    Deletion,
    /// Deletion or a change of data.
    Data,
}

impl WatchKind {
    fn fires_on(self, event: NodeEvent) -> bool {
        match event {
            NodeEvent::Deleted => true,
            NodeEvent::DataChanged => self == WatchKind::Data,
            _ => false,
        }
    }
}

/// One watch set by a session.
#[derive(Debug)]
pub(super) struct Watch {
    session: SessionId,
    kind: WatchKind,
    tx: WatchTx,
}

/// A path's list of watches is pruned of dropped ones once it is this long, and then each time it has doubled since.
const PRUNE_FROM: usize = 8;

/// The watches set on the nodes, by path, each path's in the order they were set. Hashed by path, as the tree's nodes
/// are (see `Tree`): what leaves the table in several paths' watches leaves it sorted by path.
#[derive(Debug, Default)]
pub(crate) struct Watches(HashMap<String, PathWatches, foldhash::fast::FixedState>);

/// One path's watches, in the order they were set, and the length at which dropped ones are pruned next.
#[derive(Debug, Default)]
pub(crate) struct PathWatches {
    list: Vec<Watch>,
    prune_at: usize,
}

impl Watches {
    /// Takes out the watches on `path` that `event` fires, in order.
    pub(super) fn fired(&mut self, path: &str, event: NodeEvent) -> Vec<Watch> {
        let Some(ws) = self.0.get_mut(path) else {
            return Vec::new();
        };
        let (fire, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut ws.list)
            .into_iter()
            .partition(|w| w.kind.fires_on(event));
        ws.list = keep;
        if ws.list.is_empty() {
            self.0.remove(path);
        }
        fire
    }

    /// Sets a watch on `path`. Watches whose receiver was dropped go, as the ZooKeeper client removes a dropped
    /// watcher's watch (found by review: an observer re-arming its watch of a leader that stays piled them up): when
    /// the path's list has doubled since it was last pruned, so that each watch costs O(1) amortised however the live
    /// and the dropped ones interleave (found by review: pruning at fixed lengths rescanned a list that stayed at one;
    /// pruning at every watch made a herd on one node quadratic).
    pub(super) fn add(&mut self, path: String, watch: Watch) {
        let ws = self.0.entry(path).or_default();
        if ws.list.len() >= ws.prune_at.max(PRUNE_FROM) {
            ws.list.retain(|w| !w.tx.is_closed());
            ws.prune_at = 2 * ws.list.len();
        }
        ws.list.push(watch);
    }

    /// The sessions with a watch on `path`.
    pub(super) fn sessions_on(&self, path: &str) -> impl Iterator<Item = SessionId> + '_ {
        self.0
            .get(path)
            .into_iter()
            .flat_map(|ws| ws.list.iter().map(|w| w.session))
    }

    /// How many watches are set.
    pub(crate) fn count(&self) -> usize {
        self.0.values().map(|ws| ws.list.len()).sum()
    }

    /// Takes out every watch of session `sid`, path by path in order: an order that depends on the paths alone, not
    /// on the table's history of inserts and removals, nor on the platform (found by review, helper-73: the model
    /// checker treats events on different nodes as commuting, and replays a schedule recorded on another machine).
    pub(super) fn take_session(&mut self, sid: SessionId) -> Vec<WatchTx> {
        let mut taken: Vec<(&String, Vec<Watch>)> = Vec::new();
        for (path, ws) in &mut self.0 {
            let (mine, rest): (Vec<_>, Vec<_>) =
                std::mem::take(&mut ws.list).into_iter().partition(|w| w.session == sid);
            ws.list = rest;
            if !mine.is_empty() {
                taken.push((path, mine));
            }
        }
        taken.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let taken: Vec<WatchTx> = taken.into_iter().flat_map(|(_, ws)| ws).map(|w| w.tx).collect();
        self.0.retain(|_, ws| !ws.list.is_empty());
        taken
    }
}

impl State {
    /// Sets a watch of `sid` on `path` when the node exists (as ZooKeeper sets the watch of a read that finds the
    /// node); returns the node.
    pub(super) fn watch(&mut self, sid: SessionId, path: String, kind: WatchKind, tx: WatchTx) -> Option<&Node> {
        let node = self.tree.node(&path)?;
        self.watches.add(path, Watch { session: sid, kind, tx });
        Some(node)
    }

    /// Fires the watches on `path` that `event` triggers.
    pub(super) fn fire_watches(&mut self, path: &str, event: NodeEvent, now: Instant) {
        for w in self.watches.fired(path, event) {
            self.deliver_event(w.session, w.tx, Ok(event), now);
        }
    }
}
