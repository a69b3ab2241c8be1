//! Helpers shared by the scenarios: bounded waits, an overlap detector, spawning clients.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use recipes_core::backend::{CreateMode, SessionRef};
use recipes_core::LockGuard;

use crate::harness::Harness;

/// Runs a scenario, failing it if it takes longer than the harness allows several times over (never hangs).
pub async fn within<F: Future<Output = ()>>(h: &dyn Harness, name: &str, f: F) {
    let limit = h.patience() * 8;
    if tokio::time::timeout(limit, f).await.is_err() {
        panic!("scenario {name} on {} did not finish within {limit:?}", h.name());
    }
}

/// Polls `cond` until it holds, at most `h.patience()`; panics with `what` otherwise.
pub async fn eventually<F, Fut>(h: &dyn Harness, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let tick = h.tick();
    let rounds = (h.patience().as_millis() / tick.as_millis().max(1)).max(1);
    for _ in 0..rounds {
        if cond().await {
            return;
        }
        tokio::time::sleep(tick).await;
    }
    panic!("timed out waiting until {what} on {}", h.name());
}

/// Waits until `path` has exactly `n` children.
pub async fn wait_children(h: &dyn Harness, path: &str, n: usize) {
    eventually(h, &format!("{path} has {n} children"), || async {
        h.children(path).await.len() == n
    })
    .await;
}

/// Awaits `f`, failing the test after `h.patience()`.
pub async fn bounded<T, F: Future<Output = T>>(h: &dyn Harness, what: &str, f: F) -> T {
    match tokio::time::timeout(h.patience(), f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out: {what} on {}", h.name()),
    }
}

/// Asserts that `f` has not completed after a few ticks (it is waiting).
pub async fn assert_pending<T, F: Future<Output = T> + Unpin>(h: &dyn Harness, what: &str, f: &mut F) {
    if tokio::time::timeout(h.tick() * 4, f).await.is_ok() {
        panic!("expected to still be waiting: {what}");
    }
}

/// Detects overlapping critical sections: exclusive entries must be alone, shared entries may overlap each other.
#[derive(Debug, Default)]
pub struct Occupancy {
    state: Mutex<(u32, u32)>,
    violations: AtomicU64,
    entries: AtomicU64,
    max_shared: AtomicU64,
    tokens: Mutex<Vec<u128>>,
}

impl Occupancy {
    /// A new detector.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Enters exclusively, recording the fencing token in entry order.
    pub fn enter_exclusive(&self, token: u128) {
        let mut s = self.state.lock().unwrap();
        if s.0 != 0 || s.1 != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        s.0 += 1;
        self.entries.fetch_add(1, Ordering::SeqCst);
        self.tokens.lock().unwrap().push(token);
    }

    /// Leaves an exclusive section.
    pub fn exit_exclusive(&self) {
        self.state.lock().unwrap().0 -= 1;
    }

    /// Enters shared.
    pub fn enter_shared(&self) {
        let mut s = self.state.lock().unwrap();
        if s.0 != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        s.1 += 1;
        self.max_shared.fetch_max(s.1 as u64, Ordering::SeqCst);
        self.entries.fetch_add(1, Ordering::SeqCst);
    }

    /// Leaves a shared section.
    pub fn exit_shared(&self) {
        self.state.lock().unwrap().1 -= 1;
    }

    /// Overlaps seen.
    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::SeqCst)
    }

    /// Sections entered.
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::SeqCst)
    }

    /// The most shared sections at once.
    pub fn max_shared(&self) -> u64 {
        self.max_shared.load(Ordering::SeqCst)
    }

    /// Fencing tokens of exclusive entries, in entry order.
    pub fn tokens(&self) -> Vec<u128> {
        self.tokens.lock().unwrap().clone()
    }
}

/// Holds `guard` exclusively for `hold`, recording it in `occ`, then releases it.
pub async fn hold_exclusive(occ: &Occupancy, guard: LockGuard, hold: Duration) {
    occ.enter_exclusive(guard.fencing_token());
    tokio::time::sleep(hold).await;
    occ.exit_exclusive();
    guard.release().await.expect("release");
}

