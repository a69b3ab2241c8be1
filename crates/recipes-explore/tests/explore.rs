//! The explorer's public API, as an application's test would use it: each oracle shown finding what it exists to
//! find, and passing what is right.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_explore::{Builtin, Explorer, Fault, Process};

/// Each process adds one to a counter in the store: under the lock (with the token), or with no lock at all.
async fn add_one(p: Process, locked: bool) -> recipes_core::Result<()> {
    let guard = match locked {
        true => Some(p.track(p.locks().fair("/counter/lock")?.acquire().await?)),
        false => None,
    };
    let n: u32 = p.store().get("n").await.map_or(0, |v| v.parse().unwrap());
    match &guard {
        Some(g) => {
            if let Err(e) = p.store().put_fenced("n", (n + 1).to_string(), g.fencing_token()).await {
                p.note(e);
            }
        }
        None => p.store().put("n", (n + 1).to_string()).await,
    }
    match guard {
        Some(g) => g.release().await,
        None => Ok(()),
    }
}

fn counter_explorer() -> Explorer {
    Explorer::new("counter")
        .processes(2)
        .faults(0, &[])
        .check_at_end(|step| match step.store().value("n").as_deref() {
            Some("2") => Ok(()),
            other => Err(format!("lost update: the counter is {other:?} after two increments")),
        })
}

#[test]
fn a_check_at_the_end_finds_a_lost_update_and_the_lock_prevents_it() {
    let unlocked = counter_explorer().run(|p| add_one(p, false));
    println!("{unlocked}");
    let failure = unlocked.expect_failure();
    assert!(failure.message.contains("lost update"), "{failure}");
    // The trace says which process did what.
    assert!(
        failure.trace.iter().any(|l| l.contains("the store applies process")),
        "{failure}"
    );

    let locked = counter_explorer().run(|p| add_one(p, true));
    println!("{locked}");
    locked.assert_ok();
    assert!(locked.complete && locked.schedules > 1, "{locked}");
}

#[test]
fn a_failure_replays_from_its_choices_and_a_walk_from_its_seed() {
    let explorer = counter_explorer().random_walks(5, 500);
    let report = explorer.run(|p| add_one(p, false));
    let failure = report.expect_failure().clone();
    let seed = failure.seed.expect("a walk's failure names its seed");

    let (trace, violation) = explorer.replay(&failure.choices, |p| add_one(p, false));
    assert_eq!(violation.as_deref(), Some(failure.message.as_str()));
    assert_eq!(trace, failure.trace);

    let again = counter_explorer().random_walks(seed, 1).run(|p| add_one(p, false));
    assert_eq!(again.expect_failure().choices, failure.choices);
}

#[test]
fn a_panic_in_the_application_fails_the_schedule_with_its_message() {
    let report = Explorer::new("panics").faults(0, &[]).run(|p| async move {
        let guard = p.locks().fair("/p")?.acquire().await?;
        assert!(p.id() == 0, "process {} objects", p.id());
        guard.release().await
    });
    let failure = report.expect_failure();
    assert!(
        failure.message.contains("process 1 panicked: process 1 objects"),
        "{failure}"
    );
}

#[test]
fn the_one_holder_oracle_counts_valid_guards() {
    // Two readers share a read lock: right as shared holds, two holders when (wrongly) tracked as exclusive.
    let readers = |shared: bool| {
        move |p: Process| async move {
            let lock = p.locks().read_write("/rw")?.read();
            let guard = lock.acquire().await?;
            let guard = if shared { p.track_shared(guard) } else { p.track(guard) };
            tokio::time::sleep(Duration::from_secs(1)).await;
            guard.release().await
        }
    };
    let explorer = Explorer::new("readers").faults(0, &[]);
    explorer.run(readers(true)).assert_ok();
    let failure = explorer.run(readers(false)).expect_failure().clone();
    assert!(
        failure.message.contains("two holders of /rw with valid guards"),
        "{failure}"
    );
}

/// Takes the lock within 1 s, and holds it for 5: whoever comes second waits longer than the 1 s it allows itself.
async fn hold_five_seconds_within_one(p: Process) -> recipes_core::Result<()> {
    let lock = p.locks().fair("/d")?;
    let guard = p.within(Duration::from_secs(1), "acquire", lock.acquire()).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    guard.release().await
}

#[test]
fn a_missed_deadline_is_reported() {
    let explorer = Explorer::new("deadline").faults(0, &[]);
    let report = explorer.run(hold_five_seconds_within_one);
    let failure = report.expect_failure();
    assert!(failure.message.contains("acquire ran past its deadline"), "{failure}");
    // Switched off, the same program passes.
    explorer
        .without(Builtin::Deadlines)
        .run(hold_five_seconds_within_one)
        .assert_ok();
}

#[test]
fn a_node_left_by_a_live_session_is_reported() {
    let report = Explorer::new("leak").processes(1).faults(0, &[]).run(|p| async move {
        p.client()
            .current()
            .create("/leaked", b"", CreateMode::Ephemeral)
            .await
            .map(|_| ())
    });
    let failure = report.expect_failure();
    assert!(
        failure.message.contains("left behind by live sessions: [\"/leaked\"]"),
        "{failure}"
    );
}

#[test]
fn faults_are_explored_and_a_crash_stops_the_processs_tasks() {
    // Each process spawns a task that counts while it holds; a crash must stop it (the count stays where it was).
    let report = Explorer::new("crashes")
        .faults(1, &[Fault::Crash, Fault::Expire, Fault::Blip])
        .state(|_| Arc::new(AtomicUsize::new(0)))
        .check(|step| {
            let n = step.state().load(Ordering::SeqCst);
            if n > 2 {
                return Err(format!("{n} holds counted by two processes holding once each"));
            }
            Ok(())
        })
        .run(|p| async move {
            let counted = p.state().clone();
            let lock = p.locks().fair("/c")?;
            let task = p.spawn(async move {
                let guard = lock.acquire().await?;
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                guard.release().await
            });
            task.await.unwrap_or(Ok(()))
        });
    println!("{report}");
    report.assert_ok();
    assert!(report.complete && report.schedules > 20, "{report}");
}
