//! Counters kept per [`Locks`](crate::Locks) value, for tests, benchmarks and dashboards.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the counters of one [`Locks`](crate::Locks) value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Lock nodes that came to hold a lock.
    pub acquisitions: u64,
    /// Lock nodes released by the application (awaited or on drop).
    pub releases: u64,
    /// Times a waiting acquire was woken by a deletion watch and looked at the queue again.
    pub wakeups: u64,
    /// Lock nodes created.
    pub creates: u64,
    /// Creates whose reply was lost and whose node was found again by its attempt id.
    pub create_recoveries: u64,
    /// Lock nodes deleted by cleanup after a timeout, an error or a cancelled acquire.
    pub cleanups: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub acquisitions: AtomicU64,
    pub releases: AtomicU64,
    pub wakeups: AtomicU64,
    pub creates: AtomicU64,
    pub create_recoveries: AtomicU64,
    pub cleanups: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Metrics {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Metrics {
            acquisitions: r(&self.acquisitions),
            releases: r(&self.releases),
            wakeups: r(&self.wakeups),
            creates: r(&self.creates),
            create_recoveries: r(&self.create_recoveries),
            cleanups: r(&self.cleanups),
        }
    }
}
