//! The contract's container reaper: an emptied container goes some time after its last child, at a pass of a
//! reaper that runs on a clock of its own (ZooKeeper's `ContainerManager`, every `znode.container.checkIntervalMs`).

use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode, SessionRef};
use tokio::time::Instant;

use super::{containers, kept_containers};
use crate::harness::Harness;
use crate::util::{eventually, skip};

/// An empty container is deleted by the server some time after its last child goes, not at once (a recipe that
/// creates under it may find it gone later, or still there now).
pub async fn containers_are_reaped_later_not_at_once(h: &dyn Harness) {
    let path = h.path("reaped");
    let a = h.client().await;
    let on = a.locks.backend().current();
    // The reaper runs periodically; the check right after the delete could, rarely, coincide with a pass: a few
    // tries make that vanishingly unlikely.
    let mut stayed = false;
    for _ in 0..3 {
        containers(on, &path).await;
        let child = format!("{path}/c");
        on.create(&child, b"", CreateMode::Ephemeral).await.unwrap();
        on.delete(&child).await.unwrap();
        if on.get(&path).await.unwrap().is_some() {
            stayed = true;
            break;
        }
    }
    assert!(stayed, "an emptied container vanished at once, three times");
    eventually(h, "the emptied container is reaped", || async {
        matches!(on.get(&path).await, Ok(None))
    })
    .await;
}

/// The reaper deletes the containers emptied since its last pass at its next one, whenever each was emptied: a
/// container emptied just before a pass goes at once, one emptied just after it waits a whole interval. Four
/// containers emptied a quarter of an interval apart are reaped at one or two passes, so two of them wait times that
/// differ by a quarter of an interval. Found by review (helper-103): the in-memory backend reaped each container
/// exactly one interval after it was emptied, never soon after, which hid the race of a create right after a release
/// (one that failed a contract check on CI with `NoNode`).
pub async fn the_reaper_takes_emptied_containers_at_its_passes(h: &dyn Harness) {
    let name = "the_reaper_takes_emptied_containers_at_its_passes";
    let Some(every) = h.container_reap_delay() else {
        return skip(h, name, "a container reaper of a known interval");
    };
    let path = h.path("reaper-passes");
    let a = h.client().await;
    let on = a.locks.backend().current();
    let keep = kept_containers(on, &path).await;
    // A round whose deletes a stalled server or machine pushed out of their quarters proves nothing: another round.
    let mut waits = None;
    for round in 0..3 {
        waits = waits_of_a_round(h, on, &format!("{path}/r{round}"), every).await;
        if waits.is_some() {
            break;
        }
    }
    let waits = waits.expect("one of three rounds emptied its containers within their quarters of an interval");
    // By the next pass, give or take a pass that deletes many containers (6 ms each on ZooKeeper) and the polls.
    assert!(
        waits.iter().all(|w| *w <= every * 2),
        "every container reaped by the reaper's next pass: {waits:?}"
    );
    let (shortest, longest) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
    assert!(
        *longest - *shortest >= every / (2 * QUARTERS),
        "containers emptied apart are reaped together at a pass, not each an interval after it was emptied: {waits:?}"
    );
    on.delete(&keep).await.unwrap();
}

/// Containers emptied in one round, one in each quarter of the reaper's interval.
const QUARTERS: u32 = 4;

/// Empties a container under `parent` in each quarter of an interval, and waits until each is reaped: how long each
/// waited, or `None` when a delete left its quarter's first sixteenth (a stall: the waits would not tell).
async fn waits_of_a_round(h: &dyn Harness, on: SessionRef<'_>, parent: &str, every: Duration) -> Option<Vec<Duration>> {
    containers(on, parent).await;
    let names: Vec<String> = (0..QUARTERS).map(|i| format!("{parent}/c{i}")).collect();
    for c in &names {
        on.create(c, b"", CreateMode::Container).await.unwrap();
        on.create(&format!("{c}/x"), b"", CreateMode::Ephemeral).await.unwrap();
    }
    let start = Instant::now();
    let mut emptied = Vec::new();
    let mut stalled = false;
    for (i, c) in (0..QUARTERS).zip(&names) {
        let slot = start + every * i / QUARTERS;
        tokio::time::sleep_until(slot).await;
        on.delete(&format!("{c}/x")).await.unwrap();
        let at = Instant::now();
        stalled |= at - slot > every / (4 * QUARTERS);
        emptied.push(at);
    }
    // When each was first seen gone, to a tick.
    let mut gone: Vec<Option<Instant>> = vec![None; names.len()];
    let rounds = (every * 3).as_millis() / h.tick().as_millis().max(1) + 1;
    for _ in 0..rounds {
        for (c, gone) in names.iter().zip(gone.iter_mut()) {
            if gone.is_none() && on.get(c).await.unwrap().is_none() {
                *gone = Some(Instant::now());
            }
        }
        if gone.iter().all(Option::is_some) {
            break;
        }
        tokio::time::sleep(h.tick()).await;
    }
    let waits = (gone.iter().zip(&emptied))
        .map(|(gone, emptied)| gone.expect("every emptied container reaped within three intervals") - *emptied)
        .collect();
    (!stalled).then_some(waits)
}
