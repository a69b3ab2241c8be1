//! The etcd layout (etcd's own lock, Go's `concurrency.Mutex`): keys named by the session, one per session and path,
//! ordered by creation; refused where the backend orders by sequence, and beside every other family.

use std::sync::Arc;

use recipes_core::backend::{BackendExt, ChildOrder};
use recipes_core::{Error, Layout, Lock, Locks, Recipe};
use tokio::task::JoinSet;

use super::HOLD;
use crate::harness::Harness;
use crate::util::{bounded, hold_exclusive, wait_children, Occupancy};

fn etcd_layout(locks: &Locks) -> Locks {
    Locks::builder(locks.backend().clone()).layout(Layout::Etcd).build()
}

/// Whether the harness's backend orders children by creation (where the etcd layout runs); otherwise checks that the
/// layout is refused with a typed error.
async fn runs_here(h: &dyn Harness, scenario: &str) -> bool {
    let c = h.client().await;
    if c.locks.backend().child_order() == ChildOrder::Creation {
        return true;
    }
    match etcd_layout(&c.locks).fair(h.path(scenario)) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("create revision"), "{m}"),
        other => panic!(
            "expected the etcd layout refused by a backend ordered by sequence, got {:?}",
            other.map(|_| ())
        ),
    }
    false
}

/// Three sessions with two tasks each take the etcd layout's fair lock in turns: never two holders, each holder's key
/// is its session's lease id in hex, the two tasks of one session take turns on that one key, and nothing is left.
pub async fn etcd_layout_excludes_with_one_key_per_session(h: &dyn Harness) {
    if !runs_here(h, "etcd-layout").await {
        return;
    }
    let path = h.path("etcd-layout");
    let occ = Occupancy::new();
    let mut set = JoinSet::new();
    // Kept until the tasks are done (a client's faults hold its connection: its proxy).
    let mut clients = Vec::new();
    for _ in 0..3 {
        let c = h.client().await;
        let locks = etcd_layout(&c.locks);
        for _ in 0..2 {
            let lock: Arc<dyn Lock> = locks.lock(&path, Recipe::Fair).unwrap();
            let (occ, backend) = (occ.clone(), c.locks.backend().clone());
            set.spawn(async move {
                for _ in 0..4 {
                    let g = lock.acquire().await.expect("acquire");
                    let name = g.node().rsplit('/').next().unwrap().to_owned();
                    assert_eq!(name, Layout::session_name(backend.session_status().id));
                    hold_exclusive(&occ, g, HOLD).await;
                }
            });
        }
        clients.push(c);
    }
    while let Some(r) = set.join_next().await {
        r.expect("task");
    }
    drop(clients);
    assert_eq!(occ.violations(), 0, "two holders at once");
    assert_eq!(occ.entries(), 24);
    wait_children(h, &path, 0).await;
}

