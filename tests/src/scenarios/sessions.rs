//! Sessions and leases: what a holder and a waiter see when their session expires, acquiring again on a new session,
//! the lease of a held lock and the operations guarded by it.

use recipes_core::{Error, LostReason, Recipe};

use crate::harness::Harness;
use crate::util::{assert_pending, bounded, skip, wait_children};

/// Session expiry resolves lost() with SessionExpired.
pub async fn session_expiry_fires_lost(h: &dyn Harness) {
    let path = h.path("expiry-lost");
    let a = h.client().await;
    for recipe in [Recipe::Fair, Recipe::Exclusive, Recipe::Read] {
        let g = a.locks.lock(&path, recipe).unwrap().acquire().await.unwrap();
        let mut lost = Box::pin(g.lost());
        assert_pending(h, "lost before expiry", &mut lost).await;
        a.faults.expire_session().await;
        assert_eq!(bounded(h, "lost", lost).await, LostReason::SessionExpired);
        let r = g.release().await;
        assert!(r.is_err(), "{recipe}: release after expiry must report the loss");
        wait_children(h, &path, 0).await;
    }
}

/// When the holder's session expires, a waiter takes over with a higher token.
pub async fn session_expiry_waiter_takes_over(h: &dyn Harness) {
    let path = h.path("expiry-takeover");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let lb = b.locks.fair(&path).unwrap();
    let mut wb = tokio::spawn(async move { lb.acquire().await.unwrap() });
    wait_children(h, &path, 2).await;
    assert_pending(h, "waiter", &mut wb).await;
    a.faults.expire_session().await;
    let gb = bounded(h, "waiter takes over", wb).await.unwrap();
    assert!(gb.fencing_token() > g.fencing_token());
    assert_eq!(g.lost().await, LostReason::SessionExpired);
    drop(g);
    gb.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A waiting acquire fails with SessionExpired when its own session expires, leaving the holder alone.
pub async fn waiting_acquire_fails_on_session_expiry(h: &dyn Harness) {
    let path = h.path("expiry-waiter");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let lb = b.locks.fair(&path).unwrap();
    let wb = tokio::spawn(async move { lb.acquire().await.map(|g| g.fencing_token()) });
    wait_children(h, &path, 2).await;
    b.faults.expire_session().await;
    let r = bounded(h, "waiter fails", wb).await.unwrap();
    assert_eq!(r, Err(Error::SessionExpired));
    wait_children(h, &path, 1).await;
    assert!(
        bounded(h, "holder not lost", tokio::time::timeout(h.tick() * 3, g.lost()))
            .await
            .is_err()
    );
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// After its session expired, a client acquires again on a new session.
pub async fn acquire_after_expiry_uses_new_session(h: &dyn Harness) {
    let path = h.path("expiry-new-session");
    let a = h.client().await;
    let lock = a.locks.fair(&path).unwrap();
    let g = lock.acquire().await.unwrap();
    let old = g.session_id();
    a.faults.expire_session().await;
    assert_eq!(g.lost().await, LostReason::SessionExpired);
    drop(g);
    let g2 = bounded(h, "acquire on new session", lock.acquire()).await.unwrap();
    assert_ne!(g2.session_id(), old);
    g2.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A held lock's lease is valid, and ends no later than a session timeout from now.
pub async fn lease_valid_while_held(h: &dyn Harness) {
    let path = h.path("lease-valid");
    let a = h.client().await;
    let timeout = a.faults.session_timeout();
    for recipe in [Recipe::Fair, Recipe::Exclusive, Recipe::Read, Recipe::Write] {
        let g = a.locks.lock(&path, recipe).unwrap().acquire().await.unwrap();
        let until = g.valid_until().expect("lease of a live session");
        let now = tokio::time::Instant::now();
        assert!(
            until > now && until <= now + timeout,
            "{recipe}: {until:?} not in (now, now + {timeout:?}]"
        );
        assert!(g.is_valid());
        g.release().await.unwrap();
    }
    wait_children(h, &path, 0).await;
}

/// A holder cut off from the server sees its lease run out (lost() fires) before any other client acquires.
pub async fn lease_lost_before_another_client_acquires(h: &dyn Harness) {
    if !h.capabilities().disconnect {
        return skip(h, "lease_lost_before_another_client_acquires", "disconnects");
    }
    let path = h.path("lease-order");
    let (a, b) = (h.client().await, h.client().await);
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let lock = b.locks.fair(&path).unwrap();
    let waiter = tokio::spawn(async move {
        let g = lock.acquire().await.unwrap();
        (tokio::time::Instant::now(), g)
    });
    wait_children(h, &path, 2).await;
    let timeout = a.faults.session_timeout();
    a.faults.disconnect_for(timeout * 2).await;
    let reason = bounded(h, "lost", g.lost()).await;
    let lost_at = tokio::time::Instant::now();
    assert_eq!(
        reason,
        LostReason::LeaseExpired,
        "the lease must run out before the expiry is known"
    );
    assert!(!g.is_valid());
    let (acquired_at, gb) = bounded(h, "b takes over", waiter).await.unwrap();
    assert!(
        lost_at < acquired_at,
        "a's lost() at {lost_at:?} must precede b's acquire at {acquired_at:?}"
    );
    assert!(gb.fencing_token() > g.fencing_token());
    gb.release().await.unwrap();
    drop(g);
    wait_children(h, &path, 0).await;
}

/// A guarded operation runs and commits under a valid lease, and does not run once the session is gone.
pub async fn guarded_operation_under_the_lease(h: &dyn Harness) {
    let path = h.path("guarded");
    let a = h.client().await;
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let token = g.fencing_token();
    let r = g.guarded(|| async { Ok::<_, String>(token) }, |_| async {}).await;
    assert_eq!(r, Ok(token));
    a.faults.expire_session().await;
    let r = g.guarded(|| async { Ok::<_, String>(0) }, |_| async {}).await;
    assert_eq!(r, Err(recipes_core::GuardedError::NotRun));
    drop(g);
    wait_children(h, &path, 0).await;
}

/// An acquire waiting when the application closes its `Locks` ends with `Closed` (not `SessionExpired`, which says
/// the server ended the session), and leaves no node behind; so does a multi-lock's.
pub async fn acquire_in_flight_ends_closed_on_close(h: &dyn Harness) {
    let (x, y) = (h.path("close-x"), h.path("close-y"));
    let (a, b) = (h.client().await, h.client().await);
    let busy = a.locks.fair(&y).unwrap().acquire().await.unwrap();
    let lock = b.locks.fair(&y).unwrap();
    let set = b.locks.multi([(&x, Recipe::Fair), (&y, Recipe::Write)]).unwrap();
    let mut waiting = tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) });
    let waiting_set = tokio::spawn(async move { set.acquire().await.map(|g| g.guards().len()) });
    wait_children(h, &y, 3).await;
    assert_pending(h, "the acquire waits", &mut waiting).await;
    b.locks.close().await;
    let got = bounded(h, "the acquire ends", waiting).await.unwrap();
    assert_eq!(
        got,
        Err(Error::Closed),
        "an acquire in flight when the application closed"
    );
    let got = bounded(h, "the set's acquire ends", waiting_set).await.unwrap();
    assert_eq!(
        got,
        Err(Error::Closed),
        "a multi-lock's acquire in flight when the application closed"
    );
    wait_children(h, &x, 0).await;
    wait_children(h, &y, 1).await;
    busy.release().await.unwrap();
    wait_children(h, &y, 0).await;
}
