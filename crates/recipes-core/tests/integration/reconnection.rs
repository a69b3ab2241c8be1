//! A waiter whose connection was cut while its own node and then its blocker were deleted, stepped event by event in
//! the in-memory backend's controlled mode. After the reconnection the client sets its watches again, and ZooKeeper
//! reports them in the client's order, not the changes': the in-memory backend reports the watch set last (the
//! blocker's) first. A waiter that trusted the order (`Mutant::TrustAcrossReconnection`) held on the blocker's event
//! alone, its node gone, beside the contender that was behind it (docs/algorithm.md, "After a disconnection").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::{LockGuard, Locks, Result};
use recipes_mem::{MemCluster, NetEvent};

use crate::support::{run, settle};
use tokio::task::JoinHandle;

fn acquire(locks: &Locks) -> JoinHandle<Result<LockGuard>> {
    let lock = locks.fair("/cut").unwrap();
    tokio::spawn(async move { lock.acquire().await })
}

/// Holder H, waiter W and contender C in line on `/cut`; W's connection cut; an operator deletes W's node; H lets go
/// and C holds; W reconnects, and its watches report the blocker's deletion first. Returns whether W then holds.
async fn waiter_holds_after_reconnection() -> bool {
    let cluster = MemCluster::new();
    let (h, w, c) = (cluster.client(), cluster.client(), cluster.client());
    let (lh, lw, lc) = (Locks::new(h), Locks::new(w.clone()), Locks::new(c));
    let ctl = cluster.controlled();
    let holder = acquire(&lh);
    run(&ctl).await;
    let holder = holder.await.unwrap().unwrap();
    let waiter = acquire(&lw);
    run(&ctl).await;
    let behind = acquire(&lc);
    run(&ctl).await;
    let queue = cluster.children("/cut");
    assert_eq!(queue.len(), 3, "{queue:?}");
    let ours = cluster
        .ephemerals()
        .into_iter()
        .find(|(_, owner)| *owner == w.session_id())
        .expect("the waiter's node")
        .0;
    w.disconnect_for(Duration::from_millis(10));
    ctl.operator_delete(&ours).unwrap();
    run(&ctl).await;
    let release = tokio::spawn(async move { holder.release().await });
    run(&ctl).await;
    release.await.unwrap().unwrap();
    assert!(behind.is_finished(), "the contender behind the waiter holds");
    let c_guard = behind.await.unwrap().unwrap();
    assert!(c_guard.is_valid());
    // The reconnection: the watches set again, their events one at a time.
    tokio::time::advance(Duration::from_millis(20)).await;
    let timers: Vec<NetEvent> = ctl
        .events()
        .into_iter()
        .filter(|e| matches!(e, NetEvent::Timer(_)))
        .collect();
    assert_eq!(timers.len(), 1, "{timers:?}");
    assert!(ctl.fire(timers[0]));
    settle().await;
    assert!(ctl.fire(NetEvent::Deliver(w.session_id())), "the blocker's deletion");
    settle().await;
    let held = waiter.is_finished();
    run(&ctl).await;
    if held {
        let g = waiter.await.unwrap().unwrap();
        assert!(g.is_valid(), "a valid guard beside the contender's");
    } else {
        waiter.abort();
    }
    held
}

#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test(start_paused = true)]
async fn a_waiter_cut_off_while_its_node_went_does_not_hold_without_it() {
    use recipes_core::mutants::{self, Mutant};
    for old_rule in [false, true] {
        mutants::set(Mutant::TrustAcrossReconnection, old_rule);
        let held = waiter_holds_after_reconnection().await;
        mutants::set(Mutant::TrustAcrossReconnection, false);
        assert_eq!(
            held, old_rule,
            "old rule {old_rule}: the waiter held on the blocker's event alone"
        );
    }
}
