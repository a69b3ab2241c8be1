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
