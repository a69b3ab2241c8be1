//! From helper-99's review: acquires (and releases) dropped at every millisecond of a contended line, three tasks of
//! one session beside two of another, in every layout and for the fair, write and exclusive recipes; and, for `Locks`
//! built with `foreign_writes`, another client's request to let go written into some queue node now and then (the
//! exclusive recipe's fixed node and etcd's session-named key are outside the setting: decision 81). One holder at a
//! time, no hang, and no node left behind. With `Mutant::ForeignWritesTrusted` (the default's rule under the setting)
//! it finds two holders (the native fair lock, seed 0).
//!
//! (The review's first version wrote through `MemCluster::controlled()`, which switches the cluster to the model
//! checker's mode, where nothing happens until a controller picks it: every request after it waited forever, which
//! read as a release that never returned.)

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recipes_conformance::campaign::Rng;
use recipes_core::backend::ChildOrder;
use recipes_core::{Layout, Locks, Recipe};
use recipes_mem::MemCluster;

/// The sweep with both sessions' `Locks` built alike.
async fn run(layout: Layout, recipe: Recipe, foreign: bool, seed: u64) {
    sweep(layout, recipe, (foreign, foreign), seed).await;
}

/// One sweep: `(foreign, foreign_b)` say whether the first and the second session's `Locks` are built with
/// `foreign_writes`; another client writes into queue nodes only when both are.
async fn sweep(layout: Layout, recipe: Recipe, (foreign, foreign_b): (bool, bool), seed: u64) {
    // The setting covers the queue's nodes. The exclusive recipe's fixed node and etcd's session-named key, recognised
    // by their data after a create whose outcome is unknown (a dropped acquire's), are not (decision 81: written over,
    // they stay until their session ends; this sweep found both).
    let writes = foreign && foreign_b && recipe != Recipe::Exclusive && layout != Layout::Etcd;
    let mut cluster = MemCluster::new();
    if layout == Layout::Etcd {
        cluster = cluster.ordered_by(ChildOrder::Creation);
    }
    cluster.set_latency(Duration::from_millis(1));
    let (ca, cb) = (cluster.client(), cluster.client());
    let la = Locks::builder(ca.clone())
        .layout(layout)
        .foreign_writes(foreign)
        .build();
    let lb = Locks::builder(cb.clone())
        .layout(layout)
        .foreign_writes(foreign_b)
        .build();
    let path = "/operator-writes/p";
    if la.lock(path, recipe).is_err() {
        return;
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..5u64 {
        let l = if t < 3 { la.clone() } else { lb.clone() };
        let inside = inside.clone();
        let mut s = Rng(seed ^ (t * 0x9E37_79B9) | 1);
        tasks.push(tokio::spawn(async move {
            for _ in 0..6 {
                let lock = l.lock(path, recipe).unwrap();
                let limit = Duration::from_millis(s.below(40));
                let cancel_in = Duration::from_millis(s.below(40));
                let hold = Duration::from_millis(s.below(8));
                let how = s.below(3);
                let fut = lock.acquire_timeout(limit + Duration::from_millis(5));
                let g = match how {
                    // Dropped at any await of the acquire.
                    0 => match tokio::time::timeout(cancel_in, fut).await {
                        Ok(r) => r,
                        Err(_) => continue,
                    },
                    _ => fut.await,
                };
                let Ok(Some(g)) = g else { continue };
                let was = inside.fetch_add(1, Ordering::SeqCst);
                assert_eq!(
                    was, 0,
                    "two holders: {layout:?} {recipe:?} foreign={foreign}/{foreign_b} seed={seed}"
                );
                let out = crate::support::Out(inside.clone());
                tokio::time::sleep(hold).await;
                drop(out);
                if s.below(3) == 0 {
                    // The release dropped at any await.
                    let _ = tokio::time::timeout(Duration::from_millis(s.below(3)), g.release()).await;
                } else {
                    let _ = g.release().await;
                }
            }
        }));
    }
    // An operator's write of a request to let go into some node now and then (allowed under `foreign`).
    if writes {
        let other = cluster.client();
        let mut s = Rng(seed | 1);
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(s.below(30))).await;
            let kids = cluster.children(path);
            if !kids.is_empty() {
                let k = &kids[s.below(kids.len() as u64) as usize];
                let node = format!("{path}/{k}");
                let _ =
                    recipes_core::Backend::set_data(&*other, other.session_id(), &node, recipes_core::REVOKE_MESSAGE)
                        .await;
            }
        }
    }
    for (i, t) in tasks.into_iter().enumerate() {
        match tokio::time::timeout(Duration::from_secs(600), t).await {
            Ok(r) => r.unwrap(),
            Err(_) => panic!("hang: task t{i}; nodes {:?}", cluster.children(path)),
        }
    }
    let case = format!("{layout:?} {recipe:?} foreign={foreign}/{foreign_b} seed={seed}");
    crate::support::assert_nothing_left(&cluster, &case).await;
}

#[tokio::test(start_paused = true)]
async fn dropped_acquires_and_releases_beside_foreign_writes_keep_one_holder_and_leave_nothing() {
    for layout in [Layout::Native, Layout::Curator, Layout::Etcd] {
        for recipe in [Recipe::Fair, Recipe::Write, Recipe::Exclusive] {
            for foreign in [false, true] {
                for seed in 0..25u64 {
                    run(layout, recipe, foreign, seed).await;
                }
            }
        }
    }
}

/// A mixed deployment (decision 81): one session's `Locks` built with `foreign_writes`, the other's without, on the
/// same paths, with acquires and releases dropped as above and no foreign write (the default's side forbids them). A
/// holder with the setting sends no mark with its release, a waiter with it trusts only a mark read back: one holder
/// at a time, and nothing left (found missing by review, helper-105).
#[tokio::test(start_paused = true)]
async fn a_mixed_deployment_of_the_setting_keeps_one_holder_and_leaves_nothing() {
    for layout in [Layout::Native, Layout::Curator] {
        for recipe in [Recipe::Fair, Recipe::Write] {
            for sides in [(true, false), (false, true)] {
                for seed in 0..25u64 {
                    sweep(layout, recipe, sides, seed).await;
                }
            }
        }
    }
}
