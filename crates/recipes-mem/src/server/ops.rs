//! The requests and replies of the wire, running a request on the tree, and the watches it sets and fires.

use recipes_core::{CreateMode, Created, NodeEvent, Result, SessionId, Stat};
use tokio::time::Instant;

use super::{Access, State, WatchTx};

/// A request, as sent on the wire.
#[derive(Debug)]
pub(crate) enum Op {
    Create {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
    },
    Children {
        path: String,
    },
    Get {
        path: String,
    },
    /// An exists-watch: registered (when the node exists) before the reply says whether it exists.
    Exists {
        path: String,
        watch: WatchTx,
    },
    /// A data watch with a read of the data.
    GetWatch {
        path: String,
        watch: WatchTx,
    },
    SetData {
        path: String,
        data: Vec<u8>,
    },
    Delete {
        path: String,
    },
    /// Catch up with the leader: the one server here is always caught up.
    Sync {
        path: String,
    },
}

impl Op {
    /// A create of `path`.
    pub fn create(path: &str, data: &[u8], mode: CreateMode) -> Op {
        Op::Create {
            path: path.to_owned(),
            data: data.to_vec(),
            mode,
        }
    }

    /// What the request reads and writes of the tree, for partial-order reduction.
    pub(super) fn access(&self, sid: SessionId) -> Access {
        let node = |p: &str| format!("node:{p}");
        let children = |p: &str| format!("children:{}", crate::tree::parent_of(p));
        let (reads, writes) = match self {
            Op::Create { path, .. } | Op::Delete { path } => (vec![], vec![node(path), children(path)]),
            Op::SetData { path, .. } => (vec![], vec![node(path)]),
            Op::Children { path } => (vec![format!("children:{path}")], vec![]),
            Op::Get { path } | Op::Exists { path, .. } | Op::GetWatch { path, .. } => (vec![node(path)], vec![]),
            Op::Sync { .. } => (vec![], vec![]),
        };
        Access {
            session: Some(sid),
            reads,
            writes,
            global: false,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Op::Create { path, mode, .. } => format!("create {path} ({mode:?})"),
            Op::Children { path } => format!("list {path}"),
            Op::Get { path } => format!("get {path}"),
            Op::Exists { path, .. } => format!("exists+watch {path}"),
            Op::GetWatch { path, .. } => format!("get+watch {path}"),
            Op::SetData { path, .. } => format!("set {path}"),
            Op::Delete { path } => format!("delete {path}"),
            Op::Sync { path } => format!("sync {path}"),
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
}

/// A reply, as received.
#[derive(Debug)]
pub(crate) enum Reply {
    Created(Created),
    Names(Vec<String>),
    Node(Option<(Vec<u8>, Stat)>),
    Exists(Option<Stat>),
    Done,
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

    fn unexpected(self, op: &str) -> ! {
        unreachable!("the in-memory server answers a {op} with its own reply kind, got {self:?}")
    }
}

/// What a watch waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WatchKind {
    /// Deletion only (an exists-watch).
    Deletion,
    /// Deletion or a change of data.
    Data,
}

impl State {
    /// Runs a request on the tree, as session `sid`.
    pub(super) fn execute(&mut self, sid: SessionId, op: Op, now: Instant) -> Result<Reply> {
        match op {
            Op::Create { path, data, mode } => {
                let created = self.tree.create(sid, &path, &data, mode)?;
                Ok(Reply::Created(created))
            }
            Op::Children { path } => self.tree.children(&path).map(Reply::Names),
            Op::Get { path } => Ok(Reply::Node(self.tree.node(&path).map(|n| (n.data.clone(), n.stat())))),
            Op::Exists { path, watch } => {
                let stat = self.tree.node(&path).map(|n| n.stat());
                if stat.is_some() {
                    self.watches
                        .entry(path)
                        .or_default()
                        .push((sid, WatchKind::Deletion, watch));
                }
                Ok(Reply::Exists(stat))
            }
            Op::GetWatch { path, watch } => {
                let found = self.tree.node(&path).map(|n| (n.data.clone(), n.stat()));
                if found.is_some() {
                    self.watches
                        .entry(path)
                        .or_default()
                        .push((sid, WatchKind::Data, watch));
                }
                Ok(Reply::Node(found))
            }
            Op::SetData { path, data } => {
                self.tree.set_data(&path, &data)?;
                self.fire_changed(&path, now);
                Ok(Reply::Done)
            }
            Op::Delete { path } => {
                self.tree.delete(&path, now)?;
                self.fire_deleted(&path, now);
                Ok(Reply::Done)
            }
            Op::Sync { .. } => Ok(Reply::Done),
        }
    }

    pub(super) fn fire_deleted(&mut self, path: &str, now: Instant) {
        if let Some(ws) = self.watches.remove(path) {
            for (sid, _, tx) in ws {
                self.deliver_event(sid, tx, Ok(NodeEvent::Deleted), now);
            }
        }
    }

    fn fire_changed(&mut self, path: &str, now: Instant) {
        let Some(ws) = self.watches.get_mut(path) else { return };
        let (fire, keep): (Vec<_>, Vec<_>) = std::mem::take(ws)
            .into_iter()
            .partition(|(_, k, _)| *k == WatchKind::Data);
        *ws = keep;
        if ws.is_empty() {
            self.watches.remove(path);
        }
        for (sid, _, tx) in fire {
            self.deliver_event(sid, tx, Ok(NodeEvent::DataChanged), now);
        }
    }

    /// Deletes a node from outside every session (an operator's tool), firing its watches.
    pub fn operator_delete(&mut self, path: &str, now: Instant) -> Result<()> {
        self.tree.delete(path, now)?;
        self.fire_deleted(path, now);
        self.touch();
        Ok(())
    }
}
