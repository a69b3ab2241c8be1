//! The data tree: ZooKeeper's node semantics, without sessions, watches or the network.

mod emptied;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use recipes_core::backend::{ChildOrder, CreateMode, Created, SessionId, Stat};
use recipes_core::{Error, Result};
use tokio::time::Instant;

use emptied::Emptied;
pub(crate) use emptied::ReapChecks;

#[derive(Debug)]
pub(crate) struct Node {
    pub data: Vec<u8>,
    pub czxid: i64,
    pub ephemeral_owner: SessionId,
    pub container: bool,
    pub children: BTreeSet<String>,
    /// The child-change counter; the next sequential child's sequence.
    pub cversion: i32,
    /// The data-change counter (ZooKeeper's `version`): 0 until the data is first set.
    pub version: i32,
    pub ctime: i64,
}

impl Node {
    fn new(data: Vec<u8>, czxid: i64, ephemeral_owner: SessionId, container: bool, ctime: i64) -> Self {
        Node {
            data,
            czxid,
            ephemeral_owner,
            container,
            children: BTreeSet::new(),
            cversion: 0,
            version: 0,
            ctime,
        }
    }

    pub fn stat(&self) -> Stat {
        Stat::new(self.czxid, self.ephemeral_owner, self.ctime)
    }

    /// What a read returns: the data and the stat.
    pub fn read(&self) -> (Vec<u8>, Stat) {
        (self.data.clone(), self.stat())
    }
}

/// The wall clock's milliseconds at a moment of the tree's clock: a node's `ctime` comes from the time of the request
/// that made it, without a read of the wall clock per create (a test's paused clock moves it too).
#[derive(Debug, Clone, Copy)]
struct WallClock {
    at: Instant,
    millis: i64,
    /// The last time given.
    last: i64,
}

impl WallClock {
    fn now() -> Self {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        WallClock {
            at: Instant::now(),
            millis,
            last: millis,
        }
    }

    /// The time at `now`, never before the last one given: `now` is read before the server's lock, so a later
    /// create may bring an earlier one, where ZooKeeper's leader stamps `ctime` in the order of the transactions
    /// (helper-58).
    fn millis_at(&mut self, now: Instant) -> i64 {
        let millis = (self.millis)
            .saturating_add(now.saturating_duration_since(self.at).as_millis() as i64)
            .max(self.last);
        self.last = millis;
        millis
    }
}

pub(crate) fn parent_of(path: &str) -> &str {
    split(path).0
}

/// A path's parent and its last name, found by one search for the last `/` (each search passes over the whole name:
/// two per create and delete were about 3% of an in-memory acquire + release).
fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        None => ("/", path),
        Some(i) => (&path[..i], &path[i + 1..]),
    }
}

