//! The watches the sessions set on the nodes, and their firing: ZooKeeper's one-shot watches, in the order they were
//! set. A session whose connection is down misses its watches' firing: ZooKeeper drops a connection's watches with
//! it, and the client sets them again on its reconnection (`setWatches`), each answered from the node as it is then
//! (see `State::watches_set_again`).

use std::collections::HashMap;

use recipes_core::backend::{NodeEvent, SessionId, TreeChange, TreeEvent};
use tokio::time::Instant;

use super::{State, TreeTx, WatchTx};
use crate::tree::Node;

/// One watch set by a session, on the node of this creation id at this version of its data: ZooKeeper's data watch,
/// which a read or an existence check of the node sets, and a change of its data or its deletion fires (an exists
/// watch too: the backends' deletion watches set one again after a change of data, as the ZooKeeper backend's does).
#[derive(Debug)]
pub(super) struct Watch {
    session: SessionId,
    tx: WatchTx,
    czxid: i64,
    version: i32,
    /// Its place among the watches set (see `Watches::set`).
    set: u64,
    /// A watch of the node's deletion alone (ZooKeeper's child watch on a node without children): a change of data
    /// leaves it set.
    gone_only: bool,
}

impl Watch {
    /// The session that set it.
    pub(super) fn session(&self) -> SessionId {
        self.session
    }

    /// Its client's end of the channel.
    pub(super) fn into_tx(self) -> WatchTx {
        self.tx
    }

    /// Hands `event` to its client.
    pub(super) fn send(self, event: recipes_core::Result<NodeEvent>) {
        let _ = self.tx.send(event);
    }

    /// What the watch reports when its session sets it again after a reconnection, the node at `path` being `now`
    /// (ZooKeeper's `setWatches`, answered from the node as it stands): deleted when it is gone; a change of data
    /// when its data changed, or when another node of the name stands there (ZooKeeper compares the node's last
    /// change with the last the client saw, and reports a node made again as changed, helper-103; a deletion watch
    /// tells it by its creation id when it sets itself again); nothing (the watch stays) otherwise.
    fn set_again(&self, now: Option<&Node>) -> Option<NodeEvent> {
        let Some(node) = now else {
            return Some(NodeEvent::Deleted);
        };
        // A child watch is answered from the node's children: of a node made again, they changed (ZooKeeper compares
        // its `pzxid`); a change of data is none of its business.
        let changed = node.czxid != self.czxid || (node.version != self.version && !self.gone_only);
        changed.then_some(NodeEvent::DataChanged)
    }
}

/// A path's list of watches is pruned of dropped ones once it is this long, and then each time it has doubled since.
const PRUNE_FROM: usize = 8;

/// The watches set on the nodes, by path, each path's in the order they were set. Hashed by path, as the tree's nodes
/// are (see `Tree`): what leaves the table in several paths' watches leaves it sorted by path.
#[derive(Debug, Default)]
pub(crate) struct Watches {
    by_path: HashMap<String, PathWatches, foldhash::fast::FixedState>,
    /// Counts the watches set: each watch's place in the order its session set them.
    set: u64,
    /// The tree watches (ZooKeeper's persistent recursive), in the order they were set: few, each on a subtree.
    trees: Vec<TreeWatch>,
    /// Tree watches whose session then set a one-shot watch on their root: they report deletions only, until the
    /// connection goes (see `silence_trees`).
    silenced: Vec<TreeWatch>,
}

/// A persistent watch of a session on a node and every node below it: kept while its session's connection is up
/// and its stream is not dropped.
#[derive(Debug)]
struct TreeWatch {
    session: SessionId,
    root: String,
    tx: TreeTx,
}

impl TreeWatch {
    fn covers(&self, path: &str) -> bool {
        match path.strip_prefix(self.root.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/') || self.root == "/",
            None => false,
        }
    }
}

/// One path's watches, in the order they were set, and the length at which dropped ones are pruned next.
#[derive(Debug, Default)]
pub(crate) struct PathWatches {
    list: Vec<Watch>,
    prune_at: usize,
}

impl Watches {
    /// Takes out the watches on `path` that `event` fires (its deletion fires them all, a change of its data all but
    /// the watches of its deletion alone), in order, but those of sessions whose connection is `down`: they stay, to
    /// be set again at the reconnection.
    pub(super) fn fired(&mut self, path: &str, event: NodeEvent, down: impl Fn(SessionId) -> bool) -> Vec<Watch> {
        let Some(ws) = self.by_path.get_mut(path) else {
            return Vec::new();
        };
        let fires = |w: &Watch| !down(w.session) && (event == NodeEvent::Deleted || !w.gone_only);
        let (fire, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut ws.list).into_iter().partition(fires);
        ws.list = keep;
        if ws.list.is_empty() {
            self.by_path.remove(path);
        }
        fire
    }

