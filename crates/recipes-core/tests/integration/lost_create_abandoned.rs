//! An acquire whose create reply is lost (the create's failures, handled apart from the acquire since the twentieth
//! session: `exclusive_not_made`, `queued_not_made`) and which is abandoned after `d` ms, or a try bounded by its
//! bound, beside a holder that lets go and a contender on another session, in every layout: one holder at a time, and
//! no node left behind (helper-79's sweep, kept).

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::ChildOrder;
use recipes_core::{Layout, LockGuard, Locks, Recipe, Result};
use recipes_mem::MemCluster;

use crate::support::Out;

/// One acquire of `recipe` at `path` (a semaphore: one of one permit): `None` timeout = a try.
async fn acq(l: Locks, path: &'static str, recipe: Recipe, timeout: Option<Duration>) -> Result<Option<LockGuard>> {
    if recipe == Recipe::Semaphore {
        let s = l.semaphore(path, 1)?;
        return match timeout {
            Some(t) => s.acquire_timeout(t).await,
            None => s.try_acquire().await,
        };
    }
    let lock = l.lock(path, recipe)?;
    match timeout {
        Some(t) => lock.acquire_timeout(t).await,
        None => lock.try_acquire().await,
    }
}

async fn run(layout: Layout, recipe: Recipe, d: u64, try_once: bool, held: bool, expire: bool) {
    let mut cluster = MemCluster::new();
    if layout == Layout::Etcd {
        cluster = cluster.ordered_by(ChildOrder::Creation);
    }
    cluster.set_latency(Duration::from_millis(1));
    let (ca, cb, ch) = (cluster.client(), cluster.client(), cluster.client());
    let la = Locks::builder(ca.clone()).layout(layout).build();
    let lb = Locks::builder(cb.clone()).layout(layout).build();
    let lh = Locks::builder(ch.clone()).layout(layout).build();
    let path = "/lost-create/p";
    let ok = if recipe == Recipe::Semaphore {
        la.semaphore(path, 1).is_ok()
    } else {
        la.lock(path, recipe).is_ok()
    };
    if !ok {
        return;
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let h = if held {
        let g = acq(lh.clone(), path, recipe, Some(Duration::from_secs(5)))
            .await
            .unwrap()
            .unwrap();
        inside.fetch_add(1, Ordering::SeqCst);
        Some(g)
    } else {
        None
    };
    ca.lose_next_create_replies(1);
    let al = la.clone();
    let ain = inside.clone();
    let a = tokio::spawn(async move {
        let g = acq(al, path, recipe, (!try_once).then_some(Duration::from_secs(30))).await;
        if let Ok(Some(g)) = g {
            assert_eq!(ain.fetch_add(1, Ordering::SeqCst), 0, "two holders (A)");
            // Dropped before the guard when the task is aborted while it holds: out before the node goes.
            let out = Out(ain.clone());
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(out);
            let _ = g.release().await;
        }
    });
    tokio::time::sleep(Duration::from_millis(2)).await;
    let bl = lb.clone();
    let bin = inside.clone();
    let b = tokio::spawn(async move {
        let g = acq(bl, path, recipe, Some(Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("B holds");
        let was = bin.fetch_add(1, Ordering::SeqCst);
        // An expiry ends A's hold (its guard says lost): only then may B hold beside A's task.
        assert!(
            was == 0 || expire,
            "two holders (B): {layout:?} {recipe:?} d={d} try={try_once} held={held}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        bin.fetch_sub(1, Ordering::SeqCst);
        g.release().await.unwrap();
    });
    if let Some(h) = h {
        tokio::time::sleep(Duration::from_millis(d / 2)).await;
        inside.fetch_sub(1, Ordering::SeqCst);
        h.release().await.unwrap();
    }
    if expire {
        tokio::time::sleep(Duration::from_millis(d % 7)).await;
        ca.expire_session();
    }
    tokio::time::sleep(Duration::from_millis(d)).await;
    a.abort();
    // Aborted, or done first; a panic of A's (its "two holders" check) fails the test.
    if let Err(e) = a.await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    tokio::time::timeout(Duration::from_secs(90), b)
        .await
        .expect("B holds in time")
        .unwrap();
    let case = format!("{layout:?} {recipe:?} d={d} try={try_once} held={held} expire={expire}");
    crate::support::assert_nothing_left(&cluster, &case).await;
}

#[tokio::test(start_paused = true)]
async fn lost_create_then_abandoned_leaves_nothing_and_one_holder() {
    for layout in [Layout::Native, Layout::Curator, Layout::Kazoo, Layout::Etcd] {
        for recipe in [Recipe::Exclusive, Recipe::Fair, Recipe::Write, Recipe::Semaphore] {
            for d in 0..28u64 {
                for (try_once, held, expire) in [
                    (false, false, false),
                    (false, true, false),
                    (true, false, false),
                    (true, true, false),
                    (false, true, true),
                ] {
                    run(layout, recipe, d, try_once, held, expire).await;
                }
            }
        }
    }
}
