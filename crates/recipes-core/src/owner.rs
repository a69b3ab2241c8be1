//! Who a reentrant hold belongs to.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;

/// The owner of a reentrant hold: holds by the same owner nest (with a count); a different owner contends like any
/// other client, even in the same process.
///
/// # Contract: reuse of owner ids
/// - Thread ids are never reused by the standard library, so a thread owner is exact.
/// - Tokio task ids are unique only among *running* tasks: once a task ends, a later task may get its id. A guard
///   that outlives its task (moved elsewhere) is still counted under the old id, and a new task that happens to get
///   that id would re-enter it. Release holds before a task ends, or use an [`OwnerToken`] for work that moves.
/// - [`OwnerToken`]s come from a process-wide counter and are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A tokio task ([`tokio::task::try_id`]).
    Task(tokio::task::Id),
    /// An OS thread (the blocking API).
    Thread(ThreadId),
    /// An explicit token, for work that moves between tasks or threads.
    Token(OwnerToken),
}

impl Owner {
    /// The current tokio task when called inside one, otherwise the current thread.
    ///
    /// Note that the future passed to `Runtime::block_on` (and the body of `#[tokio::test]`) is not a task: there
    /// the current thread is the owner.
    pub fn current() -> Owner {
        tokio::task::try_id().map(Owner::Task).unwrap_or_else(Owner::thread)
    }

    /// The current thread.
    pub fn thread() -> Owner {
        Owner::Thread(std::thread::current().id())
    }
}

impl From<OwnerToken> for Owner {
    fn from(t: OwnerToken) -> Owner {
        Owner::Token(t)
    }
}

/// An explicit owner identity, unique in the process and never reused.
///
/// ```
/// use recipes_core::{Owner, OwnerToken};
/// let a = OwnerToken::new();
/// let b = OwnerToken::new();
/// assert_ne!(Owner::from(a), Owner::from(b));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerToken(u64);

impl OwnerToken {
    /// A fresh token.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        OwnerToken(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The token's number.
    pub fn get(self) -> u64 {
        self.0
    }
}
