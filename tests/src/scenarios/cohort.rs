//! Cohorts ([`LocksBuilder::cohorts`](recipes_core::LocksBuilder::cohorts)): the tasks of one process share one node
//! of a fair lock, pass it among themselves up to the bound, and learn of a loss, a revocation or a cancellation as a
//! lone holder or waiter does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use recipes_core::{Error, LockGuard, Locks, LostReason};
use tokio::task::JoinSet;

use crate::harness::{Harness, TestClient};
use crate::util::{assert_increasing, assert_pending, bounded, wait_children, Occupancy};

/// A `Locks` with cohorts of `bound` holds on the client's own session.
fn cohort_locks(c: &TestClient, bound: u32) -> Locks {
    Locks::builder(c.locks.backend().clone()).cohorts(bound).build()
}

/// Lets the tasks just spawned reach their first await (a cohort queues them without a request).
async fn settle(tick: Duration) {
    tokio::time::sleep(tick).await;
}

/// Tasks of a cohort and another session contend: never two holders, tokens strictly increase across local passes
/// and nodes, holds of one node are passed without a new node, a try beside a local holder fails at once, and no node
/// is left.
pub async fn cohort_passes_keep_exclusion_and_token_order(h: &dyn Harness) {
    let path = h.path("cohort-exclusion");
    let (a, b) = (h.client().await, h.client().await);
    let locks = cohort_locks(&a, 4);
    let occ = Occupancy::new();
    let nodes = Arc::new(Mutex::new(Vec::new()));
    let mut set = JoinSet::new();
    for _ in 0..6 {
        let (lock, occ, nodes) = (locks.fair(&path).unwrap(), occ.clone(), nodes.clone());
        set.spawn(async move {
            for _ in 0..5 {
                let g = lock.acquire().await.expect("acquire");
                occ.enter_exclusive(g.fencing_token());
                nodes.lock().unwrap().push(g.node().to_owned());
                // A try beside a local holder fails without waiting.
                assert!(lock.try_acquire().await.unwrap().is_none());
                tokio::time::sleep(Duration::from_millis(1)).await;
                occ.exit_exclusive();
                g.release().await.expect("release");
            }
        });
    }
    let (lock, o) = (b.locks.fair(&path).unwrap(), occ.clone());
    set.spawn(async move {
        for _ in 0..5 {
            let g = lock.acquire().await.expect("acquire");
            o.enter_exclusive(g.fencing_token());
            tokio::time::sleep(Duration::from_millis(1)).await;
            o.exit_exclusive();
            g.release().await.expect("release");
        }
    });
    bounded(h, "cohort contention", async {
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
    })
    .await;
    assert_eq!(occ.violations(), 0, "two holders at once");
    assert_eq!(occ.entries(), 35);
    assert_increasing(&occ.tokens());
    let nodes = nodes.lock().unwrap().clone();
    let mut distinct = nodes.clone();
    distinct.dedup();
    assert!(
        distinct.len() < nodes.len(),
        "no hold was passed within the cohort: {nodes:?}"
    );
    wait_children(h, &path, 0).await;
}

/// Another session's waiter queued behind a cohort's node waits for at most the bound's holds of the cohort, whose
/// tasks are served in the order they asked; then the cohort queues again behind it.
pub async fn cohort_bound_lets_a_waiting_session_in(h: &dyn Harness) {
    const K: u32 = 3;
    let path = h.path("cohort-bound");
    let (a, b) = (h.client().await, h.client().await);
    let locks = cohort_locks(&a, K);
    let lock = locks.fair(&path).unwrap();
    let first = lock.acquire().await.unwrap();
    let order = Arc::new(Mutex::new(vec!["a0".to_owned()]));
    let mut set = JoinSet::new();
    for i in 1..=5 {
        let (lock, order) = (lock.clone(), order.clone());
        set.spawn(async move {
            let g = lock.acquire().await.expect("acquire");
            order.lock().unwrap().push(format!("a{i}"));
            tokio::time::sleep(Duration::from_millis(1)).await;
            g.release().await.expect("release");
        });
        // Four ticks: the order checked below is the order the tasks joined in, room for a busy worker thread.
        settle(h.tick() * 4).await;
    }
    let (lb, o) = (b.locks.fair(&path).unwrap(), order.clone());
    let mut other = tokio::spawn(async move {
        let g = lb.acquire().await.expect("acquire");
        o.lock().unwrap().push("b".to_owned());
        tokio::time::sleep(Duration::from_millis(1)).await;
        g.release().await.expect("release");
    });
    wait_children(h, &path, 2).await;
    assert_pending(h, "the other session waits", &mut other).await;
    first.release().await.unwrap();
    bounded(h, "the cohort and the other session", async {
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
        other.await.unwrap();
    })
    .await;
    let order = order.lock().unwrap().clone();
    assert_eq!(order, ["a0", "a1", "a2", "b", "a3", "a4", "a5"], "K = {K}");
    wait_children(h, &path, 0).await;
}

