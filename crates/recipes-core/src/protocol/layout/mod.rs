//! Node naming: how a lock node's name carries its kind, its attempt id and its sequence number.

use std::fmt;

use uuid::Uuid;

mod family;

pub use family::Family;
pub(crate) use family::{is_kazoo_lease, may_be_unqueued, CURATOR_SEMAPHORE_LEASES, CURATOR_SEMAPHORE_MUTEX};

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
    /// Every layout.
    pub const ALL: [Layout; 3] = [Layout::Native, Layout::Curator, Layout::Kazoo];

    /// The name prefix to create an ephemeral-sequential node with (the server appends the sequence).
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
        }
    }

    /// Parses a child name; `None` for names this layout did not make.
    pub fn parse(self, name: &str) -> Option<ParsedNode> {
        match self {
            Layout::Native => parse_native(name),
            Layout::Curator => parse_curator(name),
            Layout::Kazoo => parse_kazoo(name),
        }
    }

    /// The family of the nodes this layout's queued recipes make and honour.
    pub fn queue_family(self) -> Family {
        match self {
            Layout::Native => Family::NativeQueue,
            Layout::Curator => Family::CuratorLock,
            Layout::Kazoo => Family::Kazoo,
        }
    }

    /// The family of the nodes of `kind` in this layout: a semaphore's permits are a family of their own.
    pub fn family(self, kind: NodeKind) -> Family {
        match (self, kind) {
            (Layout::Native, NodeKind::Permit) => Family::NativeSemaphore,
            (Layout::Curator, NodeKind::Permit) => Family::CuratorLease,
            (Layout::Kazoo, NodeKind::Permit) => Family::KazooLease,
            _ => self.queue_family(),
        }
    }

    /// Whether a waiting reader watches the *first* writer ahead of it (Curator) rather than the nearest one.
    pub fn reader_watches_first_writer(self) -> bool {
        self == Layout::Curator
    }
}

/// The value of each ASCII hex digit (either case); `0xff` for every other byte.
static HEX_DIGITS: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Parses a native name: `<tag>-<id>-[<weight>-]<seq>` as ZooKeeper makes it, or without the sequence,
/// `<tag>-<id>-[<weight>-]`, as a backend that orders children by creation makes it ([`ChildOrder::Creation`]:
/// `seq` is `None` and the key is a placeholder, `Number(0)`; the listing's order is the key).
///
/// [`ChildOrder::Creation`]: crate::backend::ChildOrder::Creation
pub(crate) fn parse_native(name: &str) -> Option<ParsedNode> {
    let b = name.as_bytes();
    // tag, '-', 32 hex, '-', [weight, '-',] [seq (10 digits, or '-' and up to 10 digits)]
    if b.len() < 35 || b[1] != b'-' || b[34] != b'-' {
        return None;
    }
    let kind = match b[0] {
        b'L' => NodeKind::Lock,
        b'R' => NodeKind::Read,
        b'W' => NodeKind::Write,
        b'S' => NodeKind::Permit,
        _ => return None,
    };
    // The attempt id, decoded as it is checked: every listing parses every name, so this is on the hot path (a table
    // lookup per digit, one test for all 32 at the end).
    let (mut id, mut bad) = (0u128, 0u8);
    for &c in &b[2..34] {
        let digit = HEX_DIGITS[usize::from(c)];
        bad |= digit;
        id = id << 4 | u128::from(digit & 0x0f);
    }
    if bad & 0x80 != 0 {
        return None;
    }
    // Bytes 0..35 are ASCII (checked above), so 35 is a character boundary.
    let rest = &name[35..];
    // A permit node's weight above 1: digits and a '-' before the sequence (a sequence starts with a digit only when
    // it is not negative, and then has no '-').
    let split = if kind == NodeKind::Permit {
        rest.split_once('-')
    } else {
        None
    };
    let (weight, seq_text) = match split {
        Some((w, s)) if !w.is_empty() => {
            let weight: u32 = w.parse().ok().filter(|n: &u32| *n > 1 && n.to_string() == w)?;
            (weight, s)
        }
        _ => (1, rest),
    };
    let seq = if seq_text.is_empty() {
        None
    } else {
        Some(parse_seq(seq_text)?)
    };
    Some(ParsedNode {
        kind,
        attempt: Uuid::from_u128(id),
        seq,
        key: SortKey::Number(seq.map_or(0, i64::from)),
        weight,
    })
}

