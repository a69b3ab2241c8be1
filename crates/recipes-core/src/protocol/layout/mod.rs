//! Node naming: how a lock node's name carries its kind, its attempt id and its sequence number.

use std::fmt;

use uuid::Uuid;

mod family;
mod parse;

pub use family::Family;
pub(crate) use family::{is_kazoo_lease, may_be_unqueued, CURATOR_SEMAPHORE_LEASES, CURATOR_SEMAPHORE_MUTEX};
use parse::parse_curator;
pub use parse::parse_seq;
pub(crate) use parse::{parse_kazoo, parse_native};

/// What a lock node stands for in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A fair (or reentrant) mutex contender: excludes everyone.
    Lock,
    /// A reader: excludes writers only.
    Read,
    /// A writer: excludes everyone.
    Write,
    /// A semaphore's claim on one or more of its permits (see [`ParsedNode::weight`]).
    Permit,
}

impl NodeKind {
    /// Whether a reader must wait for a node of this kind that is ahead of it.
    pub fn blocks_readers(self) -> bool {
        !matches!(self, NodeKind::Read)
    }
}

/// The naming scheme of lock nodes under a path, and the order its peers put them in.
///
/// # Contract
/// A name the layout makes for an attempt parses back to the same kind (for kazoo, `Write` parses back as `Lock`:
/// kazoo's `Lock` and `WriteLock` use one name) and attempt id, with the sequence the server appended; names the
/// layout does not recognise parse to `None` and are ignored by every recipe. Contenders are ordered by
/// [`ParsedNode::key`], exactly as the layout's peer library orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Layout {
    /// This library's own layout: `L-<id>-<seq>`, `R-<id>-<seq>`, `W-<id>-<seq>`, where `<id>` is the attempt's
    /// UUID in 32 lower-case hex digits and `<seq>` the server's sequence; ordered by the sequence as a number, in
    /// creation order across the wrap of the server's signed counter. On a backend that orders children by creation
    /// (etcd: [`ChildOrder::Creation`](crate::backend::ChildOrder::Creation)) the names have no `<seq>` and the
    /// listing's order is the queue's. The exclusive recipe uses the fixed name `lock`.
    #[default]
    Native,
    /// Apache Curator's: `InterProcessMutex` `_c_<uuid>-lock-<seq>`, `InterProcessReadWriteLock`
    /// `_c_<uuid>-__READ__<seq>` / `_c_<uuid>-__WRIT__<seq>`. Ordered as Curator orders them: by the *text* after
    /// the last marker. Readers wait for (and watch) the first writer ahead, as Curator's do.
    Curator,
    /// kazoo's: `Lock` / `WriteLock` `<uuid hex>__lock__<seq>`, `ReadLock` `<uuid hex>__rlock__<seq>`. Only names
    /// ending in `__lock__` or `__rlock__` and `-?` plus ten digits count, as in kazoo; ordered as kazoo orders
    /// them: by the text of that sequence.
    Kazoo,
    /// etcd's own lock, Go's `concurrency.Mutex` (what `etcdctl lock` runs) and `concurrency.Election` (`etcdctl
    /// elect`): `<prefix>/<lease id in hex>`, one key per session, ordered by create revision (the first holds; a
    /// waiter waits for the key created before its own). Only on a backend that orders children by creation (etcd),
    /// and only the fair and reentrant locks and the election (the Go package has no read/write lock or semaphore). A node's name is its session's ([`Layout::session_name`]), so a process's
    /// tasks on one session take turns on one key.
    Etcd,
}

/// The order of contenders under one layout (all keys of one layout are of one variant).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SortKey {
    /// Ordered by number.
    Number(i64),
    /// Ordered as text (byte-wise), as Curator and kazoo compare sequence strings.
    Text(String),
}

/// A lock node name, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedNode {
    /// The kind of contender.
    pub kind: NodeKind,
    /// The attempt id embedded in the name (nil when the name carries none this library can read).
    pub attempt: Uuid,
    /// The sequence number the server appended (negative after the counter wrapped), when it reads as one; `None` for
    /// a native name made without one (a backend that orders children by creation).
    pub seq: Option<i32>,
    /// Where the node sorts among its contenders.
    pub key: SortKey,
    /// How many permits a [`NodeKind::Permit`] node claims (1 for every other kind).
    pub weight: u32,
}

/// The fixed node name of the exclusive recipe.
pub const EXCLUSIVE_NODE: &str = "lock";

const CURATOR_MARKERS: [(&str, NodeKind); 5] = [
    ("__WRIT__", NodeKind::Write),
    ("__READ__", NodeKind::Read),
    ("lock-", NodeKind::Lock),
    ("lease-", NodeKind::Permit),
    // `LeaderLatch`'s candidates: a lock's contenders (Curator's recipes count every child), of a family of their own
    // (`Family::CuratorLatch`), which every other recipe refuses to hold beside.
    (CURATOR_LATCH_MARKER, NodeKind::Lock),
];

/// The marker of Curator's `LeaderLatch` nodes: `_c_<uuid>-latch-<seq>`.
pub(crate) const CURATOR_LATCH_MARKER: &str = "latch-";

