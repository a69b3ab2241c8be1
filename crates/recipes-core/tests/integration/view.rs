//! The session's view of the queue (decision 0085): the waiters in line of one session on one lock path share one tree
//! watch instead of two one-shot watches each, and still never hold with their own node gone. Stepped in the
//! in-memory backend's controlled mode where the order of events matters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use recipes_core::mutants::{self, Mutant};
use recipes_core::{LockGuard, Locks, Result};
use recipes_mem::{MemCluster, NetEvent};

use crate::support::run;
use tokio::task::JoinHandle;

fn acquire(locks: &Locks, path: &str) -> JoinHandle<Result<LockGuard>> {
    let lock = locks.fair(path).unwrap();
    tokio::spawn(async move { lock.acquire().await })
}

/// Twenty waiters of one session keep one tree watch between them (and the first, which came alone, its two one-shot
/// watches), where each kept two of its own; and they still hold in turn, first in, first out, leaving nothing.
#[tokio::test(start_paused = true)]
async fn the_waiters_of_a_session_share_its_view() {
    for views in [true, false] {
        mutants::set(Mutant::NoViews, !views);
        let cluster = MemCluster::new();
        let (a, b) = (cluster.client(), cluster.client());
        let (la, lb) = (Locks::new(a), Locks::new(b));
        let holder = la.fair("/view/share").unwrap().acquire().await.unwrap();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..20 {
            let lock = lb.fair("/view/share").unwrap();
            let order = order.clone();
            waiters.push(tokio::spawn(async move {
                let g = lock.acquire().await.unwrap();
                order.lock().unwrap().push(i);
                g.release().await.unwrap();
            }));
            // One at a time: each is in line before the next comes.
            for _ in 0..100 {
                if cluster.children("/view/share").len() == i + 2 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let watches = cluster.watches();
        if views {
            assert!(watches <= 3, "{watches} watches");
        } else {
            assert!(watches >= 40, "{watches} watches");
        }
        holder.release().await.unwrap();
        for w in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(60), w)
                .await
                .unwrap()
                .unwrap();
        }
        assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>(), "views {views}");
        assert!(cluster.children("/view/share").is_empty());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(
            cluster.watches(),
            0,
            "views {views}: the view went with its last waiter"
        );
    }
    mutants::set(Mutant::NoViews, false);
}

/// Holder H (session A), two waiters of session B, W1 and W2, then C (session C) and W3 (session B again). H lets go
/// and W1 holds; W2 lists again (H was its scout) and waits on W1, first now, through B's view (W3 waits in line too).
/// An operator deletes W2's node, then W1's; the view tells W2 both in one go. Returns whether W2 then holds (beside C,
/// which its node's deletion let in).
async fn waiter_holds_with_its_node_gone() -> bool {
    let cluster = MemCluster::new();
    let (a, b, c) = (cluster.client(), cluster.client(), cluster.client());
    let (la, lb, lc) = (Locks::new(a), Locks::new(b.clone()), Locks::new(c));
    let ctl = cluster.controlled();
    let path = "/view/own";
    let holder = acquire(&la, path);
    run(&ctl).await;
    let holder = holder.await.unwrap().unwrap();
    let w1 = acquire(&lb, path);
    run(&ctl).await;
    let w2 = acquire(&lb, path);
    run(&ctl).await;
    let behind = acquire(&lc, path);
    run(&ctl).await;
    let w3 = acquire(&lb, path);
    run(&ctl).await;
    assert_eq!(cluster.children(path).len(), 5);
    let release = tokio::spawn(async move { holder.release().await });
    run(&ctl).await;
    release.await.unwrap().unwrap();
    assert!(w1.is_finished(), "W1 holds");
    let mut ours: Vec<String> = cluster
        .ephemerals()
        .into_iter()
        .filter(|(_, owner)| *owner == b.session_id())
        .map(|(p, _)| p)
        .collect();
    // By sequence (the names' last ten digits), not by name: the attempt ids before them are random.
    ours.sort_by_key(|p| p[p.len() - 10..].to_owned());
    let [w1_node, w2_node] = [ours[0].clone(), ours[1].clone()];
    assert_eq!(ours.len(), 3);
    ctl.operator_delete(&w2_node).unwrap();
    ctl.operator_delete(&w1_node).unwrap();
    // Every event on its way to B at once, then the tasks: the view tells W2 both deletions in one go.
    while ctl.fire(NetEvent::Deliver(b.session_id())) {}
    run(&ctl).await;
    assert!(behind.is_finished(), "the contender behind W2 holds");
    let c_guard = behind.await.unwrap().unwrap();
    assert!(c_guard.is_valid());
    let held = w2.is_finished();
    if held {
        assert!(
            w2.await.unwrap().unwrap().is_valid(),
            "a valid guard beside the contender's"
        );
    } else {
        w2.abort();
    }
    w1.abort();
    w3.abort();
    held
}

#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test(start_paused = true)]
async fn a_waiter_in_the_view_never_holds_with_its_node_gone() {
    for ignores_own in [false, true] {
        mutants::set(Mutant::ViewIgnoresOwn, ignores_own);
        let held = waiter_holds_with_its_node_gone().await;
        mutants::set(Mutant::ViewIgnoresOwn, false);
        assert_eq!(
            held, ignores_own,
            "ignores own {ignores_own}: the waiter held with its node gone"
        );
    }
}
