//! What a drain of a long queue costs in lists, on the in-memory backend: the names the waiters read after their
//! wake-ups, counted by the cluster (`MemCluster::listed_names`), not timed. A waiter lists the queue again only when
//! it cannot know that its blocker held: the blocker was not first in its list and did not mark itself `first`
//! (docs/algorithm.md, optimisation 3; decisions 59, 60 and 73).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::Locks;
use recipes_mem::MemCluster;
use tokio::task::JoinSet;

/// A holder of `path` (on the first of `sessions`) and `waiters` waiters queued behind it one by one, consecutive
/// waiters on different sessions (each handoff goes through the watch, not a same-session pass), each releasing as
/// soon as it holds. Returns once every waiter has listed once and waits in line.
async fn queue_behind(
    cluster: &MemCluster,
    sessions: &[Locks],
    path: &str,
    waiters: usize,
) -> (recipes_core::LockGuard, JoinSet<()>) {
    queue_behind_on(cluster, sessions, path, waiters, |i| i % sessions.len()).await
}

/// As [`queue_behind`], waiter `i` on the session `session_of(i)`.
async fn queue_behind_on(
    cluster: &MemCluster,
    sessions: &[Locks],
    path: &str,
    waiters: usize,
    session_of: impl Fn(usize) -> usize,
) -> (recipes_core::LockGuard, JoinSet<()>) {
    let holder = sessions[0].fair(path).unwrap().acquire().await.unwrap();
    let mut queued = JoinSet::new();
    for i in 0..waiters {
        let lock = sessions[session_of(i) % sessions.len()].fair(path).unwrap();
        queued.spawn(async move { lock.acquire().await.unwrap().release().await.unwrap() });
        queued_as(cluster, path, i).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    (holder, queued)
}

/// Waits (bounded) until waiter `i` has queued behind the holder: `i + 2` nodes on `path`.
pub(crate) async fn queued_as(cluster: &MemCluster, path: &str, i: usize) {
    for _ in 0..1000 {
        if cluster.children(path).len() == i + 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(cluster.children(path).len(), i + 2, "waiter {i} queued");
}

/// `waiters` queued behind a holder on four sessions, neighbours two by two on one session, each delete sent for a
/// handoff keeping its thread 5 ms before the holder goes on (`SlowGet::slow_sends`): see
/// `a_waiter_that_sees_the_deletion_before_the_handoff_waits_for_it`.
async fn queue_in_pairs_slow_sends(
    cluster: &MemCluster,
    path: &str,
    waiters: usize,
) -> (recipes_core::LockGuard, JoinSet<()>) {
    use crate::support::SlowGet;
    let backends: Vec<Arc<SlowGet>> = (0..4).map(|_| Arc::new(SlowGet::new(cluster.client()))).collect();
    let sessions: Vec<Locks> = backends.iter().map(|b| Locks::new(b.clone())).collect();
    let queued = queue_behind_on(cluster, &sessions, path, waiters, |i| i / 2).await;
    for b in &backends {
        b.slow_sends.store(true, Ordering::SeqCst);
    }
    queued
}

/// Releases `holder` and waits (bounded) until every queued waiter has held and released.
pub(crate) async fn drain(holder: recipes_core::LockGuard, mut queued: JoinSet<()>) {
    holder.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(600), async {
        while let Some(r) = queued.join_next().await {
            r.unwrap();
        }
    })
    .await
    .expect("the queue drains");
}

/// Drains the queue behind `holder` and checks that its `waiters` listed at most two names each in all (once is one
/// each) and left nothing on `path`.
async fn drains_listing_the_queue_once(
    cluster: &MemCluster,
    path: &str,
    holder: recipes_core::LockGuard,
    queued: JoinSet<()>,
    waiters: usize,
) {
    let before = cluster.listed_names();
    drain(holder, queued).await;
    let listed = cluster.listed_names() - before;
    assert!(listed <= 2 * waiters as u64, "the drain listed {listed} names");
    assert!(cluster.children(path).is_empty());
}

/// 300 waiters queued one by one, so that the first 32 listed a short queue, then drained. The second waiter's
/// blocker was first in its list and did not mark, so it lists the whole queue again, and marks (a long listing); from
/// then on, a holder that came to hold through its blocker's mark, with something ahead of that blocker in its own
/// list, passes the mark on (decision 0073): about 300 names listed in all. Without passing it on (decision 0060),
/// the waiters near the front marked every other time, and about 32 lists read some 8,600 names; with the names ahead
/// as the rule (decision 59) the first 63 never marked (about 17,000); with no mark at all, every waiter would list.
#[tokio::test(start_paused = true)]
async fn a_drain_lists_the_whole_queue_once() {
    const WAITERS: usize = 300;
    let path = "/drain/queue";
    let cluster = MemCluster::new();
    let sessions: Vec<Locks> = (0..4).map(|_| Locks::new(cluster.client())).collect();
    let (holder, queued) = queue_behind(&cluster, &sessions, path, WAITERS).await;
    drains_listing_the_queue_once(&cluster, path, holder, queued, WAITERS).await;
}

/// Decision 0075: as above, but waiters side by side in the queue share a session, two by two, so that every other
/// handoff is a same-session pass within the process. A waiter handed the lock so by a holder whose release marks
/// passes the mark on, as one woken by the mark does: 298 names listed in all. When such a handoff broke the chain of
/// marks (decision 0073 alone), the waiter behind a pass listed the rest of the queue: 8,308 names. Found in the
/// seventeenth session, once `recipes-bench mem-drain` waited for a settled queue: 3,000 waiters on 8 sessions then
/// listed 26,000 to 235,000 names in a drain.
#[tokio::test(start_paused = true)]
async fn a_drain_through_same_session_passes_lists_the_whole_queue_once() {
    const WAITERS: usize = 300;
    let path = "/drain/pairs";
    let cluster = MemCluster::new();
    let sessions: Vec<Locks> = (0..4).map(|_| Locks::new(cluster.client())).collect();
    let (holder, queued) = queue_behind_on(&cluster, &sessions, path, WAITERS, |i| i / 2).await;
    drains_listing_the_queue_once(&cluster, path, holder, queued, WAITERS).await;
}

/// Decision 0075: as above, on a runtime of two worker threads, where the deletion of a blocker released by a task of
/// the same session can reach its waiter before the holder's word that it hands over: the holder sends its delete, then
/// tells its waiters, while the waiter runs on the other thread. Here every delete sent for a handoff keeps its thread
/// 5 ms before the holder goes on (`SlowGet::slow_sends`), so the waiter always sees the deletion first. It waits for
/// the word when the holder took its registration: 98 names listed. When it heeded the deletion alone, it listed the
/// rest of the queue after every pass: 2,819 names (and `recipes-bench mem-drain`, 3,000 waiters on 8 sessions,
/// listed 20,000 to 235,000 names in a drain, where the race was left to chance).
///
/// Without scouts (`Mutant::NoScout`, on both worker threads: a switch is a thread's), so that the names count the word
/// alone: until decision 0080 a waiter whose scout was the first of a pair listed when that node went (its plain
/// delete handed the lock to its mate within the process), which counted here as much as the relists this test is
/// about (2,239 names in one run); the next test drains pairs with scouts.
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[test]
fn a_waiter_that_sees_the_deletion_before_the_handoff_waits_for_it() {
    use recipes_core::mutants::{self, Mutant};
    const WAITERS: usize = 100;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| mutants::set(Mutant::NoScout, true))
        .build()
        .unwrap();
    mutants::set(Mutant::NoScout, true);
    rt.block_on(async {
        let path = "/drain/pairs-threads";
        let cluster = MemCluster::new();
        let (holder, queued) = queue_in_pairs_slow_sends(&cluster, path, WAITERS).await;
        drains_listing_the_queue_once(&cluster, path, holder, queued, WAITERS).await;
    });
    mutants::set(Mutant::NoScout, false);
}

