//! The one error type of the library.

use std::fmt;

/// Why a lock path was rejected by [`LockPath::new`](crate::LockPath::new).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PathProblem {
    /// The path is the empty string.
    Empty,
    /// The path does not start with `/`.
    Relative,
    /// The path is `/` itself: a lock needs a node of its own under the root.
    Root,
    /// The path ends with `/`.
    TrailingSlash,
    /// The path contains `//`.
    EmptyComponent,
    /// A component is `.` or `..`.
    RelativeComponent,
    /// The path contains NUL or another control character, or a character ZooKeeper refuses.
    ControlCharacter,
    /// The path is longer than [`LockPath::MAX_LEN`](crate::LockPath::MAX_LEN) bytes.
    TooLong,
    /// The path is under `/zookeeper`, which the server reserves for itself.
    Reserved,
}

impl fmt::Display for PathProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathProblem::Empty => "it is empty",
            PathProblem::Relative => "it does not start with '/'",
            PathProblem::Root => "it is the root; a lock needs a node of its own",
            PathProblem::TrailingSlash => "it ends with '/'",
            PathProblem::EmptyComponent => "it has an empty component ('//')",
            PathProblem::RelativeComponent => "it has a '.' or '..' component",
            PathProblem::ControlCharacter => "it contains NUL, a control character or a character ZooKeeper refuses",
            PathProblem::TooLong => "it is longer than ZooKeeper allows",
            PathProblem::Reserved => "it is under /zookeeper, which the server reserves",
        })
    }
}

/// What a lost lock was lost to, as reported by [`LockGuard::lost`](crate::LockGuard::lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The session that owned the lock node expired (or was closed); the server deleted the node.
    SessionExpired,
    /// The lock node was deleted by someone else (an operator, another client).
    NodeDeleted,
    /// The lease ran out: no request of the session has been answered for longer than the session timeout (less the
    /// margin), so the server may have expired the session and let another client in. The lock *may* still be held
    /// (if the connection comes back in time [`LockGuard::is_valid`](crate::LockGuard::is_valid) turns true again),
    /// but it cannot be trusted now.
    LeaseExpired,
}

impl LostReason {
    /// A short, stable name (`"session_expired"`, `"node_deleted"`, `"lease_expired"`), for metrics labels and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            LostReason::SessionExpired => "session_expired",
            LostReason::NodeDeleted => "node_deleted",
            LostReason::LeaseExpired => "lease_expired",
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::SessionExpired => "the session that owned the lock expired",
            LostReason::NodeDeleted => "the lock node was deleted by someone else",
            LostReason::LeaseExpired => "the lease ran out: the server has not answered within the session timeout",
        })
    }
}

/// Why a release found its lock not held ([`Error::NotHeld`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotHeldReason {
    /// The hold was released already.
    Released,
    /// The lock node was deleted by someone else before the release.
    Deleted,
    /// The lock node was deleted by someone else and a node of the same name now belongs to another holder (the
    /// exclusive recipe's fixed node); it was left alone.
    Replaced,
}

impl fmt::Display for NotHeldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotHeldReason::Released => "it was released already",
            NotHeldReason::Deleted => "its node was deleted by someone else before the release",
            NotHeldReason::Replaced => "its node was deleted and now belongs to another holder",
        })
    }
}

/// What kept going wrong when an operation gave up after its bound of attempts ([`Error::RetriesExhausted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryReason {
    /// An acquire's node would not stick: create replies were lost, the parent vanished, or the node was deleted under
    /// it, [`max_attempts`](crate::LocksBuilder::max_attempts) times.
    NodeWouldNotStick,
    /// The connection kept failing while releasing (deleting) the lock node.
    ReleaseKeptFailing,
    /// The connection kept failing while deleting what an abandoned acquire had made. Only ever said in the warning
    /// of a cleanup in the background, and no longer: such a delete goes on while its session lives (decision 0086).
    CleanupKeptFailing,
}

impl fmt::Display for RetryReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RetryReason::NodeWouldNotStick => {
                "the lock node could not be made to stick (lost replies, vanishing parent or node)"
            }
            RetryReason::ReleaseKeptFailing => "the connection kept failing while deleting the lock node",
            RetryReason::CleanupKeptFailing => "the connection kept failing while cleaning up",
        })
    }
}

