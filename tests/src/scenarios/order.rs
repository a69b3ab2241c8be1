//! Order: waiters acquire in the order they queued, a release wakes whom it should, and fencing tokens strictly
//! increase from holder to holder.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::{Lock, LockGuard, Recipe};
use tokio::task::JoinSet;

use super::{contend_exclusive, HOLD};
use crate::harness::Harness;
use crate::util::{assert_increasing, bounded, hold_exclusive, wait_children, Occupancy};

async fn queue_in_order(h: &dyn Harness, path: &str, n: usize, write: bool) -> Vec<usize> {
    let holder = h.client().await;
    let first = if write {
        holder.locks.read_write(path).unwrap().write().acquire().await.unwrap()
    } else {
        holder.locks.fair(path).unwrap().acquire().await.unwrap()
    };
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut set = JoinSet::new();
    for i in 0..n {
        let c = h.client().await;
        let order = order.clone();
        let lock: Arc<dyn Lock> = if write {
            Arc::new(c.locks.read_write(path).unwrap().write())
        } else {
            Arc::new(c.locks.fair(path).unwrap())
        };
        set.spawn(async move {
            let g = lock.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(HOLD).await;
            g.release().await.unwrap();
            drop(c);
        });
        // Each waiter is queued before the next one starts.
        wait_children(h, path, i + 2).await;
    }
    first.release().await.unwrap();
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    let order = order.lock().unwrap().clone();
    order
}

/// Fair: waiters acquire in the order they queued.
pub async fn fair_fifo_order(h: &dyn Harness) {
    let path = h.path("fair-fifo");
    let order = queue_in_order(h, &path, 5, false).await;
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
    wait_children(h, &path, 0).await;
}

/// Write: writers acquire in the order they queued.
pub async fn write_fifo_order(h: &dyn Harness) {
    let path = h.path("write-fifo");
    let order = queue_in_order(h, &path, 5, true).await;
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
    wait_children(h, &path, 0).await;
}

async fn tokens_increase(h: &dyn Harness, recipe: Recipe) {
    let occ = contend_exclusive(h, recipe, 3, 5).await;
    let tokens = occ.tokens();
    assert_eq!(tokens.len(), 15);
    assert_increasing(&tokens);
}

/// Fair: fencing tokens strictly increase across successive holders.
pub async fn fencing_tokens_increase_fair(h: &dyn Harness) {
    tokens_increase(h, Recipe::Fair).await;
}

/// Exclusive: fencing tokens strictly increase across successive holders.
pub async fn fencing_tokens_increase_exclusive(h: &dyn Harness) {
    tokens_increase(h, Recipe::Exclusive).await;
}

