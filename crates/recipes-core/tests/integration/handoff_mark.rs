//! A release that hands the lock over within the process and marks (decision 0080): what its word, its refused mark
//! and its cancellation do. The tests are helper-92's and helper-93's, from their reviews of the decision.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recipes_core::{Backend, Locks};
use recipes_mem::MemCluster;
use tokio::task::JoinSet;

use crate::support::{SlowGet, STALL_STATUS};

/// The waiter's registration is taken by a release that then cannot hand over (it finds its connection blinking and
/// drops the word), while a revoker's request changes the holder's data. The waiter, woken by the change with its
/// registration taken, reads the spent word, then the blocker's data back (still there: the holder's delete is held
/// back 600 ms), and waits on: it must never poll the spent word again. It did, and its acquire panicked ("called
/// after complete"), until the wait gave up the word once read (found by review, helper-92).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_seen_while_a_release_cannot_hand_over_is_waited_out() {
    const PATH: &str = "/handoff-mark/revoked";
    let cluster = MemCluster::new();
    let slow = Arc::new(SlowGet::new(cluster.client()));
    let locks = Locks::new(slow.clone());
    let a = locks.fair(PATH).unwrap().acquire().await.unwrap();
    let a_node = a.node().to_owned();
    let lock_b = locks.fair(PATH).unwrap();
    let b = tokio::spawn(async move { lock_b.acquire().await });
    crate::support::wait_children(&cluster, PATH, 2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The holder's delete waits 600 ms before it is sent.
    slow.before_delete.store(1, Ordering::SeqCst);
    let release = tokio::spawn(async move {
        // The release's second look at the session (the handoff's) stalls 50 ms and finds it suspended.
        STALL_STATUS.with(|c| c.set(2));
        a.release().await
    });
    // The holder has taken B's registration and stalls; a revoker writes its request into the holder's node.
    tokio::time::sleep(Duration::from_millis(15)).await;
    let other = cluster.client();
    other
        .set_data(other.session_id(), &a_node, recipes_core::REVOKE_MESSAGE)
        .await
        .unwrap();
    let b = tokio::time::timeout(Duration::from_secs(5), b)
        .await
        .expect("the waiter holds in time")
        .expect("the waiter's task did not panic")
        .expect("the waiter holds");
    release.await.unwrap().unwrap();
    b.release().await.unwrap();
    assert!(cluster.children(PATH).is_empty());
}

/// Every handoff's marked transaction is refused (an ACL that lets a session delete its node but not write it): the
/// node goes by a plain delete, slowed here, while the holder it handed the lock to holds, and may release with its
/// own mark, behind it. Never two holders; nothing left; the refusals were met.
#[test]
fn refused_handoff_marks_never_let_two_hold() {
    const WAITERS: usize = 200;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let path = "/handoff-mark/refused";
        let cluster = MemCluster::new();
        let backends: Vec<Arc<SlowGet>> = (0..4).map(|_| Arc::new(SlowGet::new(cluster.client()))).collect();
        let sessions: Vec<Locks> = backends.iter().map(|b| Locks::new(b.clone())).collect();
        let holders = Arc::new(AtomicI32::new(0));
        let holder = sessions[0].fair(path).unwrap().acquire().await.unwrap();
        let mut queued = JoinSet::new();
        for i in 0..WAITERS {
            // Neighbours two by two on a session: every other release hands over (more than 32 waiters: they mark).
            let lock = sessions[(i / 2) % 4].fair(path).unwrap();
            let holders = holders.clone();
            queued.spawn(async move {
                let g = lock.acquire().await.unwrap();
                assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                tokio::time::sleep(Duration::from_micros(200)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                g.release().await.unwrap();
            });
            crate::support::wait_children(&cluster, path, i + 2).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        for b in &backends {
            b.slow_sends.store(true, Ordering::SeqCst);
            b.refuse_sent_marks.store(true, Ordering::SeqCst);
            b.before_delete.store(4, Ordering::SeqCst);
        }
        holder.release().await.unwrap();
        tokio::time::timeout(Duration::from_secs(300), async {
            while let Some(r) = queued.join_next().await {
                r.unwrap();
            }
        })
        .await
        .expect("the queue drains");
        for _ in 0..2000 {
            if cluster.children(path).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(cluster.children(path).is_empty(), "{:?}", cluster.children(path));
        let refused: u32 = backends.iter().map(|b| b.refused_marks.load(Ordering::SeqCst)).sum();
        assert!(refused > 0, "no handoff's mark was refused");
    });
}

/// Releases that hand over with their mark, dropped after their first poll (the marked transaction and the word are
/// sent; the guard's drop then deletes the node as after a lost reply), on one to three sessions, answered at once or
/// after 1 or 2 ms: never two holders, nothing left, and the marked path was taken (helper-93).
#[test]
fn cancelled_releases_of_marked_handoffs_leave_one_holder_and_nothing_behind() {
    for (latency_ms, sessions, cancel_every) in [(0, 1, 2), (0, 2, 3), (0, 3, 2), (2, 1, 2), (2, 2, 3), (1, 3, 2)] {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(cancelled_releases(latency_ms, sessions, cancel_every));
    }
}

async fn cancelled_releases(latency_ms: u64, sessions_n: usize, cancel_every: usize) {
    const WAITERS: usize = 90;
    let path = "/handoff-mark/cancelled";
    let cluster = MemCluster::new();
    cluster.set_latency(Duration::from_millis(latency_ms));
    let backends: Vec<Arc<SlowGet>> = (0..sessions_n)
        .map(|_| Arc::new(SlowGet::new(cluster.client())))
        .collect();
    let sessions: Vec<Locks> = backends.iter().map(|b| Locks::new(b.clone())).collect();
    let holders = Arc::new(AtomicI32::new(0));
    let holder = sessions[0].fair(path).unwrap().acquire().await.unwrap();
    let mut queued = JoinSet::new();
    for i in 0..WAITERS {
        // Three neighbours to a session; more than 32 waiters, so releases mark.
        let lock = sessions[(i / 3) % sessions_n].fair(path).unwrap();
        let holders = holders.clone();
        queued.spawn(async move {
            let g = lock.acquire().await.unwrap();
            assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            tokio::time::sleep(Duration::from_micros(300)).await;
            holders.fetch_sub(1, Ordering::SeqCst);
            if i % cancel_every == 0 {
                let _ = tokio::time::timeout(Duration::ZERO, g.release()).await;
            } else {
                g.release().await.unwrap();
            }
        });
        crate::support::wait_children(&cluster, path, i + 2).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(r) = queued.join_next().await {
            r.unwrap();
        }
    })
    .await
    .expect("the queue drains");
    for _ in 0..3000 {
        if cluster.children(path).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(cluster.children(path).is_empty(), "{:?}", cluster.children(path));
    let marks: u32 = backends.iter().map(|b| b.marks.load(Ordering::SeqCst)).sum();
    assert!(marks > 0, "no release marked ({latency_ms} ms, {sessions_n} sessions)");
}
