//! Layer 2, the pure half: who holds the lock, whom a waiter watches, and what the driver does next. No I/O.
//!
//! [`contenders`] and [`decide`] are the order and the decision; [`judge`] wraps them with everything else the
//! driver decides from one listing of the lock path (refusals, how to wait, whether to mark), so that the I/O loop
//! only sends requests and follows the verdict.

mod judge;

use crate::layout::{Family, Layout, NodeKind, SortKey};

pub use judge::{judge, judge_exclusive, judge_newcomer, Next, Refusal, Wait, MARK_FROM_QUEUE_LEN};

/// A queued lock node, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// The child name.
    pub name: String,
    /// What it contends for.
    pub kind: NodeKind,
    /// Where it sorts, by the layout's rule.
    pub key: SortKey,
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

/// The first child that is a lock node of a family other than `own` (see [`Family`]): a recipe refuses to hold beside
/// it. Children of no family are not lock nodes and do not count.
///
/// # Contract
/// Every contender lists the children *after* its own create is applied (ZooKeeper applies one session's requests in
/// order, and the server that answers a list has applied every write before that session's own). So of two
/// contenders of different families, the one whose create came second lists a queue that holds the other's node,
/// and refuses: at least one of any two racing contenders sees the other, and they never hold together.
pub fn foreign<S: AsRef<str>>(own: Family, children: &[S]) -> Option<(String, Family)> {
    children.iter().find_map(|c| {
        let name = c.as_ref();
        Family::of(name).filter(|f| *f != own).map(|f| (name.to_owned(), f))
    })
}

/// In a peer layout (Curator, kazoo), the first contender whose sequence has wrapped (is negative): those layouts
/// order sequences as text, as their peers do, which inverts the order of negative sequences and puts a newcomer
/// ahead of the holder, so no decision can be trusted while one is in the queue. `None` in the native layout, which
/// orders across the wrap (see `unwrap_sequences`).
pub fn wrapped(layout: Layout, contenders: &[Contender]) -> Option<&Contender> {
    if layout == Layout::Native {
        return None;
    }
    contenders
        .iter()
        .find(|c| matches!(&c.key, SortKey::Text(t) if t.starts_with('-')))
}

/// Parses `children` with `layout`, drops names it does not recognise, and sorts them by the layout's key (then
/// name).
///
/// Ordering is by the sequence, never by the whole name: the names start with attempt ids. The native layout
/// compares sequences as numbers, in creation order across the wrap of ZooKeeper's signed counter (see
/// `unwrap_sequences`); the Curator and kazoo layouts compare them as text, exactly as those libraries do, so that
/// every process on a shared path agrees on the queue (including, at the wrap, on the peers' wrong order).
pub fn contenders<S: AsRef<str>>(layout: Layout, children: &[S]) -> Vec<Contender> {
    let mut out: Vec<Contender> = children
        .iter()
        .filter_map(|c| {
            let name = c.as_ref();
            layout.parse(name).map(|p| Contender {
                name: name.to_owned(),
                kind: p.kind,
                key: p.key,
            })
        })
        .collect();
    if layout == Layout::Native {
        unwrap_sequences(&mut out);
    }
    out.sort_unstable_by(|a, b| a.key.cmp(&b.key).then_with(|| a.name.cmp(&b.name)));
    out
}

/// ZooKeeper's per-parent counter is a signed 32-bit number: after `2147483647` comes `-2147483648`. A plain
/// numeric (or text) order would put a node made after the wrap *ahead* of the holder made before it, and let it
/// in beside the holder. When the queue straddles the wrap (it holds sequences in the top and in the bottom quarter
/// of the range), the negative ones are moved past the positive ones (serial-number order, RFC 1982): correct for any
/// queue spanning fewer than 2³⁰ sequence numbers.
fn unwrap_sequences(cs: &mut [Contender]) {
    const QUARTER: i64 = 1 << 30;
    let num = |c: &Contender| match c.key {
        SortKey::Number(n) => n,
        SortKey::Text(_) => 0,
    };
    let high = cs.iter().any(|c| num(c) >= QUARTER);
    let low = cs.iter().any(|c| num(c) < -QUARTER);
    if high && low {
        for c in cs.iter_mut() {
            if let SortKey::Number(n) = &mut c.key {
                if *n < 0 {
                    *n += 1 << 32;
                }
            }
        }
    }
}

/// Decides whether the node `ours`, of kind `kind`, holds the lock among the sorted `contenders`.
///
/// # Contract
/// - A [`NodeKind::Lock`] or [`NodeKind::Write`] node holds when it is first; otherwise it waits on its immediate
///   predecessor, whatever that is (no herd: each release wakes one waiter).
/// - A [`NodeKind::Read`] node holds when no `Lock` or `Write` node is ahead of it; otherwise it waits on the
///   nearest such node ahead of it (the first one, in the Curator layout, as Curator's readers do). A reader never
///   waits on a node behind it.
/// - `Missing` when `ours` is not among the contenders.
pub fn decide(layout: Layout, kind: NodeKind, contenders: &[Contender], ours: &str) -> Decision {
    match contenders.iter().position(|c| c.name == ours) {
        None => Decision::Missing,
        Some(index) => match blocker(layout, kind, &contenders[..index]) {
            None => Decision::Acquired,
            Some(c) => Decision::Wait { on: c.name.clone() },
        },
    }
}

/// The contender a node of `kind` waits on, among those `ahead` of it (`None`: it holds the lock).
fn blocker(layout: Layout, kind: NodeKind, ahead: &[Contender]) -> Option<&Contender> {
    match kind {
        NodeKind::Read if layout.reader_watches_first_writer() => ahead.iter().find(|c| c.kind.blocks_readers()),
        NodeKind::Read => ahead.iter().rev().find(|c| c.kind.blocks_readers()),
        NodeKind::Lock | NodeKind::Write => ahead.last(),
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
mod tests;
