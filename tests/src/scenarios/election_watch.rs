//! Watching an election: the stream of leader changes, and the blocking forms of the election's calls.

use futures::StreamExt;
use recipes_core::{Error, Leader, LostReason};

use crate::harness::Harness;
use crate::util::{assert_pending, bounded, wait_children};

/// The next item of an observer's stream of changes, at most the harness's patience away.
async fn next_change<S>(h: &dyn Harness, what: &str, changes: &mut S) -> Option<Leader>
where
    S: futures::Stream<Item = recipes_core::Result<Option<Leader>>> + Unpin,
{
    bounded(h, what, changes.next())
        .await
        .expect("the stream of changes ended")
        .expect("a read of the leader")
}

/// An observer's stream names each leader in turn with its term (terms only go up), says when nobody leads, stays
/// quiet while only the queue behind the leader changes or the leader is asked to let go, follows a leader lost with
/// its session, and ends when the observer's `Locks` is dropped.
pub async fn election_changes_follow_the_leader(h: &dyn Harness) {
    let path = h.path("election-changes");
    let (a, b, observer) = (h.client().await, h.client().await, h.client().await);
    let mut changes = Box::pin(observer.locks.election(&path).unwrap().changes());
    assert_eq!(next_change(h, "nobody leads yet", &mut changes).await, None);
    let ca = a.locks.election(&path).unwrap().candidate("a").unwrap();
    let cb = b.locks.election(&path).unwrap().candidate("b").unwrap();
    let first = ca.leadership().await.unwrap();
    let seen = next_change(h, "a leads", &mut changes).await.expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("a", first.term()));
    let mut waiting = Box::pin(cb.leadership());
    assert_pending(h, "b waits", &mut waiting).await;
    assert_pending(h, "no change while b only stands", &mut changes.next()).await;
    let first_term = first.term();
    first.resign().await.unwrap();
    let second = bounded(h, "b leads", waiting).await.unwrap();
    let seen = next_change(h, "b leads", &mut changes).await.expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("b", second.term()));
    assert!(seen.term > first_term, "terms went back");
    // Asked to let go, b still leads until it goes: the stream stays with it (its node no longer says who it is).
    assert_eq!(observer.locks.revoke(&path).await.unwrap().len(), 1);
    assert_pending(h, "a revoked leader is still the one reported", &mut changes.next()).await;
    b.faults.expire_session().await;
    assert_eq!(bounded(h, "b's loss", second.lost()).await, LostReason::SessionExpired);
    assert_eq!(
        next_change(h, "nobody leads after b's expiry", &mut changes).await,
        None
    );
    let again = ca.leadership().await.unwrap();
    let seen = next_change(h, "a leads again", &mut changes).await.expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("a", again.term()));
    assert!(again.term() > second.term(), "terms went back");
    drop(second);
    again.resign().await.unwrap();
    assert_eq!(next_change(h, "nobody leads at the end", &mut changes).await, None);
    wait_children(h, &path, 0).await;
    // The stream keeps no session alive: it ends with the observer's `Locks`.
    drop(observer);
    assert!(bounded(h, "the stream ends", changes.next()).await.is_none());
}

