//! Lock node families: which recipe of which layout a child name belongs to, so that every recipe can refuse to hold
//! beside another's nodes.

use uuid::Uuid;

use super::{parse_kazoo, parse_native, parse_seq, Layout, EXCLUSIVE_NODE};
use crate::backend::ChildOrder;

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
    /// Native semaphore permits: `S-<id>-<seq>`, or `S-<id>-<weight>-<seq>` for a claim on several.
    NativeSemaphore,
    /// Curator's mutex and read/write lock: `_c_<uuid>-lock-<seq>`, `…-__READ__<seq>`, `…-__WRIT__<seq>`.
    CuratorLock,
    /// Curator's semaphore leases: `_c_<uuid>-lease-<seq>`.
    CuratorLease,
    /// Curator's `LeaderLatch` candidates: `_c_<uuid>-latch-<seq>`. A family of its own: Curator orders a `latch-`
    /// node ahead of every `lock-` node in a latch and behind them in a mutex (each of its recipes sorts by the text
    /// after its own marker, and a name without it by the whole name), so the two on one path would let a latch and
    /// a `LeaderSelector` lead at once (found by review).
    CuratorLatch,
    /// A Curator semaphore's path holds its leases in the child `leases` (and its mutex in `locks`, which needs no
    /// family: `leases` is there as long as any lease is). A recipe that finds a child of that name confirms that it
    /// holds leases before it refuses (it may be a lock path nested in its own, of no family).
    CuratorSemaphore,
    /// kazoo's `Lock`, `ReadLock` and `WriteLock`: `…__lock__<seq>`, `…__rlock__<seq>`.
    Kazoo,
    /// kazoo's semaphore leases: a bare `<uuid hex>` (32 lower-case hex digits). A recipe that finds such a child
    /// confirms that it is ephemeral before it refuses (it may be a lock path nested in its own).
    KazooLease,
    /// etcd's own lock (Go's `concurrency.Mutex`, `etcdctl lock`): a bare lease id in lower-case hex (1 to 16 digits,
    /// no leading zero), on a backend that orders children by creation only ([`Family::of_in`]). A recipe that finds
    /// such a child confirms that it is ephemeral before it refuses (a short hex name may be a lock path nested in its
    /// own: `/jobs/42`).
    EtcdMutex,
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
    /// assert_eq!(Family::of("0123456789abcdef0123456789abcdef"), Some(Family::KazooLease));
    /// assert_eq!(Family::of("leases"), Some(Family::CuratorSemaphore));
    /// assert_eq!(Family::of("config"), None);
    /// ```
    pub fn of(name: &str) -> Option<Family> {
        if name == EXCLUSIVE_NODE {
            return Some(Family::Exclusive);
        }
        if let Some(p) = parse_native(name) {
            return Some(Layout::Native.family(p.kind));
        }
        if let Some(f) = curator_family(name) {
            return Some(f);
        }
        if parse_kazoo(name).is_some() {
            return Some(Family::Kazoo);
        }
        if is_kazoo_lease(name) {
            return Some(Family::KazooLease);
        }
        if name == CURATOR_SEMAPHORE_LEASES {
            return Some(Family::CuratorSemaphore);
        }
        None
    }

    /// As [`of`](Family::of), for a child of a backend that orders children by `order`: there a bare lease id in hex
    /// (1 to 16 lower-case digits) is etcd's own lock's key ([`Family::EtcdMutex`]). On ZooKeeper (by sequence) no
    /// such lock can be, and such a name is no lock node (found by review: an ephemeral child `42` under a ZooKeeper
    /// lock path made every recipe refuse).
    ///
    /// ```
    /// use recipes_core::backend::ChildOrder;
    /// use recipes_core::layout::Family;
    /// assert_eq!(Family::of_in("694d7c1a2b3c4d5e", ChildOrder::Creation), Some(Family::EtcdMutex));
    /// assert_eq!(Family::of_in("694d7c1a2b3c4d5e", ChildOrder::Sequence), None);
    /// ```
    pub fn of_in(name: &str, order: ChildOrder) -> Option<Family> {
        Family::of(name)
            .or_else(|| (order == ChildOrder::Creation && is_etcd_lease_name(name)).then_some(Family::EtcdMutex))
    }

    /// What the family is, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Family::Exclusive => "exclusive (native, fixed node)",
            Family::NativeQueue => "native fair/reentrant/read/write",
            Family::NativeSemaphore => "native semaphore",
            Family::CuratorLock => "Curator mutex or read/write",
            Family::CuratorLease => "Curator semaphore lease",
            Family::CuratorLatch => "Curator LeaderLatch candidate",
            Family::CuratorSemaphore => "Curator semaphore (its leases)",
            Family::Kazoo => "kazoo lock",
            Family::KazooLease => "kazoo semaphore lease",
            Family::EtcdMutex => "etcd's own lock (Go concurrency.Mutex, etcdctl lock)",
        }
    }
}

/// The child of a Curator semaphore's path that holds its mutex (`InterProcessSemaphoreV2`'s `LOCK_PARENT`).
pub(crate) const CURATOR_SEMAPHORE_MUTEX: &str = "locks";
/// The child of a Curator semaphore's path that holds its leases (`LEASE_PARENT`).
pub(crate) const CURATOR_SEMAPHORE_LEASES: &str = "leases";

/// Whether a name can be of a family with a name of its own: the exclusive node (`lock`), a Curator semaphore's
/// `leases`, a kazoo lease (32 characters), or etcd's own lock's key (at most 16). A test cheaper than [`Family::of`], for the names of a long queue.
pub(crate) fn may_be_unqueued(name: &str) -> bool {
    name.len() == 32 || name.len() <= 16 || name == CURATOR_SEMAPHORE_LEASES
}

/// Whether a name is etcd's own lock's key under its prefix: a lease id as Go's `%x` writes it (a positive 64-bit
/// id: 1 to 16 lower-case hex digits, no leading zero).
pub(crate) fn is_etcd_lease_name(name: &str) -> bool {
    (1..=16).contains(&name.len())
        && !name.starts_with('0')
        && name.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether a name is a kazoo semaphore's lease: `uuid.uuid4().hex`, 32 lower-case hex digits.
pub(crate) fn is_kazoo_lease(name: &str) -> bool {
    name.len() == 32 && name.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Curator's protected names `_c_<uuid>-<marker><seq>`, and the unprotected `<marker><seq>`.
pub(super) fn curator_family(name: &str) -> Option<Family> {
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
        (super::CURATOR_LATCH_MARKER, Family::CuratorLatch),
    ] {
        if let Some(seq) = rest.strip_prefix(marker) {
            return parse_seq(seq).map(|_| family);
        }
    }
    None
}