/// The etcd layout refuses beside every other family on its path, and they beside it; it has no exclusive, read/write
/// lock or semaphore (Go's package has no such recipe; its `Election` is the layout's election).
pub async fn etcd_layout_refuses_what_it_cannot_share(h: &dyn Harness) {
    if !runs_here(h, "etcd-layout-mixed").await {
        return;
    }
    let path = h.path("etcd-layout-mixed");
    let (a, b) = (h.client().await, h.client().await);
    let etcd = etcd_layout(&b.locks);
    for refused in [
        etcd.exclusive(&path).map(|_| ()),
        etcd.read_write(&path).map(|_| ()),
        etcd.semaphore(&path, 2).map(|_| ()),
    ] {
        assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{refused:?}");
    }
    let native = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let r = bounded(
        h,
        "the etcd layout beside a native holder",
        etcd.fair(&path).unwrap().acquire(),
    )
    .await;
    assert!(matches!(r, Err(Error::ForeignLock { .. })), "{:?}", r.map(|_| ()));
    native.release().await.unwrap();
    wait_children(h, &path, 0).await;
    let held = etcd.fair(&path).unwrap().acquire().await.unwrap();
    for (what, r) in [
        (
            "fair",
            a.locks.fair(&path).unwrap().try_acquire().await.map(|g| g.is_some()),
        ),
        (
            "exclusive",
            a.locks
                .exclusive(&path)
                .unwrap()
                .try_acquire()
                .await
                .map(|g| g.is_some()),
        ),
    ] {
        assert!(
            matches!(r, Err(Error::ForeignLock { .. })),
            "{what} beside the etcd layout: {r:?}"
        );
    }
    assert!(held.is_valid());
    held.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Two tasks of one session in the etcd layout: while the first waits, an operator deletes its key, and the second
/// makes the key again under the same name. The first must not take the second's key for its own when the holder
/// goes: one of them holds at a time (found by review: both held).
pub async fn etcd_layout_a_deleted_waiting_key_is_not_taken_back(h: &dyn Harness) {
    if !runs_here(h, "etcd-layout-deleted").await {
        return;
    }
    let path = h.path("etcd-layout-deleted");
    let (holder, s, admin) = (h.client().await, h.client().await, h.client().await);
    let held = etcd_layout(&holder.locks).fair(&path).unwrap().acquire().await.unwrap();
    let key = format!("{path}/{}", Layout::session_name(s.locks.backend().session_status().id));
    let occ = Occupancy::new();
    // Two `Locks` on the one backend (one session), each with turns of its own: the second task finds the first's
    // key and waits for it to go. (Two tasks of one `Locks` take turns: the second would not make the key while the
    // first has its turn.)
    let (first, second) = (
        etcd_layout(&s.locks).fair(&path).unwrap(),
        etcd_layout(&s.locks).fair(&path).unwrap(),
    );
    let occ_a = occ.clone();
    let a = tokio::spawn(async move {
        if let Ok(g) = first.acquire().await {
            hold_exclusive(&occ_a, g, HOLD * 20).await;
        }
    });
    wait_children(h, &path, 2).await;
    let occ_b = occ.clone();
    let b = tokio::spawn(async move {
        let g = second.acquire().await.expect("the second task holds in the end");
        hold_exclusive(&occ_b, g, HOLD * 20).await;
    });
    tokio::time::sleep(h.tick() * 5).await;
    admin.locks.backend().current().delete(&key).await.unwrap();
    // The second task makes the key again (the first's is gone).
    crate::util::eventually(h, "the second task queues under the name", || async {
        h.children(&path).await.len() == 2
    })
    .await;
    held.release().await.unwrap();
    bounded(h, "the second task", b).await.unwrap();
    bounded(h, "the first task", a).await.unwrap();
    assert_eq!(occ.violations(), 0, "two tasks of one session held at once");
    wait_children(h, &path, 0).await;
}

/// Two tasks of one session that each acquire again as soon as they release take the session's one key in turns, first
/// in, first out (decision 70: without turns, the task that had just released made the key again before its mate's
/// watch fired, up to 168 times in a row); another session's task still gets its turn among them.
pub async fn etcd_layout_tasks_of_a_session_take_turns(h: &dyn Harness) {
    if !runs_here(h, "etcd-layout-turns").await {
        return;
    }
    let path = h.path("etcd-layout-turns");
    let (s, other) = (h.client().await, h.client().await);
    let sl = etcd_layout(&s.locks);
    // Waiting for its turn keeps the deadline, and a try gives up at once; neither makes a key.
    let held = sl.fair(&path).unwrap().acquire().await.unwrap();
    let mate = sl.fair(&path).unwrap();
    assert!(mate.acquire_timeout(h.tick() * 4).await.unwrap().is_none(), "timed out");
    assert!(
        mate.try_acquire().await.unwrap().is_none(),
        "a try beside the turn's holder"
    );
    assert_eq!(h.children(&path).await.len(), 1, "only the holder's key");
    held.release().await.unwrap();
    mate.acquire().await.unwrap().release().await.unwrap();
    let occ = Occupancy::new();
    let holds = Arc::new(std::sync::Mutex::new(Vec::new()));
    let start = Arc::new(tokio::sync::Barrier::new(2));
    let mut set = JoinSet::new();
    for task in 0..2u32 {
        let lock = sl.fair(&path).unwrap();
        let (occ, holds, start) = (occ.clone(), holds.clone(), start.clone());
        set.spawn(async move {
            start.wait().await;
            for _ in 0..10 {
                let g = lock.acquire().await.expect("acquire");
                holds.lock().unwrap().push(task);
                hold_exclusive(&occ, g, HOLD).await;
            }
        });
    }
    let lock = etcd_layout(&other.locks).fair(&path).unwrap();
    let (occ_o, holds_o) = (occ.clone(), holds.clone());
    set.spawn(async move {
        for _ in 0..3 {
            let g = lock.acquire().await.expect("acquire");
            holds_o.lock().unwrap().push(2);
            hold_exclusive(&occ_o, g, HOLD).await;
        }
    });
    while let Some(r) = set.join_next().await {
        r.expect("task");
    }
    assert_eq!(occ.violations(), 0, "two holders at once");
    let holds = holds.lock().unwrap().clone();
    assert_eq!(holds.len(), 23);
    let session: Vec<u32> = holds.iter().copied().filter(|&t| t < 2).collect();
    let longest = session.chunk_by(|a, b| a == b).map(<[u32]>::len).max().unwrap_or(0);
    // FIFO within the session: the mate is in line before the holder asks again. Two in a row at most, where the
    // mate's first ask came after the holder's second.
    assert!(
        longest <= 2,
        "one task of the session held {longest} times in a row: {holds:?}"
    );
    wait_children(h, &path, 0).await;
}

/// A guard whose key an operator deleted keeps no turn its session's tasks wait for (found by review, helper-50: a
/// task that acquired again while its lost guard lived waited forever, and so did a mate): the same task acquires
/// again, a try succeeds, a waiting mate holds next, while the lost guard lives on.
pub async fn etcd_layout_a_lost_guard_keeps_no_turn(h: &dyn Harness) {
    if !runs_here(h, "etcd-layout-lost-turn").await {
        return;
    }
    let path = h.path("etcd-layout-lost-turn");
    let (s, admin) = (h.client().await, h.client().await);
    let sl = etcd_layout(&s.locks);
    let lock = sl.fair(&path).unwrap();
    let lost = lock.acquire().await.unwrap();
    let mate_lock = sl.fair(&path).unwrap();
    let mate = tokio::spawn(async move { mate_lock.acquire().await.expect("the mate holds") });
    tokio::time::sleep(h.tick() * 4).await;
    admin.locks.backend().current().delete(lost.node()).await.unwrap();
    assert_eq!(
        bounded(h, "lost() reports the delete", lost.lost()).await,
        recipes_core::LostReason::NodeDeleted
    );
    let g = bounded(h, "the mate holds beside the lost guard", mate).await.unwrap();
    let again = sl.fair(&path).unwrap();
    assert!(again.try_acquire().await.unwrap().is_none(), "the mate holds");
    g.release().await.unwrap();
    let g = bounded(h, "the lost guard's task acquires again", lock.acquire())
        .await
        .unwrap();
    assert!(g.is_valid());
    g.release().await.unwrap();
    let t = again.try_acquire().await.unwrap().expect("a try beside the lost guard");
    t.release().await.unwrap();
    drop(lost);
    wait_children(h, &path, 0).await;
}

/// In the etcd layout a try beside another task of its session gives up at once (`None`), and `revoke` refuses a key
/// of etcd's own lock (its data is what tells an acquire whose key it is).
pub async fn etcd_layout_tries_and_revocations(h: &dyn Harness) {
    if !runs_here(h, "etcd-layout-try").await {
        return;
    }
    let path = h.path("etcd-layout-try");
    let (a, b) = (h.client().await, h.client().await);
    let al = etcd_layout(&a.locks);
    let held = al.fair(&path).unwrap().acquire().await.unwrap();
    let t0 = tokio::time::Instant::now();
    for r in [
        al.fair(&path).unwrap().try_acquire().await.map(|g| g.is_some()),
        al.multi([(&path, Recipe::Fair)])
            .unwrap()
            .try_acquire()
            .await
            .map(|g| g.is_some()),
    ] {
        assert!(matches!(r, Ok(false)), "{r:?}");
    }
    assert!(t0.elapsed() < h.patience() / 4, "a try waited: {:?}", t0.elapsed());
    let r = etcd_layout(&b.locks).revoke(&path).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    // The native layout sees no holder of its own there: it asks nobody.
    assert_eq!(b.locks.revoke(&path).await.unwrap(), Vec::<String>::new());
    assert!(held.is_valid());
    held.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A short hex name is etcd's own lock's key only on a backend ordered by creation: on ZooKeeper an ephemeral child
/// `42` under a lock path is no lock node, and every recipe ignores it (found by review: they refused beside it); on
/// etcd the native recipes refuse beside it.
pub async fn a_short_hex_child_is_etcds_lock_only_on_etcd(h: &dyn Harness) {
    let path = h.path("short-hex");
    let (a, b) = (h.client().await, h.client().await);
    let on = b.locks.backend().current();
    // The lock path made as a lock makes it (its parents too, where the store has them), but never emptied: the reaper
    // takes an emptied container (a lock acquired and released) before the create below, now and then.
    crate::contract::containers(on, &path).await;
    on.create(&format!("{path}/42"), b"", recipes_core::backend::CreateMode::Ephemeral)
        .await
        .unwrap();
    let r = a.locks.fair(&path).unwrap().try_acquire().await;
    match a.locks.backend().child_order() {
        ChildOrder::Creation => assert!(
            matches!(r, Err(Error::ForeignLock { .. })),
            "{:?}",
            r.map(|g| g.is_some())
        ),
        _ => {
            let g = r.unwrap().expect("free: `42` is no lock node on ZooKeeper");
            g.release().await.unwrap();
        }
    }
    on.delete(&format!("{path}/42")).await.unwrap();
    wait_children(h, &path, 0).await;
}