/// Every error of the library. Backends map their own errors into it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A lock path was rejected.
    #[error("invalid lock path {path:?}: {problem}")]
    InvalidPath {
        /// The path as given (possibly truncated for display).
        path: String,
        /// What is wrong with it.
        problem: PathProblem,
    },
    /// A recipe name given at run time is not known.
    #[error("unknown recipe {0:?}: expected one of exclusive, fair, reentrant, read, write, semaphore")]
    UnknownRecipe(String),
    /// A layout name given at run time is not known.
    #[error("unknown layout {0:?}: expected one of native, curator, kazoo, etcd")]
    UnknownLayout(String),
    /// No server could be reached to open a session.
    #[error("could not reach the coordination service at {servers}: {why}")]
    Unreachable {
        /// The connect string.
        servers: String,
        /// What happened.
        why: String,
    },
    /// The connection to the server was lost; the outcome of the request is unknown.
    #[error("connection to the coordination service lost")]
    ConnectionLoss,
    /// The session expired or was closed; every ephemeral node it owned is gone.
    #[error("session expired: every lock held by it is lost")]
    SessionExpired,
    /// The node does not exist.
    #[error("node {0} does not exist")]
    NoNode(String),
    /// The node already exists.
    #[error("node {0} already exists")]
    NodeExists(String),
    /// The node has children and cannot be deleted.
    #[error("node {0} has children")]
    NotEmpty(String),
    /// The node exists under an ephemeral parent, or other invalid request to the backend.
    #[error("backend refused the request: {0}")]
    Refused(String),
    /// The lock is not held (any more) by this guard: released already, or lost.
    #[error("lock at {path} is not held: {why}")]
    NotHeld {
        /// The lock path.
        path: String,
        /// Why it is not held.
        why: NotHeldReason,
    },
    /// An owner holding the read side asked for the write side of the same lock.
    #[error("lock at {0}: upgrading a read lock to a write lock is refused (it would deadlock); release the read lock first")]
    UpgradeRefused(String),
    /// A reentrant hold count would overflow.
    #[error("lock at {0}: reentrant hold count overflow")]
    CountOverflow(String),
    /// The lock node kept vanishing (a connection blip, or someone deleting it) beyond the retry bound.
    #[error("lock at {path}: gave up after {attempts} attempts: {why}")]
    RetriesExhausted {
        /// The lock path.
        path: String,
        /// How many attempts counted against the bound (an acquire's first missing parent, and an exclusive acquire's
        /// missing parents before the lock last passed on, are not counted).
        attempts: u32,
        /// What kept going wrong.
        why: RetryReason,
    },
    /// The lock path holds a lock node of another recipe or layout: this lock refuses to run beside it (the two
    /// would not see each other as contenders, and could both hold).
    #[error(
        "lock at {path}: found {node:?}, a {found} lock node; this lock is {ours}. One path takes one recipe family \
         and one layout: refusing to hold beside it"
    )]
    ForeignLock {
        /// The lock path.
        path: String,
        /// The child name of the foreign lock node.
        node: String,
        /// What the foreign node is (e.g. "curator", "exclusive (native)").
        found: String,
        /// What this lock is.
        ours: String,
    },
    /// ZooKeeper's sequence counter under the lock path has wrapped past `2147483647`, and the layout's peers
    /// (Curator, kazoo) order the negative sequences that follow as text, which puts a newcomer ahead of the holder:
    /// the lock refuses rather than hold in an order that lets two holders in.
    #[error(
        "lock at {path}: its sequence counter has wrapped ({node}), and the {layout} layout orders such nodes as its \
         peers do, wrongly (a newcomer would sort ahead of the holder): refusing. The native layout orders across \
         the wrap; with a peer layout the path recovers once it is empty (its container is deleted and the counter \
         starts again)"
    )]
    SequenceWrapped {
        /// The lock path.
        path: String,
        /// A node with a wrapped (negative) sequence.
        node: String,
        /// The layout.
        layout: crate::layout::Layout,
    },
    /// The lock was lost (its session ended, its node was deleted, or its lease ran out) while this owner still
    /// held it: re-entering it, or taking its read side, is refused.
    #[error("lock at {path} was lost ({reason}): re-entering it is refused; release every hold and acquire again")]
    LockLost {
        /// The lock path.
        path: String,
        /// How it was lost.
        reason: LostReason,
    },
    /// The server's ACL on the node (or, for a create or a delete, on its parent) does not let this client's
    /// credentials do what was asked.
    #[error("not authorized at {0}: the node's ACL does not grant this client's credentials (see the ACL section of docs/operations.md)")]
    NotAuthorized(String),
    /// The servers refused this client's credentials when the session was opened (a wrong SASL password, say).
    #[error("the coordination service at {servers} refused this client's credentials: {why}")]
    AuthenticationFailed {
        /// The connect string.
        servers: String,
        /// What was refused.
        why: String,
    },
    /// A semaphore was asked for with a permit count other than the one stored at its path (by the client that made
    /// the path), or at a path that stores none: two clients that disagreed on the count could both let their
    /// contenders in beside each other (Curator's semaphores over-grant silently then).
    #[error(
        "semaphore at {path}: this client asks for {asked} permits, but {}; every client of one semaphore must ask for \
         the same count (to change it, let the path go empty, or delete it, and start again)",
        match stored { Some(n) => format!("the path stores {n}"), None => "the path exists and stores no permit count".to_owned() }
    )]
    PermitsMismatch {
        /// The semaphore path.
        path: String,
        /// The count this client asked for.
        asked: u32,
        /// The count stored at the path, `None` when its data is not a count.
        stored: Option<u32>,
    },
    /// Releasing several locks at once ([`MultiGuard::release`](crate::MultiGuard::release)), some releases failed:
    /// each member's path and error. The other members were released.
    #[error(
        "{} of the locks could not be released cleanly: {}",
        failures.len(),
        failures.iter().map(|(p, e)| format!("{p}: {e}")).collect::<Vec<_>>().join("; ")
    )]
    ReleaseFailed {
        /// The path and error of every release that failed.
        failures: Vec<(String, Error)>,
    },
    /// An argument is out of its range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A blocking call was made from inside an async runtime, where it would stall the runtime.
    #[error("blocking lock call made from inside an async runtime; use the async API there")]
    BlockingInAsync,
    /// The backend was closed by the application.
    #[error("backend closed")]
    Closed,
    /// Any other failure of the backend.
    #[error("backend error: {0}")]
    Backend(String),
}