/// A writer's token is above the tokens of the readers before it.
pub async fn fencing_writer_above_earlier_readers(h: &dyn Harness) {
    let path = h.path("fencing-rw");
    let (r1, r2, w) = (h.client().await, h.client().await, h.client().await);
    let g1 = r1.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let g2 = r2.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let write = w.locks.read_write(&path).unwrap().write();
    let ww = tokio::spawn(async move { write.acquire().await.unwrap() });
    wait_children(h, &path, 3).await;
    let (t1, t2) = (g1.fencing_token(), g2.fencing_token());
    g1.release().await.unwrap();
    g2.release().await.unwrap();
    let gw = bounded(h, "writer", ww).await.unwrap();
    assert!(gw.fencing_token() > t1.max(t2));
    gw.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Fencing tokens strictly increase over 1000 handoffs among 4 clients.
pub async fn fencing_tokens_increase_over_1000_handoffs(h: &dyn Harness) {
    let path = h.path("fencing-1000");
    let occ = Occupancy::new();
    let mut set = JoinSet::new();
    for _ in 0..4 {
        let c = h.client().await;
        let lock = c.locks.fair(&path).unwrap();
        let occ = occ.clone();
        set.spawn(async move {
            for _ in 0..250 {
                let g = lock.acquire().await.expect("acquire");
                hold_exclusive(&occ, g, Duration::ZERO).await;
            }
            drop(c);
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("client task");
    }
    assert_eq!(occ.violations(), 0);
    let tokens = occ.tokens();
    assert_eq!(tokens.len(), 1000);
    assert_increasing(&tokens);
    wait_children(h, &path, 0).await;
}

async fn wakeups_per_release(h: &dyn Harness, recipe: Recipe, waiters: usize) -> u64 {
    let path = h.path(&format!("wakeups-{recipe}"));
    let holder = h.client().await;
    let g = holder.locks.lock(&path, recipe).unwrap().acquire().await.unwrap();
    let mut clients = Vec::new();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<LockGuard>(waiters);
    for i in 0..waiters {
        let c = h.client().await;
        let lock = c.locks.lock(&path, recipe).unwrap();
        let done = done_tx.clone();
        tokio::spawn(async move {
            if let Ok(g) = lock.acquire().await {
                let _ = done.send(g).await;
            }
        });
        if recipe == Recipe::Exclusive {
            // No node of its own to wait for: time for its create to fail and its watch to be set, long enough
            // beside a slow disk's commit (a waiter not yet watching at the release takes the lock without a wakeup).
            tokio::time::sleep(h.tick() * 20).await;
        } else {
            wait_children(h, &path, i + 2).await;
        }
        clients.push(c);
    }
    tokio::time::sleep(h.tick() * 3).await;
    let before: u64 = clients.iter().map(|c| c.locks.metrics().wakeups).sum();
    g.release().await.unwrap();
    let next = bounded(h, "next holder", done_rx.recv()).await.unwrap();
    tokio::time::sleep(h.tick() * 5).await;
    let after: u64 = clients.iter().map(|c| c.locks.metrics().wakeups).sum();
    // Drain the rest so nothing is left behind.
    next.release().await.unwrap();
    for _ in 1..waiters {
        bounded(h, "later holder", done_rx.recv())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    wait_children(h, &path, 0).await;
    after - before
}

/// Fair: one release wakes exactly one waiter (no herd).
pub async fn fair_wakes_one_waiter_per_release(h: &dyn Harness) {
    assert_eq!(wakeups_per_release(h, Recipe::Fair, 5).await, 1);
}

/// Exclusive: one release wakes every waiter (the documented herd effect).
pub async fn exclusive_wakes_every_waiter(h: &dyn Harness) {
    let woke = wakeups_per_release(h, Recipe::Exclusive, 5).await;
    assert!(woke >= 5, "expected every one of 5 waiters to wake, saw {woke}");
}

/// A queue longer than the marking threshold (more than 32 names), its early waiters queued behind short lists: a
/// waiter that lists the whole queue again after a cancellation ahead of it marks itself once it holds, however
/// near the front it is. With early waiters cancelled in the middle of the chain, the rest still hold one at a time,
/// in the order they queued, with increasing tokens, and no node is left.
pub async fn long_queue_with_cancelled_early_waiters_holds_in_order(h: &dyn Harness) {
    const WAITERS: usize = 72;
    const CANCELLED: [usize; 3] = [1, 2, 5];
    let path = h.path("long-queue");
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(h.client().await);
    }
    let holder = clients[0].locks.fair(&path).unwrap().acquire().await.unwrap();
    let occ = Occupancy::new();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        // Tasks of one session and of others, so that both the watch and the same-session handoff pass the lock on.
        let lock = clients[i % clients.len()].locks.fair(&path).unwrap();
        let (occ, order) = (occ.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            hold_exclusive(&occ, g, Duration::ZERO).await;
        }));
        // Each waiter lists the queue as it was when it joined: the first ones see a short list.
        wait_children(h, &path, i + 2).await;
    }
    for i in CANCELLED {
        waiters[i].abort();
    }
    wait_children(h, &path, WAITERS + 1 - CANCELLED.len()).await;
    holder.release().await.unwrap();
    for (i, w) in waiters.into_iter().enumerate() {
        if !CANCELLED.contains(&i) {
            bounded(h, &format!("waiter {i} holds and releases"), w).await.unwrap();
        }
    }
    let want: Vec<usize> = (0..WAITERS).filter(|i| !CANCELLED.contains(i)).collect();
    assert_eq!(*order.lock().unwrap(), want);
    assert_eq!(occ.violations(), 0);
    assert_increasing(&occ.tokens());
    wait_children(h, &path, 0).await;
}
