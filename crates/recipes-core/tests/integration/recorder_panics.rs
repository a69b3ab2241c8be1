//! A metrics recorder that panics while a guard is dropped (not released) must not leave the lock node behind. Found
//! by an adversarial review: the drop marked the node released, counted the release through the facade, and only
//! then spawned the delete, so a panic in between left the node for as long as the session lived. The delete is now on
//! its way before anything is counted.
//!
//! The same for a cohort: a hold whose lease ran out, dropped while another task of the cohort waits, once counted the
//! loss under the cohort's mutex, and a recorder that panicked there left the cohort holding the node for good (the
//! waiter hung, the node stayed; found by review, helper 13).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use recipes_core::Locks;
use recipes_mem::MemCluster;

/// Panics on every count of a lost lock (`lock_recipes_lost_total`).
struct PanicsOnLost;

struct BoomCounter;
impl metrics::CounterFn for BoomCounter {
    fn increment(&self, _: u64) {
        panic!("recorder failure");
    }
    fn absolute(&self, _: u64) {}
}

impl Recorder for PanicsOnLost {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() == "lock_recipes_lost_total" {
            Counter::from_arc(Arc::new(BoomCounter))
        } else {
            Counter::noop()
        }
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[test]
fn a_panicking_recorder_at_a_cohort_holds_end_leaves_no_node_and_no_hung_waiter() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let cluster = MemCluster::new();
        let ca = cluster.client();
        let timeout = ca.session_timeout();
        let lock = Locks::builder(ca.clone())
            .cohorts(8)
            .build()
            .fair("/cohort-orphan")
            .unwrap();
        let held = lock.acquire().await.unwrap();
        let waiter = tokio::spawn({
            let l = lock.clone();
            async move { l.acquire().await.map(|g| g.is_valid()) }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        // The lease runs out while the session lives.
        ca.disconnect_for(timeout.mul_f64(0.9));
        for _ in 0..1000 {
            if !held.is_valid() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            metrics::with_local_recorder(&PanicsOnLost, || drop(held));
        }));
        let got = tokio::time::timeout(Duration::from_secs(600), waiter).await;
        assert!(
            matches!(got, Ok(Ok(Ok(true)))),
            "the waiter got {got:?}, not a valid guard"
        );
        tokio::time::sleep(timeout * 3).await;
        assert!(
            cluster.children("/cohort-orphan").is_empty(),
            "left {:?}",
            cluster.children("/cohort-orphan")
        );
    });
}

/// Panics on every record into `lock_recipes_hold_seconds` (a recorder with a bug, a poisoned lock, a full buffer...).
struct PanicsOnHold;

struct Boom;
impl HistogramFn for Boom {
    fn record(&self, _: f64) {
        panic!("recorder failure");
    }
}

impl Recorder for PanicsOnHold {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        if key.name() == "lock_recipes_hold_seconds" {
            Histogram::from_arc(Arc::new(Boom))
        } else {
            Histogram::noop()
        }
    }
}

#[test]
fn a_panicking_recorder_at_drop_leaves_no_node() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cluster = MemCluster::new();
        let a = Locks::new(cluster.client());
        let b = Locks::new(cluster.client());
        let guard = a.fair("/orphan").unwrap().acquire().await.unwrap();
        let node = guard.node().to_owned();
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            metrics::with_local_recorder(&PanicsOnHold, || drop(guard));
        }));
        assert!(dropped.is_err(), "the recorder panicked in the guard's drop");
        // Give any background delete every chance to run.
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let p = b.participants("/orphan").await.unwrap();
        let still = p.nodes.iter().any(|n| node.ends_with(&n.node));
        let other = b.fair("/orphan").unwrap().try_acquire().await.unwrap();
        assert!(
            !still && other.is_some(),
            "orphan: {node} is still there after its guard was dropped (participants {p:?}); another client cannot take the lock"
        );
    });
}