/// A Curator node's name before its sequence, as its protection mode makes it: `_c_<uuid>-<marker>`.
pub(crate) fn curator_prefix(attempt: Uuid, marker: &str) -> String {
    format!(
        "_c_{}-{marker}",
        attempt.hyphenated().encode_lower(&mut Uuid::encode_buffer())
    )
}

impl Layout {
    /// Every layout a ZooKeeper path can hold: the native one and its peers'.
    pub const ALL: [Layout; 3] = [Layout::Native, Layout::Curator, Layout::Kazoo];

    /// Every layout, etcd's own lock's included.
    pub const EVERY: [Layout; 4] = [Layout::Native, Layout::Curator, Layout::Kazoo, Layout::Etcd];

    /// The name of a node of the session `session` in the etcd layout: its lease id in lower-case hex, as Go's
    /// `concurrency.Mutex` names it (`fmt.Sprintf("%x", lease)`).
    ///
    /// ```
    /// assert_eq!(recipes_core::layout::Layout::session_name(0x694d7c1a2b3c4d5e), "694d7c1a2b3c4d5e");
    /// ```
    pub fn session_name(session: i64) -> String {
        format!("{session:x}")
    }

    /// The name prefix to create an ephemeral-sequential node with (the server appends the sequence). Empty in the etcd
    /// layout, whose nodes are named by their session ([`Layout::session_name`]).
    pub fn prefix(self, kind: NodeKind, attempt: Uuid) -> String {
        self.weighted_prefix(kind, attempt, 1)
    }

    /// As [`prefix`](Layout::prefix), for a node that claims `weight` permits of a semaphore (the native layout writes
    /// a weight above 1 into the name: `S-<id>-<weight>-<seq>`; the peers' semaphores claim one permit per node).
    pub fn weighted_prefix(self, kind: NodeKind, attempt: Uuid, weight: u32) -> String {
        let mut buf = Uuid::encode_buffer();
        match self {
            Layout::Native => {
                let tag = match kind {
                    NodeKind::Lock => 'L',
                    NodeKind::Read => 'R',
                    NodeKind::Write => 'W',
                    NodeKind::Permit => 'S',
                };
                let mut s = String::with_capacity(40);
                s.push(tag);
                s.push('-');
                s.push_str(attempt.simple().encode_lower(&mut buf));
                s.push('-');
                if kind == NodeKind::Permit && weight > 1 {
                    s.push_str(&weight.to_string());
                    s.push('-');
                }
                s
            }
            Layout::Curator => curator_prefix(
                attempt,
                match kind {
                    NodeKind::Lock => "lock-",
                    NodeKind::Read => "__READ__",
                    NodeKind::Write => "__WRIT__",
                    NodeKind::Permit => "lease-",
                },
            ),
            Layout::Kazoo => {
                let marker = match kind {
                    NodeKind::Read => "__rlock__",
                    NodeKind::Lock | NodeKind::Write | NodeKind::Permit => "__lock__",
                };
                format!("{}{marker}", attempt.simple().encode_lower(&mut buf))
            }
            // Named by the session, not the attempt: see `session_name`.
            Layout::Etcd => String::new(),
        }
    }

    /// Parses a child name; `None` for names this layout did not make.
    pub fn parse(self, name: &str) -> Option<ParsedNode> {
        match self {
            Layout::Native => parse_native(name),
            Layout::Curator => parse_curator(name),
            Layout::Kazoo => parse_kazoo(name),
            Layout::Etcd => family::is_etcd_lease_name(name).then_some(ParsedNode {
                kind: NodeKind::Lock,
                attempt: Uuid::nil(),
                seq: None,
                // The listing's order (by create revision) is the key: see `ChildOrder::Creation`.
                key: SortKey::Number(0),
                weight: 1,
            }),
        }
    }

    /// The family of the nodes this layout's queued recipes make and honour.
    pub fn queue_family(self) -> Family {
        match self {
            Layout::Native => Family::NativeQueue,
            Layout::Curator => Family::CuratorLock,
            Layout::Kazoo => Family::Kazoo,
            Layout::Etcd => Family::EtcdMutex,
        }
    }

    /// The family of the nodes of `kind` in this layout: a semaphore's permits are a family of their own.
    pub fn family(self, kind: NodeKind) -> Family {
        match (self, kind) {
            (Layout::Native, NodeKind::Permit) => Family::NativeSemaphore,
            (Layout::Curator, NodeKind::Permit) => Family::CuratorLease,
            (Layout::Kazoo, NodeKind::Permit) => Family::KazooLease,
            (Layout::Etcd, _) => Family::EtcdMutex,
            _ => self.queue_family(),
        }
    }

    /// Whether a waiting reader watches the *first* writer ahead of it (Curator) rather than the nearest one.
    pub fn reader_watches_first_writer(self) -> bool {
        self == Layout::Curator
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Native => "native",
            Layout::Curator => "curator",
            Layout::Kazoo => "kazoo",
            Layout::Etcd => "etcd",
        })
    }
}

#[cfg(test)]
mod tests;