/// Asserts that tokens strictly increase.
pub fn assert_increasing(tokens: &[u128]) {
    for w in tokens.windows(2) {
        assert!(w[0] < w[1], "fencing tokens must strictly increase: {tokens:?}");
    }
}

/// Skips (with a line on stderr) when a capability is missing.
pub fn skip(h: &dyn Harness, scenario: &str, what: &str) {
    eprintln!(
        "SKIPPED {}::{scenario}: the {} harness has no {what}",
        h.name(),
        h.name()
    );
}

/// Makes `path` and its ancestors (containers), keeps `path` from being reaped with an ephemeral child `keep` that is
/// no lock node, and sets the path's sequence counter to `next` (the harness must have settable sequences); returns
/// the keeper's path, for the scenario to delete at its end.
pub async fn path_kept_at_sequence(h: &dyn Harness, on: SessionRef<'_>, path: &str, next: i32) -> String {
    let mut at = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        at.push('/');
        at.push_str(part);
        let _ = on.create(&at, b"", CreateMode::Container).await;
    }
    let keep = format!("{path}/keep");
    on.create(&keep, b"", CreateMode::Ephemeral)
        .await
        .expect("the keeper node");
    h.set_next_sequence(path, next);
    keep
}

/// Waits (at most 20 s) until `backend` has seen its session `old` end: a new session, or `old` reported expired.
/// The harnesses' `expire_session` ends with it, as the in-memory backend reports an expiry at once.
pub async fn until_session_ended(backend: &dyn recipes_core::Backend, old: recipes_core::backend::SessionId) {
    let mut rx = backend.session();
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let st = *rx.borrow_and_update();
            if st.id != old || st.state == recipes_core::backend::SessionState::Expired {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "the client did not learn that its session {old:#x} ended");
}

/// A multi-thread runtime of two workers, all drivers on (a service's runtime, as the runtime tests make it).
pub fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("app-worker")
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Where a session must run for each `SessionRuntime` (decision 0094): the runtimes to connect on, and the cases.
pub struct SessionRuntimes {
    /// A multi-thread runtime, threads named `app-worker`.
    pub app: tokio::runtime::Runtime,
    /// A current-thread runtime.
    pub current: tokio::runtime::Runtime,
}

impl Default for SessionRuntimes {
    fn default() -> Self {
        SessionRuntimes {
            app: multi_thread_runtime(),
            current: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
        }
    }
}

impl SessionRuntimes {
    /// Each case: its description, the runtime to connect on, the choice (`None`: the options' default), and the
    /// thread a task spawned on the session's runtime must run on, for a backend whose own runtime's threads are named
    /// `own` and whose default is `default`.
    pub fn cases(
        &self,
        own: &'static str,
        default: recipes_core::backend::SessionRuntime,
    ) -> [(
        &'static str,
        &tokio::runtime::Runtime,
        Option<recipes_core::backend::SessionRuntime>,
        &'static str,
    ); 6] {
        use recipes_core::backend::SessionRuntime;
        let on_the_app = match default {
            SessionRuntime::Caller => "app-worker",
            _ => own,
        };
        [
            (
                "caller, multi-thread",
                &self.app,
                Some(SessionRuntime::Caller),
                "app-worker",
            ),
            ("own, multi-thread", &self.app, Some(SessionRuntime::Own), own),
            ("default, multi-thread", &self.app, None, on_the_app),
            (
                "caller, current-thread",
                &self.current,
                Some(SessionRuntime::Caller),
                own,
            ),
            ("own, current-thread", &self.current, Some(SessionRuntime::Own), own),
            ("default, current-thread", &self.current, None, own),
        ]
    }
}

/// The name of the thread a task spawned on `rt` runs on (at most 10 s to run it).
pub fn thread_of(rt: &tokio::runtime::Handle) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let _ = tx.send(std::thread::current().name().unwrap_or_default().to_owned());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the runtime runs its tasks")
}
