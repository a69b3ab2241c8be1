//! The explorer finds a classic bug in a small service, and shows that the fix holds.
//!
//! Two processes keep a ledger's balance in a store, under one lock. Process 0 is a slow batch job: its work takes
//! longer than its session timeout. Process 1 is a quick request handler. Each takes the lock, reads the balance,
//! works, and writes the balance back.
//!
//! The bug: the write carries no fencing token. If the batch job is cut off from the coordination service during
//! its work, the server expires its session, the handler takes the lock and writes, and then the batch job's write
//! lands over the handler's: its lease had run out, and nothing told the store.
//!
//! The fix: the read and the write carry the guard's fencing token, and the store refuses a token below the highest
//! it has seen. The token on the write alone is not enough: a batch job that lost the lock could still write between
//! the handler's read and the handler's write, and the handler would write over the job's update (the explorer finds
//! that too: `check_at_end` below counts the updates). Run it with `cargo run -p lock-recipes --features explore --example explore_late_write`.

#![allow(clippy::print_stdout)]

use std::time::Duration;

use lock_recipes::explore::{Explorer, Fault, Process};

/// One turn of the service; `fenced`: the read and the write carry the fencing token.
async fn service(p: Process, fenced: bool) -> lock_recipes::Result<()> {
    let work = if p.id() == 0 {
        p.session_timeout() * 2
    } else {
        Duration::ZERO
    };
    let lock = p.locks().fair("/ledger/lock")?;
    let guard = p.track(lock.acquire().await?);
    let token = guard.fencing_token();
    let read = match fenced {
        true => p.store().get_fenced("balance", token).await,
        false => Ok(p.store().get("balance").await),
    };
    let written = match read {
        Ok(balance) => {
            let balance: i64 = balance.map_or(0, |v| v.parse().unwrap_or(0));
            p.note(format!("read balance {balance}, works for {work:?}"));
            tokio::time::sleep(work).await;
            let value = (balance + 10).to_string();
            if !fenced {
                p.store().put("balance", value).await;
                return guard.release().await;
            }
            p.store().put_fenced("balance", value, token).await
        }
        Err(refused) => Err(refused),
    };
    if let Err(refused) = written {
        // The lock was lost: give the turn up, as a real service would retry it.
        p.note(refused);
    }
    guard.release().await
}

fn explorer() -> Explorer {
    // Faults the service must survive: an expired session, a partition, a short disconnection, a crash, a delay.
    Explorer::new("ledger")
        .processes(2)
        .faults(1, Fault::USUAL)
        .paths(&["/ledger/lock"])
        // Every schedule of the fixed service: 57,572 of them, about 20 s of a core in a debug build (the explorer's
        // code is the example's, unoptimised). The default bound, 60 s of wall time, leaves a busy or slow machine
        // little room (40 s in a run of scripts/test beside its fault campaign).
        .time_limit(Duration::from_secs(600))
        // No update lost: the balance is 10 for each write the store accepted.
        .check_at_end(|step| {
            let accepted = step.store().writes().iter().filter(|w| w.accepted).count();
            let balance = step.store().value("balance").map_or(0, |v| v.parse().unwrap_or(0));
            match balance == 10 * accepted as i64 {
                true => Ok(()),
                false => Err(format!(
                    "lost update: balance {balance} after {accepted} accepted writes of +10"
                )),
            }
        })
}

fn main() {
    let buggy = explorer().run(|p| service(p, false));
    println!("without the token: {buggy}");
    let failure = buggy.expect_failure();
    println!("{failure}");
    assert!(failure.message.contains("had lost the lock"));

    let fixed = explorer().run(|p| service(p, true));
    println!("with the token: {fixed}");
    fixed.assert_ok();
    assert!(fixed.complete, "every schedule explored");
}
