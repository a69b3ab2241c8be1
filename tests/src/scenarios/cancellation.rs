//! Acquires that do not wait to the end: `try_acquire`, timed acquires, acquires and releases whose futures are
//! dropped at any point. None of them may leave a node behind.

use std::time::Duration;

use recipes_core::{Owner, OwnerToken, Recipe};
use tokio::task::JoinSet;

use super::granted_then_released;
use crate::harness::Harness;
use crate::util::{assert_pending, bounded, wait_children};

/// try_acquire on a held fair lock returns nothing and leaves no node.
pub async fn try_acquire_on_held_fair(h: &dyn Harness) {
    let path = h.path("try-fair");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    for _ in 0..3 {
        assert!(b.locks.fair(&path).unwrap().try_acquire().await.unwrap().is_none());
        assert_eq!(h.children(&path).await.len(), 1);
    }
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// try_acquire on a held exclusive lock returns nothing and leaves no node.
pub async fn try_acquire_on_held_exclusive(h: &dyn Harness) {
    let path = h.path("try-exclusive");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.exclusive(&path).unwrap().acquire().await.unwrap();
    assert!(b.locks.exclusive(&path).unwrap().try_acquire().await.unwrap().is_none());
    assert_eq!(h.children(&path).await, vec!["lock".to_string()]);
    g.release().await.unwrap();
    let g = b
        .locks
        .exclusive(&path)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free now");
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// try_acquire on a free lock succeeds, for every recipe.
pub async fn try_acquire_free_every_recipe(h: &dyn Harness) {
    let a = h.client().await;
    for recipe in Recipe::ALL {
        let path = h.path(&format!("try-free-{recipe}"));
        let g = a.locks.lock(&path, recipe).unwrap().try_acquire().await.unwrap();
        let g = g.unwrap_or_else(|| panic!("{recipe}: free lock not acquired"));
        g.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// try_acquire of the read side succeeds beside a reader, fails beside a writer.
pub async fn try_read_beside_reader_but_not_writer(h: &dyn Harness) {
    let path = h.path("try-read");
    let (a, b) = (h.client().await, h.client().await);
    let r1 = a.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let r2 = b
        .locks
        .read_write(&path)
        .unwrap()
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("share");
    let other: Owner = OwnerToken::new().into();
    let write = b.locks.read_write(&path).unwrap().write().with_owner(other);
    assert!(write.try_acquire().await.unwrap().is_none());
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = a.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    assert!(b
        .locks
        .read_write(&path)
        .unwrap()
        .read()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    w.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

async fn timeout_leaves_no_node(h: &dyn Harness, recipe: Recipe, holder_recipe: Recipe) {
    let path = h.path(&format!("timeout-{recipe}"));
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.lock(&path, holder_recipe).unwrap().acquire().await.unwrap();
    let before = h.children(&path).await;
    let lock = b.locks.lock(&path, recipe).unwrap();
    let r = bounded(h, "acquire with timeout", lock.acquire_timeout(h.tick() * 5))
        .await
        .unwrap();
    assert!(r.is_none(), "{recipe}: got a held lock");
    // No settling: the node is gone by the time the call returns.
    assert_eq!(
        h.children(&path).await,
        before,
        "{recipe}: timed-out acquire left a node"
    );
    assert!(b.locks.metrics().cleanups >= u64::from(recipe != Recipe::Exclusive));
    g.release().await.unwrap();
    granted_then_released(h, "acquire after timeout", lock.acquire()).await;
    wait_children(h, &path, 0).await;
}

/// A timed-out fair acquire returns nothing and leaves no node.
pub async fn timeout_leaves_no_node_fair(h: &dyn Harness) {
    timeout_leaves_no_node(h, Recipe::Fair, Recipe::Fair).await;
}

/// A timed-out exclusive acquire returns nothing and leaves no node.
pub async fn timeout_leaves_no_node_exclusive(h: &dyn Harness) {
    timeout_leaves_no_node(h, Recipe::Exclusive, Recipe::Exclusive).await;
}

/// A timed-out read acquire (behind a writer) returns nothing and leaves no node.
pub async fn timeout_leaves_no_node_read(h: &dyn Harness) {
    timeout_leaves_no_node(h, Recipe::Read, Recipe::Write).await;
}

/// Aborting a waiting acquire (its future dropped) leaves no node, for every recipe.
pub async fn dropped_acquire_leaves_no_node(h: &dyn Harness) {
    for (recipe, holder) in [
        (Recipe::Fair, Recipe::Fair),
        (Recipe::Exclusive, Recipe::Exclusive),
        (Recipe::Reentrant, Recipe::Reentrant),
        (Recipe::Read, Recipe::Write),
        (Recipe::Write, Recipe::Read),
    ] {
        let path = h.path(&format!("dropped-{recipe}"));
        let (a, b) = (h.client().await, h.client().await);
        let g = a.locks.lock(&path, holder).unwrap().acquire().await.unwrap();
        let lock = b.locks.lock(&path, recipe).unwrap();
        let task = tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) });
        if recipe != Recipe::Exclusive {
            wait_children(h, &path, 2).await;
        } else {
            tokio::time::sleep(h.tick() * 3).await;
        }
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        wait_children(h, &path, 1).await;
        g.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// The application's runtime dropped with a guard held and an acquire waiting on it, their sessions still open: neither
/// leaves its node, and the lock is free for another session at once, not when those sessions end. On ZooKeeper and
/// etcd their deletes run on the connection's own runtime; the in-memory backend, which has none, sends them as they
/// are dropped unfinished (decision 42; on a fixed name, bound to the node's creation id).
pub async fn a_runtime_dropped_with_a_guard_and_a_waiter_on_it_leaves_no_node(h: &dyn Harness) {
    for recipe in [Recipe::Fair, Recipe::Exclusive, Recipe::Write] {
        let path = h.path(&format!("runtime-dropped-{recipe}"));
        let (holder, waiter, next) = (h.client().await, h.client().await, h.client().await);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime of one worker");
        let lock = holder.locks.lock(&path, recipe).unwrap();
        let (held, holds) = tokio::sync::oneshot::channel();
        runtime.spawn(async move {
            let guard = lock.acquire().await;
            let _ = held.send(guard.is_ok());
            std::future::pending::<()>().await;
            drop(guard);
        });
        assert!(bounded(h, "the hold on the other runtime", holds).await.unwrap());
        let lock = waiter.locks.lock(&path, recipe).unwrap();
        runtime.spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) });
        if recipe == Recipe::Exclusive {
            // Its waiter has no node of its own.
            tokio::time::sleep(h.tick() * 3).await;
        } else {
            wait_children(h, &path, 2).await;
        }
        // A runtime is dropped where blocking is allowed.
        tokio::task::spawn_blocking(move || drop(runtime)).await.unwrap();
        wait_children(h, &path, 0).await;
        let lock = next.locks.lock(&path, recipe).unwrap();
        let guard = bounded(h, "the lock the dropped runtime held", lock.acquire())
            .await
            .unwrap();
        guard.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// Cancelling an acquire at many points, including with a create reply in flight, never leaves a node.
pub async fn dropped_acquire_at_every_point(h: &dyn Harness) {
    let path = h.path("dropped-every-point");
    let step = if h.capabilities().latency {
        h.set_latency(Duration::from_millis(4));
        Duration::from_millis(1)
    } else {
        Duration::from_micros(300)
    };
    let (a, b) = (h.client().await, h.client().await);
    for held in [false, true] {
        let g = if held {
            Some(a.locks.fair(&path).unwrap().acquire().await.unwrap())
        } else {
            None
        };
        let base = usize::from(held);
        for i in 0..24u32 {
            let lock = b.locks.fair(&path).unwrap();
            let task = tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) });
            tokio::time::sleep(step * i).await;
            task.abort();
            let _ = task.await;
            wait_children(h, &path, base).await;
        }
        if let Some(g) = g {
            g.release().await.unwrap();
        }
    }
    h.set_latency(Duration::ZERO);
    wait_children(h, &path, 0).await;
}

/// A waiter cancelled from the middle of the queue: the one behind it re-links and the order holds.
pub async fn cancelled_middle_waiter_chain_repairs(h: &dyn Harness) {
    let path = h.path("middle-cancel");
    let (a, b, c, d) = (h.client().await, h.client().await, h.client().await, h.client().await);
    let ga = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let lb = b.locks.fair(&path).unwrap();
    let mut wb = tokio::spawn(async move { lb.acquire().await.unwrap() });
    wait_children(h, &path, 2).await;
    let lc = c.locks.fair(&path).unwrap();
    let wc = tokio::spawn(async move { lc.acquire().await.unwrap() });
    wait_children(h, &path, 3).await;
    let ld = d.locks.fair(&path).unwrap();
    let mut wd = tokio::spawn(async move { ld.acquire().await.unwrap() });
    wait_children(h, &path, 4).await;
    wc.abort();
    let _ = wc.await;
    wait_children(h, &path, 3).await;
    assert_pending(h, "d behind b", &mut wd).await;
    ga.release().await.unwrap();
    let gb = bounded(h, "b", &mut wb).await.unwrap();
    assert_pending(h, "d behind b holding", &mut wd).await;
    gb.release().await.unwrap();
    granted_then_released(h, "d", wd).await;
    wait_children(h, &path, 0).await;
}

/// A waiter behind two (its blocker, and the scout ahead of it) whose scout, then blocker, are cancelled while the first
/// holds: the scout's deletion only makes it list again (a cancelled scout says nothing of what is ahead), and the
/// blocker's deletion, with the holder still ahead, makes it list again too. It never holds beside the holder, it
/// holds once the holder releases, and nothing is left. With the scout's deletion taken for "nothing ahead of the
/// blocker" (`Mutant::ScoutMeansFirst`) it held beside the holder (`scout::a_scouts_deletion_alone_lets_two_hold`).
pub async fn cancelled_scout_and_blocker_never_let_a_waiter_in_beside_the_holder(h: &dyn Harness) {
    let path = h.path("scout-cancelled");
    let (a, s, p, w) = (h.client().await, h.client().await, h.client().await, h.client().await);
    for round in 0..2 {
        let ga = a.locks.fair(&path).unwrap().acquire().await.unwrap();
        let ls = s.locks.fair(&path).unwrap();
        let scout = tokio::spawn(async move { ls.acquire().await });
        wait_children(h, &path, 2).await;
        let lp = p.locks.fair(&path).unwrap();
        let blocker = tokio::spawn(async move { lp.acquire().await });
        wait_children(h, &path, 3).await;
        let lw = w.locks.fair(&path).unwrap();
        let mut waiter = tokio::spawn(async move { lw.acquire().await.unwrap() });
        wait_children(h, &path, 4).await;
        tokio::time::sleep(h.tick() * 2).await;
        scout.abort();
        let _ = scout.await;
        wait_children(h, &path, 3).await;
        assert_pending(
            h,
            &format!("round {round}: the waiter after its scout went"),
            &mut waiter,
        )
        .await;
        blocker.abort();
        let _ = blocker.await;
        wait_children(h, &path, 2).await;
        assert_pending(h, &format!("round {round}: the waiter behind the holder"), &mut waiter).await;
        ga.release().await.unwrap();
        granted_then_released(h, "the waiter", waiter).await;
        wait_children(h, &path, 0).await;
    }
}

/// 1000 acquires of every queued recipe, cancelled or timed out at pseudo-random points: no node is left.
#[allow(clippy::print_stdout)] // the fault campaign's figures (scripts/campaign)
pub async fn thousand_abandoned_acquires_leave_no_node(h: &dyn Harness) {
    let path = h.path("abandoned-1000");
    let (a, b) = (h.client().await, h.client().await);
    if h.capabilities().latency {
        h.set_latency(Duration::from_millis(1)); // so that creates are in flight when cancelled
    }
    let holder = a.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let step = h.tick() / 10;
    let (mut cancelled, mut timed_out) = (0, 0);
    for batch in 0..50 {
        let mut set = JoinSet::new();
        for _ in 0..20 {
            let r = next();
            let recipe = [Recipe::Fair, Recipe::Read, Recipe::Write, Recipe::Reentrant][(r % 4) as usize];
            let lock = b.locks.lock(&path, recipe).unwrap();
            let wait = step * ((r >> 8) % 30) as u32;
            if r & (1 << 40) == 0 {
                cancelled += 1;
                // Cancelled: the acquire future is dropped at some await point.
                let t = tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) });
                set.spawn(async move {
                    tokio::time::sleep(wait).await;
                    t.abort();
                    let _ = t.await;
                });
            } else {
                timed_out += 1;
                set.spawn(async move {
                    let r = lock.acquire_timeout(wait).await;
                    assert!(matches!(r, Ok(None)), "got a held lock: {r:?}");
                });
            }
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
        if batch % 10 == 9 {
            wait_children(h, &path, 1).await;
        }
    }
    h.set_latency(Duration::ZERO);
    wait_children(h, &path, 1).await;
    holder.release().await.unwrap();
    wait_children(h, &path, 0).await;
    println!(
        "CAMPAIGN abandoned ({}): {cancelled} acquires cancelled and {timed_out} timed out at pseudo-random points \
         behind a held lock; lock nodes left: 0",
        h.name()
    );
}

/// A release whose future is dropped midway (a timeout around it, a cancelled task) still frees the lock.
pub async fn cancelled_release_leaves_no_node(h: &dyn Harness) {
    let path = h.path("cancelled-release");
    let (a, b) = (h.client().await, h.client().await);
    if h.capabilities().latency {
        h.set_latency(Duration::from_millis(2)); // so that the delete is in flight when the release is dropped
    }
    for cut in [Duration::ZERO, Duration::from_millis(1), Duration::from_millis(3)] {
        let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
        let _ = tokio::time::timeout(cut, g.release()).await;
        let gb = bounded(
            h,
            "other client after a cancelled release",
            b.locks.fair(&path).unwrap().acquire(),
        )
        .await;
        gb.unwrap().release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
    h.set_latency(Duration::ZERO);
}
