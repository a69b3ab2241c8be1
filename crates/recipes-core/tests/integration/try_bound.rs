//! A try's bound on its requests (5 s while the client is disconnected) counts from its first poll, not from the
//! call that made its future: since decision 78 the attempt is made at the call, in another layer than the one that
//! starts its clock (`begin`), and a refactoring that read the bound before it would go unnoticed elsewhere (a guard
//! asked for by review, helper-88).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use recipes_core::Locks;
use recipes_mem::MemCluster;

#[tokio::test(start_paused = true)]
async fn a_tries_bound_counts_from_its_first_poll() {
    let cluster = MemCluster::new();
    let client = cluster.client();
    let lock = Locks::new(client.clone()).fair("/try/bound").unwrap();
    let f = lock.try_acquire();
    // Made at 0 s, first polled at 4 s, the client disconnected from 4 s to 7 s: a bound from the call would end
    // at 5 s, in the outage; from the first poll it ends at 9 s, after it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    client.disconnect_for(Duration::from_secs(3));
    let g = f
        .await
        .unwrap()
        .expect("the lock is free: the try holds once the client is back");
    g.release().await.unwrap();
    let children = cluster.children("/try/bound");
    assert!(children.is_empty(), "no node left: {children:?}");
}
