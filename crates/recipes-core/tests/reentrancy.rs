//! Reentrancy edge cases that need a backend (the in-memory one).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use recipes_core::{Error, Locks, Owner, OwnerToken};
use recipes_mem::MemCluster;

#[tokio::test]
async fn hold_count_overflow_is_an_error_not_a_wrap() {
    let locks = Locks::new(MemCluster::new().client());
    let owner: Owner = OwnerToken::new().into();
    let lock = locks.reentrant("/overflow").unwrap().with_owner(owner);
    let g = lock.acquire().await.unwrap();
    lock.__set_hold_count(owner, u32::MAX);
    let r = lock.acquire().await;
    assert!(matches!(r, Err(Error::CountOverflow(_))), "{r:?}");
    assert_eq!(lock.hold_count(owner), u32::MAX);
    lock.__set_hold_count(owner, 1);
    g.release().await.unwrap();
    assert_eq!(lock.hold_count(owner), 0);
}

#[tokio::test]
async fn handles_on_one_path_share_counts() {
    let locks = Locks::new(MemCluster::new().client());
    let owner: Owner = OwnerToken::new().into();
    let a = locks.reentrant("/shared").unwrap().with_owner(owner);
    let b = locks.reentrant("/shared").unwrap().with_owner(owner);
    let g1 = a.acquire().await.unwrap();
    let g2 = b.acquire().await.unwrap();
    assert_eq!(g2.hold_count(), 2);
    assert_eq!(g1.node(), g2.node());
    drop(g2);
    drop(g1);
}
