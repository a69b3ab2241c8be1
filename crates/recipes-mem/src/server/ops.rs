//! The requests and replies of the wire ([`Op`], [`Reply`]), and running a request on the tree (the watches it sets and
//! fires are in `watches`).

use std::borrow::Cow;

use recipes_core::backend::{ChildOrder, CreateMode, Created, NodeEvent, SessionId, Stat, TreeChange};
use recipes_core::Result;
use tokio::time::Instant;

use super::{Access, State, TreeTx, WatchTx};
use crate::tree::{parent_of, Node};

/// A request, as sent on the wire: its path and data borrowed from the caller while it is applied at once (no
/// copy made only to be dropped; each was an allocation of every request), owned once it waits in a queue.
#[derive(Debug)]
pub(crate) enum Op<'a> {
    Create {
        path: Cow<'a, str>,
        data: Cow<'a, [u8]>,
        mode: CreateMode,
    },
    Children {
        path: Cow<'a, str>,
    },
    Get {
        path: Cow<'a, str>,
    },
    /// An exists-watch: registered (when the node exists) before the reply says whether it exists.
    Exists {
        path: Cow<'a, str>,
        watch: WatchTx,
    },
    /// A data watch with a read of the data.
    GetWatch {
        path: Cow<'a, str>,
        watch: WatchTx,
    },
    /// A watch of the node's deletion alone (ZooKeeper's watch on a node's children, set by a listing of them), with
    /// its existence: registered when the node exists.
    WatchGone {
        path: Cow<'a, str>,
        watch: WatchTx,
    },
    SetData {
        path: Cow<'a, str>,
        data: Cow<'a, [u8]>,
        /// The data version expected (ZooKeeper's), or any.
        version: Option<i32>,
    },
    Delete {
        path: Cow<'a, str>,
    },
    /// A delete of the node the write `czxid` made; a node of that name another write made is left alone.
    DeleteCreated {
        path: Cow<'a, str>,
        czxid: i64,
    },
    /// A transaction of deletes: all or none.
    DeleteAll {
        paths: Vec<String>,
    },
    /// A transaction of a `setData` (any version) and a `delete` of one node: both or neither.
    SetDataAndDelete {
        path: Cow<'a, str>,
        data: Cow<'a, [u8]>,
    },
    /// Catch up with the leader: the one server here is always caught up.
    Sync {
        path: Cow<'a, str>,
    },
    /// A persistent watch on a node and every node below it (ZooKeeper's `addWatch`, recursive).
    AddTreeWatch {
        path: Cow<'a, str>,
        watch: TreeTx,
    },
}

impl<'a> Op<'a> {
    /// A create of `path`.
    pub fn create(path: &'a str, data: &'a [u8], mode: CreateMode) -> Self {
        Op::Create {
            path: path.into(),
            data: data.into(),
            mode,
        }
    }

