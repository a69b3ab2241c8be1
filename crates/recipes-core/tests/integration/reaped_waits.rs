//! Waiters that meet the container reaper at many handoffs: the path reaped between a release and the next create
//! (ZooKeeper's reaper passes every `znode.container.checkIntervalMs`, and one may fall in that window; here the
//! reaper takes an emptied container at once, so every handoff meets it). A failed create that the lock's passing to
//! another follows is no node that would not stick: the acquires go on waiting, and never fail with
//! `RetriesExhausted`. Found by review (helper-126): the exclusive recipe counted every such create, over its whole
//! wait, against its bound of ten.

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::time::Duration;

use recipes_core::{Error, Layout, Locks, Recipe};
use recipes_mem::MemCluster;

/// Four sessions (in `layout`) each take a lock and let it go a hundred times, on a cluster whose reaper takes an
/// emptied container at once: `once` takes and releases it once. None fails, and no node is left.
async fn four_sessions_take_turns<F, Fut>(layout: Layout, what: &str, once: F)
where
    F: Fn(Locks) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), Error>> + Send,
{
    let cluster = MemCluster::new();
    cluster.set_container_reap_delay(Duration::ZERO);
    cluster.set_latency(Duration::from_millis(1));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let locks = Locks::builder(cluster.client()).layout(layout).build();
        let once = once.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..100 {
                once(locks.clone()).await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        let done = tokio::time::timeout(Duration::from_secs(600), t).await;
        done.expect("bounded")
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    assert!(cluster.ephemerals().is_empty(), "{what}: no node left");
}

#[tokio::test(start_paused = true)]
async fn waiters_meeting_the_reaper_at_every_handoff_are_not_failed() {
    for recipe in [Recipe::Exclusive, Recipe::Fair] {
        four_sessions_take_turns(Layout::Native, recipe.name(), move |locks| async move {
            locks.lock("/reaped/x", recipe)?.acquire().await?.release().await
        })
        .await;
    }
}

/// The same for a semaphore of one permit in every layout: the peers' leases are made and counted under a path that
/// the reaper takes when the last lease goes.
#[tokio::test(start_paused = true)]
async fn semaphore_waiters_meeting_the_reaper_at_every_handoff_are_not_failed() {
    for layout in [Layout::Native, Layout::Curator, Layout::Kazoo] {
        four_sessions_take_turns(layout, &format!("{layout:?}"), |locks| async move {
            locks.semaphore("/reaped/s", 1)?.acquire().await?.release().await
        })
        .await;
    }
}
