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
//! The fix: the write carries the guard's fencing token, and the store refuses a token below the highest it has
//! seen. Run it with `cargo run -p lock-recipes --features explore --example explore_late_write`.

#![allow(clippy::print_stdout)]

use std::time::Duration;

use lock_recipes::explore::{Explorer, Fault, Process};

/// One turn of the service; `fenced`: the write carries the fencing token.
async fn service(p: Process, fenced: bool) -> lock_recipes::Result<()> {
    let work = if p.id() == 0 {
        p.session_timeout() * 2
    } else {
        Duration::ZERO
    };
    let lock = p.locks().fair("/ledger/lock")?;
    let guard = p.track(lock.acquire().await?);
    let balance: i64 = p.store().get("balance").await.map_or(0, |v| v.parse().unwrap_or(0));
    p.note(format!("read balance {balance}, works for {work:?}"));
    tokio::time::sleep(work).await;
    let value = (balance + 10).to_string();
    if fenced {
        if let Err(refused) = p.store().put_fenced("balance", value, guard.fencing_token()).await {
            // The lock was lost while working: give the turn up, as a real service would retry it.
            p.note(refused);
        }
    } else {
        p.store().put("balance", value).await;
    }
    guard.release().await
}

fn explorer() -> Explorer {
    // Faults the service must survive: an expired session, a partition, a short disconnection, a crash, a delay.
    Explorer::new("ledger")
        .processes(2)
        .faults(1, Fault::USUAL)
        .paths(&["/ledger/lock"])
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
