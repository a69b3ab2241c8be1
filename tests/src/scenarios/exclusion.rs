//! Mutual exclusion on every recipe, alone and mixed, and the basics every lock shares: paths (valid, invalid,
//! deep), guards (dropped, moved between tasks), children that are no lock nodes, the blocking API inside a runtime.

use std::sync::Arc;

use recipes_core::backend::BackendExt;
use recipes_core::{BlockingLock, Error, Recipe};
use tokio::task::JoinSet;

use super::{contend_exclusive, HOLD};
use crate::harness::Harness;
use crate::util::{bounded, hold_exclusive, wait_children, Occupancy};

/// Exclusive: many clients, never two holders.
pub async fn exclusive_mutual_exclusion(h: &dyn Harness) {
    contend_exclusive(h, Recipe::Exclusive, 6, 4).await;
}

/// Fair: many clients, never two holders.
pub async fn fair_mutual_exclusion(h: &dyn Harness) {
    contend_exclusive(h, Recipe::Fair, 6, 4).await;
}

/// Reentrant: many clients, each re-entering, never two holders.
pub async fn reentrant_mutual_exclusion(h: &dyn Harness) {
    contend_exclusive(h, Recipe::Reentrant, 6, 4).await;
}

/// Write: many writers, never two holders.
pub async fn write_mutual_exclusion(h: &dyn Harness) {
    contend_exclusive(h, Recipe::Write, 6, 4).await;
}