/// The session of a cohort's node expires: the holder's `lost()` says so, every task waiting in the cohort fails as
/// a waiter in line does, and nothing is left; the `Locks` goes on with a new session.
pub async fn cohort_session_expiry_reaches_every_task(h: &dyn Harness) {
    let path = h.path("cohort-expiry");
    let a = h.client().await;
    let locks = cohort_locks(&a, 8);
    let lock = locks.fair(&path).unwrap();
    let g = lock.acquire().await.unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.acquire().await })
        })
        .collect();
    settle(h.tick()).await;
    a.faults.expire_session().await;
    assert_eq!(bounded(h, "lost", g.lost()).await, LostReason::SessionExpired);
    for w in waiters {
        match bounded(h, "a waiting task", w).await.unwrap() {
            Err(Error::SessionExpired) => {}
            other => panic!("a task waiting in the cohort got {other:?}, not SessionExpired"),
        }
    }
    assert!(g.release().await.is_err(), "the release reports the loss");
    wait_children(h, &path, 0).await;
    let again = bounded(h, "an acquire on the new session", lock.acquire())
        .await
        .unwrap();
    again.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Cancelled members of a cohort: a leader whose time runs out in the global queue hands the lead to the next task,
/// a local waiter whose time runs out leaves the queue, a dropped leader's node is cleaned up, and nothing is left.
pub async fn cohort_cancellations_leave_no_node(h: &dyn Harness) {
    let path = h.path("cohort-cancel");
    let (a, b) = (h.client().await, h.client().await);
    let locks = cohort_locks(&a, 4);
    let lock = locks.fair(&path).unwrap();
    let held = b.locks.fair(&path).unwrap().acquire().await.unwrap();
    let short = h.tick() * 4;
    // The leader: queued in the global queue behind `held`, gives up.
    let leader = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire_timeout(short).await })
    };
    settle(h.tick()).await;
    // A local waiter that gives up too, and one that waits as long as it takes.
    let quitter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire_timeout(short).await })
    };
    let patient = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire().await })
    };
    // A task whose acquire is dropped while it waits in the cohort.
    let dropped = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire().await })
    };
    settle(h.tick()).await;
    dropped.abort();
    assert!(bounded(h, "leader times out", leader).await.unwrap().unwrap().is_none());
    assert!(bounded(h, "local waiter times out", quitter)
        .await
        .unwrap()
        .unwrap()
        .is_none());
    // The patient task now leads, with a node of its own behind `held`.
    wait_children(h, &path, 2).await;
    held.release().await.unwrap();
    let g: LockGuard = bounded(h, "the patient task holds", patient).await.unwrap().unwrap();
    // A local task takes the passed node and is dropped while it holds: the node goes, the other session holds.
    let holder2 = b.locks.fair(&path).unwrap();
    let mut next = tokio::spawn(async move { holder2.acquire().await });
    wait_children(h, &path, 2).await;
    let (tx, holding) = tokio::sync::oneshot::channel();
    let passed = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock.acquire().await;
            let _ = tx.send(());
            std::future::pending::<()>().await;
            drop(g);
        })
    };
    settle(h.tick()).await;
    g.release().await.unwrap();
    bounded(h, "the pass", holding).await.unwrap();
    assert_pending(h, "the other session behind the cohort's node", &mut next).await;
    passed.abort();
    let _ = passed.await;
    let other = bounded(h, "the other session after the cohort", &mut next)
        .await
        .unwrap()
        .unwrap();
    // A leader dropped while its node waits in the global queue: the node goes with it.
    let leader = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire().await })
    };
    wait_children(h, &path, 2).await;
    leader.abort();
    let _ = leader.await;
    wait_children(h, &path, 1).await;
    other.release().await.unwrap();
    wait_children(h, &path, 0).await;
    let last = bounded(h, "the cohort after it all", lock.acquire()).await.unwrap();
    last.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A revocation of a cohort's node reaches its holder (and a later local holder of the same node), and ends the