/// The same drain with scouts (decision 79), as an application gets it, on 300 waiters. The first of each pair hands
/// the lock to its mate within the process, and its release writes the mark its release would (decision 0080): a
/// waiter whose scout is that node sees the mark, retires its scout and waits on, so the queue is listed about twice
/// in all, as without pairs. With the handoff's plain delete (`Mutant::HandoffDeletesBare`, the rule before), every
/// waiter among the first 64 (the threshold then) whose scout handed over listed the whole queue when its scout went:
/// 8,639 names in one run of these 300 (and `recipes-bench mem-drain`, 3,000 waiters on 8 sessions, listed up to
/// 50,559 names where 5,999 are needed).
#[test]
fn a_paired_drain_with_scouts_lists_the_whole_queue_once() {
    use recipes_core::mutants::{self, Mutant};
    const WAITERS: usize = 300;
    // The rule before, only where the switches are compiled in (as scripts/test builds the tests).
    let bare_too: &[bool] = if cfg!(recipes_mutants) {
        &[false, true]
    } else {
        &[false]
    };
    for &bare in bare_too {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start(move || mutants::set(Mutant::HandoffDeletesBare, bare))
            .build()
            .unwrap();
        mutants::set(Mutant::HandoffDeletesBare, bare);
        let listed = rt.block_on(async {
            let path = "/drain/pairs-threads-scouts";
            let cluster = MemCluster::new();
            let (holder, queued) = queue_in_pairs_slow_sends(&cluster, path, WAITERS).await;
            let before = cluster.listed_names();
            drain(holder, queued).await;
            assert!(cluster.children(path).is_empty());
            cluster.listed_names() - before
        });
        mutants::set(Mutant::HandoffDeletesBare, false);
        if bare {
            assert!(
                listed > 4 * WAITERS as u64,
                "with the handoff's plain delete the drain listed only {listed} names"
            );
        } else {
            assert!(
                listed <= 2 * WAITERS as u64,
                "the drain listed {listed} names (at most {})",
                2 * WAITERS
            );
        }
    }
}

