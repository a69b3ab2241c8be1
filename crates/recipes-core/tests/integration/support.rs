//! What several integration tests share: a backend that delegates to another and delays its reads and deletes on
//! demand (to open a window between a request and what a recipe does after it), and a wait for a path's children.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recipes_core::backend::*;
use recipes_core::{Backend, Result};
use recipes_mem::MemClient;
use tokio::sync::watch;

/// Waits (bounded: 2 s) until `path` has `n` children on `cluster`.
pub async fn wait_children(cluster: &recipes_mem::MemCluster, path: &str, n: usize) {
    for _ in 0..400 {
        if cluster.children(path).len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{path}: {:?}", cluster.children(path));
}

/// Lets the tasks run until they have nothing left to do for now (a test in the controlled mode).
pub async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

/// Makes every enabled request, reply and event of the live connections happen, the tasks running between each,
/// until nothing is left (bounded). Timers are not fired: time does not move.
pub async fn run(ctl: &recipes_mem::Controller) {
    for _ in 0..1_000 {
        settle().await;
        let Some(e) = ctl
            .events()
            .into_iter()
            .find(|e| !matches!(e, recipes_mem::NetEvent::Timer(_)))
        else {
            return;
        };
        assert!(ctl.fire(e));
    }
    panic!("the cluster never quietened");
}

/// As [`run`], but stops as soon as the next request of session `sid` to be applied is `request` (as the controller
/// describes it: `apply list /s`); `false` when the cluster quietened first.
pub async fn run_until_applying(
    ctl: &recipes_mem::Controller,
    sid: recipes_core::backend::SessionId,
    request: &str,
) -> bool {
    for _ in 0..1_000 {
        settle().await;
        if ctl.describe(recipes_mem::NetEvent::Apply(sid)).ends_with(request) {
            return true;
        }
        let Some(e) = ctl
            .events()
            .into_iter()
            .find(|e| !matches!(e, recipes_mem::NetEvent::Timer(_)))
        else {
            return false;
        };
        assert!(ctl.fire(e));
    }
    false
}

/// Counts a holder out of a count of holders when dropped (a sweep's check of one holder at a time).
pub struct Out(pub Arc<AtomicUsize>);

impl Drop for Out {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Asserts, once every session of `cluster` has had time to end (8 s of tokio's clock), that no ephemeral node is left
/// (`case` names the run in the failure).
pub async fn assert_nothing_left(cluster: &recipes_mem::MemCluster, case: &str) {
    tokio::time::sleep(Duration::from_secs(8)).await;
    let left = cluster.ephemerals();
    assert!(left.is_empty(), "left behind: {left:?} ({case})");
}

thread_local! {
    /// The call of `SlowGet::session_status` on this thread that this counts down to (1: the next; 0: none) stalls
    /// 50 ms and reports `Suspended`: a releasing thread held up right after it took its waiters' registrations, that
    /// then finds its connection blinking (helper-92).
    pub static STALL_STATUS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// How long a delayed read waits.
pub const DELAY: Duration = Duration::from_millis(600);

/// Delegates to `inner` (an in-memory client), powers included. A `get` sleeps [`DELAY`] before it is sent while
/// `before` is set; and after its reply, for as many gets as `after` counts down. A delete (plain, or conditioned on
/// the node's creation) sleeps before it is sent, for as many as `before_delete` counts down; and fails with
/// `ConnectionLoss` without being sent, for as many as `lost_deletes` counts down. Then a plain delete is sent and its
/// connection breaks while it is in flight, for as many as `orphan_deletes` counts down: the request lands 100 ms
/// later as an orphan, its caller gets `ConnectionLoss`, and the next get sleeps [`DELAY`] after its reply. `marks`
/// counts the releases that marked their node `first` in their transaction (`set_data_and_delete`, or its form sent at
/// once, for a handoff).
#[derive(Debug)]
pub struct SlowGet {
    pub inner: Arc<dyn Backend>,
    client: Arc<MemClient>,
    pub before: Arc<AtomicBool>,
    pub after: Arc<AtomicU32>,
    pub before_delete: Arc<AtomicU32>,
    pub lost_deletes: Arc<AtomicU32>,
    pub orphan_deletes: Arc<AtomicU32>,
    pub marks: Arc<AtomicU32>,
    /// A delete sent now (`SendNow`) blocks its thread for 5 ms before returning, while this is set: on a runtime of
    /// several threads, the deleted node's watchers run on another and see its deletion before the sender goes on.
    pub slow_sends: Arc<AtomicBool>,
    /// Reads (`get_and_watch`) of this path are refused with `NoAuth`, as an ACL that denies us reading it would.
    pub unreadable: Arc<std::sync::Mutex<Option<String>>>,
    /// A handoff's marked transaction (`set_data_and_delete_sent`) is refused with `NotAuthorized`, nothing applied,
    /// as an ACL that lets us delete our node but not write it would; `refused_marks` counts them.
    pub refuse_sent_marks: Arc<AtomicBool>,
    pub refused_marks: Arc<AtomicU32>,
}

impl SlowGet {
    /// With `slow_sends`, a sender held up right after its request went out (its handoff's word not yet given).
    fn after_send(&self) {
        if self.slow_sends.load(Ordering::SeqCst) {
            // The woken watcher sits in this worker's LIFO slot, which other workers cannot steal from: a task spawned
            // now takes the slot and moves it to the queue they steal from.
            drop(tokio::spawn(async {}));
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn new(client: Arc<MemClient>) -> Self {
        SlowGet {
            inner: client.clone(),
            client,
            before: Arc::default(),
            after: Arc::default(),
            before_delete: Arc::default(),
            lost_deletes: Arc::default(),
            orphan_deletes: Arc::default(),
            marks: Arc::default(),
            slow_sends: Arc::default(),
            unreadable: Arc::default(),
            refuse_sent_marks: Arc::default(),
            refused_marks: Arc::default(),
        }
    }

    /// A delete sent whose connection breaks while it is in flight (see `orphan_deletes`).
    async fn orphaned_delete(&self, s: SessionId, p: &str) -> Result<()> {
        let cluster = self.client.cluster().clone();
        cluster.set_latency(Duration::from_millis(100));
        let (inner, p) = (self.inner.clone(), p.to_owned());
        let sent = tokio::spawn(async move { inner.delete(s, &p).await });
        tokio::task::yield_now().await; // the delete is sent
        self.client.disconnect_for(Duration::from_millis(5));
        cluster.set_latency(Duration::from_millis(1));
        self.after.fetch_add(1, Ordering::SeqCst);
        sent.await.expect("the delete's task")
    }
}

/// Takes a turn of `count`, if it has one left.
fn take_turn(count: &AtomicU32) -> bool {
    count
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// A delete's connection lost before it was sent, while `lost` has a turn left.
fn lost(lost: &AtomicU32) -> Result<()> {
    match take_turn(lost) {
        true => Err(recipes_core::Error::ConnectionLoss),
        false => Ok(()),
    }
}

/// Sleeps [`DELAY`] when `count` has a turn left, and takes it.
async fn delay_by(count: &AtomicU32) {
    if take_turn(count) {
        tokio::time::sleep(DELAY).await;
    }
}

#[async_trait]
impl CreationChecks for SlowGet {
    async fn delete_if_created(&self, s: SessionId, p: &str, czxid: i64) -> Result<bool> {
        delay_by(&self.before_delete).await;
        lost(&self.lost_deletes)?;
        let checks = self
            .inner
            .creation_checks()
            .expect("offered only when the inner backend has them");
        checks.delete_if_created(s, p, czxid).await
    }
}

#[async_trait]
impl Transactions for SlowGet {
    async fn delete_all(&self, s: SessionId, paths: &[String]) -> Result<()> {
        self.inner_transactions().delete_all(s, paths).await
    }
    async fn set_data_and_delete(&self, s: SessionId, p: &str, d: &[u8]) -> Result<()> {
        self.marks.fetch_add(1, Ordering::SeqCst);
        self.inner_transactions().set_data_and_delete(s, p, d).await
    }
}

impl SendNow for SlowGet {
    fn delete_sent(&self, s: SessionId, p: &str) -> Option<ReplyFuture> {
        let sent = self
            .inner
            .send_now()
            .expect("offered only when the inner backend has it")
            .delete_sent(s, p);
        self.after_send();
        sent
    }

    fn delete_if_created_sent(&self, s: SessionId, p: &str, czxid: i64) -> Option<ReplyFuture> {
        let sent = self
            .inner
            .send_now()
            .expect("offered only when the inner backend has it")
            .delete_if_created_sent(s, p, czxid);
        self.after_send();
        sent
    }

    fn set_data_and_delete_sent(&self, s: SessionId, p: &str, data: &[u8]) -> Option<ReplyFuture> {
        if self.refuse_sent_marks.load(Ordering::SeqCst) {
            self.refused_marks.fetch_add(1, Ordering::SeqCst);
            let p = p.to_owned();
            return Some(Box::pin(async move { Err(recipes_core::Error::NotAuthorized(p)) }));
        }
        let sent = self
            .inner
            .send_now()
            .expect("offered only when the inner backend has it")
            .set_data_and_delete_sent(s, p, data);
        if sent.is_some() {
            self.marks.fetch_add(1, Ordering::SeqCst);
        }
        self.after_send();
        sent
    }
}

impl SlowGet {
    fn inner_transactions(&self) -> &dyn Transactions {
        self.inner
            .transactions()
            .expect("offered only when the inner backend has them")
    }
}

#[async_trait]
impl Backend for SlowGet {
    async fn create(&self, s: SessionId, p: &str, d: &[u8], m: CreateMode) -> Result<Created> {
        self.inner.create(s, p, d, m).await
    }
    async fn create_and_list(&self, s: SessionId, p: &str, d: &[u8], m: CreateMode) -> CreateAndList {
        self.inner.create_and_list(s, p, d, m).await
    }
    async fn children(&self, s: SessionId, p: &str) -> Result<Vec<String>> {
        self.inner.children(s, p).await
    }
    async fn get(&self, s: SessionId, p: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        if self.before.load(Ordering::SeqCst) {
            tokio::time::sleep(DELAY).await;
        }
        let r = self.inner.get(s, p).await;
        delay_by(&self.after).await;
        r
    }
    async fn sync(&self, s: SessionId, p: &str) -> Result<()> {
        self.inner.sync(s, p).await
    }
    async fn watch_deletion(&self, s: SessionId, p: &str) -> Result<Option<(Stat, DeletionWatch)>> {
        self.inner.watch_deletion(s, p).await
    }
    async fn get_and_watch(&self, s: SessionId, p: &str) -> Result<Option<(Vec<u8>, NodeWatch)>> {
        if self.unreadable.lock().is_ok_and(|u| u.as_deref() == Some(p)) {
            return Err(recipes_core::Error::NotAuthorized(p.to_owned()));
        }
        self.inner.get_and_watch(s, p).await
    }
    async fn set_data(&self, s: SessionId, p: &str, d: &[u8]) -> Result<()> {
        self.inner.set_data(s, p, d).await
    }
    fn set_data_unacked(&self, s: SessionId, p: &str, d: &[u8], v: Option<i32>) {
        self.inner.set_data_unacked(s, p, d, v)
    }
    async fn delete(&self, s: SessionId, p: &str) -> Result<()> {
        delay_by(&self.before_delete).await;
        lost(&self.lost_deletes)?;
        if take_turn(&self.orphan_deletes) {
            return self.orphaned_delete(s, p).await;
        }
        self.inner.delete(s, p).await
    }
    fn child_order(&self) -> ChildOrder {
        self.inner.child_order()
    }
    fn transactions(&self) -> Option<&dyn Transactions> {
        self.inner.transactions().map(|_| self as &dyn Transactions)
    }
    fn creation_checks(&self) -> Option<&dyn CreationChecks> {
        self.inner.creation_checks().map(|_| self as &dyn CreationChecks)
    }
    fn send_now(&self) -> Option<&dyn SendNow> {
        self.inner.send_now().map(|_| self as &dyn SendNow)
    }
    // Passed through as they are: hidden, they kept every test built on this wrapper off decision 0092's path (found
    // by review, helper-150).
    fn gone_watches(&self) -> Option<&dyn recipes_core::backend::GoneWatches> {
        self.inner.gone_watches()
    }
    fn session(&self) -> watch::Receiver<SessionStatus> {
        self.inner.session()
    }
    fn session_status(&self) -> SessionStatus {
        let stall = STALL_STATUS.with(|c| {
            let n = c.get();
            c.set(n.saturating_sub(1));
            n == 1
        });
        if stall {
            std::thread::sleep(Duration::from_millis(50));
            let mut s = self.inner.session_status();
            s.state = SessionState::Suspended;
            return s;
        }
        self.inner.session_status()
    }
    async fn close(&self) {
        self.inner.close().await
    }
    fn lease(&self) -> Lease {
        self.inner.lease()
    }
    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.inner.runtime()
    }
}

/// A multi-thread runtime of one worker, for the tests that run several runtimes side by side.
pub fn one_worker() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime of one worker")
}

/// Waits, on `rt`, until `path` has `n` children in `cluster`, ten seconds at most; whether it came to that.
pub fn children_on(rt: &tokio::runtime::Runtime, cluster: &recipes_mem::MemCluster, path: &str, n: usize) -> bool {
    rt.block_on(async {
        for _ in 0..10_000 {
            if cluster.children(path).len() == n {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        false
    })
}

/// `N` `Locks` of `cluster`, each on a session of its own, made on `rt`.
pub fn sessions_on<const N: usize>(
    rt: &tokio::runtime::Runtime,
    cluster: &recipes_mem::MemCluster,
) -> [recipes_core::Locks; N] {
    rt.block_on(async { std::array::from_fn(|_| recipes_core::Locks::new(cluster.client())) })
}
