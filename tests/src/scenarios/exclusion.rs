//! Mutual exclusion on every recipe, alone and mixed, and the basics every lock shares: paths (valid, invalid,
//! deep), guards (dropped, moved between tasks), children that are no lock nodes, the blocking API inside a runtime.

use std::sync::Arc;

use recipes_core::{BackendExt, BlockingLock, Error, Recipe};
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
    let mut set = JoinSet::new();
    for i in 0..8 {
        let c = h.client().await;
        let rw = c.locks.read_write(&path).unwrap();
        let occ = occ.clone();
        set.spawn(async move {
            for round in 0..4 {
                if (i + round) % 3 == 0 {
                    let g = rw.write().acquire().await.expect("write");
                    hold_exclusive(&occ, g, HOLD).await;
                } else {
                    let g = rw.read().acquire().await.expect("read");
                    occ.enter_shared();
                    tokio::time::sleep(HOLD * 2).await;
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
        .create(&foreign, b"", recipes_core::CreateMode::Ephemeral)
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
