//! The etcd layout (etcd's own lock, Go's `concurrency.Mutex`): keys named by the session, one per session and path,
//! ordered by creation; refused where the backend orders by sequence, and beside every other family.

use std::sync::Arc;

use recipes_core::backend::ChildOrder;
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
/// lock, semaphore or election (Go's package has no such recipe sharing its keys).
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
        etcd.election(&path).map(|_| ()),
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
