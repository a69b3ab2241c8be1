//! The peers' semaphores beside other recipes and layouts on the in-memory backend: regressions of the review of the
//! Curator and kazoo semaphore layouts (helper-22), each of which once let two holders in or refused a lock it must
//! not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::{Error, Layout, Locks, Result};
use recipes_mem::MemCluster;

fn locks(c: &MemCluster, layout: Layout) -> Locks {
    Locks::builder(c.client()).layout(layout).build()
}

fn show<T>(r: &Result<Option<T>>) -> String {
    match r {
        Ok(Some(_)) => "held".into(),
        Ok(None) => "busy".into(),
        Err(e) => format!("error: {e}"),
    }
}

/// The Curator-layout semaphore lists its own path after its lease is made: beside a native semaphore's permit, or a
/// kazoo-layout semaphore's lease, on that path it refuses (it held beside both: it counted only `P/leases`).
#[tokio::test(start_paused = true)]
async fn a_curator_semaphore_refuses_another_semaphore_on_its_path() {
    for other in [Layout::Native, Layout::Kazoo] {
        let c = MemCluster::new();
        let _held = locks(&c, other).semaphore("/p", 1).unwrap().acquire().await.unwrap();
        let r = locks(&c, Layout::Curator)
            .semaphore("/p", 1)
            .unwrap()
            .try_acquire()
            .await;
        assert!(
            matches!(r, Err(Error::ForeignLock { .. })),
            "beside a {other} semaphore: {}",
            show(&r)
        );
        // The lease is made under `/p/leases` by a procedure; the refusal names the semaphore's path, the one it is
        // held as (helper-84: the attempt keeps that path out of line since the twenty-first session).
        assert!(
            matches!(&r, Err(Error::ForeignLock { path, .. }) if path == "/p"),
            "beside a {other} semaphore: {}",
            show(&r)
        );
        assert_eq!(c.ephemerals().len(), 1, "the refused lease is gone");
    }
}

/// The kazoo-layout semaphore counts, then makes its lease, and lists again with the create: a native contender that
/// came between the count and the create is seen, and refused (both held: the native one had listed before the
/// lease was made, and the kazoo one had counted before the native node was).
#[tokio::test(start_paused = true)]
async fn a_kazoo_semaphore_racing_a_native_contender_never_holds_beside_it() {
    let mut both = Vec::new();
    for native_semaphore in [false, true] {
        for offset in 0..80u64 {
            let c = MemCluster::new();
            c.set_latency(Duration::from_millis(5));
            let kazoo = locks(&c, Layout::Kazoo).semaphore("/r", 1).unwrap();
            let native = locks(&c, Layout::Native);
            let k = tokio::spawn(async move { kazoo.acquire_timeout(Duration::from_secs(5)).await });
            tokio::time::sleep(Duration::from_millis(offset)).await;
            let n = tokio::spawn(async move {
                if native_semaphore {
                    let s = native.semaphore("/r", 1).unwrap();
                    s.acquire_timeout(Duration::from_secs(5)).await
                } else {
                    native.fair("/r").unwrap().acquire_timeout(Duration::from_secs(5)).await
                }
            });
            let (kr, nr) = (k.await.unwrap(), n.await.unwrap());
            if matches!(kr, Ok(Some(_))) && matches!(nr, Ok(Some(_))) {
                both.push((native_semaphore, offset, c.children("/r")));
            }
        }
    }
    assert!(
        both.is_empty(),
        "both held (native semaphore?, offset ms, children): {both:?}"
    );
}