    /// Sets a watch on `path`. Watches whose receiver was dropped go, as the ZooKeeper client removes a dropped
    /// watcher's watch (found by review: an observer re-arming its watch of a leader that stays piled them up): when
    /// the path's list has doubled since it was last pruned, so that each watch costs O(1) amortised however the live
    /// and the dropped ones interleave (found by review: pruning at fixed lengths rescanned a list that stayed at one;
    /// pruning at every watch made a herd on one node quadratic).
    pub(super) fn add(&mut self, path: String, watch: Watch) {
        let ws = self.by_path.entry(path).or_default();
        if ws.list.len() >= ws.prune_at.max(PRUNE_FROM) {
            ws.list.retain(|w| !w.tx.is_closed());
            ws.prune_at = 2 * ws.list.len();
        }
        ws.list.push(watch);
    }

    /// The sessions with a watch on `path`, or on a tree it is in (a silenced one too: it reports deletions).
    pub(super) fn sessions_on<'a>(&'a self, path: &'a str) -> impl Iterator<Item = SessionId> + 'a {
        self.by_path
            .get(path)
            .into_iter()
            .flat_map(|ws| ws.list.iter().map(|w| w.session))
            .chain(
                self.trees
                    .iter()
                    .chain(&self.silenced)
                    .filter(move |t| t.covers(path))
                    .map(|t| t.session),
            )
    }

    /// Sets a tree watch of `session` on `root`.
    pub(super) fn add_tree(&mut self, session: SessionId, root: String, tx: TreeTx) {
        self.trees.retain(|t| !t.tx.is_closed());
        self.trees.push(TreeWatch { session, root, tx });
    }

    /// The tree watches that a change of `path` fires (their session and channel), in the order they were set, the
    /// silenced ones after the others and only for a deletion (see `silence_trees`); those whose stream was dropped go.
    fn trees_on(&mut self, path: &str, change: TreeChange) -> Vec<(SessionId, TreeTx)> {
        if self.trees.is_empty() && self.silenced.is_empty() {
            return Vec::new();
        }
        self.trees.retain(|t| !t.tx.is_closed());
        self.silenced.retain(|t| !t.tx.is_closed());
        let silenced = self.silenced.iter().filter(|_| change == TreeChange::Deleted);
        self.trees
            .iter()
            .chain(silenced)
            .filter(|t| t.covers(path))
            .map(|t| (t.session, t.tx.clone()))
            .collect()
    }

    /// Drops the tree watches of `session`: its connection broke, or the session ended (ZooKeeper drops a
    /// connection's watches; the client sets a persistent watch again at its reconnection, but the events between are
    /// lost, ZOOKEEPER-4698, so a tree watch here ends at the break and its user sets a new one).
    pub(super) fn drop_trees_of(&mut self, session: SessionId) {
        self.trees.retain(|t| t.session != session);
        self.silenced.retain(|t| t.session != session);
    }

    /// A one-shot watch of `session` on `path`: ZooKeeper before 3.9 keeps one watch mode per path and session
    /// (ZOOKEEPER-4466), so it replaces the session's tree watch rooted there, in the server's table of data watches.
    /// That watch reports no creation and no change of data any more, and does not end either (found by review,
    /// helper-109, on ZooKeeper 3.8.0); the server keeps it in its table of child watches too, where the one-shot
    /// watch does not go, and from there it still reports every deletion (found by review, helper-114, on the same
    /// server). Until the connection goes.
    fn silence_trees(&mut self, session: SessionId, path: &str) {
        if self.trees.is_empty() {
            return;
        }
        let (silenced, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.trees)
            .into_iter()
            .partition(|t| t.session == session && t.root == path);
        self.trees = kept;
        self.silenced.extend(silenced);
    }

    /// How many tree watches are silenced (see `silence_trees`; not those whose stream was dropped).
    pub(crate) fn silenced_trees(&self) -> usize {
        self.silenced.iter().filter(|t| !t.tx.is_closed()).count()
    }

    /// How many tree watches are set (silenced ones included; not those whose stream was dropped).
    pub(crate) fn trees(&self) -> usize {
        let live = |t: &&TreeWatch| !t.tx.is_closed();
        self.trees.iter().filter(live).count() + self.silenced.iter().filter(live).count()
    }

    /// How many watches are set (tree watches, silenced ones too, included; not those whose stream was dropped, which
    /// ZooKeeper's client removes at once and this server when it next looks).
    pub(crate) fn count(&self) -> usize {
        self.by_path.values().map(|ws| ws.list.len()).sum::<usize>() + self.trees()
    }

