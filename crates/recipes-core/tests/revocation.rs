//! Revocation on the in-memory backend: a request to let go is a data change of the holder's node, which a waiter
//! in line behind it must not take for the `first` mark.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::mutants::{self, Mutant};
use recipes_core::Locks;
use recipes_mem::MemCluster;

/// Readers R1 and R2 hold, a writer waits in line on R2. R2 is asked to let go, then releases: the writer must wait
/// for R1 (found by review when revocation was added: the waiter took any data change of its blocker for the
/// `first` mark, and came in beside R1). With the old rule switched back on, the writer gets in beside R1.
#[tokio::test(start_paused = true)]
async fn a_revoked_reader_never_lets_the_writer_behind_it_in_beside_readers_ahead() {
    for old_rule in [false, true] {
        mutants::set(Mutant::AnyDataChangeIsMark, old_rule);
        let cluster = MemCluster::new();
        cluster.set_latency(Duration::from_millis(1));
        let (a, b, c) = (
            Locks::new(cluster.client()),
            Locks::new(cluster.client()),
            Locks::new(cluster.client()),
        );
        let r1 = a.read_write("/rw").unwrap().read().acquire().await.unwrap();
        let r2 = b.read_write("/rw").unwrap().read().acquire().await.unwrap();
        let writer = c.read_write("/rw").unwrap().write();
        let waiting = tokio::spawn(async move { writer.acquire().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        let r2_name = r2.node().rsplit('/').next().unwrap().to_owned();
        assert!(a.revoke_node("/rw", &r2_name).await.unwrap());
        tokio::time::timeout(Duration::from_secs(1), r2.revocation_requested())
            .await
            .expect("the request reaches R2")
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        r2.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            waiting.is_finished(),
            old_rule,
            "with the old rule {old_rule}: the writer came in beside R1: {}",
            waiting.is_finished()
        );
        assert!(r1.is_valid());
        r1.release().await.unwrap();
        let w = waiting.await.unwrap().unwrap();
        w.release().await.unwrap();
    }
    mutants::set(Mutant::AnyDataChangeIsMark, false);
}

/// The request reaches every holder of a path (readers, a semaphore's permits), and nobody else; the exclusive
/// recipe's fixed node cannot be revoked; a request to a node that is gone reports `false`.
#[tokio::test(start_paused = true)]
async fn every_holder_and_only_holders_are_asked() {
    let cluster = MemCluster::new();
    let (a, b) = (Locks::new(cluster.client()), Locks::new(cluster.client()));
    let sem = a.semaphore("/sem", 2).unwrap();
    let (p1, p2) = (sem.acquire().await.unwrap(), sem.acquire().await.unwrap());
    let other = b.semaphore("/sem", 2).unwrap();
    let waiting = tokio::spawn(async move { other.acquire().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let asked = b.revoke("/sem").await.unwrap();
    assert_eq!(asked.len(), 2);
    for p in [&p1, &p2] {
        let name = p.node().rsplit('/').next().unwrap();
        assert!(asked.iter().any(|n| n == name));
        tokio::time::timeout(Duration::from_secs(1), p.revocation_requested())
            .await
            .unwrap()
            .unwrap();
    }
    let participants = b.participants("/sem").await.unwrap();
    assert_eq!(participants.holders().filter(|h| h.revocation_requested).count(), 2);
    assert_eq!(participants.waiters().filter(|w| w.revocation_requested).count(), 0);
    p1.release().await.unwrap();
    let g = waiting.await.unwrap().unwrap();
    assert!(!b
        .revoke_node("/sem", "S-0123456789abcdef0123456789abcdef-0000000099")
        .await
        .unwrap());
    drop((g, p2));
    let ex = a.exclusive("/ex").unwrap().acquire().await.unwrap();
    assert!(matches!(
        b.revoke("/ex").await,
        Err(recipes_core::Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.revoke_node("/ex", "a/b").await,
        Err(recipes_core::Error::InvalidArgument(_))
    ));
    assert!(ex.is_valid());
    ex.release().await.unwrap();
}
