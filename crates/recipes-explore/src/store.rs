//! A simulated data store for the application's data: a key-value map behind a network of its own, whose requests
//! the explorer delivers when it chooses, and which can enforce fencing tokens.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::process::{Activity, Sharing, Tracker};

/// A fenced write the store refused: its token is below the highest it has seen for the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The key written.
    pub key: String,
    /// The writer's token.
    pub token: u128,
    /// The highest token the store had seen for the key.
    pub highest: u128,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the store refused a write of {:?}: fencing token {:#x} is below {:#x}, the highest it has seen",
            self.key, self.token, self.highest
        )
    }
}

impl std::error::Error for Rejected {}

/// One write the store applied (or refused), in the order it applied them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The writing process.
    pub process: usize,
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// The fencing token the write carried (`None`: an unfenced [`Store::put`]).
    pub token: Option<u128>,
    /// Whether the store took it.
    pub accepted: bool,
    /// The fencing token of the hold the writer was in when it sent the write (its highest tracked exclusive
    /// guard's), whether or not the write carried it: what the oracle of write order compares.
    pub hold: Option<u128>,
}

enum Op {
    Get(String),
    Put {
        key: String,
        value: String,
        token: Option<u128>,
    },
}

enum Answer {
    Value(Option<String>),
    Put(Result<(), Rejected>),
}

struct Request {
    op: Op,
    hold: Option<u128>,
    reply: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct State {
    data: BTreeMap<String, String>,
    /// Per key: the highest fencing token seen.
    highest: BTreeMap<String, u128>,
    /// Per key: the highest hold token among the accepted writes.
    last_hold: BTreeMap<String, u128>,
    /// Requests sent and not yet applied, per process, oldest first.
    pending: Vec<VecDeque<Request>>,
    history: Vec<Write>,
    violations: Vec<String>,
}

/// A process's client of the simulated data store.
///
/// Requests travel on a network the explorer controls: each is applied when the explorer chooses (a process's
/// requests in the order it sent them), so a write can land long after its sender checked its lease, and after a
/// newer holder's writes. A request already sent is applied even if its sender gives up or crashes.
///
/// [`put_fenced`](Store::put_fenced) writes only with a fencing token at least the highest the store has seen for
/// the key, as a store that checks tokens does; [`put`](Store::put) always writes. The oracle of write order
/// ([`Builtin::WritesInLockOrder`](crate::Builtin::WritesInLockOrder)) fails a schedule in which the store accepted a
/// write from a hold older than the hold of a write it had already accepted: a holder that had lost the lock wrote
/// over its successor.
///
/// ```
/// use recipes_explore::Explorer;
///
/// // One process, no faults: a fenced write with an older token than the store has seen is refused.
/// let report = Explorer::new("store").processes(1).faults(0, &[]).run(|p| async move {
///     let store = p.store();
///     store.put_fenced("k", "new", 7).await.unwrap();
///     let refused = store.put_fenced("k", "old", 3).await.unwrap_err();
///     assert_eq!((refused.token, refused.highest), (3, 7));
///     assert_eq!(store.get("k").await.as_deref(), Some("new"));
/// });
/// report.assert_ok();
/// ```
#[derive(Clone)]
pub struct Store {
    state: Arc<Mutex<State>>,
    process: usize,
    activity: Activity,
    tracker: Arc<Mutex<Tracker>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("process", &self.process).finish()
    }
}

impl Store {
    pub(crate) fn new(processes: usize, activity: Activity, tracker: Arc<Mutex<Tracker>>) -> Self {
        let state = State {
            pending: (0..processes).map(|_| VecDeque::new()).collect(),
            ..State::default()
        };
        Store {
            state: Arc::new(Mutex::new(state)),
            process: 0,
            activity,
            tracker,
        }
    }

    /// The same store, as `process`'s client.
    pub(crate) fn for_process(&self, process: usize) -> Store {
        Store {
            process,
            ..self.clone()
        }
    }

    async fn send(&self, op: Op) -> Answer {
        let hold = self
            .tracker
            .lock()
            .holds(Some(self.process))
            .into_iter()
            .filter(|(_, sharing, _)| *sharing == Sharing::Exclusive)
            .map(|(_, _, h)| h.token)
            .max();
        let (tx, rx) = oneshot::channel();
        self.state.lock().pending[self.process].push_back(Request { op, hold, reply: tx });
        self.activity.touch();
        match rx.await {
            Ok(answer) => answer,
            // The explorer dropped the schedule: nothing awaits this task any more.
            Err(_) => std::future::pending().await,
        }
    }