/// Appends ZooKeeper's sequence suffix, as its `%010d`: ten characters at least, zero-padded (a negative sequence
/// number after the counter wraps counts its sign in the ten: `-000000001`). Written by hand for the usual
/// non-negative case: the formatter cost about 1% of an acquire + release.
fn push_sequence(full: &mut String, seq: i32) {
    if seq < 0 {
        let _ = write!(full, "{seq:010}");
        return;
    }
    let mut digits = [b'0'; 10];
    let mut rest = seq.unsigned_abs();
    for d in digits.iter_mut().rev() {
        *d = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    full.extend(digits.iter().map(|&d| char::from(d)));
}

/// The tree of nodes, with the transaction counter and the containers waiting to be reaped.
#[derive(Debug)]
pub(crate) struct Tree {
    /// By path, hashed as ZooKeeper's `DataTree` keeps them: a lookup costs the same however many nodes there are
    /// (a B-tree's grew with a queue's length, every key sharing the lock path; eighteenth session,
    /// docs/performance.md). The table's order is never seen: what leaves it several at a time leaves it sorted
    /// (`nodes`, `ephemerals_of`), so that it depends on the paths alone (the model checker replays schedules).
    nodes: HashMap<String, Node, foldhash::fast::FixedState>,
    zxid: i64,
    /// Empty containers that once had a child, and when they became empty: ZooKeeper's reaper deletes them on a
    /// later pass, not at once.
    emptied: Emptied,
    /// How sequential nodes are named and children listed: ZooKeeper's sequence in the name, or etcd's order of
    /// creation (no suffix; lists in czxid order).
    pub order: ChildOrder,
    wall: WallClock,
}

impl Default for Tree {
    fn default() -> Self {
        let wall = WallClock::now();
        let mut nodes = HashMap::default();
        nodes.insert("/".to_owned(), Node::new(Vec::new(), 0, 0, false, wall.millis));
        Tree {
            nodes,
            zxid: 0,
            emptied: Emptied::default(),
            order: ChildOrder::Sequence,
            wall,
        }
    }
}

impl Tree {
    pub fn node(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// The nodes, by path in order.
    pub fn nodes(&self) -> impl Iterator<Item = (&String, &Node)> {
        let mut all: Vec<_> = self.nodes.iter().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
    }

    /// Creates a node as ZooKeeper's `create` at `now` (its `ctime`). Its path was checked as the request was sent
    /// (`Op::check_paths`).
    pub fn create(
        &mut self,
        sid: SessionId,
        path: &str,
        data: Vec<u8>,
        mode: CreateMode,
        now: Instant,
    ) -> Result<Created> {
        if path == "/" {
            return Err(Error::Refused("\"/\": can not create root node".to_owned()));
        }
        let parent_path = parent_of(path);
        let parent = self
            .nodes
            .get_mut(parent_path)
            .ok_or_else(|| Error::NoNode(parent_path.to_owned()))?;
        if parent.ephemeral_owner != 0 {
            return Err(Error::Refused(format!(
                "ephemeral node {parent_path} cannot have children"
            )));
        }
        let full = match mode {
            CreateMode::EphemeralSequential if self.order == ChildOrder::Sequence => {
                let mut full = String::with_capacity(path.len() + 11);
                full.push_str(path);
                push_sequence(&mut full, parent.cversion);
                full
            }
            _ => path.to_owned(),
        };
        // The name follows the parent's path and its `/` (the sequence suffix included): no second search.
        let name = full[if parent_path == "/" { 1 } else { parent_path.len() + 1 }..].to_owned();
        if parent.children.contains(&name) {
            return Err(Error::NodeExists(full));
        }
        parent.children.insert(name);
        parent.cversion = parent.cversion.wrapping_add(1);
        self.emptied.remove(parent_path);
        self.zxid += 1;
        let ephemeral = matches!(mode, CreateMode::Ephemeral | CreateMode::EphemeralSequential);
        let node = Node::new(
            data,
            self.zxid,
            if ephemeral { sid } else { 0 },
            mode == CreateMode::Container,
            self.wall.millis_at(now),
        );
        self.nodes.insert(full.clone(), node);
        Ok(Created {
            path: full,
            czxid: self.zxid,
        })
    }

    /// A client's delete: the node must exist and have no children.
    pub fn delete(&mut self, path: &str, now: Instant) -> Result<()> {
        self.check_delete(path)?;
        self.remove(path, now);
        Ok(())
    }

    /// Whether a client's delete of `path` would succeed, and its error when not (a transaction checks before it
    /// applies anything). Its path was checked as the request was sent (`Op::check_paths`).
    pub fn check_delete(&self, path: &str) -> Result<()> {
        if path == "/" {
            return Err(Error::Refused("cannot delete /".into()));
        }
        let node = self.nodes.get(path).ok_or_else(|| Error::NoNode(path.to_owned()))?;
        if !node.children.is_empty() {
            return Err(Error::NotEmpty(path.to_owned()));
        }
        Ok(())
    }

    /// Removes a childless node (a delete, an ephemeral of an ended session, a reaped container). Returns whether
    /// it existed.
    pub fn remove(&mut self, path: &str, now: Instant) -> bool {
        if self.nodes.remove(path).is_none() {
            return false;
        }
        self.emptied.remove(path);
        self.zxid += 1;
        let (parent, name) = split(path);
        let Some(p) = self.nodes.get_mut(parent) else {
            unreachable!("a node's parent stays while it has children, and `/` is never removed")
        };
        p.children.remove(name);
        p.cversion = p.cversion.wrapping_add(1);
        if p.container && p.children.is_empty() {
            self.emptied.insert(parent, now);
        }
        true
    }

    /// Sets a node's data, when its data version is `version` (any version: `None`), as ZooKeeper's `setData`.
    pub fn set_data(&mut self, path: &str, data: &[u8], version: Option<i32>) -> Result<()> {
        let node = self.nodes.get_mut(path).ok_or_else(|| Error::NoNode(path.to_owned()))?;
        if version.is_some_and(|v| v != node.version) {
            return Err(Error::Backend(format!("bad version of {path}: its data changed")));
        }
        node.data = data.to_vec();
        node.version = node.version.wrapping_add(1);
        self.zxid += 1;
        Ok(())
    }

    /// The names of `path`'s children: sorted by name (ZooKeeper's order is none in particular), or in the order of
    /// their creation when the tree orders by creation (etcd's listing sorted by create revision).
    pub fn children(&self, path: &str) -> Result<Vec<String>> {
        let node = self.nodes.get(path).ok_or_else(|| Error::NoNode(path.to_owned()))?;
        let mut names: Vec<String> = node.children.iter().cloned().collect();
        if self.order == ChildOrder::Creation {
            let base = if path == "/" { "" } else { path };
            let czxid = |name: &String| self.nodes.get(&format!("{base}/{name}")).map_or(0, |n| n.czxid);
            names.sort_by_cached_key(czxid);
        }
        Ok(names)
    }

    /// The ephemeral nodes of `sid`, by path in reverse order: an expiry deletes them (and fires other sessions'
    /// watches) in an order of the paths alone, not of the table's history or the platform (found by review,
    /// helper-73: the model checker treats events on different nodes as commuting, and replays schedules recorded
    /// elsewhere). ZooKeeper's own order is its hash set's (`9, 5, 6, 7, 8, 1, 2, 3, 4, 10, 0, 11` for twelve nodes of
    /// a queue, helper-109); of the orders it may take, the last made first is the one that breaks a view of a queue
    /// trusting its head to go first. No recipe may rely on any.
    pub fn ephemerals_of(&self, sid: SessionId) -> Vec<String> {
        let mut paths: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.ephemeral_owner == sid)
            .map(|(p, _)| p.clone())
            .collect();
        paths.sort_unstable_by(|a, b| b.cmp(a));
        paths
    }

    /// Deletes the containers that were empty at a check of the reaper's by `now` (ZooKeeper's container reaper);
    /// returns the paths removed. A parent emptied by a check is emptied at that check's time, and goes at the next
    /// one, which may also lie before `now` (a catch-up that came late, as the model checker's quiet ticks do: found
    /// by review, helper-126, where a nested container waited for the catch-up, not for the reaper's next pass).
    pub fn reap(&mut self, now: Instant, checks: ReapChecks) -> Vec<String> {
        let mut removed = Vec::new();
        loop {
            let due = self.emptied.due(|at| checks.after(at).is_some_and(|pass| pass <= now));
            if due.is_empty() {
                return removed;
            }
            for (p, emptied) in due {
                self.emptied.remove(&p);
                let pass = checks.after(emptied).unwrap_or(now);
                let empty = self.nodes.get(&p).is_some_and(|n| n.children.is_empty());
                if empty && p != "/" && self.remove(&p, pass) {
                    removed.push(p);
                }
            }
        }
    }

    /// The earliest time a waiting container can be reaped.
    pub fn next_reap(&self, checks: ReapChecks) -> Option<Instant> {
        self.emptied.first().and_then(|at| checks.after(at))
    }

    /// Sets the next sequence handed out under `parent`.
    pub fn set_next_sequence(&mut self, parent: &str, next: i32) -> Result<()> {
        let node = self
            .nodes
            .get_mut(parent)
            .ok_or_else(|| Error::NoNode(parent.to_owned()))?;
        node.cversion = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{push_sequence, ReapChecks, Tree};
    use recipes_core::backend::CreateMode;
    use std::time::Duration;
    use tokio::time::Instant;

    /// Nested containers go at consecutive passes of the reaper, the inner one at the first pass after it was
    /// emptied, its parent at the next, even when the server catches up with the reaper many passes late (found by
    /// review, helper-126: the parent counted as emptied at the catch-up, and waited for a pass after it).
    #[test]
    fn nested_containers_go_at_consecutive_passes_when_caught_up_late() {
        let origin = Instant::now();
        let s = Duration::from_secs;
        let checks = ReapChecks { origin, every: s(4) };
        // `/jobs/a` emptied at 1 s.
        let emptied = || {
            let mut t = Tree::default();
            t.create(1, "/jobs", Vec::new(), CreateMode::Container, origin).unwrap();
            t.create(1, "/jobs/a", Vec::new(), CreateMode::Container, origin)
                .unwrap();
            t.create(1, "/jobs/a/x", Vec::new(), CreateMode::Ephemeral, origin)
                .unwrap();
            t.delete("/jobs/a/x", origin + s(1)).unwrap();
            t
        };
        // Caught up on time: the inner container at the pass at 4 s, its parent at the one at 8 s.
        let mut on_time = emptied();
        assert_eq!(on_time.reap(origin + s(5), checks), ["/jobs/a"]);
        assert_eq!(on_time.next_reap(checks), Some(origin + s(8)));
        assert_eq!(on_time.reap(origin + s(8), checks), ["/jobs"]);
        // Caught up at 31 s: both went by then.
        let mut late = emptied();
        assert_eq!(late.reap(origin + s(31), checks), ["/jobs/a", "/jobs"]);
        assert_eq!(late.next_reap(checks), None);
    }

    /// The hand-written suffix is the formatter's `{:010}`, at the edges of the counter and across its wrap.
    #[test]
    fn sequence_suffix_is_zookeepers() {
        for seq in [0, 1, 9, 10, 42, 999_999_999, 1_000_000_000, i32::MAX, -1, -42, i32::MIN] {
            let mut s = String::from("/a/n-");
            push_sequence(&mut s, seq);
            assert_eq!(s, format!("/a/n-{seq:010}"), "sequence {seq}");
        }
    }
}