fn parse_curator(name: &str) -> Option<ParsedNode> {
    // Curator's own rule: a node is a contender of the kind whose marker it carries; it sorts by the text after the
    // last occurrence of the marker.
    let (kind, at, marker) = CURATOR_MARKERS
        .iter()
        .find_map(|(m, k)| name.rfind(m).map(|i| (*k, i, *m)))?;
    // `LeaderLatch`'s names are only ever Curator's protected ones (`_c_<uuid>-latch-<seq>`): a name that merely
    // contains the marker is no candidate (found by review: a stray `x-latch-` sorted ahead of every node).
    if marker == CURATOR_LATCH_MARKER && family::curator_family(name) != Some(Family::CuratorLatch) {
        return None;
    }
    let suffix = &name[at + marker.len()..];
    let attempt = name
        .strip_prefix("_c_")
        .and_then(|rest| rest.get(..36))
        .and_then(|u| Uuid::parse_str(u).ok())
        .filter(|_| name.get(39..40) == Some("-"))
        .unwrap_or(Uuid::nil());
    Some(ParsedNode {
        kind,
        attempt,
        seq: parse_seq(suffix),
        key: SortKey::Text(suffix.to_owned()),
        weight: 1,
    })
}

fn parse_kazoo(name: &str) -> Option<ParsedNode> {
    // kazoo's rule: `(__lock__|__rlock__)(-?\d{10})$`, searched anywhere in the name; and, beyond kazoo, the sequence
    // as ZooKeeper writes it from -999999999 to -1 (`%010d`: a sign and nine digits), which kazoo does not match.
    let (head, seq_text) = split_kazoo_seq(name)?;
    let (kind, prefix) = if let Some(p) = head.strip_suffix("__rlock__") {
        (NodeKind::Read, p)
    } else if let Some(p) = head.strip_suffix("__lock__") {
        (NodeKind::Lock, p)
    } else {
        return None;
    };
    let attempt = if prefix.len() == 32 && prefix.bytes().all(|c| c.is_ascii_hexdigit()) {
        Uuid::parse_str(prefix).unwrap_or(Uuid::nil())
    } else {
        Uuid::nil()
    };
    Some(ParsedNode {
        kind,
        attempt,
        seq: seq_text.parse().ok(),
        key: SortKey::Text(seq_text.to_owned()),
        weight: 1,
    })
}

/// Splits a name ending in a sequence as ZooKeeper writes it (ten characters: ten digits, or a sign and nine or ten
/// digits) into the head and the sequence text.
fn split_kazoo_seq(name: &str) -> Option<(&str, &str)> {
    let digits_at = name.len().checked_sub(10)?;
    let tail = name.get(digits_at..)?;
    let tail_digits = tail.strip_prefix('-').unwrap_or(tail);
    if !tail_digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if tail.starts_with('-') {
        // "-000000001" … "-999999999": nine digits after the sign.
        if crate::mutants::is_active(crate::mutants::Mutant::KazooNineDigits) {
            return None;
        }
        return Some((&name[..digits_at], tail));
    }
    // Ten digits, possibly after a sign (-1000000000 … -2147483648).
    match name[..digits_at].strip_suffix('-') {
        Some(h) => Some((h, &name[digits_at - 1..])),
        None => Some((&name[..digits_at], tail)),
    }
}

/// Parses ZooKeeper's sequence suffix: `%010d` of a signed 32-bit counter, so 10 digits, or a `-` and digits once
/// the counter has wrapped past `i32::MAX`.
pub fn parse_seq(s: &str) -> Option<i32> {
    if let Some(digits) = s.strip_prefix('-') {
        if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        return s.parse().ok();
    }
    // The common case, read in one pass: ten digits, at most `i32::MAX`.
    if s.len() != 10 {
        return None;
    }
    let mut n = 0i64;
    for c in s.bytes() {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i64::from(c - b'0');
    }
    i32::try_from(n).ok()
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Native => "native",
            Layout::Curator => "curator",
            Layout::Kazoo => "kazoo",
        })
    }
}

#[cfg(test)]
mod tests;