    /// Takes out every watch of session `sid`, path by path in order: an order that depends on the paths alone, not
    /// on the table's history of inserts and removals, nor on the platform (found by review, helper-73: the model
    /// checker treats events on different nodes as commuting, and replays a schedule recorded on another machine).
    pub(super) fn take_session(&mut self, sid: SessionId) -> Vec<WatchTx> {
        self.take_session_by_path(sid)
            .into_iter()
            .flat_map(|(_, ws)| ws)
            .map(|w| w.tx)
            .collect()
    }

    /// Takes out every watch of session `sid`, with its path, path by path in order (see `take_session`).
    pub(super) fn take_session_by_path(&mut self, sid: SessionId) -> Vec<(String, Vec<Watch>)> {
        let mut taken: Vec<(String, Vec<Watch>)> = Vec::new();
        for (path, ws) in &mut self.by_path {
            let (mine, rest): (Vec<_>, Vec<_>) =
                std::mem::take(&mut ws.list).into_iter().partition(|w| w.session == sid);
            ws.list = rest;
            if !mine.is_empty() {
                taken.push((path.clone(), mine));
            }
        }
        taken.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.by_path.retain(|_, ws| !ws.list.is_empty());
        taken
    }
}

impl State {
    /// Sets a watch of `sid` on `path` when the node exists (as ZooKeeper sets the watch of a read that finds the
    /// node); returns the node. `exists`: an existence check, whose watch ZooKeeper sets on a missing node too (the
    /// backends drop that one at once, but it has replaced a tree watch rooted there all the same).
    pub(super) fn watch(&mut self, sid: SessionId, path: String, exists: bool, tx: WatchTx) -> Option<&Node> {
        if exists || self.tree.node(&path).is_some() {
            self.watches.silence_trees(sid, &path);
        }
        self.add_watch(sid, path, tx, false)
    }

    /// Sets a watch of `sid` on the deletion alone of the node at `path`, when it exists; returns the node. It
    /// leaves tree watches as they are: no recipe sets one on a tree's root (see `GoneWatches::watch_gone`).
    pub(super) fn watch_gone(&mut self, sid: SessionId, path: String, tx: WatchTx) -> Option<&Node> {
        self.add_watch(sid, path, tx, true)
    }

    fn add_watch(&mut self, sid: SessionId, path: String, tx: WatchTx, gone_only: bool) -> Option<&Node> {
        let node = self.tree.node(&path)?;
        self.watches.set += 1;
        let watch = Watch {
            session: sid,
            tx,
            czxid: node.czxid,
            version: node.version,
            set: self.watches.set,
            gone_only,
        };
        self.watches.add(path, watch);
        Some(node)
    }

    /// Fires the watches on `path` that `event` triggers, but those of sessions whose connection is down (ZooKeeper
    /// dropped them with the connection: their client sets them again at its reconnection).
    pub(super) fn fire_watches(&mut self, path: &str, event: NodeEvent, now: Instant) {
        let sessions = &self.sessions;
        let down = |sid: SessionId| sessions.get(&sid).is_some_and(|r| r.alive && !r.up);
        for w in self.watches.fired(path, event, down) {
            self.deliver_event(path, w, Ok(event), now);
        }
        let change = match event {
            NodeEvent::Deleted => TreeChange::Deleted,
            _ => TreeChange::DataChanged,
        };
        self.fire_trees(path, change, now);
    }

    /// Fires the tree watches over `path` (after its node's own watches, as ZooKeeper's client hands them out).
    pub(super) fn fire_trees(&mut self, path: &str, change: TreeChange, now: Instant) {
        for (sid, tx) in self.watches.trees_on(path, change) {
            let event = TreeEvent {
                path: path.to_owned(),
                change,
            };
            self.deliver_tree_event(sid, tx, event, now);
        }
    }

    /// The client of `sid`, its connection made again, sets its watches again (ZooKeeper's `setWatches`): each is
    /// answered from its node as it is now (see `Watch::set_again`), the events sent last-set first. ZooKeeper's
    /// client sends its watches in the order of its own table, which is neither the order of the changes nor of the
    /// watches: after a reconnection the watch on our own node may report its deletion after the watch on the node
    /// ahead of ours reports that one's, though ours went first (`Mutant::TrustAcrossReconnection`). Of the orders
    /// ZooKeeper may take, last-set first is the one that breaks a rule trusting a watch set first to report first (a
    /// waiter sets the watch on its own node before the one on its blocker).
    pub(super) fn watches_set_again(&mut self, sid: SessionId, now: Instant) {
        let mut set: Vec<(String, Watch)> = self
            .watches
            .take_session_by_path(sid)
            .into_iter()
            .flat_map(|(path, ws)| ws.into_iter().map(move |w| (path.clone(), w)))
            .collect();
        set.sort_unstable_by_key(|(_, w)| std::cmp::Reverse(w.set));
        for (path, w) in set {
            match w.set_again(self.tree.node(&path)) {
                Some(event) => self.deliver_event(&path, w, Ok(event), now),
                None => self.watches.add(path, w),
            }
        }
    }
}