    /// Reads `key`.
    pub async fn get(&self, key: &str) -> Option<String> {
        match self.send(Op::Get(key.to_owned())).await {
            Answer::Value(v) => v,
            Answer::Put(_) => unreachable!("a read is answered with a value"),
        }
    }

    /// Writes `key` without a fencing token: the store always takes it.
    pub async fn put(&self, key: &str, value: impl Into<String>) {
        let op = Op::Put {
            key: key.to_owned(),
            value: value.into(),
            token: None,
        };
        let _ = self.send(op).await;
    }

    /// Writes `key` with a fencing token ([`LockGuard::fencing_token`](recipes_core::LockGuard::fencing_token)):
    /// refused when the token is below the highest the store has seen for the key.
    pub async fn put_fenced(&self, key: &str, value: impl Into<String>, token: u128) -> Result<(), Rejected> {
        let op = Op::Put {
            key: key.to_owned(),
            value: value.into(),
            token: Some(token),
        };
        match self.send(op).await {
            Answer::Put(r) => r,
            Answer::Value(_) => unreachable!("a write is answered with its outcome"),
        }
    }

    /// The value of `key` now (for checks: no request, no delay).
    pub fn value(&self, key: &str) -> Option<String> {
        self.state.lock().data.get(key).cloned()
    }

    /// Every write the store applied or refused so far, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.state.lock().history.clone()
    }

    /// The processes with requests in flight.
    pub(crate) fn senders(&self) -> Vec<usize> {
        let s = self.state.lock();
        (0..s.pending.len()).filter(|p| !s.pending[*p].is_empty()).collect()
    }

    /// The key `process`'s oldest request touches, and whether it writes it: what the search's sleep sets need.
    pub(crate) fn touches(&self, process: usize) -> Option<(String, bool)> {
        match self.state.lock().pending[process].front().map(|r| &r.op) {
            Some(Op::Get(key)) => Some((key.clone(), false)),
            Some(Op::Put { key, .. }) => Some((key.clone(), true)),
            None => None,
        }
    }

    /// What applying `process`'s oldest request would do, for the trace.
    pub(crate) fn describe(&self, process: usize) -> String {
        let s = self.state.lock();
        match s.pending[process].front().map(|r| &r.op) {
            Some(Op::Get(key)) => format!("the store answers process {process}'s read of {key:?}"),
            Some(Op::Put { key, value, token }) => format!(
                "the store applies process {process}'s write {key:?} = {value:?}{}",
                token.map(|t| format!(" with token {t:#x}")).unwrap_or_default()
            ),
            None => format!("(process {process} has no store request)"),
        }
    }

    /// Applies `process`'s oldest request and answers it; `ordered`: check the write order.
    pub(crate) fn apply(&self, process: usize, ordered: bool) -> String {
        let mut s = self.state.lock();
        let Some(req) = s.pending[process].pop_front() else {
            return String::new();
        };
        let (answer, outcome) = match req.op {
            Op::Get(key) => {
                let v = s.data.get(&key).cloned();
                let outcome = format!("{v:?}");
                (Answer::Value(v), outcome)
            }
            Op::Put { key, value, token } => {
                let highest = s.highest.get(&key).copied().unwrap_or(0);
                let refused = token.is_some_and(|t| t < highest);
                let result = match token {
                    Some(t) if t < highest => Err(Rejected {
                        key: key.clone(),
                        token: t,
                        highest,
                    }),
                    _ => Ok(()),
                };
                if !refused {
                    if let Some(t) = token {
                        s.highest.insert(key.clone(), t);
                    }
                    if let Some(h) = req.hold {
                        let last = s.last_hold.get(&key).copied().unwrap_or(0);
                        if ordered && h < last {
                            s.violations.push(format!(
                                "the store accepted process {process}'s write of {key:?} from a hold (token {h:#x}) \
                                 older than a hold whose write it had already accepted ({last:#x}): a holder that \
                                 had lost the lock wrote after its successor"
                            ));
                        }
                        s.last_hold.insert(key.clone(), h.max(last));
                    }
                    s.data.insert(key.clone(), value.clone());
                }
                s.history.push(Write {
                    process,
                    key,
                    value,
                    token,
                    accepted: !refused,
                    hold: req.hold,
                });
                let outcome = if refused { "refused" } else { "accepted" }.to_owned();
                (Answer::Put(result), outcome)
            }
        };
        drop(s);
        // The sender may have given up: the request landed all the same.
        let _ = req.reply.send(answer);
        self.activity.touch();
        outcome
    }

    pub(crate) fn violation(&self) -> Option<String> {
        self.state.lock().violations.first().cloned()
    }
}
