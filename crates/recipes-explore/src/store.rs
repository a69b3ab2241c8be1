//! A simulated data store for the application's data: a key-value map behind a network of its own, whose requests
//! the explorer delivers when it chooses, and which can enforce fencing tokens.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::process::Activity;
use crate::tracked::{Sharing, Tracker};

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
    /// The holds the writer was in when it sent the write (lock path and fencing token of each of its tracked
    /// exclusive guards), whether or not the write carried a token: what the oracle of write order compares.
    pub holds: Vec<(String, u128)>,
}

enum Op {
    Get {
        key: String,
        token: Option<u128>,
    },
    Put {
        key: String,
        value: String,
        token: Option<u128>,
    },
}

enum Answer {
    Value(Result<Option<String>, Rejected>),
    Put(Result<(), Rejected>),
}

struct Request {
    op: Op,
    holds: Vec<(String, u128)>,
    reply: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct State {
    data: BTreeMap<String, String>,
    /// Per key: the highest fencing token seen.
    highest: BTreeMap<String, u128>,
    /// Per key and lock path: the highest hold token among the requests that read or wrote the key.
    last_hold: BTreeMap<(String, String), u128>,
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
/// the key, as a store that checks tokens does, and [`get_fenced`](Store::get_fenced) reads so; [`put`](Store::put)
/// and [`get`](Store::get) take no token. The oracle of write order
/// ([`Builtin::WritesInLockOrder`](crate::Builtin::WritesInLockOrder)) fails a schedule in which the store accepted a
/// write from a hold of a lock older than a hold of the same lock whose request had already read or written the key:
/// a holder that had lost the lock wrote after its successor had seen or changed the key. Requests are attributed to
/// the holds of the sender's [tracked](crate::Process::track) exclusive guards when it sent them, lock by lock.
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
    /// The process's crash: it sends nothing after it.
    crashed: Arc<AtomicBool>,
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
            crashed: Arc::new(AtomicBool::new(false)),
            activity,
            tracker,
        }
    }

    /// The same store, as `process`'s client, which sends nothing once `crashed` is set.
    pub(crate) fn for_process(&self, process: usize, crashed: Arc<AtomicBool>) -> Store {
        Store {
            process,
            crashed,
            ..self.clone()
        }
    }

    async fn send(&self, op: Op) -> Answer {
        if self.crashed.load(Ordering::SeqCst) {
            // A crashed process sends nothing (a task the crash did not reach would be a bug of the explorer's).
            return std::future::pending().await;
        }
        let holds = self
            .tracker
            .lock()
            .holds(Some(self.process))
            .into_iter()
            .filter(|(_, sharing, _)| *sharing == Sharing::Exclusive)
            .map(|(_, _, h)| (h.path, h.token))
            .collect();
        let (tx, rx) = oneshot::channel();
        self.state.lock().pending[self.process].push_back(Request { op, holds, reply: tx });
        self.activity.touch();
        match rx.await {
            Ok(answer) => answer,
            // The explorer dropped the schedule: nothing awaits this task any more.
            Err(_) => std::future::pending().await,
        }
    }

    async fn read(&self, key: &str, token: Option<u128>) -> Result<Option<String>, Rejected> {
        match self
            .send(Op::Get {
                key: key.to_owned(),
                token,
            })
            .await
        {
            Answer::Value(v) => v,
            Answer::Put(_) => unreachable!("a read is answered with a value"),
        }
    }

    /// Reads `key`.
    pub async fn get(&self, key: &str) -> Option<String> {
        self.read(key, None).await.unwrap_or_default()
    }

    /// Reads `key` with a fencing token, as a store that checks the token on every request of a read-modify-write
    /// does: refused when the token is below the highest the store has seen for the key, and raises that highest
    /// otherwise, so that an older holder's write that lands after this read is refused. Without it, a holder that
    /// lost the lock can still write between its successor's read and write (a lost update the token alone on the
    /// write does not stop).
    pub async fn get_fenced(&self, key: &str, token: u128) -> Result<Option<String>, Rejected> {
        self.read(key, Some(token)).await
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
    /// A fenced read writes (it raises the key's highest token).
    pub(crate) fn touches(&self, process: usize) -> Option<(String, bool)> {
        match self.state.lock().pending[process].front().map(|r| &r.op) {
            Some(Op::Get { key, token }) => Some((key.clone(), token.is_some())),
            Some(Op::Put { key, .. }) => Some((key.clone(), true)),
            None => None,
        }
    }

    /// What applying `process`'s oldest request would do, for the trace.
    pub(crate) fn describe(&self, process: usize) -> String {
        let s = self.state.lock();
        let with = |token: &Option<u128>| token.map(|t| format!(" with token {t:#x}")).unwrap_or_default();
        match s.pending[process].front().map(|r| &r.op) {
            Some(Op::Get { key, token }) => {
                format!("the store answers process {process}'s read of {key:?}{}", with(token))
            }
            Some(Op::Put { key, value, token }) => format!(
                "the store applies process {process}'s write {key:?} = {value:?}{}",
                with(token)
            ),
            None => format!("(process {process} has no store request)"),
        }
    }

    /// Applies `process`'s oldest request and answers it; `ordered`: check the order of holds.
    pub(crate) fn apply(&self, process: usize, ordered: bool) -> String {
        let mut s = self.state.lock();
        let Some(req) = s.pending[process].pop_front() else {
            return String::new();
        };
        let (key, token) = match &req.op {
            Op::Get { key, token } | Op::Put { key, token, .. } => (key.clone(), *token),
        };
        let highest = s.highest.get(&key).copied().unwrap_or(0);
        let refused = token.filter(|t| *t < highest).map(|t| Rejected {
            key: key.clone(),
            token: t,
            highest,
        });
        if refused.is_none() {
            if let Some(t) = token {
                s.highest.insert(key.clone(), t);
            }
            let write = matches!(req.op, Op::Put { .. });
            if ordered && write && req.holds.is_empty() && s.violations.is_empty() {
                let guarded = s
                    .last_hold
                    .keys()
                    .find(|(k, _)| *k == key)
                    .map(|(_, path)| path.clone());
                if let Some(path) = guarded {
                    s.violations.push(format!(
                        "the store accepted process {process}'s write of {key:?}, sent with no tracked guard, after \
                         a hold of {path} had read or written the key: a write from outside the lock (a task that \
                         outlived its guard, or a process that crashed)"
                    ));
                }
            }
            for (path, h) in &req.holds {
                let at = (key.clone(), path.clone());
                let last = s.last_hold.get(&at).copied().unwrap_or(0);
                if ordered && write && *h < last && s.violations.is_empty() {
                    s.violations.push(format!(
                        "the store accepted process {process}'s write of {key:?} from a hold of {path} (token \
                         {h:#x}) older than a hold of it that had already read or written the key ({last:#x}): a \
                         holder that had lost the lock wrote after its successor"
                    ));
                }
                s.last_hold.insert(at, (*h).max(last));
            }
        }
        let accepted = refused.is_none();
        let (answer, outcome) = match req.op {
            Op::Get { .. } => match refused {
                Some(r) => (Answer::Value(Err(r)), "refused".to_owned()),
                None => {
                    let v = s.data.get(&key).cloned();
                    let outcome = format!("{v:?}");
                    (Answer::Value(Ok(v)), outcome)
                }
            },
            Op::Put { value, .. } => {
                if accepted {
                    s.data.insert(key.clone(), value.clone());
                }
                s.history.push(Write {
                    process,
                    key,
                    value,
                    token,
                    accepted,
                    holds: req.holds,
                });
                let outcome = if accepted { "accepted" } else { "refused" }.to_owned();
                (Answer::Put(refused.map_or(Ok(()), Err)), outcome)
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