    /// The request with its own copies of what it borrowed: to wait in a queue.
    pub fn into_owned(self) -> Op<'static> {
        let own = |p: Cow<'a, str>| Cow::Owned(p.into_owned());
        let own_data = |d: Cow<'a, [u8]>| Cow::Owned(d.into_owned());
        match self {
            Op::Create { path, data, mode } => Op::Create {
                path: own(path),
                data: own_data(data),
                mode,
            },
            Op::Children { path } => Op::Children { path: own(path) },
            Op::Get { path } => Op::Get { path: own(path) },
            Op::Exists { path, watch } => Op::Exists { path: own(path), watch },
            Op::GetWatch { path, watch } => Op::GetWatch { path: own(path), watch },
            Op::WatchGone { path, watch } => Op::WatchGone { path: own(path), watch },
            Op::SetData { path, data, version } => Op::SetData {
                path: own(path),
                data: own_data(data),
                version,
            },
            Op::Delete { path } => Op::Delete { path: own(path) },
            Op::DeleteCreated { path, czxid } => Op::DeleteCreated { path: own(path), czxid },
            Op::DeleteAll { paths } => Op::DeleteAll { paths },
            Op::SetDataAndDelete { path, data } => Op::SetDataAndDelete {
                path: own(path),
                data: own_data(data),
            },
            Op::Sync { path } => Op::Sync { path: own(path) },
            Op::AddTreeWatch { path, watch } => Op::AddTreeWatch { path: own(path), watch },
        }
    }

    /// What the request reads and writes of the tree, for partial-order reduction.
    pub(super) fn access(&self, sid: SessionId) -> Access {
        let node = |p: &str| format!("node:{p}");
        let children = |p: &str| format!("children:{}", parent_of(p));
        let (reads, writes) = match self {
            Op::Create { path, .. }
            | Op::Delete { path }
            | Op::DeleteCreated { path, .. }
            | Op::SetDataAndDelete { path, .. } => (vec![], vec![node(path), children(path)]),
            Op::SetData { path, .. } => (vec![], vec![node(path)]),
            Op::DeleteAll { paths } => (vec![], paths.iter().flat_map(|p| [node(p), children(p)]).collect()),
            Op::Children { path } => (vec![format!("children:{path}")], vec![]),
            Op::Get { path } | Op::Exists { path, .. } | Op::GetWatch { path, .. } | Op::WatchGone { path, .. } => {
                (vec![node(path)], vec![])
            }
            Op::Sync { .. } => (vec![], vec![]),
            // Whether a change below the path is reported depends on its order with this: commutes with nothing.
            Op::AddTreeWatch { .. } => return Access::global(),
        };
        Access {
            session: Some(sid),
            reads,
            writes,
            global: false,
            notifies: Vec::new(),
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Op::Create { path, mode, .. } => format!("create {path} ({mode:?})"),
            Op::Children { path } => format!("list {path}"),
            Op::Get { path } => format!("get {path}"),
            Op::Exists { path, .. } => format!("exists+watch {path}"),
            Op::GetWatch { path, .. } => format!("get+watch {path}"),
            Op::WatchGone { path, .. } => format!("watch deletion {path}"),
            Op::SetData { path, .. } => format!("set {path}"),
            Op::Delete { path } => format!("delete {path}"),
            Op::DeleteCreated { path, czxid } => format!("delete {path} if made by {czxid}"),
            Op::DeleteAll { paths } => format!("delete all of {}", paths.join(" ")),
            Op::SetDataAndDelete { path, .. } => format!("set and delete {path}"),
            Op::Sync { path } => format!("sync {path}"),
            Op::AddTreeWatch { path, .. } => format!("watch tree {path}"),
        }
    }

    pub(super) fn is_ephemeral_create(&self) -> bool {
        matches!(
            self,
            Op::Create {
                mode: CreateMode::Ephemeral | CreateMode::EphemeralSequential,
                ..
            }
        )
    }

    /// Whether the request writes (or is a `sync`): such a request waits for the orphans of a broken connection.
    pub(super) fn is_write_or_sync(&self) -> bool {
        matches!(
            self,
            Op::Sync { .. }
                | Op::Create { .. }
                | Op::Delete { .. }
                | Op::DeleteCreated { .. }
                | Op::DeleteAll { .. }
                | Op::SetData { .. }
                | Op::SetDataAndDelete { .. }
        )
    }
}

/// A reply, as received.
#[derive(Debug)]
pub(crate) enum Reply {
    Created(Created),
    Names(Vec<String>),
    Node(Option<(Vec<u8>, Stat)>),
    Exists(Option<Stat>),
    Done,
    /// A conditioned delete found a node of that name that another write made, and left it.
    Kept,
}

/// The server answers each request with the reply of its kind: the accessors name the request.
impl Reply {
    /// The reply to a create.
    pub fn created(self) -> Created {
        match self {
            Reply::Created(c) => c,
            other => other.unexpected("create"),
        }
    }

    /// The reply to a list of children.
    pub fn names(self) -> Vec<String> {
        match self {
            Reply::Names(n) => n,
            other => other.unexpected("list"),
        }
    }

    /// The reply to a get (with or without a watch).
    pub fn node(self) -> Option<(Vec<u8>, Stat)> {
        match self {
            Reply::Node(n) => n,
            other => other.unexpected("get"),
        }
    }

    /// The reply to an exists-watch.
    pub fn exists(self) -> Option<Stat> {
        match self {
            Reply::Exists(s) => s,
            other => other.unexpected("exists"),
        }
    }

    /// The reply to a request that returns nothing (`op`: a delete, a sync).
    pub fn done(self, op: &str) {
        match self {
            Reply::Done => {}
            other => other.unexpected(op),
        }
    }

    /// The reply to a conditioned delete: whether it deleted.
    pub fn deleted(self) -> bool {
        match self {
            Reply::Done => true,
            Reply::Kept => false,
            other => other.unexpected("conditioned delete"),
        }
    }

    fn unexpected(self, op: &str) -> ! {
        unreachable!("the in-memory server answers a {op} with its own reply kind, got {self:?}")
    }

    /// For traces.
    pub(super) fn describe(result: &Result<Reply>) -> String {
        match result {
            Ok(Reply::Created(c)) => format!("created {}", c.path),
            Ok(Reply::Names(n)) => format!("{} children", n.len()),
            Ok(Reply::Node(Some(_))) => "node".into(),
            Ok(Reply::Node(None)) => "no node".into(),
            Ok(Reply::Exists(Some(_))) => "exists (watch set)".into(),
            Ok(Reply::Exists(None)) => "does not exist".into(),
            Ok(Reply::Done) => "ok".into(),
            Ok(Reply::Kept) => "another's node, kept".into(),
            Err(e) => format!("error: {e}"),
        }
    }
}