/// Decision 0073: a chain of marks starts only after a long listing (or a revocation). Eight tasks on two sessions take turns on a short
/// queue, so that a waiter is often handed the lock by a task of its own session while something was ahead of its
/// blocker: a handoff from a holder that does not mark passes no mark on (found by review, helper-64: it started a
/// chain of marks in a short queue, and every release after it became the mark's transaction). No release marks.
#[tokio::test(start_paused = true)]
async fn tasks_sharing_sessions_in_a_short_queue_never_mark() {
    use crate::support::SlowGet;
    let cluster = MemCluster::new();
    let backends: Vec<Arc<SlowGet>> = (0..2).map(|_| Arc::new(SlowGet::new(cluster.client()))).collect();
    let sessions: Vec<Locks> = backends.iter().map(|b| Locks::new(b.clone())).collect();
    let mut tasks = JoinSet::new();
    for i in 0..8 {
        // Four tasks of one session, then four of the other: neighbours in the queue mostly share a session.
        let lock = sessions[i / 4].fair("/drain/short").unwrap();
        tasks.spawn(async move {
            for _ in 0..25 {
                let g = lock.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                g.release().await.unwrap();
            }
        });
    }
    tokio::time::timeout(Duration::from_secs(600), async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    })
    .await
    .expect("the tasks finish");
    let marks: u32 = backends.iter().map(|b| b.marks.load(Ordering::SeqCst)).sum();
    assert_eq!(marks, 0, "releases that marked their node");
}

