//! The search's vocabulary: a choice of the world, and what it touches (for the sleep sets) and whose it is (for
//! PCT's priorities).

use recipes_core::backend::SessionId;
use recipes_mem::{Access, NetEvent};

use crate::Fault;

/// What a choice touches, for the search's sleep sets: two choices commute when neither touches what the other does.
#[derive(Debug, Clone)]
pub(crate) enum Touch {
    /// A network event of the in-memory cluster; a delivery wakes its session's process.
    Net {
        access: Access,
        delivers_to: Option<SessionId>,
    },
    /// The store applies a request of the process on `session`, and wakes it with the answer: it commutes with the
    /// events of other sessions that do not wake this process (a watch event the cluster queues for it is woken
    /// by its own delivery, which the search orders against the store's answer), and with requests on other keys.
    Store {
        session: SessionId,
        key: String,
        write: bool,
    },
    /// Time, faults: everything.
    Global,
}

impl Touch {
    /// The session whose process the event belongs to, for PCT's priorities (`None`: time, faults).
    pub(crate) fn owner(&self) -> Option<SessionId> {
        match self {
            Touch::Net { access, delivers_to } => delivers_to.or(access.session),
            Touch::Store { session, .. } => Some(*session),
            Touch::Global => None,
        }
    }

    pub(crate) fn independent(&self, other: &Touch) -> bool {
        match (self, other) {
            (Touch::Global, _) | (_, Touch::Global) => false,
            (Touch::Net { access: a, .. }, Touch::Net { access: b, .. }) => a.independent(b),
            (
                Touch::Store {
                    session: a,
                    key: ka,
                    write: wa,
                },
                Touch::Store {
                    session: b,
                    key: kb,
                    write: wb,
                },
            ) => a != b && (ka != kb || !(*wa || *wb)),
            (Touch::Store { session, .. }, Touch::Net { access, delivers_to })
            | (Touch::Net { access, delivers_to }, Touch::Store { session, .. }) => {
                !access.global && *delivers_to != Some(*session) && access.session != Some(*session)
            }
        }
    }
}

/// A choice, identified the same way in every run of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    Net(NetEvent),
    /// The store applies this process's oldest request.
    Store(usize),
    Tick,
    Fault(Fault, usize),
    /// An operator deletes the lock node with this creation id.
    Delete(i64),
    /// An operator writes a request to let go into the lock node with this creation id.
    Write(i64),
    Delay,
}
