//! Node naming: how a lock node's name carries its kind, its attempt id and its sequence number.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

use crate::error::Error;

/// What a lock node stands for in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A fair (or reentrant) mutex contender: excludes everyone.
    Lock,
    /// A reader: excludes writers only.
    Read,
    /// A writer: excludes everyone.
    Write,
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
    /// creation order across the wrap of the server's signed counter. The exclusive recipe uses the fixed name
    /// `lock`.
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
    /// The sequence number the server appended (negative after the counter wrapped), when it reads as one.
    pub seq: Option<i32>,
    /// Where the node sorts among its contenders.
    pub key: SortKey,
}

/// The fixed node name of the exclusive recipe.
pub const EXCLUSIVE_NODE: &str = "lock";

const CURATOR_MARKERS: [(&str, NodeKind); 3] = [
    ("__WRIT__", NodeKind::Write),
    ("__READ__", NodeKind::Read),
    ("lock-", NodeKind::Lock),
];

impl Layout {
    /// Every layout.
    pub const ALL: [Layout; 3] = [Layout::Native, Layout::Curator, Layout::Kazoo];

    /// The name prefix to create an ephemeral-sequential node with (the server appends the sequence).
    pub fn prefix(self, kind: NodeKind, attempt: Uuid) -> String {
        let mut buf = Uuid::encode_buffer();
        match self {
            Layout::Native => {
                let tag = match kind {
                    NodeKind::Lock => 'L',
                    NodeKind::Read => 'R',
                    NodeKind::Write => 'W',
                };
                let mut s = String::with_capacity(35);
                s.push(tag);
                s.push('-');
                s.push_str(attempt.simple().encode_lower(&mut buf));
                s.push('-');
                s
            }
            Layout::Curator => {
                let marker = match kind {
                    NodeKind::Lock => "lock-",
                    NodeKind::Read => "__READ__",
                    NodeKind::Write => "__WRIT__",
                };
                format!("_c_{}-{marker}", attempt.hyphenated().encode_lower(&mut buf))
            }
            Layout::Kazoo => {
                let marker = match kind {
                    NodeKind::Read => "__rlock__",
                    NodeKind::Lock | NodeKind::Write => "__lock__",
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

    /// Whether a waiting reader watches the *first* writer ahead of it (Curator) rather than the nearest one.
    pub fn reader_watches_first_writer(self) -> bool {
        self == Layout::Curator
    }
}

fn parse_native(name: &str) -> Option<ParsedNode> {
    let b = name.as_bytes();
    // tag, '-', 32 hex, '-', seq (10 digits, or '-' and up to 10 digits)
    if b.len() < 35 + 10 || b[1] != b'-' || b[34] != b'-' {
        return None;
    }
    let kind = match b[0] {
        b'L' => NodeKind::Lock,
        b'R' => NodeKind::Read,
        b'W' => NodeKind::Write,
        _ => return None,
    };
    let hex = name.get(2..34)?;
    if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let attempt = Uuid::parse_str(hex).ok()?;
    let seq = parse_seq(name.get(35..)?)?;
    Some(ParsedNode {
        kind,
        attempt,
        seq: Some(seq),
        key: SortKey::Number(i64::from(seq)),
    })
}

fn parse_curator(name: &str) -> Option<ParsedNode> {
    // Curator's own rule: a node is a contender of the kind whose marker it carries; it sorts by the text after the
    // last occurrence of the marker.
    let (kind, at, marker) = CURATOR_MARKERS
        .iter()
        .find_map(|(m, k)| name.rfind(m).map(|i| (*k, i, *m)))?;
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

/// A family of lock nodes: the nodes of one recipe of one layout, which only that recipe (and its peers) honours.
///
/// Every recipe recognises the nodes of *every* family on its path, and refuses with
/// [`Error::ForeignLock`](crate::Error::ForeignLock) to hold beside a family other than its own: two recipes that
/// ignored each other's nodes could both hold. Children of no family are not lock nodes and are left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Family {
    /// The exclusive recipe's fixed node `lock`.
    Exclusive,
    /// The native queue of the fair, reentrant, read and write recipes: `L-`, `R-`, `W-<id>-<seq>`.
    NativeQueue,
    /// Native semaphore leases: `S-<id>-<seq>`.
    NativeSemaphore,
    /// Curator's mutex and read/write lock: `_c_<uuid>-lock-<seq>`, `…-__READ__<seq>`, `…-__WRIT__<seq>`.
    CuratorLock,
    /// Curator's semaphore leases: `_c_<uuid>-lease-<seq>`.
    CuratorLease,
    /// kazoo's `Lock`, `ReadLock` and `WriteLock`: `…__lock__<seq>`, `…__rlock__<seq>`.
    Kazoo,
}

impl Family {
    /// The family of a child name, or `None` when it is no lock node this library knows.
    ///
    /// ```
    /// use recipes_core::layout::Family;
    /// assert_eq!(Family::of("lock"), Some(Family::Exclusive));
    /// assert_eq!(Family::of("L-0123456789abcdef0123456789abcdef-0000000007"), Some(Family::NativeQueue));
    /// assert_eq!(Family::of("_c_8c2b6b0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e-lock-0000000007"), Some(Family::CuratorLock));
    /// assert_eq!(Family::of("0123456789abcdef0123456789abcdef__rlock__0000000007"), Some(Family::Kazoo));
    /// assert_eq!(Family::of("config"), None);
    /// ```
    pub fn of(name: &str) -> Option<Family> {
        if name == EXCLUSIVE_NODE {
            return Some(Family::Exclusive);
        }
        if parse_native(name).is_some() {
            return Some(Family::NativeQueue);
        }
        if is_native_semaphore(name) {
            return Some(Family::NativeSemaphore);
        }
        if let Some(f) = curator_family(name) {
            return Some(f);
        }
        if parse_kazoo(name).is_some() {
            return Some(Family::Kazoo);
        }
        None
    }

    /// What the family is, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Family::Exclusive => "exclusive (native, fixed node)",
            Family::NativeQueue => "native fair/reentrant/read/write",
            Family::NativeSemaphore => "native semaphore",
            Family::CuratorLock => "Curator mutex or read/write",
            Family::CuratorLease => "Curator semaphore",
            Family::Kazoo => "kazoo lock",
        }
    }
}

fn is_native_semaphore(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= 45
        && b[0] == b'S'
        && b[1] == b'-'
        && b[34] == b'-'
        && name
            .get(2..34)
            .is_some_and(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
        && name.get(35..).and_then(parse_seq).is_some()
}

/// Curator's protected names `_c_<uuid>-<marker><seq>`, and the unprotected `<marker><seq>`.
fn curator_family(name: &str) -> Option<Family> {
    let rest = match name.strip_prefix("_c_") {
        Some(r) => {
            let uuid = r.get(..36)?;
            Uuid::parse_str(uuid).ok()?;
            r.get(36..)?.strip_prefix('-')?
        }
        None => name,
    };
    for (marker, family) in [
        ("lock-", Family::CuratorLock),
        ("__READ__", Family::CuratorLock),
        ("__WRIT__", Family::CuratorLock),
        ("lease-", Family::CuratorLease),
    ] {
        if let Some(seq) = rest.strip_prefix(marker) {
            return parse_seq(seq).map(|_| family);
        }
    }
    None
}

/// Parses ZooKeeper's sequence suffix: `%010d` of a signed 32-bit counter, so 10 digits, or a `-` and digits once
/// the counter has wrapped past `i32::MAX`.
pub fn parse_seq(s: &str) -> Option<i32> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if !s.starts_with('-') && s.len() != 10 {
        return None;
    }
    s.parse().ok()
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

impl FromStr for Layout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "native" => Ok(Layout::Native),
            "curator" => Ok(Layout::Curator),
            "kazoo" => Ok(Layout::Kazoo),
            _ => Err(Error::UnknownLayout(s.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn native_round_trip() {
        let id = Uuid::new_v4();
        for kind in [NodeKind::Lock, NodeKind::Read, NodeKind::Write] {
            for seq in [0, 7, 2_147_483_647, -2_147_483_648, -1] {
                let name = format!("{}{:010}", Layout::Native.prefix(kind, id), seq);
                assert_eq!(
                    Layout::Native.parse(&name),
                    Some(ParsedNode {
                        kind,
                        attempt: id,
                        seq: Some(seq),
                        key: SortKey::Number(i64::from(seq)),
                    }),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn foreign_names_are_ignored() {
        for name in [
            "lock",
            "",
            "L-",
            "X-0123456789abcdef0123456789abcdef-0000000001",
            "L-0123456789abcdef0123456789abcdeg-0000000001",
            "L-0123456789abcdef0123456789abcdef-000000001",
            "L-0123456789abcdef0123456789abcdef-00000000012",
            "L-0123456789abcdef0123456789abcdef_0000000001",
            "_c_8c2b-lock-0000000001",
            "abcdef__lock__0000000001",
        ] {
            assert_eq!(Layout::Native.parse(name), None, "{name}");
        }
    }

    #[test]
    fn seq_parsing() {
        assert_eq!(parse_seq("0000000042"), Some(42));
        assert_eq!(parse_seq("-2147483648"), Some(i32::MIN));
        assert_eq!(parse_seq("2147483648"), None);
        assert_eq!(parse_seq("42"), None);
        assert_eq!(parse_seq("-"), None);
        assert_eq!(parse_seq("+000000042"), None);
    }

    #[test]
    fn layout_names() {
        assert_eq!("native".parse::<Layout>(), Ok(Layout::Native));
        assert_eq!("Curator".parse::<Layout>(), Ok(Layout::Curator));
        assert_eq!("kazoo".parse::<Layout>(), Ok(Layout::Kazoo));
        assert!(matches!("nope".parse::<Layout>(), Err(Error::UnknownLayout(_))));
    }

    #[test]
    fn peer_names() {
        let c = Layout::Curator;
        let p = c
            .parse("_c_8c2b6b0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e-lock-0000000007")
            .unwrap();
        assert_eq!(
            (p.kind, p.seq, p.key.clone()),
            (NodeKind::Lock, Some(7), SortKey::Text("0000000007".into()))
        );
        assert_eq!(
            p.attempt,
            Uuid::parse_str("8c2b6b0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e").unwrap()
        );
        assert_eq!(
            c.parse("_c_8c2b6b0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e-__READ__0000000001")
                .unwrap()
                .kind,
            NodeKind::Read
        );
        assert_eq!(
            c.parse("_c_8c2b6b0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e-__WRIT__0000000001")
                .unwrap()
                .kind,
            NodeKind::Write
        );
        // Curator counts an unprotected name too; its attempt id is unknown.
        let p = c.parse("lock-0000000003").unwrap();
        assert_eq!((p.attempt, p.seq), (Uuid::nil(), Some(3)));
        assert_eq!(c.parse("readme"), None);
        let k = Layout::Kazoo;
        let p = k.parse("0123456789abcdef0123456789abcdef__lock__0000000042").unwrap();
        assert_eq!((p.kind, p.seq), (NodeKind::Lock, Some(42)));
        assert_eq!(
            k.parse("0123456789abcdef0123456789abcdef__rlock__0000000042")
                .unwrap()
                .kind,
            NodeKind::Read
        );
        assert_eq!(k.parse("x__lock__-2147483648").unwrap().seq, Some(i32::MIN));
        // ZooKeeper writes -1 as "-000000001": kazoo's `-?\d{10}` does not match it, but we must find our own node.
        assert_eq!(k.parse("x__lock__-000000001").unwrap().seq, Some(-1));
        assert_eq!(k.parse("x__lock__-999999999").unwrap().seq, Some(-999_999_999));
        assert_eq!(k.parse("x__lock__-1000000000").unwrap().seq, Some(-1_000_000_000));
        assert_eq!(k.parse("x__lock__000000042"), None);
        assert_eq!(k.parse("__lock__"), None);
        assert_eq!(k.parse("x__block__0000000001"), None);
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,60}|[_a-z]{0,10}(__lock__|__rlock__|lock-|__READ__|__WRIT__)-?[0-9]{0,11}") {
            for layout in Layout::ALL {
                let _ = layout.parse(&s);
            }
        }

        #[test]
        fn written_names_parse_back(bits in any::<u128>(), seq in any::<i32>(), k in 0u8..3) {
            let kind = [NodeKind::Lock, NodeKind::Read, NodeKind::Write][k as usize];
            let id = Uuid::from_u128(bits);
            for layout in Layout::ALL {
                let name = format!("{}{:010}", layout.prefix(kind, id), seq);
                let p = layout.parse(&name);
                // kazoo's WriteLock and Lock share one name.
                let want_kind = if layout == Layout::Kazoo && kind == NodeKind::Write { NodeKind::Lock } else { kind };
                let p = p.expect("parses");
                prop_assert_eq!(p.kind, want_kind);
                prop_assert_eq!(p.attempt, id);
                prop_assert_eq!(p.seq, Some(seq));
                // And every name a layout writes is of that layout's family.
                prop_assert_eq!(Family::of(&name), Some(layout.queue_family()), "{}", name);
            }
        }
    }
}
