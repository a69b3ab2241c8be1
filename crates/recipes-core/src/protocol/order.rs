//! The order of a lock path's contenders, and the one decision on it: who holds, and whom a waiter watches. Pure.

use crate::backend::ChildOrder;
use crate::layout::{Family, Layout, NodeKind, SortKey};

/// A queued lock node, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// The child name.
    pub name: String,
    /// What it contends for.
    pub kind: NodeKind,
    /// Where it sorts, by the layout's rule.
    pub key: SortKey,
    /// How many permits it claims (a semaphore's [`NodeKind::Permit`] node; 1 for every other kind).
    pub weight: u32,
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
    foreign_in(own, ChildOrder::Sequence, children)
}

/// As [`foreign`], on a backend that orders children by `order` (see [`Family::of_in`]).
pub fn foreign_in<S: AsRef<str>>(own: Family, order: ChildOrder, children: &[S]) -> Option<(String, Family)> {
    children.iter().find_map(|c| {
        let name = c.as_ref();
        Family::of_in(name, order)
            .filter(|f| *f != own)
            .map(|f| (name.to_owned(), f))
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
/// Ordering is by the sequence, never by the whole name: the names start with attempt ids. At one sequence (only a
/// Curator 5.5+ downgraded reader shares its writer's), writers and locks come before readers. The native layout
/// compares sequences as numbers, in creation order across the wrap of ZooKeeper's signed counter (see
/// `unwrap_sequences`); the Curator and kazoo layouts compare them as text, exactly as those libraries do, so that
/// every process on a shared path agrees on the queue (including, at the wrap, on the peers' wrong order).
pub fn contenders<S: AsRef<str>>(layout: Layout, children: &[S]) -> Vec<Contender> {
    contenders_in(layout, ChildOrder::Sequence, children)
}

/// As [`contenders`], for a listing of a backend that orders children by `order`: with [`ChildOrder::Creation`],
/// `children` are in the order of their creation (as that backend lists them), the native names carry no sequence,
/// and each contender's key is its place in the listing.
pub fn contenders_in<S: AsRef<str>>(layout: Layout, order: ChildOrder, children: &[S]) -> Vec<Contender> {
    contenders_and_foreign(layout, order, None, children).0
}

/// [`contenders`] and, when `own` is given, [`foreign`]`(own, children)` of one listing, each name parsed once: a
/// waiter judges every name of the queue after each listing, so this is what a long queue costs per listing.
pub(crate) fn contenders_and_foreign<S: AsRef<str>>(
    layout: Layout,
    order: ChildOrder,
    own: Option<Family>,
    children: &[S],
) -> (Vec<Contender>, Option<(String, Family)>) {
    let (mut parsed, foreign) = parse_listing(layout, order, own, children);
    parsed.sort_unstable_by(queue_order);
    (parsed.into_iter().map(Parsed::owned).collect(), foreign)
}

/// What a waiter needs of one listing to judge it: the contenders ahead of its node `ours` (in queue order), its
/// node, the first lock node of another family than `own`, and (peer layouts) the first contender whose sequence
/// has wrapped.
#[derive(Debug)]
pub(crate) struct Ahead {
    /// The contenders that sort before ours, in queue order.
    pub ahead: Vec<Contender>,
    /// Our node's weight (the permits it claims), `None` when it is not among the contenders.
    pub ours: Option<u32>,
    /// As [`foreign`]`(own, children)`.
    pub foreign: Option<(String, Family)>,
    /// As [`wrapped`] of all the contenders.
    pub wrapped: Option<String>,
}

/// As [`contenders_and_foreign`], for a waiter judging its own node `ours`: only the contenders ahead of it are
/// sorted and copied. After a wake-up a waiter near the front lists the whole queue again, and the names behind it
/// need only be read (parsed, and checked for a foreign family) to be passed over.
pub(crate) fn ahead_of<S: AsRef<str>>(
    layout: Layout,
    order: ChildOrder,
    own: Family,
    children: &[S],
    ours: &str,
) -> Ahead {
    let (parsed, foreign) = parse_listing(layout, order, Some(own), children);
    let wrapped = if layout == Layout::Native {
        None
    } else {
        parsed
            .iter()
            .filter(|c| matches!(&c.key, SortKey::Text(t) if t.starts_with('-')))
            .min_by(|a, b| queue_order(a, b))
            .map(|c| c.name.to_owned())
    };
    // Ours: only its weight leaves this function (no copy of its name; a judge of a short queue allocates little).
    let Some(mine) = parsed.iter().find(|c| c.name == ours).cloned() else {
        return Ahead {
            ahead: Vec::new(),
            ours: None,
            foreign,
            wrapped,
        };
    };
    let mut ahead: Vec<Parsed<'_>> = parsed
        .into_iter()
        .filter(|c| queue_order(c, &mine) == std::cmp::Ordering::Less)
        .collect();
    ahead.sort_unstable_by(queue_order);
    Ahead {
        ahead: ahead.into_iter().map(Parsed::owned).collect(),
        ours: Some(mine.weight),
        foreign,
        wrapped,
    }
}

/// A contender of a listing, borrowing its name from the listing.
#[derive(Debug, Clone)]
struct Parsed<'a> {
    name: &'a str,
    kind: NodeKind,
    key: SortKey,
    weight: u32,
}

impl Parsed<'_> {
    fn owned(self) -> Contender {
        Contender {
            name: self.name.to_owned(),
            kind: self.kind,
            key: self.key,
            weight: self.weight,
        }
    }
}

/// The queue's order: by the layout's key; at one key, a writer before a reader (since Curator 5.5 the holder of a
/// write lock that takes the read lock makes a plain ephemeral `_c_<uuid>-__READ__<seq>` named with its write node's
/// sequence, made after it); then by name.
fn queue_order(a: &Parsed<'_>, b: &Parsed<'_>) -> std::cmp::Ordering {
    a.key
        .cmp(&b.key)
        .then_with(|| b.kind.blocks_readers().cmp(&a.kind.blocks_readers()))
        .then_with(|| a.name.cmp(b.name))
}

/// Parses a listing once: its contenders (sequences unwrapped, unsorted) and, when `own` is given, its first lock
/// node of another family.
///
/// With [`ChildOrder::Sequence`] a native name without a sequence is no contender (no ZooKeeper create makes one;
/// it still counts for its family). With [`ChildOrder::Creation`] the listing is in creation order, and a contender's
/// key is its place in it: only the order within one listing is ever compared.
fn parse_listing<S: AsRef<str>>(
    layout: Layout,
    order: ChildOrder,
    own: Option<Family>,
    children: &[S],
) -> (Vec<Parsed<'_>>, Option<(String, Family)>) {
    let mut out = Vec::with_capacity(children.len());
    let mut foreign = None;
    let by_creation = order == ChildOrder::Creation;
    for (place, c) in children.iter().enumerate() {
        let name = c.as_ref();
        let parsed = layout.parse(name);
        if let (Some(own), None) = (own, &foreign) {
            // A name the native layout reads is of its family by `Family::of`'s own first rules (it is not `lock`).
            let family = match &parsed {
                Some(p) if layout == Layout::Native => Some(Layout::Native.family(p.kind)),
                _ => Family::of_in(name, order),
            };
            if let Some(f) = family.filter(|f| *f != own) {
                foreign = Some((name.to_owned(), f));
            }
        }
        let parsed = parsed.filter(|p| by_creation || layout != Layout::Native || p.seq.is_some());
        if let Some(p) = parsed {
            let key = if by_creation && crate::mutants::is_active(crate::mutants::Mutant::CreationOrderIgnored) {
                SortKey::Number(0)
            } else if by_creation {
                SortKey::Number(i64::try_from(place).unwrap_or(i64::MAX))
            } else {
                p.key
            };
            out.push(Parsed {
                name,
                kind: p.kind,
                key,
                weight: p.weight,
            });
        }
    }
    if layout == Layout::Native && !by_creation {
        unwrap_sequences(&mut out);
    }
    (out, foreign)
}

/// ZooKeeper's per-parent counter is a signed 32-bit number: after `2147483647` comes `-2147483648`. A plain
/// numeric (or text) order would put a node made after the wrap *ahead* of the holder made before it, and let it
/// in beside the holder. When the queue straddles the wrap (it holds sequences in the top and in the bottom quarter
/// of the range), the negative ones are moved past the positive ones (serial-number order, RFC 1982): correct for any
/// queue spanning fewer than 2³⁰ sequence numbers.
fn unwrap_sequences(cs: &mut [Parsed<'_>]) {
    const QUARTER: i64 = 1 << 30;
    let num = |c: &Parsed<'_>| match c.key {
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

/// Decides whether the node `ours`, of kind `kind`, holds among the sorted `contenders`, in a queue of `permits`
/// permits (1 for a lock: a lock is a semaphore of one permit, as Curator's `maxLeases`).
///
/// # Contract
/// - A [`NodeKind::Lock`] or [`NodeKind::Write`] node holds when it is first; otherwise it waits on its immediate
///   predecessor, whatever that is (no herd: each release wakes one waiter).
/// - A [`NodeKind::Read`] node holds when no `Lock` or `Write` node is ahead of it; otherwise it waits on the
///   nearest such node ahead of it (the first one, in the Curator layout, as Curator's readers do). A reader never
///   waits on a node behind it.
/// - A [`NodeKind::Permit`] node holds when the permits claimed ahead of it and its own are at most `permits`;
///   otherwise it waits on the nearest node ahead (see [`permit_window`] for all it watches).
/// - `Missing` when `ours` is not among the contenders.
pub fn decide(layout: Layout, kind: NodeKind, contenders: &[Contender], ours: &str, permits: u32) -> Decision {
    let Some(index) = contenders.iter().position(|c| c.name == ours) else {
        return Decision::Missing;
    };
    match blockers(layout, kind, &contenders[..index], contenders[index].weight, permits).last() {
        None => Decision::Acquired,
        Some(c) => Decision::Wait { on: c.name.clone() },
    }
}

/// The contenders `ahead` (in queue order) that a claim of `kind` on `weight` of `permits` permits waits for: empty
/// when it holds. The last one is its blocker, the node it watches; the others (a semaphore's window) also wake it.
///
/// A reader waits only for the nodes that exclude readers, and watches one of them: the nearest (the first, in the
/// Curator layout, as Curator's readers do). A semaphore's claim waits for the window of [`permit_window`]; a lock's
/// node (one permit of one, whatever `permits` says) for its immediate predecessor.
pub(crate) fn blockers(
    layout: Layout,
    kind: NodeKind,
    ahead: &[Contender],
    weight: u32,
    permits: u32,
) -> Vec<&Contender> {
    match kind {
        // A semaphore's claim: its weight of the permits.
        NodeKind::Permit => return permit_window(ahead, weight, permits).iter().collect(),
        // A lock is one permit, whatever count the path stores (a lock's node beside a semaphore's is refused, but
        // a report of the path's participants may see both at once).
        NodeKind::Lock | NodeKind::Write => return permit_window(ahead, 1, 1).iter().collect(),
        NodeKind::Read => {}
    }
    let mut writers = ahead.iter().filter(|c| c.kind.blocks_readers());
    let watched = if layout.reader_watches_first_writer() {
        writers.next()
    } else {
        writers.next_back()
    };
    watched.into_iter().collect()
}

/// The nodes a semaphore's permit node claiming `weight` of `permits` watches, among those `ahead` of it (in queue
/// order); empty when it holds its permits.
///
/// # Contract
/// - It holds when the weights ahead plus its own are at most `permits`.
/// - Otherwise the window is the shortest run of nodes right ahead of it whose weights add up to more than
///   `permits - weight`. Nodes behind it never count, and nodes ahead only go, so it can come to hold only after more
///   than `weights ahead + weight - permits` permits ahead are freed; the nodes ahead of the window claim at most
///   `weights ahead - (permits - weight + 1)` of them, one fewer than that. So no node can come to hold without a
///   deletion in its window since it last looked: a deletion in the window wakes it, and it looks again. One
///   release wakes at most `permits` waiters (those whose windows hold the node), never the whole queue. (Curator's
///   `StandardLockInternalsDriver` watches only the node `permits` ahead, and misses a release of any other holder.)
pub fn permit_window(ahead: &[Contender], weight: u32, permits: u32) -> &[Contender] {
    let claimed: u64 = ahead.iter().map(|c| u64::from(c.weight)).sum();
    let own = if crate::mutants::is_active(crate::mutants::Mutant::PermitOverGrant) {
        // Counts the claims ahead only: holds when one permit is free, whatever its own weight.
        1
    } else {
        u64::from(weight)
    };
    if claimed + own <= u64::from(permits) {
        return &[];
    }
    let need = u64::from(permits.saturating_sub(weight)) + 1;
    let mut sum = 0;
    for (i, c) in ahead.iter().enumerate().rev() {
        sum += u64::from(c.weight);
        if sum >= need {
            return &ahead[i..];
        }
    }
    ahead
}
