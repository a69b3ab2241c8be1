//! The multi-lock: all or none, no deadlock between overlapping sets listed in opposite orders, mixed recipes, and
//! nothing left behind by a timeout, a cancellation or a failed release.

use recipes_core::backend::BackendExt;
use recipes_core::{Error, Recipe};
use tokio::task::JoinSet;

use super::HOLD;
use crate::harness::Harness;
use crate::util::{assert_pending, bounded, skip, wait_children, Occupancy};

/// A set with one busy member is not taken: a timed acquire gives up holding nothing and leaving no node on the free
/// members; once the member is free the whole set is taken, each member with its own token.
pub async fn multi_lock_all_or_none(h: &dyn Harness) {
    let (x, y, z) = (h.path("multi-x"), h.path("multi-y"), h.path("multi-z"));
    let (a, b) = (h.client().await, h.client().await);
    let busy = a.locks.fair(&y).unwrap().acquire().await.unwrap();
    let set = b
        .locks
        .multi([(&z, Recipe::Fair), (&x, Recipe::Write), (&y, Recipe::Fair)])
        .unwrap();
    assert!(set.try_acquire().await.unwrap().is_none());
    assert!(set.acquire_timeout(h.tick() * 3).await.unwrap().is_none());
    for (p, n) in [(&x, 0), (&y, 1), (&z, 0)] {
        wait_children(h, p, n).await;
    }
    // The others stay free meanwhile.
    let other = a
        .locks
        .fair(&z)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("z is free");
    other.release().await.unwrap();
    let mut waiting = tokio::spawn(async move { set.acquire().await });
    assert_pending(h, "the set waits for y", &mut waiting).await;
    busy.release().await.unwrap();
    let held = bounded(h, "the set is taken", waiting).await.unwrap().unwrap();
    assert_eq!(held.guards().len(), 3);
    assert!(held.is_valid());
    let paths: Vec<&str> = held.guards().iter().map(|g| g.path().as_str()).collect();
    let mut sorted = paths.clone();
    sorted.sort_unstable();
    assert_eq!(paths, sorted, "taken in the canonical order");
    assert!(held.guard(&x).unwrap().fencing_token() > 0);
    held.release().await.unwrap();
    for p in [&x, &y, &z] {
        wait_children(h, p, 0).await;
    }
}

/// Two multi-locks over the same members listed in opposite orders, contending many times: never a deadlock, never
/// two holders. (Curator's `InterProcessMultiLock` takes members in the caller's order and can deadlock here.)
pub async fn multi_lock_opposite_orders_never_deadlock(h: &dyn Harness) {
    let (p, q, r) = (h.path("multi-p"), h.path("multi-q"), h.path("multi-r"));
    let occ = Occupancy::new();
    let mut tasks = JoinSet::new();
    for i in 0..3 {
        let c = h.client().await;
        let members = match i {
            0 => [(&p, Recipe::Fair), (&q, Recipe::Write), (&r, Recipe::Fair)],
            1 => [(&r, Recipe::Fair), (&q, Recipe::Write), (&p, Recipe::Fair)],
            _ => [(&q, Recipe::Write), (&r, Recipe::Fair), (&p, Recipe::Fair)],
        };
        let set = c.locks.multi(members).unwrap();
        let occ = occ.clone();
        tasks.spawn(async move {
            for _ in 0..6 {
                let held = set.acquire().await.expect("acquire");
                occ.enter_exclusive(held.guards()[0].fencing_token());
                tokio::time::sleep(HOLD).await;
                occ.exit_exclusive();
                held.release().await.expect("release");
            }
            drop(c);
        });
    }
    bounded(h, "every set taken six times, without deadlock", async {
        while let Some(r) = tasks.join_next().await {
            r.expect("client task");
        }
    })
    .await;
    assert_eq!(occ.violations(), 0, "two holders of one set at once");
    assert_eq!(occ.entries(), 18);
    for path in [&p, &q, &r] {
        wait_children(h, path, 0).await;
    }
}