/// Read/write: readers and writers mixed; a writer never overlaps anyone, readers do overlap.
pub async fn read_write_mutual_exclusion(h: &dyn Harness) {
    let path = h.path("rw-mixed");
    let occ = Occupancy::new();
    // Every client is connected before any starts, and they start together: made one by one, the first rounds would
    // be staggered by a session's creation each, and readers that hold 10 ms might never meet on a slow machine.
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(h.client().await);
    }
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let tick = h.tick();
    let mut set = JoinSet::new();
    for (i, c) in clients.into_iter().enumerate() {
        let rw = c.locks.read_write(&path).unwrap();
        let (occ, start) = (occ.clone(), start.clone());
        set.spawn(async move {
            start.wait().await;
            for round in 0..4 {
                if (i + round) % 3 == 0 {
                    let g = rw.write().acquire().await.expect("write");
                    hold_exclusive(&occ, g, HOLD).await;
                } else {
                    let g = rw.read().acquire().await.expect("read");
                    occ.enter_shared();
                    tokio::time::sleep(HOLD * 2).await;
                    // A reader's first round stays on, 2 s at most, until another reader is in with it: a lock whose
                    // readers never share still fails the check below.
                    let t0 = tokio::time::Instant::now();
                    while round == 0 && occ.max_shared() < 2 && t0.elapsed() < std::time::Duration::from_secs(2) {
                        tokio::time::sleep(tick).await;
                    }
                    occ.exit_shared();
                    g.release().await.expect("release read");
                }
            }
            drop(c);
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("client task");
    }
    assert_eq!(occ.violations(), 0, "a writer overlapped another holder");
    assert_eq!(occ.entries(), 32);
    assert!(occ.max_shared() >= 2, "readers never shared the lock");
    wait_children(h, &path, 0).await;
}

/// Every recipe chosen by name at run time excludes other clients on the same path.
pub async fn every_recipe_by_name_excludes(h: &dyn Harness) {
    for name in ["exclusive", "fair", "reentrant", "write"] {
        let recipe: Recipe = name.parse().unwrap();
        let path = h.path(&format!("by-name-{name}"));
        let (a, b) = (h.client().await, h.client().await);
        let la = a.locks.lock(&path, recipe).unwrap();
        let lb = b.locks.lock(&path, recipe).unwrap();
        assert_eq!(la.recipe(), recipe);
        let g = la.acquire().await.unwrap();
        assert!(
            lb.try_acquire().await.unwrap().is_none(),
            "{name}: second client got a held lock"
        );
        g.release().await.unwrap();
        let g = bounded(h, "acquire after release", lb.acquire()).await.unwrap();
        g.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// Many paths locked at once by many clients stay independent and exclusive.
pub async fn many_paths_at_once(h: &dyn Harness) {
    let mut set = JoinSet::new();
    let mut occs = Vec::new();
    for p in 0..12 {
        let path = h.path(&format!("many-{p}"));
        let occ = Occupancy::new();
        occs.push((path.clone(), occ.clone()));
        for _ in 0..3 {
            let c = h.client().await;
            let lock = c
                .locks
                .lock(&path, if p % 2 == 0 { Recipe::Fair } else { Recipe::Exclusive })
                .unwrap();
            let occ = occ.clone();
            set.spawn(async move {
                for _ in 0..3 {
                    let g = lock.acquire().await.unwrap();
                    hold_exclusive(&occ, g, HOLD).await;
                }
                drop(c);
            });
        }
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    for (path, occ) in occs {
        assert_eq!(occ.violations(), 0, "{path}");
        assert_eq!(occ.entries(), 9);
        wait_children(h, &path, 0).await;
    }
}

/// Readers and writers of six clients contend; the recorded history passes the checker (exclusion, token order,
/// progress of every client).
pub async fn history_checked_mixed_contention(h: &dyn Harness) {
    use crate::history::{check, Event, Mode};
    let path = h.path("history-mixed");
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let t0 = tokio::time::Instant::now();
    let mut set = JoinSet::new();
    for client in 0..6usize {
        let c = h.client().await;
        let rw = c.locks.read_write(&path).unwrap();
        let events = events.clone();
        set.spawn(async move {
            for round in 0..5 {
                let write = (client + round) % 3 == 0;
                let g = if write {
                    rw.write().acquire().await
                } else {
                    rw.read().acquire().await
                }
                .unwrap();
                let mode = if write { Mode::Exclusive } else { Mode::Shared };
                let at = || (tokio::time::Instant::now() - t0).as_nanos() as u64;
                events.lock().unwrap().push(Event::Acquired {
                    at: at(),
                    client,
                    token: g.fencing_token(),
                    mode,
                });
                tokio::time::sleep(HOLD).await;
                events.lock().unwrap().push(Event::Released { at: at(), client });
                g.release().await.unwrap();
            }
            drop(c);
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    let events = events.lock().unwrap().clone();
    assert_eq!(events.len(), 60);
    let violations = check(&events, &(0..6).collect::<Vec<_>>());
    assert!(violations.is_empty(), "{violations:?}");
    wait_children(h, &path, 0).await;
}

/// Invalid paths and unknown recipe names are typed errors, for every recipe.
pub async fn bad_paths_rejected(h: &dyn Harness) {
    let a = h.client().await;
    let long = format!("/{}", "x".repeat(2000));
    for bad in [
        "",
        "relative",
        "/",
        "/trailing/",
        "/a//b",
        "/a/./b",
        "/a/../b",
        "/nul\0byte",
        "/zookeeper/x",
        long.as_str(),
    ] {
        for recipe in Recipe::ALL {
            match a.locks.lock(bad, recipe) {
                Err(Error::InvalidPath { .. }) => {}
                other => panic!("{recipe} accepted {bad:?}: {other:?}"),
            }
        }
        assert!(matches!(a.locks.fair(bad), Err(Error::InvalidPath { .. })));
        assert!(matches!(a.locks.read_write(bad), Err(Error::InvalidPath { .. })));
    }
    let e = "mutex".parse::<Recipe>().unwrap_err();
    assert!(matches!(e, Error::UnknownRecipe(_)));
    assert!(e.to_string().contains("mutex"));
}

/// Dropping a guard releases the lock in the background.
pub async fn release_on_drop_frees_lock(h: &dyn Harness) {
    let path = h.path("drop-release");
    let (a, b) = (h.client().await, h.client().await);
    for recipe in [Recipe::Fair, Recipe::Exclusive, Recipe::Reentrant, Recipe::Write] {
        let g = a.locks.lock(&path, recipe).unwrap().acquire().await.unwrap();
        drop(g);
        let gb = bounded(h, "acquire after drop", b.locks.lock(&path, recipe).unwrap().acquire())
            .await
            .unwrap();
        gb.release().await.unwrap();
        wait_children(h, &path, 0).await;
    }
}

/// A guard moves to another task and is released there.
pub async fn guard_moves_between_tasks(h: &dyn Harness) {
    let path = h.path("guard-moves");
    let a = h.client().await;
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let r = tokio::spawn(async move {
        assert!(g.fencing_token() > 0);
        g.release().await
    })
    .await
    .unwrap();
    assert!(r.is_ok());
    wait_children(h, &path, 0).await;
}

/// A deep lock path is created on demand and its container vanishes after the last release.
pub async fn deep_path_created_and_emptied(h: &dyn Harness) {
    let path = format!("{}/deep/er/still", h.path("deep"));
    let a = h.client().await;
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    assert!(g.node().starts_with(&format!("{path}/L-")));
    assert_eq!(h.children(&path).await.len(), 1);
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// Children the layout does not recognise are ignored, and left alone.
pub async fn unknown_children_ignored(h: &dyn Harness) {
    let path = h.path("foreign-children");
    let a = h.client().await;
    let g = a.locks.fair(&path).unwrap().acquire().await.unwrap();
    let backend = a.locks.backend().clone();
    let foreign = format!("{path}/not-a-lock-0000000001");
    backend
        .current()
        .create(&foreign, b"", recipes_core::backend::CreateMode::Ephemeral)
        .await
        .unwrap();
    g.release().await.unwrap();
    let g = bounded(
        h,
        "acquire beside foreign child",
        a.locks.fair(&path).unwrap().acquire(),
    )
    .await
    .unwrap();
    g.release().await.unwrap();
    assert_eq!(h.children(&path).await, vec!["not-a-lock-0000000001".to_string()]);
    backend.current().delete(&foreign).await.unwrap();
    wait_children(h, &path, 0).await;
}

/// The blocking API refuses to run inside an async runtime instead of stalling it.
pub async fn blocking_api_refused_inside_runtime(h: &dyn Harness) {
    let a = h.client().await;
    let lock = a.locks.fair(h.path("blocking-in-async")).unwrap();
    assert!(matches!(lock.acquire_blocking(), Err(Error::BlockingInAsync)));
    assert!(matches!(lock.try_acquire_blocking(), Err(Error::BlockingInAsync)));
}

/// A framework's configuration names resources: `read/write` lets each call site choose its side, a recipe serves
/// every call site alike; `with_owner` reaches through `Arc<dyn Lock>`.
pub async fn configured_resources_and_owners(h: &dyn Harness) {
    use recipes_core::{Access, LockKind, OwnerToken};
    let path = h.path("resource-rw");
    let (a, b, c) = (h.client().await, h.client().await, h.client().await);
    let ra = a.locks.resource(&path, "read/write".parse().unwrap()).unwrap();
    let rb = b.locks.resource(&path, "rw".parse().unwrap()).unwrap();
    // Owned recipes count holds per task: exclusive access from a task that holds shared access would be an
    // upgrade (refused), so the exclusive call site is another client's.
    let rc = c.locks.resource(&path, "read-write".parse().unwrap()).unwrap();
    assert_eq!(ra.kind(), LockKind::ReadWrite);
    let shared_a = ra.lock(Access::Shared).acquire().await.unwrap();
    let shared_b = rb.lock(Access::Shared).try_acquire().await.unwrap();
    assert!(
        shared_b.is_some(),
        "two shared call sites of a read/write resource excluded each other"
    );
    assert!(
        rc.lock(Access::Exclusive).try_acquire().await.unwrap().is_none(),
        "exclusive access beside shared holders"
    );
    drop(shared_b);
    shared_a.release().await.unwrap();
    let excl = bounded(h, "exclusive access", rc.lock(Access::Exclusive).acquire())
        .await
        .unwrap();
    assert!(
        ra.lock(Access::Shared).try_acquire().await.unwrap().is_none(),
        "shared access beside a writer"
    );
    excl.release().await.unwrap();
    wait_children(h, &path, 0).await;

    // A recipe resource is the one lock for every access.
    let path = h.path("resource-fair");
    let fa = a.locks.resource(&path, "fair".parse().unwrap()).unwrap();
    let fb = b.locks.resource(&path, "fair".parse().unwrap()).unwrap();
    let g = fa.lock(Access::Shared).acquire().await.unwrap();
    assert!(
        fb.lock(Access::Shared).try_acquire().await.unwrap().is_none(),
        "a fair resource shared"
    );
    // with_owner on a recipe without owners is the same lock: it does not nest.
    let same = fa.lock(Access::Exclusive).with_owner(OwnerToken::new().into());
    assert!(
        same.try_acquire().await.unwrap().is_none(),
        "with_owner made a fair lock reentrant"
    );
    g.release().await.unwrap();

    // Through Arc<dyn Lock>, one owner's holds nest across tasks; another owner contends.
    let path = h.path("resource-owner");
    let lock: Arc<dyn recipes_core::Lock> = a.locks.lock(&path, Recipe::Reentrant).unwrap();
    let job = lock.with_owner(OwnerToken::new().into());
    let outer = job.acquire().await.unwrap();
    let job2 = job.clone();
    let inner = tokio::spawn(async move { job2.acquire().await.unwrap() })
        .await
        .unwrap();
    assert_eq!(inner.hold_count(), 2);
    let other = lock.with_owner(OwnerToken::new().into());
    assert!(
        other.try_acquire().await.unwrap().is_none(),
        "another owner entered a held reentrant lock"
    );
    drop(inner);
    outer.release().await.unwrap();
    let g = bounded(h, "other owner", other.acquire()).await.unwrap();
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
    assert!("fiar".parse::<LockKind>().is_err());
    // A "read" resource would let call sites asking for exclusive access in together: refused.
    let e = a.locks.resource(&path, "read".parse().unwrap()).unwrap_err();
    assert!(
        matches!(&e, recipes_core::Error::InvalidArgument(m) if m.contains("read/write")),
        "{e}"
    );
}

/// `Locks::participants` lists the holders and the waiters of a path in grant order, with the node each waiter
/// watches and each holder's fencing token.
pub async fn participants_list_holders_and_waiters(h: &dyn Harness) {
    use recipes_core::{NodeKind, Role};
    let path = h.path("participants");
    let (a, b, c) = (h.client().await, h.client().await, h.client().await);
    assert!(
        a.locks.participants(&path).await.unwrap().nodes.is_empty(),
        "participants of a path never locked"
    );
    let r1 = a.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let r2 = b.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let writer = c.locks.read_write(&path).unwrap().write();
    let waiting = tokio::spawn(async move { writer.acquire().await });
    wait_children(h, &path, 3).await;
    let p = c.locks.participants(&path).await.unwrap();
    let name = |g: &recipes_core::LockGuard| g.node().rsplit('/').next().unwrap().to_owned();
    let holders: Vec<_> = p.holders().collect();
    assert_eq!(holders.len(), 2, "{p:?}");
    assert_eq!(holders[0].node, name(&r1));
    assert_eq!(u128::from(holders[0].czxid as u64) << 32, r1.fencing_token());
    assert_eq!(holders[1].node, name(&r2));
    assert!(holders.iter().all(|n| n.kind == Some(NodeKind::Read)));
    let waiters: Vec<_> = p.waiters().collect();
    assert_eq!(waiters.len(), 1, "{p:?}");
    assert_eq!(waiters[0].kind, Some(NodeKind::Write));
    assert_eq!(waiters[0].role, Role::Waiter { on: name(&r2) }, "{p:?}");
    assert!(p.other_children.is_empty());
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = bounded(h, "writer after readers", waiting).await.unwrap().unwrap();
    let p = a.locks.participants(&path).await.unwrap();
    assert_eq!(p.holders().map(|n| n.node.clone()).collect::<Vec<_>>(), [name(&w)]);
    w.release().await.unwrap();

    // The exclusive recipe's fixed node is a holder of no kind.
    let path = h.path("participants-exclusive");
    let g = a.locks.exclusive(&path).unwrap().acquire().await.unwrap();
    let p = b.locks.participants(&path).await.unwrap();
    assert_eq!(p.nodes.len(), 1);
    assert_eq!((p.nodes[0].kind, &p.nodes[0].role), (None, &Role::Holder));
    assert_eq!(u128::from(p.nodes[0].czxid as u64) << 32, g.fencing_token());
    g.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A lock path nested in another under the exclusive recipe's node name (`P/lock`) does not block `P`: its child
/// `lock` is confirmed with the server (a persistent path, not the exclusive recipe's ephemeral node) before any
/// recipe at `P` refuses. A multi-lock that lists `P/lock` beside an exclusive `P` is refused as an argument error.
pub async fn nested_path_named_lock_does_not_block_its_parent(h: &dyn Harness) {
    let (parent, nested) = (h.path("nested-parent"), h.path("nested-parent/lock"));
    let (a, b) = (h.client().await, h.client().await);
    let inner = a.locks.fair(&nested).unwrap().acquire().await.unwrap();
    for recipe in [Recipe::Fair, Recipe::Reentrant, Recipe::Write, Recipe::Read] {
        let g = bounded(
            h,
            "the parent is taken",
            b.locks.lock(&parent, recipe).unwrap().try_acquire(),
        )
        .await
        .unwrap_or_else(|e| panic!("{recipe} at {parent} beside {nested}: {e}"));
        let g = g.unwrap_or_else(|| panic!("{recipe} at {parent} is free"));
        g.release().await.unwrap();
    }
    inner.release().await.unwrap();
    // The nested path's container stays until the reaper: the parent is not blocked by it either.
    let g = b.locks.fair(&parent).unwrap().try_acquire().await.unwrap();
    g.expect("free beside an emptied nested path").release().await.unwrap();
    match b.locks.multi([(&parent, Recipe::Exclusive), (&nested, Recipe::Fair)]) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(&nested), "{m}"),
        r => panic!("expected InvalidArgument, got {r:?}"),
    }
    let deeper = format!("{nested}/deeper");
    assert!(matches!(
        b.locks.multi([(&deeper, Recipe::Fair), (&parent, Recipe::Exclusive)]),
        Err(Error::InvalidArgument(_))
    ));
    wait_children(h, &nested, 0).await;
}