/// passes: after the holder that learned of it lets go, the node is released, not passed on.
pub async fn cohort_revocation_ends_the_passes(h: &dyn Harness) {
    let path = h.path("cohort-revoke");
    let (a, b) = (h.client().await, h.client().await);
    let locks = cohort_locks(&a, 8);
    let lock = locks.fair(&path).unwrap();
    let g = lock.acquire().await.unwrap();
    let node = g.node().to_owned();
    let next = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire().await })
    };
    settle(h.tick()).await;
    let asked = b.locks.revoke(&path).await.unwrap();
    assert!(asked.len() == 1 && node.ends_with(&asked[0]), "{asked:?} for {node}");
    bounded(h, "revocation reaches the holder", g.revocation_requested())
        .await
        .unwrap();
    g.release().await.unwrap();
    let g2 = bounded(h, "the next local task", next).await.unwrap().unwrap();
    assert_ne!(g2.node(), node, "a revoked node was passed on");
    g2.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Read/write cohorts: the readers of one process share one node, its writers pass theirs, beside another session's
/// readers and writers. Never a writer beside anyone, writers' tokens strictly increase, two readers of the cohort
/// held one node at once, and no node is left.
pub async fn read_write_cohorts_keep_exclusion(h: &dyn Harness) {
    let path = h.path("rw-cohort-exclusion");
    let (a, b) = (h.client().await, h.client().await);
    let locks = cohort_locks(&a, 4);
    let occ = Occupancy::new();
    // Per read node: the holds of it now, and the most at once.
    let read_nodes = Arc::new(Mutex::new(std::collections::HashMap::<String, (u32, u32)>::new()));
    let mut set = JoinSet::new();
    let sides = [
        (&locks, true),
        (&locks, true),
        (&locks, true),
        (&locks, true),
        (&locks, false),
        (&locks, false),
    ];
    let other = [(&b.locks, true), (&b.locks, false)];
    for (locks, read) in sides.into_iter().chain(other) {
        let (rw, occ, read_nodes) = (locks.read_write(&path).unwrap(), occ.clone(), read_nodes.clone());
        set.spawn(async move {
            for _ in 0..4 {
                if read {
                    let g = rw.read().acquire().await.expect("read");
                    occ.enter_shared();
                    {
                        let mut nodes = read_nodes.lock().unwrap();
                        let (now, most) = nodes.entry(g.node().to_owned()).or_default();
                        *now += 1;
                        *most = (*most).max(*now);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    read_nodes.lock().unwrap().get_mut(g.node()).expect("entered").0 -= 1;
                    occ.exit_shared();
                    g.release().await.expect("release");
                } else {
                    let g = rw.write().acquire().await.expect("write");
                    occ.enter_exclusive(g.fencing_token());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    occ.exit_exclusive();
                    g.release().await.expect("release");
                }
            }
        });
    }
    bounded(h, "read/write cohort contention", async {
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
    })
    .await;
    assert_eq!(occ.violations(), 0, "a writer beside another holder");
    assert_eq!(occ.entries(), 32);
    assert_increasing(&occ.tokens());
    let nodes = read_nodes.lock().unwrap().clone();
    assert!(
        nodes.values().any(|&(_, most)| most >= 2),
        "no read node was held by two readers at once: {nodes:?}"
    );
    wait_children(h, &path, 0).await;
}

/// The readers of a cohort join the node it holds, even with another session's writer queued behind it, up to the
/// bound: the reader past it leads a new node behind the writer (it does not wait for the node's holders), and the
/// writer holds once the node's readers let go. Tokens of the joined holds rise with each pass.
pub async fn read_cohort_bound_lets_a_writer_in(h: &dyn Harness) {
    let path = h.path("read-cohort-bound");
    let (a, b) = (h.client().await, h.client().await);
    let locks = cohort_locks(&a, 2);
    let read = locks.read_write(&path).unwrap().read();
    let spawn_read = |read: recipes_core::ReadLock| tokio::spawn(async move { read.acquire().await });
    let r0 = bounded(h, "the first reader", spawn_read(read.clone()))
        .await
        .unwrap()
        .unwrap();
    let writer = b.locks.read_write(&path).unwrap().write();
    let mut w = tokio::spawn(async move { writer.acquire().await });
    wait_children(h, &path, 2).await;
    let r1 = bounded(h, "a reader joins the cohort's node", spawn_read(read.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r1.node(), r0.node(), "the second reader has a node of its own");
    assert!(r1.fencing_token() > r0.fencing_token());
    let mut r2 = spawn_read(read.clone());
    wait_children(h, &path, 3).await;
    assert_pending(h, "the reader past the bound waits behind the writer", &mut r2).await;
    r0.release().await.unwrap();
    assert_pending(h, "the writer waits for the node's last reader", &mut w).await;
    r1.release().await.unwrap();
    let gw = bounded(h, "the writer", &mut w).await.unwrap().unwrap();
    assert_pending(h, "the reader behind the writer", &mut r2).await;
    gw.release().await.unwrap();
    let g2 = bounded(h, "the reader past the bound", r2).await.unwrap().unwrap();
    g2.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A writer of the cohort that downgrades keeps the node: the next writer of the cohort takes the pass only once the
/// downgraded read hold is released too, with a higher token, on the same node; a session expiry then reaches every
/// reader of a shared node and leaves nothing.
pub async fn write_cohort_passes_after_a_downgrade(h: &dyn Harness) {
    let path = h.path("write-cohort-downgrade");
    let a = h.client().await;
    let locks = cohort_locks(&a, 4);
    let rw = locks.read_write(&path).unwrap();
    let w0 = rw.write().acquire().await.unwrap();
    let r0 = rw.read().acquire().await.unwrap(); // downgrade: the same owner (this task)
    assert_eq!(r0.node(), w0.node());
    let mut w1 = tokio::spawn({
        let write = rw.write();
        async move { write.acquire().await }
    });
    settle(h.tick()).await;
    let (node, token) = (w0.node().to_owned(), w0.fencing_token());
    w0.release().await.unwrap();
    assert_pending(h, "the next writer while the downgraded read holds", &mut w1).await;
    r0.release().await.unwrap();
    let g1 = bounded(h, "the next writer", w1).await.unwrap().unwrap();
    assert_eq!(g1.node(), node, "the write node was not passed");
    assert!(g1.fencing_token() > token);
    g1.release().await.unwrap();
    wait_children(h, &path, 0).await;
    // Two readers of the cohort share a node; its session expires: both learn it, nothing is left.
    let spawn_read = |read: recipes_core::ReadLock| tokio::spawn(async move { read.acquire().await });
    let ra = bounded(h, "a reader", spawn_read(rw.read())).await.unwrap().unwrap();
    let rb = bounded(h, "a second reader", spawn_read(rw.read()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ra.node(), rb.node());
    a.faults.expire_session().await;
    for g in [ra, rb] {
        assert_eq!(bounded(h, "lost", g.lost()).await, LostReason::SessionExpired);
        assert!(g.release().await.is_err(), "the release reports the loss");
    }
    wait_children(h, &path, 0).await;
    let again = bounded(h, "a reader on the new session", rw.read().acquire())
        .await
        .unwrap();
    again.release().await.unwrap();
    wait_children(h, &path, 0).await;
}