/// Members of different recipes: a set that reads one resource and writes another shares the first with readers and
/// excludes the second.
pub async fn multi_lock_mixed_recipes(h: &dyn Harness) {
    let (rates, account) = (h.path("multi-rates"), h.path("multi-account"));
    let (a, b) = (h.client().await, h.client().await);
    let held = a
        .locks
        .multi([(&rates, Recipe::Read), (&account, Recipe::Write)])
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let reader = b.locks.read_write(&rates).unwrap().read().try_acquire().await.unwrap();
    assert!(reader.is_some(), "a reader shares the read member");
    let writer = b.locks.read_write(&account).unwrap().write();
    assert!(
        writer.try_acquire().await.unwrap().is_none(),
        "the write member excludes"
    );
    let other = b
        .locks
        .multi([(&account, Recipe::Read), (&rates, Recipe::Read)])
        .unwrap();
    assert!(
        other.try_acquire().await.unwrap().is_none(),
        "a set reading the written member waits"
    );
    drop(reader);
    held.release().await.unwrap();
    let both = other.acquire().await.unwrap();
    both.release().await.unwrap();
    for p in [&rates, &account] {
        wait_children(h, p, 0).await;
    }
}

/// A cancelled acquire leaves no node on any member; a session that ends under a held set makes its release report
/// every member's failure; bad sets are refused before anything is sent.
pub async fn multi_lock_cancel_and_errors(h: &dyn Harness) {
    let (x, y) = (h.path("multi-cx"), h.path("multi-cy"));
    let (a, b) = (h.client().await, h.client().await);
    let busy = a.locks.fair(&y).unwrap().acquire().await.unwrap();
    let set = b.locks.multi([(&x, Recipe::Fair), (&y, Recipe::Fair)]).unwrap();
    for _ in 0..3 {
        let s = set.clone();
        let waiting = tokio::spawn(async move { s.acquire().await.map(|g| g.guards().len()) });
        wait_children(h, &y, 2).await;
        waiting.abort();
        let _ = waiting.await;
        wait_children(h, &x, 0).await;
        wait_children(h, &y, 1).await;
    }
    busy.release().await.unwrap();
    let held = set.acquire().await.unwrap();
    b.faults.expire_session().await;
    match held.release().await {
        Err(Error::ReleaseFailed { failures }) => assert_eq!(failures.len(), 2, "{failures:?}"),
        r => panic!("expected ReleaseFailed, got {r:?}"),
    }
    for p in [&x, &y] {
        wait_children(h, p, 0).await;
    }
    let none: [(&str, Recipe); 0] = [];
    assert!(matches!(a.locks.multi(none), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        a.locks.multi([(&x, Recipe::Read), (&x, Recipe::Write)]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.locks.multi([(&x, Recipe::Fair), (&y, Recipe::Semaphore)]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.locks.multi([("relative", Recipe::Fair)]),
        Err(Error::InvalidPath { .. })
    ));
}

/// A set's release deletes its members in one transaction where the backend has them; when one member's node was
/// deleted meanwhile (the transaction then deletes nothing), the others are still released, one by one, and only
/// the lost member is reported.
pub async fn multi_lock_release_reports_only_the_lost_member(h: &dyn Harness) {
    let paths = [h.path("multi-ra"), h.path("multi-rb"), h.path("multi-rc")];
    let (a, b) = (h.client().await, h.client().await);
    let set = a.locks.multi(paths.iter().map(|p| (p, Recipe::Fair))).unwrap();
    // Whole, many times: every node goes.
    for _ in 0..5 {
        set.acquire().await.unwrap().release().await.unwrap();
        for p in &paths {
            wait_children(h, p, 0).await;
        }
    }
    let held = set.acquire().await.unwrap();
    let lost = held.guards()[1].node().to_owned();
    b.locks.backend().current().delete(&lost).await.unwrap();
    match held.release().await {
        Err(Error::ReleaseFailed { failures }) => {
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert_eq!(failures[0].0, paths[1]);
        }
        r => panic!("expected ReleaseFailed, got {r:?}"),
    }
    for p in &paths {
        wait_children(h, p, 0).await;
    }
}

/// A multi-lock never hands out a member it has already lost: one member taken on a session that expires while
/// another member's first try is still cleaning up (that try then reports "busy", not the expiry), the busy member
/// later taken on the new session. Whatever the instant of the expiry (swept across the acquire's requests), the
/// acquire either fails or returns a set whose every member is valid on one session, and no other client holds a
/// member beside it.
pub async fn multi_lock_never_hands_out_a_lost_member(h: &dyn Harness) {
    if !h.capabilities().latency {
        return skip(h, "multi_lock_never_hands_out_a_lost_member", "request latency");
    }
    let latency = std::time::Duration::from_millis(50);
    let mut handed_out = 0;
    for k in 0..24u32 {
        let (free, busy_path) = (h.path(&format!("multi-la{k}")), h.path(&format!("multi-lb{k}")));
        let (m, other, thief) = (h.client().await, h.client().await, h.client().await);
        let busy = other.locks.fair(&busy_path).unwrap().acquire().await.unwrap();
        // The free member's path made (and left to the reaper), so that both first tries take the same round trips.
        make_path(&thief.locks, &free).await;
        h.set_latency(latency);
        let set = m
            .locks
            .multi([(&free, Recipe::Fair), (&busy_path, Recipe::Fair)])
            .unwrap();
        let mut task = tokio::spawn(async move { set.acquire().await });
        // Expire at an instant among the first tries' requests (each takes two latencies).
        tokio::time::sleep(latency * k / 3).await;
        m.faults.expire_session().await;
        // Whoever gets the free member now holds it, while the set waits for the busy one.
        let mut stolen = thief
            .locks
            .fair(&free)
            .unwrap()
            .acquire_timeout(latency * 20)
            .await
            .unwrap();
        let finished_while_stolen = task.is_finished();
        if finished_while_stolen {
            drop(busy);
        } else {
            busy.release().await.unwrap();
        }
        // With the free member still stolen, the set must not be handed out: a while for it to (wrongly) end, the
        // thief's guard held; then the thief lets go.
        let mut early = None;
        if !finished_while_stolen && stolen.is_some() {
            if let Ok(r) = tokio::time::timeout(latency * 10, &mut task).await {
                early = Some(r.unwrap());
            }
            assert!(
                !matches!(early, Some(Ok(_))),
                "k={k}: the set was handed out while another client holds {free}"
            );
        }
        if !finished_while_stolen {
            drop(stolen.take());
        }
        let got = match early {
            Some(r) => r,
            None => bounded(h, "the set's acquire ends", &mut task).await.unwrap(),
        };
        h.set_latency(std::time::Duration::ZERO);
        if let Ok(held) = got {
            handed_out += 1;
            let session = held.guards()[0].session_id();
            for g in held.guards() {
                assert!(g.is_valid(), "k={k}: a member handed out is not valid: {}", g.path());
                assert_eq!(g.session_id(), session, "k={k}: members on two sessions");
            }
            assert!(stolen.is_none(), "k={k}: another client holds {free} beside the set");
            held.release().await.unwrap();
        }
        drop(stolen);
        for p in [&free, &busy_path] {
            wait_children(h, p, 0).await;
        }
    }
    eprintln!("multi_lock_never_hands_out_a_lost_member: {handed_out} of 24 sets handed out");
}

/// A timed multi-lock keeps its deadline (plus the cleanup grace) however many members it lets go: one busy member
/// ahead of eight free ones in the canonical order, with 200 ms of one-way latency, so that the free members' first
/// tries hold and must all be let go again before the set waits.
pub async fn multi_lock_timeout_keeps_its_deadline(h: &dyn Harness) {
    if !h.capabilities().latency {
        return skip(h, "multi_lock_timeout_keeps_its_deadline", "request latency");
    }
    let paths: Vec<String> = (0..9).map(|i| h.path(&format!("multi-d{i}"))).collect();
    let (a, b) = (h.client().await, h.client().await);
    let busy = a.locks.fair(&paths[0]).unwrap().acquire().await.unwrap();
    let set = b.locks.multi(paths.iter().map(|p| (p, Recipe::Fair))).unwrap();
    // The paths made (and left to the reaper): the first tries take one round trip each, well within the deadline.
    for p in &paths[1..] {
        make_path(&a.locks, p).await;
    }
    h.set_latency(std::time::Duration::from_millis(200));
    let timeout = std::time::Duration::from_millis(1500);
    let start = tokio::time::Instant::now();
    let got = set.acquire_timeout(timeout).await.unwrap();
    let took = start.elapsed();
    eprintln!("multi_lock_timeout_keeps_its_deadline: took {took:?}");
    h.set_latency(std::time::Duration::ZERO);
    assert!(got.is_none(), "the busy member was taken");
    // The grace of the acquire's own cleanup (500 ms), and a millisecond of scheduling.
    let bound = timeout + std::time::Duration::from_millis(501);
    assert!(
        took <= bound,
        "acquire_timeout({timeout:?}) took {took:?}, more than {bound:?}"
    );
    busy.release().await.unwrap();
    for p in &paths {
        wait_children(h, p, 0).await;
    }
}

/// Makes a lock path (a fair lock taken and released), left to the container reaper.
async fn make_path(locks: &recipes_core::Locks, path: &str) {
    let g = locks.fair(path).unwrap().acquire().await.unwrap();
    g.release().await.unwrap();
}

/// A multi-lock whose session ends while it waits ends at once with the expiry, even when the member it waits for
/// began its acquire while the session was cut off (that acquire would go on to queue on the next session, behind
/// a holder that may hold for hours): the disconnection, past the session timeout, is swept across the acquire.
pub async fn multi_lock_ends_with_its_session(h: &dyn Harness) {
    if !h.capabilities().latency || !h.capabilities().disconnect {
        return skip(
            h,
            "multi_lock_ends_with_its_session",
            "request latency and disconnections",
        );
    }
    let latency = std::time::Duration::from_millis(50);
    let timeout = std::time::Duration::from_secs(2);
    for k in 0..12u32 {
        let (free, busy_path) = (h.path(&format!("multi-sa{k}")), h.path(&format!("multi-sb{k}")));
        let (m, other) = (h.client_with_timeout(timeout).await, h.client().await);
        let busy = other.locks.fair(&busy_path).unwrap().acquire().await.unwrap();
        make_path(&m.locks, &free).await;
        h.set_latency(latency);
        let set = m
            .locks
            .multi([(&free, Recipe::Fair), (&busy_path, Recipe::Fair)])
            .unwrap();
        let task = tokio::spawn(async move {
            let held = set.acquire().await?;
            let session = held.guards()[0].session_id();
            assert!(held.guards().iter().all(|g| g.is_valid() && g.session_id() == session));
            Ok::<_, Error>(held.guards().len())
        });
        tokio::time::sleep(latency * k / 2).await;
        m.faults.disconnect_for(timeout * 3).await;
        // While the busy member stays held, the set either ends with the expiry of the session that held its other
        // member, or (when nothing was held on that session) still waits, on the new session.
        let mut task = task;
        let ended = tokio::time::timeout(timeout * 8, &mut task).await;
        busy.release().await.unwrap();
        match ended {
            Ok(r) => assert!(
                matches!(r, Ok(Err(Error::SessionExpired))),
                "k={k}: expected SessionExpired, got {r:?}"
            ),
            Err(_) => {
                let r = bounded(h, "the set is taken once free", task).await.unwrap();
                let held = r.unwrap_or_else(|e| panic!("k={k}: the set waited on after its session ended: {e}"));
                assert_eq!(held, 2);
            }
        }
        h.set_latency(std::time::Duration::ZERO);
        drop(m);
        for p in [&free, &busy_path] {
            wait_children(h, p, 0).await;
        }
    }
}
