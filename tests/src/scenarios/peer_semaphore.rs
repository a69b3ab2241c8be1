//! The semaphore in the peers' layouts (Curator's `InterProcessSemaphoreV2`, kazoo's `Semaphore`): never more leases
//! out than permits, nothing left behind (no lease, no mutex node) by timeouts, cancellation, lost replies or expiry,
//! and refusals where another recipe or layout is on the path.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::BackendExt;
use recipes_core::{Error, Layout, Locks};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use super::HOLD;
use crate::harness::Harness;
use crate::util::{assert_pending, bounded, skip, wait_children};

const PEERS: [Layout; 2] = [Layout::Curator, Layout::Kazoo];

fn with_layout(locks: &Locks, layout: Layout) -> Locks {
    Locks::builder(locks.backend().clone()).layout(layout).build()
}

/// Where a peer semaphore at `root` keeps its leases, and its mutex's nodes.
fn leases_and_mutex(layout: Layout, root: &str) -> (String, String) {
    match layout {
        Layout::Curator => (format!("{root}/leases"), format!("{root}/locks")),
        _ => (root.to_owned(), format!("{root}-__lock__")),
    }
}

/// Waits until the semaphore has `leases` leases and nobody holds or waits for its mutex.
async fn settled(h: &dyn Harness, layout: Layout, root: &str, leases: usize) {
    let (l, m) = leases_and_mutex(layout, root);
    wait_children(h, &l, leases).await;
    wait_children(h, &m, 0).await;
}

/// The end of a scenario: the kazoo layout's path stays when its leases are gone (kazoo makes it persistent, and
/// expects it to stay), so the scenario deletes it.
async fn remove_kazoo_path(h: &dyn Harness, layout: Layout, root: &str, locks: &Locks) {
    settled(h, layout, root, 0).await;
    if layout == Layout::Kazoo {
        let on = locks.backend().current();
        assert!(on.get(root).await.unwrap().is_some(), "the kazoo path stays");
        on.delete(root).await.unwrap();
    }
}

/// Six clients, each taking a permit of three many times over (waiting, or with a timeout): never more than three
/// out at once, more than one at a time, unique fencing tokens, and nothing left.
pub async fn peer_semaphores_never_exceed_permits(h: &dyn Harness) {
    for layout in PEERS {
        let root = h.path(&format!("peer-sem-bound-{layout}"));
        let (now, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        // Every client is connected before any starts, and they start together: made one by one, the first could
        // be done before the last has a session, and the lower bound below would fail on a slow machine.
        let mut clients = Vec::new();
        for _ in 0..6 {
            clients.push(h.client().await);
        }
        let start = Arc::new(Barrier::new(clients.len()));
        let mut set = JoinSet::new();
        for (i, c) in (0u32..).zip(clients) {
            let sem = with_layout(&c.locks, layout).semaphore(&root, 3).unwrap();
            let (now, most, patience, start, tick) = (now.clone(), most.clone(), h.patience(), start.clone(), h.tick());
            set.spawn(async move {
                let mut tokens = Vec::new();
                start.wait().await;
                for round in 0..4u32 {
                    let g = if (i + round) % 2 == 0 {
                        sem.acquire().await.expect("acquire")
                    } else {
                        sem.acquire_timeout(patience).await.expect("acquire").expect("in time")
                    };
                    most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    tokens.push(g.fencing_token());
                    // Long beside a lease's round trips, even on a loaded machine: leases overlap.
                    tokio::time::sleep(HOLD * 10).await;
                    // Every grant in these layouts waits for the mutex's delete to commit: on a slow disk the next
                    // grant can come after a hold's end, each time (a CI run saw it in the interop test of these
                    // layouts). So a holder's first two holds stay on, 2 s at most, until a second lease is out; a
                    // semaphore that lets one in at a time still fails the lower bound below.
                    let t0 = tokio::time::Instant::now();
                    while round < 2 && most.load(Ordering::SeqCst) < 2 && t0.elapsed() < Duration::from_secs(2) {
                        tokio::time::sleep(tick).await;
                        most.fetch_max(now.load(Ordering::SeqCst), Ordering::SeqCst);
                    }
                    now.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                }
                drop(c);
                tokens
            });
        }
        let mut tokens = Vec::new();
        while let Some(r) = set.join_next().await {
            tokens.extend(r.expect("client task"));
        }
        let most = most.load(Ordering::SeqCst);
        assert!(most <= 3, "{layout}: {most} leases out of 3 at once");
        assert!(most >= 2, "{layout}: never more than one lease out at once");
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 24, "{layout}: fencing tokens are unique");
        remove_kazoo_path(h, layout, &root, &h.client().await.locks).await;
    }
}