/// A lock whose path has a lock path nested in it named `locks`, `leases` or by 32 hex digits holds: those names are
/// a peer semaphore's only when they hold leases, or are ephemeral (they were refused as foreign nodes). So does a
/// semaphore, but the Curator layout's, whose own mutex and leases are those nested paths.
#[tokio::test(start_paused = true)]
async fn nested_lock_paths_named_like_peer_semaphore_nodes_are_no_foreign_nodes() {
    let hex = "0123456789abcdef0123456789abcdef";
    let c = MemCluster::new();
    let l = locks(&c, Layout::Native);
    for (layout, inner) in [
        (Layout::Native, "/app/locks".to_owned()),
        (Layout::Native, "/app/leases".to_owned()),
        (Layout::Native, format!("/app/{hex}")),
        (Layout::Kazoo, format!("/app/{hex}")),
        (Layout::Curator, "/app/locks".to_owned()),
        (Layout::Curator, "/app/leases".to_owned()),
    ] {
        let _inner = l.fair(&inner).unwrap().acquire().await.unwrap();
        let outer = locks(&c, layout);
        let r = outer.fair("/app").unwrap().try_acquire().await;
        assert!(
            matches!(r, Ok(Some(_))),
            "{layout} fair at /app beside {inner}: {}",
            show(&r)
        );
        r.unwrap().unwrap().release().await.unwrap();
        let r = outer.semaphore("/app", 2).unwrap().try_acquire().await;
        // A Curator semaphore's own mutex and leases are at `/app/locks` and `/app/leases`: a native lock there is
        // foreign to it.
        let own_child = layout == Layout::Curator;
        assert_eq!(
            matches!(r, Err(Error::ForeignLock { .. })),
            own_child,
            "{layout} semaphore at /app beside {inner}: {}",
            show(&r)
        );
    }
}

/// `revoke_node` refuses names that are a lock path's rather than a holder's: `leases`, and a bare id that is not
/// ephemeral (it overwrote the count of a semaphore nested there).
#[tokio::test(start_paused = true)]
async fn revoke_node_never_overwrites_a_nested_semaphore() {
    let hex = "0123456789abcdef0123456789abcdef";
    let c = MemCluster::new();
    let l = locks(&c, Layout::Native);
    for name in ["leases".to_owned(), hex.to_owned()] {
        let nested = format!("/x/{name}");
        let _keep = l.semaphore(&nested, 2).unwrap().acquire().await.unwrap();
        let r = l.revoke_node("/x", &name).await;
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{name}: {r:?}");
        let again = l.semaphore(&nested, 2).unwrap().try_acquire().await;
        assert!(
            matches!(again, Ok(Some(_))),
            "the semaphore at {nested} afterwards: {}",
            show(&again)
        );
    }
    // A kazoo-layout semaphore's lease is a holder's node: it can be asked.
    let kazoo = locks(&c, Layout::Kazoo);
    let g = kazoo.semaphore("/k", 1).unwrap().acquire().await.unwrap();
    let name = g.node().rsplit('/').next().unwrap().to_owned();
    assert!(kazoo.revoke_node("/k", &name).await.unwrap());
    tokio::time::timeout(Duration::from_secs(1), g.revocation_requested())
        .await
        .expect("the lease's holder is asked")
        .unwrap();
}

