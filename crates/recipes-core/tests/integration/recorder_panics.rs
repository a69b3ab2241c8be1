//! A metrics recorder that panics while a guard is dropped (not released) must not leave the lock node behind. Found
//! by an adversarial review: the drop marked the node released, counted the release through the facade, and only
//! then spawned the delete, so a panic in between left the node for as long as the session lived. The delete is now on
//! its way before anything is counted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use recipes_core::Locks;
use recipes_mem::MemCluster;

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