impl Error {
    /// A short, stable name of the error's variant (`"session_expired"`, `"foreign_lock"`...), for metrics labels and
    /// logs.
    ///
    /// ```
    /// assert_eq!(recipes_core::Error::ConnectionLoss.kind(), "connection_loss");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidPath { .. } => "invalid_path",
            Error::UnknownRecipe(_) => "unknown_recipe",
            Error::UnknownLayout(_) => "unknown_layout",
            Error::Unreachable { .. } => "unreachable",
            Error::ConnectionLoss => "connection_loss",
            Error::SessionExpired => "session_expired",
            Error::NoNode(_) => "no_node",
            Error::NodeExists(_) => "node_exists",
            Error::NotEmpty(_) => "not_empty",
            Error::Refused(_) => "refused",
            Error::NotHeld { .. } => "not_held",
            Error::UpgradeRefused(_) => "upgrade_refused",
            Error::CountOverflow(_) => "count_overflow",
            Error::RetriesExhausted { .. } => "retries_exhausted",
            Error::ForeignLock { .. } => "foreign_lock",
            Error::SequenceWrapped { .. } => "sequence_wrapped",
            Error::LockLost { .. } => "lock_lost",
            Error::NotAuthorized(_) => "not_authorized",
            Error::AuthenticationFailed { .. } => "authentication_failed",
            Error::PermitsMismatch { .. } => "permits_mismatch",
            Error::ReleaseFailed { .. } => "release_failed",
            Error::InvalidArgument(_) => "invalid_argument",
            Error::BlockingInAsync => "blocking_in_async",
            Error::Closed => "closed",
            Error::Backend(_) => "backend",
        }
    }

    /// Whether the error means "the outcome is unknown, the connection may come back".
    pub fn is_connection_loss(&self) -> bool {
        matches!(self, Error::ConnectionLoss)
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