impl State {
    /// Runs a request on the tree, as session `sid`. `orphan`: a request of a broken connection, which sets no watch
    /// (ZooKeeper binds a watch to the connection it came on; its caller was told the connection was lost).
    pub(super) fn execute(&mut self, sid: SessionId, op: Op<'_>, orphan: bool, now: Instant) -> Result<Reply> {
        self.requests += 1;
        match op {
            Op::Create { path, data, mode } => {
                let created = self.tree.create(sid, &path, data.into_owned(), mode, now)?;
                self.fire_trees(&created.path, TreeChange::Created, now);
                Ok(Reply::Created(created))
            }
            Op::Children { path } => self.tree.children(&path).map(|mut names| {
                self.listed_names += names.len() as u64;
                if self.tree.order == ChildOrder::Sequence {
                    super::unordered::in_no_order(&mut names);
                }
                Reply::Names(names)
            }),
            Op::Get { path } => Ok(Reply::Node(self.tree.node(&path).map(Node::read))),
            Op::Exists { path, .. } | Op::WatchGone { path, .. } if orphan => {
                Ok(Reply::Exists(self.tree.node(&path).map(Node::stat)))
            }
            Op::GetWatch { path, .. } if orphan => Ok(Reply::Node(self.tree.node(&path).map(Node::read))),
            Op::Exists { path, watch } => {
                let node = self.watch(sid, path.into_owned(), true, watch);
                Ok(Reply::Exists(node.map(Node::stat)))
            }
            Op::GetWatch { path, watch } => {
                let node = self.watch(sid, path.into_owned(), false, watch);
                Ok(Reply::Node(node.map(Node::read)))
            }
            Op::WatchGone { path, watch } => {
                let node = self.watch_gone(sid, path.into_owned(), watch);
                Ok(Reply::Exists(node.map(Node::stat)))
            }
            Op::SetData { path, data, version } => {
                self.tree.set_data(&path, &data, version)?;
                self.fire_watches(&path, NodeEvent::DataChanged, now);
                Ok(Reply::Done)
            }
            Op::Delete { path } => {
                self.tree.delete(&path, now)?;
                self.fire_watches(&path, NodeEvent::Deleted, now);
                Ok(Reply::Done)
            }
            Op::DeleteCreated { path, czxid } => {
                let node = self
                    .tree
                    .node(&path)
                    .ok_or_else(|| recipes_core::Error::NoNode(path.to_string()))?;
                if node.stat().czxid != czxid {
                    return Ok(Reply::Kept);
                }
                self.tree.delete(&path, now)?;
                self.fire_watches(&path, NodeEvent::Deleted, now);
                Ok(Reply::Done)
            }
            Op::DeleteAll { paths } => {
                // ZooKeeper runs a transaction's operations one after the other on a copy, and commits the copy only
                // when all succeed: a path twice, or a node with children outside the deletes before it, fails it.
                for (i, path) in paths.iter().enumerate() {
                    if path == "/" {
                        return Err(recipes_core::Error::Refused("cannot delete /".into()));
                    }
                    let node = self
                        .tree
                        .node(path)
                        .ok_or_else(|| recipes_core::Error::NoNode(path.clone()))?;
                    if paths[..i].contains(path) {
                        return Err(recipes_core::Error::NoNode(path.clone()));
                    }
                    let prefix = format!("{path}/");
                    let still = node
                        .children
                        .iter()
                        .any(|c| !paths[..i].contains(&format!("{prefix}{c}")));
                    if still {
                        return Err(recipes_core::Error::NotEmpty(path.clone()));
                    }
                }
                for path in &paths {
                    self.tree.delete(path, now)?;
                    self.fire_watches(path, NodeEvent::Deleted, now);
                }
                Ok(Reply::Done)
            }
            Op::SetDataAndDelete { path, data } => {
                // As ZooKeeper's transaction: the delete is checked before anything is applied, then both apply, each
                // firing its watches.
                self.tree.check_delete(&path)?;
                self.tree.set_data(&path, &data, None)?;
                self.fire_watches(&path, NodeEvent::DataChanged, now);
                self.tree.delete(&path, now)?;
                self.fire_watches(&path, NodeEvent::Deleted, now);
                Ok(Reply::Done)
            }
            Op::Sync { .. } => Ok(Reply::Done),
            Op::AddTreeWatch { path, watch } => {
                if !orphan {
                    self.watches.add_tree(sid, path.into_owned(), watch);
                }
                Ok(Reply::Done)
            }
        }
    }

    /// Writes a node's data from outside every session (an operator's tool, a peer's `Revoker`), firing its watches.
    pub fn operator_set_data(&mut self, path: &str, data: &[u8], now: Instant) -> Result<()> {
        self.tree.set_data(path, data, None)?;
        self.fire_watches(path, NodeEvent::DataChanged, now);
        self.touch();
        Ok(())
    }

    /// Deletes a node from outside every session (an operator's tool), firing its watches.
    pub fn operator_delete(&mut self, path: &str, now: Instant) -> Result<()> {
        self.tree.delete(path, now)?;
        self.fire_watches(path, NodeEvent::Deleted, now);
        self.touch();
        Ok(())
    }
}