/// The blocking forms lead, try, time out, read the leader, learn a loss and resign, each on a thread of its own
/// outside the runtime; inside it they refuse with a typed error.
pub async fn election_blocking_forms(h: &dyn Harness) {
    let path = h.path("election-blocking");
    let (a, b) = (h.client().await, h.client().await);
    let election = a.locks.election(&path).unwrap();
    let ca = election.candidate("a").unwrap();
    let cb = b.locks.election(&path).unwrap().candidate("b").unwrap();
    assert!(matches!(ca.leadership_blocking(), Err(Error::BlockingInAsync)));
    assert!(matches!(election.leader_blocking(), Err(Error::BlockingInAsync)));
    let held = std::thread::scope(|s| {
        s.spawn(|| {
            let first = ca.leadership_blocking().unwrap();
            let seen = election.leader_blocking().unwrap().expect("a leader");
            assert_eq!((seen.id.as_str(), seen.term), ("a", first.term()));
            assert!(cb.try_leadership_blocking().unwrap().is_none(), "b led beside a");
            let patience = std::time::Duration::from_millis(50);
            assert!(
                cb.leadership_timeout_blocking(patience).unwrap().is_none(),
                "b led beside a"
            );
            let term = first.term();
            first.resign_blocking().unwrap();
            let second = cb.try_leadership_blocking().unwrap().expect("b leads after a resigned");
            assert!(second.term() > term);
            second
        })
        .join()
        .unwrap()
    });
    b.faults.expire_session().await;
    let reason = std::thread::scope(|s| s.spawn(|| held.wait_lost_blocking().unwrap()).join().unwrap());
    assert_eq!(reason, LostReason::SessionExpired);
    drop(held);
    wait_children(h, &path, 0).await;
}

/// A known peer failure: a leader whose connection broke and came back within its session stood again beside its
/// surviving node (two nodes of one participant; two leaders when the other one led). Here the leader keeps its one
/// node and its leadership across the reconnection, the next candidate keeps waiting, and leads after the resignation.
pub async fn election_leader_reconnected_within_its_session_keeps_one_node(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return crate::util::skip(
            h,
            "election_leader_reconnected_within_its_session_keeps_one_node",
            "disconnects",
        );
    }
    let path = h.path("election-reconnected");
    let (a, b) = (h.client().await, h.client().await);
    let ca = a.locks.election(&path).unwrap().candidate("a").unwrap();
    let cb = b.locks.election(&path).unwrap().candidate("b").unwrap();
    let leading = ca.leadership().await.unwrap();
    let mut waiting = Box::pin(cb.leadership());
    assert_pending(h, "b waits", &mut waiting).await;
    a.faults.disconnect_for(a.faults.session_timeout() / 5).await;
    crate::util::eventually(h, "a's lease is current again", || async { leading.is_valid() }).await;
    assert_pending(h, "b still waits after a's reconnection", &mut waiting).await;
    assert_eq!(h.children(&path).await.len(), 2, "a stood again beside its node");
    let seen = b
        .locks
        .election(&path)
        .unwrap()
        .leader()
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!((seen.id.as_str(), seen.term), ("a", leading.term()));
    leading.resign().await.unwrap();
    let next = bounded(h, "b leads", waiting).await.unwrap();
    next.resign().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A known peer failure: a resignation over a broken connection left the node behind (the next candidate waited for
/// a leader that had gone). Here the resignation either deletes the node or reports the loss, and no node is left.
pub async fn election_resign_over_a_broken_connection_leaves_no_node(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return crate::util::skip(
            h,
            "election_resign_over_a_broken_connection_leaves_no_node",
            "disconnects",
        );
    }
    let path = h.path("election-resign-broken");
    let (a, b) = (h.client().await, h.client().await);
    let ca = a.locks.election(&path).unwrap().candidate("a").unwrap();
    let cb = b.locks.election(&path).unwrap().candidate("b").unwrap();
    let leading = ca.leadership().await.unwrap();
    let waiting = tokio::spawn(async move { cb.leadership().await.map(|l| l.term()) });
    wait_children(h, &path, 2).await;
    let session = a.locks.backend().session_status().id;
    // The connection breaks, then the leader resigns while it is down: its session lives on (the break is short),
    // so its node would stay for as long as the session does if the resignation gave up.
    a.faults.disconnect_for(a.faults.session_timeout() / 5).await;
    let _ = bounded(h, "the resignation ends", leading.resign()).await;
    bounded(h, "b leads once a's node is gone", waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        a.locks.backend().session_status().id,
        session,
        "a's session was replaced: the test proves nothing"
    );
    wait_children(h, &path, 0).await;
}
