//! A tour of the lock recipes on the in-memory backend: `cargo run --example tour`.
//!
//! Several simulated processes (client sessions on one in-memory cluster) contend on each recipe; the tour prints
//! who holds what, reentrant counts, readers sharing, a session expiry with its lost signal, fencing tokens
//! checked by a store that rejects stale writers, and guarded operations under a lease.

#![allow(clippy::print_stdout, clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use recipes_core::protocol::contenders;
use recipes_core::{Layout, Locks, LostReason, OwnerToken, Recipe};
use recipes_mem::MemCluster;
use tokio::task::JoinSet;

/// A downstream store that accepts a write only with a fencing token at least as high as any it has seen.
#[derive(Default)]
struct FencedStore {
    highest: Mutex<u128>,
}

impl FencedStore {
    fn write(&self, token: u128, what: &str) -> bool {
        let mut highest = self.highest.lock().unwrap();
        let ok = token >= *highest;
        *highest = (*highest).max(token);
        println!(
            "    store: write {what:?} with token {token} -> {}",
            if ok { "accepted" } else { "REJECTED (stale token)" }
        );
        ok
    }
}

#[tokio::main]
async fn main() -> Result<(), recipes_core::Error> {
    let cluster = MemCluster::new(); // stands in for a ZooKeeper ensemble
    let procs: Vec<Locks> = (0..6).map(|_| Locks::new(cluster.client())).collect();
    let wakeups = |procs: &[Locks]| procs.iter().map(|l| l.metrics().wakeups).sum::<u64>();

    println!("== exclusive: one fixed node; every waiter wakes on each release (herd)");
    let first = procs[0].exclusive("/tour/exclusive")?.acquire().await?;
    println!("  worker 0 holds {}; workers 1-5 wait", first.node());
    let mut set = JoinSet::new();
    for (i, locks) in procs.iter().enumerate().skip(1) {
        let lock = locks.exclusive("/tour/exclusive")?;
        set.spawn(async move {
            let g = lock.acquire().await.unwrap();
            println!("  worker {i} holds {} (token {})", g.node(), g.fencing_token());
            tokio::time::sleep(Duration::from_millis(10)).await;
            g.release().await.unwrap();
        });
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let before = wakeups(&procs);
    first.release().await?;
    while set.join_next().await.is_some() {}
    let herd = wakeups(&procs) - before;
    println!("  wake-ups for 5 handoffs: {herd} (each release wakes every waiter left: 5 + 4 + 3 + 2 + 1)");

    println!("\n== fair: sequential nodes, FIFO, each waiter watches only its predecessor");
    let first = procs[0].fair("/tour/fair")?.acquire().await?;
    println!("  worker 0 holds {}; workers 1-5 queue behind it", first.node());
    let mut set = JoinSet::new();
    for (i, locks) in procs.iter().enumerate().skip(1) {
        let lock = locks.fair("/tour/fair")?;
        set.spawn(async move {
            let g = lock.acquire().await.unwrap();
            println!("  worker {i} holds {} (token {})", g.node(), g.fencing_token());
            tokio::time::sleep(Duration::from_millis(10)).await;
            g.release().await.unwrap();
        });
        tokio::time::sleep(Duration::from_millis(5)).await; // queue in order 1, 2, 3, 4, 5
    }
    // The queue in the order the lock is granted: by sequence number (the names start with attempt ids).
    let children = cluster.children("/tour/fair");
    let queue: Vec<String> = contenders(Layout::Native, &children)
        .into_iter()
        .map(|c| c.name.rsplit('-').next().unwrap_or_default().to_owned())
        .collect();
    println!("  queue, in order: {}", queue.join(" < "));
    let before = wakeups(&procs);
    first.release().await?;
    while set.join_next().await.is_some() {}
    let fair = wakeups(&procs) - before;
    println!("  wake-ups for 5 handoffs: {fair} (one per release, no herd; the exclusive lock took {herd})");

    println!("\n== cohorts: the tasks of one process share their place in line (fair lock, at most K holds)");
    let cohort = Locks::builder(cluster.client()).cohorts(3).build();
    let first = cohort.fair("/tour/cohort")?.acquire().await?;
    let mut set = JoinSet::new();
    for i in 1..=4 {
        let lock = cohort.fair("/tour/cohort")?;
        set.spawn(async move {
            let g = lock.acquire().await.unwrap();
            println!("  task {i} holds {} (token {})", g.node(), g.fencing_token());
            g.release().await.unwrap();
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let other = procs[1].fair("/tour/cohort")?;
    let other = tokio::spawn(async move {
        let g = other.acquire().await.unwrap();
        println!("  another process holds {} (token {})", g.node(), g.fencing_token());
        g.release().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    println!(
        "  task 0 holds {} (token {}); tasks 1-4 wait in the process",
        first.node(),
        first.fencing_token()
    );
    first.release().await?;
    while set.join_next().await.is_some() {}
    other.await.expect("the other process");
    println!("  one node held 3 times (2 passes, no request), then the other process, then the cohort's next node");

    println!("\n== reentrant: holds nest per owner (task, thread or explicit token)");
    let lock = procs[0]
        .reentrant("/tour/reentrant")?
        .with_owner(OwnerToken::new().into());
    let outer = lock.acquire().await?;
    let inner = lock.acquire().await?;
    let innermost = lock.acquire().await?;
    println!("  one node {} held {} times", innermost.node(), innermost.hold_count());
    let other = procs[1].reentrant("/tour/reentrant")?;
    println!(
        "  another process tries: {}",
        if other.try_acquire().await?.is_some() {
            "got it (BUG)"
        } else {
            "refused, as it must be"
        }
    );
    innermost.release().await?;
    inner.release().await?;
    println!("  after two releases the count is {}", outer.hold_count());
    outer.release().await?;

    println!("\n== read/write: readers share, a writer excludes everyone");
    let mut readers = Vec::new();
    for (i, locks) in procs.iter().enumerate().take(3) {
        let g = locks.read_write("/tour/rw")?.read().acquire().await?;
        println!("  reader {i} holds {}", g.node());
        readers.push(g);
    }
    println!("  {} readers hold the lock at once", readers.len());
    let writer = procs[3].read_write("/tour/rw")?.write();
    let w = tokio::spawn(async move {
        let g = writer.acquire().await.unwrap();
        println!("  writer holds {} (token {})", g.node(), g.fencing_token());
        g
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    println!("  writer is waiting: {}", !w.is_finished());
    for g in readers {
        g.release().await?;
    }
    w.await.unwrap().release().await?;

    println!("\n== session expiry: the lost signal, a waiter taking over, and fencing");
    let store = Arc::new(FencedStore::default());
    let victim = cluster.client();
    let victim_locks = Locks::new(victim.clone());
    let old = victim_locks.lock("/tour/payments", Recipe::Fair)?.acquire().await?;
    println!("  process A holds with token {}", old.fencing_token());
    store.write(old.fencing_token(), "A: debit 10");
    let waiter = procs[1].fair("/tour/payments")?;
    let b = tokio::spawn(async move { waiter.acquire().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(10)).await;
    victim.expire_session(); // as if A's process paused past its session timeout
    let why: LostReason = old.lost().await;
    println!("  A's lost() resolved: {why}");
    let new = b.await.unwrap();
    println!("  process B took over with token {}", new.fencing_token());
    store.write(new.fencing_token(), "B: debit 20");
    // A wakes up from its pause and, not having looked at lost(), tries to write: the store refuses.
    store.write(old.fencing_token(), "A: stale debit 10");
    drop(old);
    new.release().await?;

    println!("\n== leases and guarded operations: trust the lock only while its lease is provably valid");
    let flaky = cluster.client_with_timeout(Duration::from_secs(1));
    let flaky_locks = Locks::new(flaky.clone());
    let g = flaky_locks.fair("/tour/ledger")?.acquire().await?;
    let left = g
        .valid_until()
        .map(|t| t.saturating_duration_since(tokio::time::Instant::now()));
    println!("  lease valid for another {left:?} (session timeout 1 s, margin 20 %)");
    let balance = &std::sync::Mutex::new(100);
    let r = g
        .guarded(
            || async {
                Ok::<_, String>({
                    *balance.lock().unwrap() -= 10;
                    *balance.lock().unwrap()
                })
            },
            |_| async { *balance.lock().unwrap() += 10 },
        )
        .await;
    println!("  guarded debit with a valid lease: {r:?}");
    // The connection drops in the middle of the next operation, for longer than the lease.
    let f = flaky.clone();
    let r = g
        .guarded(
            || async move {
                *balance.lock().unwrap() -= 10;
                f.disconnect_for(Duration::from_millis(950));
                tokio::time::sleep(Duration::from_millis(850)).await; // a slow step, or a GC pause
                Ok::<_, String>(*balance.lock().unwrap())
            },
            |_| async {
                println!("    rollback: the lease ran out during the operation");
                *balance.lock().unwrap() += 10;
            },
        )
        .await;
    println!(
        "  guarded debit during a 0.95 s disconnection: {r:?}; balance {}",
        balance.lock().unwrap()
    );
    tokio::time::sleep(Duration::from_millis(150)).await; // the connection comes back within the session timeout
    println!(
        "  reconnected in time: is_valid() = {} (the session, and the lock, survived)",
        g.is_valid()
    );
    g.release().await?;

    println!("\n== closing: a process on its way out closes its session, and its locks pass on at once");
    let leaving = Locks::new(cluster.client());
    let held = leaving.fair("/tour/close")?.acquire().await?;
    let next = procs[1].fair("/tour/close")?;
    let waiting = tokio::spawn(async move { next.acquire().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let t0 = tokio::time::Instant::now();
    leaving.close().await; // with `held` still alive, as on an early return
    let got = waiting.await.unwrap();
    println!(
        "  the next process holds {} {:?} after the close (not after the session timeout); the old guard is valid: {}",
        got.node(),
        t0.elapsed(),
        held.is_valid()
    );
    got.release().await?;

    println!("\n== election: one leader among the processes, the term a fencing token, observers see who leads");
    let me = procs[0]
        .election("/tour/leader")?
        .candidate("proc-0")?
        .with_data(b"10.0.0.10:8080".to_vec())?;
    let other = procs[1].election("/tour/leader")?.candidate("proc-1")?;
    let leading = me.leadership().await?;
    let standing = tokio::spawn(async move { other.leadership().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let seen = procs[2].election("/tour/leader")?.leader().await?.expect("a leader");
    println!(
        "  process 2 sees {} lead (term {}, reach it at {})",
        seen.id,
        seen.term,
        String::from_utf8_lossy(&seen.data)
    );
    let term = leading.term();
    leading.resign().await?;
    let next = standing.await.unwrap();
    println!(
        "  proc-0 resigned: {} leads with term {} > {term}",
        next.id(),
        next.term()
    );
    next.resign().await?;

    println!("\n== counters of process 0: {:?}", procs[0].metrics());
    for locks in &procs {
        locks.close().await;
    }
    println!("tour finished");
    Ok(())
}
