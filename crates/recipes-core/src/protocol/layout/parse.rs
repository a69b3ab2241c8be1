//! Parsing the layouts' node names: the native, Curator and kazoo names and ZooKeeper's sequence suffix.

use uuid::Uuid;

use super::{family, Family, NodeKind, ParsedNode, SortKey, CURATOR_LATCH_MARKER, CURATOR_MARKERS};

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
    } else if b.len() < 35 + 10 {
        // ZooKeeper's suffix is ten characters at least (`%010d`, a sign counted): shorter is no sequence.
        return None;
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

pub(super) fn parse_curator(name: &str) -> Option<ParsedNode> {
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
        .unwrap_or_default();
    Some(ParsedNode {
        kind,
        attempt,
        seq: parse_seq(suffix),
        key: SortKey::Text(suffix.to_owned()),
        weight: 1,
    })
}

pub(crate) fn parse_kazoo(name: &str) -> Option<ParsedNode> {
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
        Uuid::parse_str(prefix).unwrap_or_default()
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