/// A kazoo-layout semaphore that counts a Curator semaphore's empty `locks` and `leases` as full waits; when a Curator
/// lease then comes under `leases` (no deletion), it counts again within a second and refuses, instead of waiting for
/// the reaper (found by review: it waited 60 s, its mutex held, and a second kazoo client with it).
#[tokio::test(start_paused = true)]
async fn a_kazoo_semaphore_beside_a_curator_one_refuses_without_waiting_for_a_deletion() {
    let c = MemCluster::new();
    let before = locks(&c, Layout::Curator).semaphore("/r", 2).unwrap();
    before.acquire().await.unwrap().release().await.unwrap();
    let kazoo = locks(&c, Layout::Kazoo).semaphore("/r", 2).unwrap();
    let started = tokio::time::Instant::now();
    let k = tokio::spawn(async move { kazoo.acquire_timeout(Duration::from_secs(600)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let held = locks(&c, Layout::Curator)
        .semaphore("/r", 2)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let r = k.await.unwrap();
    assert!(matches!(r, Err(Error::ForeignLock { .. })), "{}", show(&r));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "it waited {:?}",
        started.elapsed()
    );
    held.release().await.unwrap();
}

/// Participants (and `zklock inspect`) list a peer semaphore's leases as its holders: kazoo's under the path,
/// Curator's as `leases/<lease>`. `revoke` asks the kazoo layout's holders, not Curator's (its semaphore has no
/// revocation).
#[tokio::test(start_paused = true)]
async fn participants_list_a_peer_semaphores_leases() {
    let c = MemCluster::new();
    for layout in [Layout::Kazoo, Layout::Curator] {
        let l = locks(&c, layout);
        let path = format!("/ps-{layout}");
        let sem = l.semaphore(&path, 3).unwrap();
        let held = [sem.acquire().await.unwrap(), sem.acquire().await.unwrap()];
        let p = l.participants(&path).await.unwrap();
        let mut names: Vec<String> = p.holders().map(|h| h.node.clone()).collect();
        names.sort();
        let mut want: Vec<String> = held
            .iter()
            .map(|g| g.node().strip_prefix(&format!("{path}/")).unwrap().to_owned())
            .collect();
        want.sort();
        assert_eq!(names, want, "{layout}");
        assert!(
            p.other_children.iter().all(|c| c != "leases"),
            "{layout}: {:?}",
            p.other_children
        );
        let asked = l.revoke(&path).await.unwrap();
        assert_eq!(asked.len(), if layout == Layout::Kazoo { 2 } else { 0 }, "{layout}");
    }
}

/// A path that exists with empty data (a lock's container, left behind) gets the first kazoo-layout semaphore's
/// count, so a second one with another count is refused there as on a fresh path (both held: the count was never
/// written; found by review).
#[tokio::test(start_paused = true)]
async fn a_kazoo_semaphore_writes_its_count_into_a_path_made_without_one() {
    let c = MemCluster::new();
    c.set_container_reap_delay(Duration::from_secs(3600));
    drop(locks(&c, Layout::Native).fair("/p").unwrap().acquire().await.unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(c.exists("/p"));
    let _one = locks(&c, Layout::Kazoo)
        .semaphore("/p", 1)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let r = locks(&c, Layout::Kazoo).semaphore("/p", 2).unwrap().try_acquire().await;
    assert!(
        matches!(
            r,
            Err(Error::PermitsMismatch {
                asked: 2,
                stored: Some(1),
                ..
            })
        ),
        "{}: {:?}",
        show(&r),
        c.children("/p")
    );
}

/// A peer semaphore's acquire dropped at every await point in turn (the count, the mutex's create and wait, the
/// lease's create and count, the mutex's release, the lease's confirmation), with a holder of the one permit behind
/// it or none: no mutex or lease node of the live session is left, and the permit is free again (the adversarial read
/// of the `Procedure` change asked where the mutex could be left between the lease's outcome and its release).
#[tokio::test(start_paused = true)]
async fn a_peer_semaphore_acquire_dropped_at_any_point_leaves_no_node() {
    for layout in [Layout::Curator, Layout::Kazoo] {
        for busy in [false, true] {
            let mut completed = false;
            // Bounded: past the number of polls a whole acquire takes, every drop point has been tried.
            for polls in 1..200 {
                let c = MemCluster::new();
                let other = locks(&c, layout);
                let held = if busy {
                    Some(other.semaphore("/p", 1).unwrap().acquire().await.unwrap())
                } else {
                    None
                };
                let ours = locks(&c, layout);
                let sem = ours.semaphore("/p", 1).unwrap();
                let mut acquire = Box::pin(sem.acquire());
                let mut got = None;
                for _ in 0..polls {
                    match futures::poll!(&mut acquire) {
                        std::task::Poll::Ready(r) => {
                            got = Some(r.unwrap());
                            break;
                        }
                        std::task::Poll::Pending => tokio::task::yield_now().await,
                    }
                }
                let whole = got.is_some();
                drop(acquire);
                drop(got);
                // The background deletes run; a session's own nodes are gone once they have.
                tokio::time::sleep(Duration::from_secs(2)).await;
                let mine: Vec<String> = c
                    .ephemerals()
                    .into_iter()
                    .filter(|(_, owner)| *owner == ours.backend().session_status().id)
                    .map(|(p, _)| p)
                    .collect();
                assert!(
                    mine.is_empty(),
                    "{layout}, busy {busy}, dropped after {polls} polls: left {mine:?}"
                );
                drop(held);
                tokio::time::sleep(Duration::from_secs(2)).await;
                let free = sem.try_acquire().await.unwrap();
                assert!(
                    free.is_some(),
                    "{layout}, busy {busy}, dropped after {polls} polls: the permit stays taken"
                );
                if whole {
                    completed = true;
                    break;
                }
            }
            assert!(
                completed || busy,
                "{layout}: a free acquire never completed within the polls tried"
            );
        }
    }
}

/// A kazoo-layout semaphore whose path holds no lease to watch, only a lock path nested there (`/s/jobs`, counted as a
/// lease, as kazoo counts it, but not watched: decision 0085), counts again every second; it returns at its deadline,
/// and learns its session's expiry at once, not at its next count (found by review, helper-115: up to a second late).
#[tokio::test(start_paused = true)]
async fn a_kazoo_semaphore_with_nothing_to_watch_sees_its_deadline_and_expiry_at_once() {
    let c = MemCluster::new();
    let client = c.client();
    let l = Locks::builder(client.clone()).layout(Layout::Kazoo).build();
    l.semaphore("/s", 1)
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let on = recipes_core::backend::BackendExt::current(&*client);
    on.create("/s/jobs", b"", recipes_core::backend::CreateMode::Persistent)
        .await
        .unwrap();
    let t = tokio::time::Instant::now();
    let r = l
        .semaphore("/s", 1)
        .unwrap()
        .acquire_timeout(Duration::from_millis(300))
        .await;
    assert!(matches!(r, Ok(None)), "{}", show(&r));
    assert!(t.elapsed() < Duration::from_millis(400), "{:?}", t.elapsed());
    let sem = l.semaphore("/s", 1).unwrap();
    let waiting = tokio::spawn(async move { sem.acquire().await.map(drop) });
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    client.expire_session();
    let t = tokio::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(r, Err(Error::SessionExpired)), "{r:?}");
    assert!(t.elapsed() < Duration::from_millis(100), "{:?}", t.elapsed());
    assert!(c.ephemerals().is_empty());
}

/// As above, the session expiring after the count's listing was answered and before the wait subscribes to the
/// session's state: the wait still learns it at once, not a second later (found by review, helper-116, whose test
/// this is: the change was taken as seen before the wait looked at it).
#[tokio::test(start_paused = true)]
async fn an_expiry_just_before_the_wait_with_nothing_to_watch_is_learnt_at_once() {
    use recipes_mem::NetEvent;
    let c = MemCluster::new();
    let ctl = c.controlled();
    let client = c.client();
    let l = Locks::builder(client.clone()).layout(Layout::Kazoo).build();
    let sem = l.semaphore("/s", 1).unwrap();
    let setup = tokio::spawn({
        let client = client.clone();
        async move {
            sem.acquire().await.unwrap().release().await.unwrap();
            let on = recipes_core::backend::BackendExt::current(&*client);
            on.create("/s/jobs", b"", recipes_core::backend::CreateMode::Persistent)
                .await
                .unwrap();
        }
    });
    while !setup.is_finished() {
        crate::support::run(&ctl).await;
    }
    let sid = client.session_id();
    let sem = l.semaphore("/s", 1).unwrap();
    let waiting = tokio::spawn(async move { sem.acquire().await.map(drop) });
    let reached = crate::support::run_until_applying(&ctl, sid, "apply list /s").await;
    assert!(reached, "the count's listing of /s");
    assert!(ctl.fire(NetEvent::Apply(sid)));
    while ctl.fire(NetEvent::Deliver(sid)) {}
    // The reply is the client's; the waiter has not run yet.
    client.expire_session();
    let t = tokio::time::Instant::now();
    while !waiting.is_finished() && t.elapsed() < Duration::from_secs(5) {
        crate::support::run(&ctl).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = waiting.await.unwrap();
    assert!(matches!(r, Err(Error::SessionExpired)), "{r:?}");
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "learnt {:?} after the expiry",
        t.elapsed()
    );
}
