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

/// The naming scheme of lock nodes under a path.
///
/// # Contract
/// A name the layout makes for an attempt parses back to the same kind and attempt id, with the sequence the
/// server appended; names the layout does not recognise parse to `None` and are ignored by every recipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Layout {
    /// This library's own layout: `L-<id>-<seq>`, `R-<id>-<seq>`, `W-<id>-<seq>`, where `<id>` is the attempt's
    /// UUID in 32 lower-case hex digits and `<seq>` the server's 10-digit sequence; the exclusive recipe uses the
    /// fixed name `lock`.
    #[default]
    Native,
}

/// A lock node name, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedNode {
    /// The kind of contender.
    pub kind: NodeKind,
    /// The attempt id embedded in the name.
    pub attempt: Uuid,
    /// The sequence number the server appended (negative after the counter wrapped).
    pub seq: i32,
}

/// The fixed node name of the exclusive recipe.
pub const EXCLUSIVE_NODE: &str = "lock";

impl Layout {
    /// The name prefix to create an ephemeral-sequential node with (the server appends the sequence).
    pub fn prefix(self, kind: NodeKind, attempt: Uuid) -> String {
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
                s.push_str(attempt.simple().encode_lower(&mut Uuid::encode_buffer()));
                s.push('-');
                s
            }
        }
    }

    /// Parses a child name; `None` for names this layout did not make.
    pub fn parse(self, name: &str) -> Option<ParsedNode> {
        match self {
            Layout::Native => {
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
                Some(ParsedNode { kind, attempt, seq })
            }
        }
    }
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
        })
    }
}

impl FromStr for Layout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "native" => Ok(Layout::Native),
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
                    Some(ParsedNode { kind, attempt: id, seq }),
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
        assert!(matches!("nope".parse::<Layout>(), Err(Error::UnknownLayout(_))));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,60}") {
            let _ = Layout::Native.parse(&s);
        }

        #[test]
        fn written_names_parse_back(bits in any::<u128>(), seq in any::<i32>(), k in 0u8..3) {
            let kind = [NodeKind::Lock, NodeKind::Read, NodeKind::Write][k as usize];
            let id = Uuid::from_u128(bits);
            let name = format!("{}{:010}", Layout::Native.prefix(kind, id), seq);
            prop_assert_eq!(Layout::Native.parse(&name), Some(ParsedNode { kind, attempt: id, seq }));
        }
    }
}
