//! Layer 2, the pure half: who holds the lock, and whom a waiter watches. No I/O.

use crate::layout::{Layout, NodeKind};

/// A queued lock node, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// The child name.
    pub name: String,
    /// What it contends for.
    pub kind: NodeKind,
    /// The server's sequence number.
    pub seq: i32,
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Our node holds the lock.
    Acquired,
    /// Wait for the deletion of this child, then decide again.
    Wait {
        /// The child name to watch.
        on: String,
    },
    /// Our node is not among the contenders: it vanished (session expired, deleted by someone).
    Missing,
}

/// Parses `children` with `layout`, drops names it does not recognise, and sorts by sequence number (then name).
///
/// Ordering is by the parsed sequence, never by the whole name: the names start with attempt ids. After ZooKeeper's
/// signed counter wraps, negative sequences sort before every positive one.
pub fn contenders<S: AsRef<str>>(layout: Layout, children: &[S]) -> Vec<Contender> {
    let mut out: Vec<Contender> = children
        .iter()
        .filter_map(|c| {
            let name = c.as_ref();
            layout.parse(name).map(|p| Contender {
                name: name.to_owned(),
                kind: p.kind,
                seq: p.seq,
            })
        })
        .collect();
    out.sort_unstable_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.name.cmp(&b.name)));
    out
}

/// Decides whether the node `ours`, of kind `kind`, holds the lock among the sorted `contenders`.
///
/// # Contract
/// - A [`NodeKind::Lock`] or [`NodeKind::Write`] node holds when it is first; otherwise it waits on its immediate
///   predecessor, whatever that is (no herd: each release wakes one waiter).
/// - A [`NodeKind::Read`] node holds when no `Lock` or `Write` node is ahead of it; otherwise it waits on the
///   nearest such node ahead of it. A reader never waits on a node behind it.
/// - `Missing` when `ours` is not among the contenders.
pub fn decide(kind: NodeKind, contenders: &[Contender], ours: &str) -> Decision {
    let Some(index) = contenders.iter().position(|c| c.name == ours) else {
        return Decision::Missing;
    };
    let ahead = &contenders[..index];
    let blocker = match kind {
        NodeKind::Read => ahead.iter().rev().find(|c| c.kind.blocks_readers()),
        NodeKind::Lock | NodeKind::Write => ahead.last(),
    };
    match blocker {
        None => Decision::Acquired,
        Some(c) => Decision::Wait { on: c.name.clone() },
    }
}

/// Whether a new node of `kind` would have to wait behind the existing `contenders` (used by `try_acquire` to
/// give up before creating anything).
pub fn would_wait(kind: NodeKind, contenders: &[Contender]) -> bool {
    match kind {
        NodeKind::Read => contenders.iter().any(|c| c.kind.blocks_readers()),
        NodeKind::Lock | NodeKind::Write => !contenders.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn name(kind: NodeKind, seq: i32) -> String {
        // A fixed id per (kind, seq) so names are distinct and sort differently from their sequence.
        let id = Uuid::from_u128(u128::MAX - (seq as u32 as u128) * 7919);
        format!("{}{:010}", Layout::Native.prefix(kind, id), seq)
    }

    fn queue(spec: &str) -> Vec<String> {
        spec.split_whitespace()
            .map(|t| {
                let (k, s) = t.split_at(1);
                let kind = match k {
                    "L" => NodeKind::Lock,
                    "R" => NodeKind::Read,
                    "W" => NodeKind::Write,
                    _ => unreachable!(),
                };
                name(kind, s.parse().unwrap())
            })
            .collect()
    }

    /// (queue in arbitrary order, our token, expected: "acq" | "miss" | token waited on)
    const TABLE: &[(&str, &str, &str)] = &[
        ("L1", "L1", "acq"),
        ("L2 L1", "L2", "L1"),
        ("L3 L1 L2", "L3", "L2"),
        ("L1 L2 L3", "L1", "acq"),
        ("L1 L3", "L2", "miss"),
        // ordered by sequence, not by name: a large sequence sorts after a small one whatever the id
        ("L10 L9", "L10", "L9"),
        ("L1000000000 L999999999", "L1000000000", "L999999999"),
        // after the counter wraps, negative sequences come first
        ("L2147483647 L-2147483648", "L2147483647", "L-2147483648"),
        // readers
        ("R1 R2 R3", "R3", "acq"),
        ("W1 R2", "R2", "W1"),
        ("R1 W2 R3", "R3", "W2"),
        ("R1 W2 R3", "R1", "acq"),
        ("W1 R2 W3 R4", "R4", "W3"),
        ("W1 R2 W3 R4", "R2", "W1"),
        ("R1 W2 R3 R4", "R4", "W2"),
        ("L1 R2", "R2", "L1"),
        // writers wait on the immediate predecessor, reader or writer
        ("R1 R2 W3", "W3", "R2"),
        ("W1 W2", "W2", "W1"),
        ("W1 R2 W3", "W3", "R2"),
        ("W1", "W1", "acq"),
    ];

    #[test]
    fn decision_table() {
        for (q, ours, want) in TABLE {
            let names = queue(q);
            let ours_name = queue(ours).remove(0);
            let kind = Layout::Native.parse(&ours_name).unwrap().kind;
            let got = decide(kind, &contenders(Layout::Native, &names), &ours_name);
            let want = match *want {
                "acq" => Decision::Acquired,
                "miss" => Decision::Missing,
                w => Decision::Wait { on: queue(w).remove(0) },
            };
            assert_eq!(got, want, "queue {q}, ours {ours}");
        }
    }

    #[test]
    fn reader_never_waits_on_a_later_writer() {
        let names = queue("R1 W2 W3 R4");
        let c = contenders(Layout::Native, &names);
        assert_eq!(decide(NodeKind::Read, &c, &names[0]), Decision::Acquired);
    }

    #[test]
    fn unknown_children_are_ignored() {
        let mut names = queue("L2 L3");
        names.push("lock".into());
        names.push("garbage-0000000001".into());
        let c = contenders(Layout::Native, &names);
        assert_eq!(c.len(), 2);
        assert_eq!(decide(NodeKind::Lock, &c, &names[0]), Decision::Acquired);
    }

    #[test]
    fn would_wait_table() {
        let c = |q: &str| contenders(Layout::Native, &queue(q));
        assert!(!would_wait(NodeKind::Lock, &c("")));
        assert!(would_wait(NodeKind::Lock, &c("R1")));
        assert!(!would_wait(NodeKind::Read, &c("R1 R2")));
        assert!(would_wait(NodeKind::Read, &c("R1 W2")));
        assert!(would_wait(NodeKind::Write, &c("R1")));
    }
}
