//! A drain through same-session passes with a chain of marks running (a queue longer than 32), on two worker threads
//! where a handed waiter sees its blocker's deletion before the holder's word (`SlowGet::slow_sends`, decision 75),
//! while waiters are cancelled in line (their tasks aborted), acquires run out of time (`acquire_timeout`) and
//! releases are dropped right after their delete (and handoff) went out. No two holders are ever inside at once,
//! every acquire with a deadline returns within it (plus slack), nothing hangs, and the path is empty at the end.
//! Written by review (helper-71); a planted bug that takes any deletion of a same-session blocker for a handoff fails
//! it in its first round ("two holders at once").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recipes_core::Locks;
use recipes_mem::MemCluster;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::support::SlowGet;

/// Who is inside the critical section, and how often two were.
#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    overlaps: AtomicUsize,
    entered: AtomicUsize,
}

impl Inside {
    /// Enters, stays `for_` (blocking its thread: no await, so an abort cannot cut the section short), leaves.
    fn section(&self, for_: Duration) {
        if self.now.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.entered.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(for_);
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

const WAITERS: usize = 90;

async fn round(round: usize) {
    let path = format!("/handoff-drain/round{round}");
    let path = path.as_str();
    let cluster = MemCluster::new();
    let backends: Vec<Arc<SlowGet>> = (0..3).map(|_| Arc::new(SlowGet::new(cluster.client()))).collect();
    let sessions: Vec<Locks> = backends.iter().map(|b| Locks::new(b.clone())).collect();
    let inside = Arc::new(Inside::default());
    let holder = sessions[0].fair(path).unwrap().acquire().await.unwrap();
    let mut tasks = JoinSet::new();
    let mut abortable = Vec::new();
    let (go, _) = tokio::sync::watch::channel(false);
    // The nodes on the path once every waiter spawned so far (but those of kind 5) has queued.
    let mut expected = 1;
    for i in 0..WAITERS {
        // Neighbours two by two on one session: every other handoff is a same-session pass.
        let lock = sessions[(i / 2 + round) % sessions.len()].fair(path).unwrap();
        let inside = inside.clone();
        match (i + round) % 6 {
            // Cancelled in line (aborted at some await of its acquire), or holds if it gets there first.
            4 => abortable.push(tokio::spawn(async move {
                let g = lock.acquire().await.unwrap();
                inside.section(Duration::from_micros(200));
                g.release().await.unwrap();
            })),
            // Joins the back of the queue once the drain starts, with a deadline that runs out during it, for some.
            5 => {
                let timeout = Duration::from_millis(((i * 37) % 400) as u64 + 5);
                let mut go = go.subscribe();
                tasks.spawn(async move {
                    let _ = go.wait_for(|g| *g).await;
                    let started = Instant::now();
                    let got = lock.acquire_timeout(timeout).await.unwrap();
                    let took = started.elapsed();
                    assert!(
                        took < timeout + Duration::from_secs(2),
                        "an acquire with a {timeout:?} deadline returned after {took:?}"
                    );
                    if let Some(g) = got {
                        inside.section(Duration::from_micros(200));
                        g.release().await.unwrap();
                    }
                });
                continue;
            }
            // The release dropped right after its first poll (its delete, and any handoff, already sent).
            3 => {
                tasks.spawn(async move {
                    let g = lock.acquire().await.unwrap();
                    inside.section(Duration::from_micros(200));
                    let _ = tokio::time::timeout(Duration::ZERO, g.release()).await;
                });
            }
            _ => {
                tasks.spawn(async move {
                    let g = lock.acquire().await.unwrap();
                    inside.section(Duration::from_micros(300));
                    tokio::task::yield_now().await;
                    g.release().await.unwrap();
                });
            }
        }
        expected += 1;
        for _ in 0..1000 {
            if cluster.children(path).len() == expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    for b in &backends {
        b.slow_sends.store(true, Ordering::SeqCst);
    }
    // Two in three of the cancellable waiters are aborted one by one while the queue drains (in line, being handed the
    // lock, or confirming it); the third are left to hold.
    let aborter = tokio::spawn(async move {
        let mut left = Vec::new();
        for (k, t) in abortable.into_iter().enumerate() {
            if k % 3 == 2 {
                left.push(t);
                continue;
            }
            tokio::time::sleep(Duration::from_micros(1500)).await;
            t.abort();
            // Aborted, or done first: either way no panic of its own.
            if let Err(e) = t.await {
                assert!(e.is_cancelled(), "{e}");
            }
        }
        for t in left {
            t.await.unwrap();
        }
    });
    go.send_replace(true);
    holder.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
        aborter.await.unwrap();
    })
    .await
    .expect("round {round}: the queue drains, no acquire waits forever");
    // Aborted acquires and dropped releases delete their nodes in the background.
    for _ in 0..2000 {
        if cluster.children(path).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let handoffs: u64 = sessions.iter().map(|s| s.metrics().handoffs).sum();
    assert_eq!(
        inside.overlaps.load(Ordering::SeqCst),
        0,
        "round {round}: two holders at once"
    );
    assert!(
        cluster.children(path).is_empty(),
        "round {round}: left behind: {:?}",
        cluster.children(path)
    );
    assert!(handoffs > 0, "round {round}: no same-session pass was exercised");
    for s in sessions {
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_through_same_session_passes_with_cancellations_never_overlaps() {
    for r in 0..6 {
        round(r).await;
    }
}