/// The requests of a drain, per handoff: a holder that marks itself `first` does so in its release, in one
/// transaction with its delete (decision 0064), and the next waiter, which watched its blocker's deletion alone as
/// well as its data (decision 0092), holds on the two events of that write without a read: 1.16 (the first 32
/// waiters, which queued behind short listings, watch no deletion alone and read their marked blocker back: 0.16;
/// with marks from a listing of 64, decision 0093's rule before, 1.32, and the bound below fails).
/// Without that watch (`Mutant::NoGoneWatch`, the rule before) it reads the blocker back after the change of data:
/// 2. With the mark written as soon as the node holds, in a write of its own (`Mutant::MarkWhenHeld`, the rule
/// before decision 0064), and no watch of the deletion alone, a handoff costs 3; the early waiters then mark only
/// after a long listing, and the lists behind every other one of them add about 0.1. (Through a session's view,
/// decision 0085, a waiter needs no new watch after a change of its blocker's data, and the old rule costs less:
/// 2.15 in one run with views from the second waiter; these 50 waiters of a session are below the view's 128.) The
/// watches of the deletion alone are set as the waiters queue, before the drain: one request per waiter, off the
/// handoffs' path.
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test(start_paused = true)]
async fn a_drain_marks_in_the_release_one_request_per_handoff() {
    use recipes_core::mutants::{self, Mutant};
    const WAITERS: usize = 200;
    // (mark when held, no watch of the deletion alone, least and most requests per handoff)
    for (when_held, no_gone, least, most) in [
        (false, false, 0.9, 1.25),
        (false, true, 1.7, 2.3),
        (true, true, 2.6, 3.3),
    ] {
        mutants::set(Mutant::MarkWhenHeld, when_held);
        mutants::set(Mutant::NoGoneWatch, no_gone);
        let path = "/drain/requests";
        let cluster = MemCluster::new();
        let sessions: Vec<Locks> = (0..4).map(|_| Locks::new(cluster.client())).collect();
        let (holder, queued) = queue_behind(&cluster, &sessions, path, WAITERS).await;
        let before = cluster.requests();
        drain(holder, queued).await;
        let per_handoff = (cluster.requests() - before) as f64 / WAITERS as f64;
        assert!(
            (least..=most).contains(&per_handoff),
            "marked when held {when_held}, no watch of the deletion alone {no_gone}: {per_handoff:.2} requests per \
             handoff, not in {least}..={most}"
        );
        assert!(cluster.children(path).is_empty());
    }
    mutants::set(Mutant::MarkWhenHeld, false);
    mutants::set(Mutant::NoGoneWatch, false);
}

/// A waiter in line whose connection was cut during its wait lists the queue again on its blocker's deletion instead
/// of holding at once, though the blocker was first in its list: after a reconnection, ZooKeeper reports the
/// re-registered watches' changes in the order of the re-registration, so its own node's deletion may come after the
/// blocker's (docs/algorithm.md, optimisation 3). With the old rule switched back on, it holds without listing.
#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches a mutant on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test(start_paused = true)]
async fn a_waiter_lists_again_after_a_disconnection_during_its_wait() {
    use recipes_core::mutants::{self, Mutant};
    for old_rule in [false, true] {
        mutants::set(Mutant::TrustAcrossReconnection, old_rule);
        let cluster = MemCluster::new();
        cluster.set_latency(Duration::from_millis(1));
        let (a, b) = (cluster.client(), cluster.client());
        let b_client = b.clone();
        let (la, lb) = (Locks::new(a), Locks::new(b));
        let holder = la.fair("/cut").unwrap().acquire().await.unwrap();
        let fair = lb.fair("/cut").unwrap();
        let waiter = tokio::spawn(async move { fair.acquire().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = cluster.listed_names();
        b_client.disconnect_for(Duration::from_millis(500));
        tokio::time::sleep(Duration::from_millis(50)).await;
        holder.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("the waiter holds after its reconnection")
            .unwrap()
            .unwrap();
        let listed = cluster.listed_names() - before;
        assert_eq!(
            listed > 0,
            !old_rule,
            "old rule {old_rule}: the waiter listed {listed} names"
        );
        g.release().await.unwrap();
    }
    mutants::set(Mutant::TrustAcrossReconnection, false);
}
