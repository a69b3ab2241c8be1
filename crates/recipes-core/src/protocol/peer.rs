//! The peers' semaphores, as layouts: Curator's `InterProcessSemaphoreV2` and kazoo's `Semaphore`. Where their
//! mutex and leases live, how their path is made, which children are leases, and in which order a lease is counted
//! and made. The engine's lease procedure (`driver/peer_semaphore.rs`) does the I/O around these answers.

use crate::backend::CreateMode;
use crate::error::{Error, Result};
use crate::layout::{is_kazoo_lease, Layout, NodeKind, CURATOR_SEMAPHORE_LEASES, CURATOR_SEMAPHORE_MUTEX};
use crate::path::LockPath;

/// A peer's semaphore layout: a mutex (a fair lock in the peer's layout) under which a lease is made and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerSemaphore {
    /// Curator (`P/locks`, `P/leases`): the lease is made first, then the leases are counted, ours among them.
    Curator,
    /// kazoo (`P-__lock__`, `P`): the leases are counted first; fewer than the permits, ours is made.
    Kazoo,
}

impl PeerSemaphore {
    /// The peer semaphore of `layout`; `None` for the native layout, whose semaphore is a queue of claims (and the etcd
    /// layout, which has none).
    pub fn of(layout: Layout) -> Option<PeerSemaphore> {
        match layout {
            Layout::Curator => Some(PeerSemaphore::Curator),
            Layout::Kazoo => Some(PeerSemaphore::Kazoo),
            // etcd's own lock has no semaphore: refused when the semaphore is made.
            Layout::Native | Layout::Etcd => None,
        }
    }

    /// The layout it belongs to.
    pub fn layout(self) -> Layout {
        match self {
            PeerSemaphore::Curator => Layout::Curator,
            PeerSemaphore::Kazoo => Layout::Kazoo,
        }
    }

    /// The mutex's path and the leases' path of the semaphore at `root`.
    pub fn paths(self, root: &LockPath) -> Result<(LockPath, LockPath)> {
        match self {
            PeerSemaphore::Curator => Ok((
                LockPath::new(root.child(CURATOR_SEMAPHORE_MUTEX))?,
                LockPath::new(root.child(CURATOR_SEMAPHORE_LEASES))?,
            )),
            PeerSemaphore::Kazoo => Ok((LockPath::new(format!("{root}-__lock__"))?, root.clone())),
        }
    }

    /// How the semaphore's path is made: Curator's as a container, as Curator makes it; kazoo's persistent, as
    /// kazoo's `ensure_path` does (kazoo expects it to stay).
    pub fn path_mode(self) -> CreateMode {
        match self {
            PeerSemaphore::Curator => CreateMode::Container,
            PeerSemaphore::Kazoo => CreateMode::Persistent,
        }
    }

    /// Whether the count is checked again once the mutex is held. Curator's mutex lives under the semaphore's path:
    /// the container reaper may remove the emptied path after the first check, and the mutex's path-making then
    /// makes it again without a count.
    pub fn checks_count_under_mutex(self) -> bool {
        self == PeerSemaphore::Curator
    }

    /// Whether a lease is made before the leases are counted (Curator), rather than after (kazoo).
    pub fn makes_before_counting(self) -> bool {
        self == PeerSemaphore::Curator
    }

    /// The child of the semaphore's path whose children are the leases (Curator's `leases`), or `None` when the
    /// leases are the path's own children (kazoo's).
    pub fn leases_under(self) -> Option<&'static str> {
        match self {
            PeerSemaphore::Curator => Some(CURATOR_SEMAPHORE_LEASES),
            PeerSemaphore::Kazoo => None,
        }
    }

    /// Whether `name`, a child of the leases' parent, is a lease of this layout.
    pub fn is_lease(self, name: &str) -> bool {
        match self {
            PeerSemaphore::Curator => Layout::Curator.parse(name).is_some_and(|p| p.kind == NodeKind::Permit),
            PeerSemaphore::Kazoo => is_kazoo_lease(name),
        }
    }

    /// Refuses a claim on several permits at once: a lease is one permit, and the peers have no claim on several
    /// (Curator's `acquire(n)` takes n leases one by one, which deadlocks two clients that each got some).
    pub fn check_weight(self, root: &LockPath, weight: u32) -> Result<()> {
        if weight == 1 {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "the {} layout's semaphore (at {root}) grants one permit per lease: acquire_many({weight}) needs the \
             native layout",
            self.layout()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_peer_layout_has_a_semaphore_and_the_native_one_none() {
        assert_eq!(PeerSemaphore::of(Layout::Native), None);
        for layout in [Layout::Curator, Layout::Kazoo] {
            assert_eq!(PeerSemaphore::of(layout).map(PeerSemaphore::layout), Some(layout));
        }
    }

    #[test]
    fn the_peers_paths() {
        let root = LockPath::new("/app/sem").unwrap();
        let (mutex, leases) = PeerSemaphore::Curator.paths(&root).unwrap();
        assert_eq!((mutex.as_str(), leases.as_str()), ("/app/sem/locks", "/app/sem/leases"));
        let (mutex, leases) = PeerSemaphore::Kazoo.paths(&root).unwrap();
        assert_eq!((mutex.as_str(), leases.as_str()), ("/app/sem-__lock__", "/app/sem"));
    }

    #[test]
    fn leases_are_told_by_their_names() {
        assert!(PeerSemaphore::Kazoo.is_lease("0123456789abcdef0123456789abcdef"));
        assert!(!PeerSemaphore::Kazoo.is_lease("leases"));
        assert!(!PeerSemaphore::Curator.is_lease("0123456789abcdef0123456789abcdef"));
        assert!(PeerSemaphore::Curator.is_lease("_c_8c2b6b0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e-lease-0000000007"));
        assert!(!PeerSemaphore::Curator.is_lease("_c_8c2b6b0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e-lock-0000000007"));
    }

    #[test]
    fn a_claim_on_several_permits_is_refused_with_the_layout_named() {
        let root = LockPath::new("/app/sem").unwrap();
        assert!(PeerSemaphore::Kazoo.check_weight(&root, 1).is_ok());
        let e = PeerSemaphore::Curator.check_weight(&root, 2).unwrap_err();
        assert!(e.to_string().contains("curator layout's semaphore"), "{e}");
    }
}