/// Timeouts, tries, dropped acquires, lost create replies and an expired holder leave no lease and no mutex node
/// behind, and free their permits (CURATOR-315 and CURATOR-462 left leases behind and the semaphore full; CURATOR-595
/// kept a lost session's permits); a waiter rides through a disconnection (CURATOR-335); of eight concurrent tries on
/// the one free permit, at most one gets it (kazoo #213).
pub async fn peer_semaphores_leave_nothing_behind(h: &dyn Harness) {
    for layout in PEERS {
        let root = h.path(&format!("peer-sem-clean-{layout}"));
        let (a, b) = (h.client().await, h.client().await);
        let (la, lb) = (with_layout(&a.locks, layout), with_layout(&b.locks, layout));
        let full = la.semaphore(&root, 2).unwrap().acquire().await.unwrap();
        let other = la.semaphore(&root, 2).unwrap().acquire().await.unwrap();
        let sem = lb.semaphore(&root, 2).unwrap();
        assert!(
            sem.try_acquire().await.unwrap().is_none(),
            "{layout}: try on a full semaphore"
        );
        assert!(
            sem.acquire_timeout(h.tick() * 2).await.unwrap().is_none(),
            "{layout}: timeout"
        );
        settled(h, layout, &root, 2).await;
        for _ in 0..3 {
            let s = sem.clone();
            let waiting = tokio::spawn(async move { s.acquire().await.map(|g| g.fencing_token()) });
            // It holds the mutex while it waits.
            wait_children(h, &leases_and_mutex(layout, &root).1, 1).await;
            waiting.abort();
            let _ = waiting.await;
            settled(h, layout, &root, 2).await;
        }
        // An expired holder's permit goes to the waiter.
        let s = sem.clone();
        let waiting = tokio::spawn(async move { s.acquire().await });
        wait_children(h, &leases_and_mutex(layout, &root).1, 1).await;
        a.faults.expire_session().await;
        let g = bounded(h, "the expired holder's permit is free", waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(g.fencing_token() > full.fencing_token().max(other.fencing_token()));
        assert!(
            full.release().await.is_err(),
            "{layout}: a release after expiry reports the loss"
        );
        drop(other);
        settled(h, layout, &root, 1).await;
        if h.capabilities().lose_create_reply {
            b.faults.lose_next_create_replies(2).await;
            let g2 = bounded(h, "a lease through lost create replies", sem.acquire())
                .await
                .unwrap();
            settled(h, layout, &root, 2).await;
            g2.release().await.unwrap();
            settled(h, layout, &root, 1).await;
        }
        if h.capabilities().disconnect {
            let c = h.client().await;
            let taken = with_layout(&c.locks, layout)
                .semaphore(&root, 2)
                .unwrap()
                .acquire()
                .await
                .unwrap();
            let s = sem.clone();
            let mut waiting = tokio::spawn(async move { s.acquire().await });
            wait_children(h, &leases_and_mutex(layout, &root).1, 1).await;
            b.faults.disconnect_for(b.faults.session_timeout() / 4).await;
            tokio::time::sleep(b.faults.session_timeout() / 3).await;
            assert_pending(h, "the waiter waits through the disconnection", &mut waiting).await;
            taken.release().await.unwrap();
            let g3 = bounded(h, "the waiter gets the freed permit", waiting)
                .await
                .unwrap()
                .unwrap();
            g3.release().await.unwrap();
            drop(c);
            settled(h, layout, &root, 1).await;
        }
        // One permit is free: of eight concurrent tries, at most one gets it.
        let mut tries = JoinSet::new();
        let mut clients = Vec::new();
        for _ in 0..8 {
            let c = h.client().await;
            let s = with_layout(&c.locks, layout).semaphore(&root, 2).unwrap();
            clients.push(c);
            tries.spawn(async move { s.try_acquire().await });
        }
        let mut got = Vec::new();
        while let Some(r) = tries.join_next().await {
            if let Some(g) = r.unwrap().unwrap() {
                got.push(g);
            }
        }
        assert!(got.len() <= 1, "{layout}: {} tries got the one free permit", got.len());
        for g in got {
            g.release().await.unwrap();
        }
        drop(clients);
        g.release().await.unwrap();
        remove_kazoo_path(h, layout, &root, &b.locks).await;
    }
}

/// What a peer semaphore refuses: a claim on several permits (its peers have none), another permit count than the
/// one its path stores, and another recipe or layout on its path (each would not count the other's holders).
pub async fn peer_semaphores_refuse_what_they_cannot_share(h: &dyn Harness) {
    let (a, b) = (h.client().await, h.client().await);
    for layout in PEERS {
        let root = h.path(&format!("peer-sem-refuse-{layout}"));
        let (la, lb) = (with_layout(&a.locks, layout), with_layout(&b.locks, layout));
        let sem = la.semaphore(&root, 2).unwrap();
        assert!(
            matches!(sem.acquire_many(2).await, Err(Error::InvalidArgument(_))),
            "{layout}: acquire_many(2)"
        );
        let held = sem.acquire().await.unwrap();
        match lb.semaphore(&root, 3).unwrap().try_acquire().await {
            Err(Error::PermitsMismatch {
                asked: 3,
                stored: Some(2),
                ..
            }) => {}
            r => panic!("{layout}: expected PermitsMismatch, got {:?}", r.map(|g| g.is_some())),
        }
        // The native recipes do not count the peer's leases: they refuse its path.
        let native = &b.locks;
        assert!(
            matches!(
                native.semaphore(&root, 2).unwrap().try_acquire().await,
                Err(Error::ForeignLock { .. })
            ),
            "{layout}: a native semaphore beside the peer's"
        );
        assert!(
            matches!(
                native.fair(&root).unwrap().try_acquire().await,
                Err(Error::ForeignLock { .. })
            ),
            "{layout}: a native lock beside the peer's semaphore"
        );
        settled(h, layout, &root, 1).await;
        held.release().await.unwrap();
        remove_kazoo_path(h, layout, &root, &a.locks).await;
    }
    // The kazoo layout's semaphore refuses a native semaphore's path while its permits are held there.
    let root = h.path("peer-sem-refuse-native");
    let native = a.locks.semaphore(&root, 2).unwrap().acquire().await.unwrap();
    let kazoo = with_layout(&b.locks, Layout::Kazoo).semaphore(&root, 2).unwrap();
    assert!(matches!(kazoo.try_acquire().await, Err(Error::ForeignLock { .. })));
    // Refused, not waited on: with the whole patience (a tick, on a loaded machine, could pass before the refusal,
    // as CI saw: the acquire then gives up with `None`).
    assert!(matches!(
        kazoo.acquire_timeout(h.patience()).await,
        Err(Error::ForeignLock { .. })
    ));
    settled(h, Layout::Kazoo, &root, 1).await;
    native.release().await.unwrap();
    wait_children(h, &root, 0).await;
}

/// The Curator-layout semaphore's permit count survives the container reaper: the emptied semaphore path is reaped
/// at an instant swept across a client's acquire (between its count check and its mutex, whose path-making would
/// make the path again without a count), and a client of another count is still refused, never let in beside it.
pub async fn curator_semaphore_count_survives_the_reaper(h: &dyn Harness) {
    let name = "curator_semaphore_count_survives_the_reaper";
    let (Some(reap), Some(_), true) = (
        h.container_reap_delay(),
        h.next_container_check(),
        h.capabilities().latency,
    ) else {
        return skip(h, name, "container reaping on a known clock, or request latency");
    };
    let latency = std::time::Duration::from_millis(20);
    let mut refused = 0;
    for k in 0..30u32 {
        let root = h.path(&format!("peer-sem-reap{k}"));
        let (a, b) = (h.client().await, h.client().await);
        let one = with_layout(&a.locks, Layout::Curator).semaphore(&root, 1).unwrap();
        let two = with_layout(&b.locks, Layout::Curator).semaphore(&root, 2).unwrap();
        // Made with a count of 1, then emptied right after a check of the reaper's: `leases` and `locks` are reaped at
        // the next check, the path (emptied then) at the one after.
        let check = h.next_container_check().expect("checked above");
        tokio::time::sleep_until(check + latency).await;
        one.acquire().await.unwrap().release().await.unwrap();
        settled(h, Layout::Curator, &root, 0).await;
        tokio::time::sleep_until(check + reap * 2 - latency * 6 + latency * k / 5).await;
        h.set_latency(latency);
        let held = bounded(h, "the 1-permit client acquires", one.acquire()).await.unwrap();
        h.set_latency(std::time::Duration::ZERO);
        match two.try_acquire().await {
            Err(Error::PermitsMismatch { asked: 2, .. }) => refused += 1,
            Ok(Some(_)) => panic!("k={k}: a 2-permit client holds beside a 1-permit client"),
            r => panic!("k={k}: expected PermitsMismatch, got {r:?}"),
        }
        held.release().await.unwrap();
        settled(h, Layout::Curator, &root, 0).await;
    }
    assert_eq!(refused, 30);
}
