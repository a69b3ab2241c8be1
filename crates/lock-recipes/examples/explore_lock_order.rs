//! The explorer finds a deadlock between two locks taken in opposite orders, and shows that the multi-lock does not
//! have it.
//!
//! A transfer between two accounts locks both. Process 0 moves money from A to B and locks A, then B; process 1
//! moves money from B to A and locks B, then A. When each holds its first lock, neither gets its second: both wait
//! forever. A multi-lock takes every lock of the set in one canonical order, whatever order the caller names them
//! in. Run it with `cargo run -p lock-recipes --features explore --example explore_lock_order`.

#![allow(clippy::print_stdout)]

use lock_recipes::explore::{Explorer, Process};
use lock_recipes::Recipe;

const A: &str = "/accounts/a";
const B: &str = "/accounts/b";

/// The accounts process `p` moves money between, in the order it names them.
fn accounts(p: &Process) -> [&'static str; 2] {
    if p.id() == 0 {
        [A, B]
    } else {
        [B, A]
    }
}

/// The bug: one lock, then the other.
async fn transfer_one_by_one(p: Process) -> lock_recipes::Result<()> {
    let [from, to] = accounts(&p);
    let first = p.track(p.locks().fair(from)?.acquire().await?);
    let second = p.track(p.locks().fair(to)?.acquire().await?);
    p.note(format!("moves money from {from} to {to}"));
    second.release().await?;
    first.release().await
}

/// The fix: both at once, with the multi-lock.
async fn transfer_with_multi_lock(p: Process) -> lock_recipes::Result<()> {
    let [from, to] = accounts(&p);
    let both = p.locks().multi([(from, Recipe::Fair), (to, Recipe::Fair)])?;
    let guard = p.track(both.acquire().await?);
    p.note(format!("moves money from {from} to {to}"));
    guard.release().await
}

fn main() {
    // No faults: the deadlock needs none.
    let explorer = Explorer::new("transfers").processes(2).faults(0, &[]).paths(&[A, B]);

    let buggy = explorer.run(transfer_one_by_one);
    println!("one lock after the other: {buggy}");
    let failure = buggy.expect_failure();
    println!("{failure}");
    assert!(failure.message.contains("never finished"));

    let fixed = explorer.run(transfer_with_multi_lock);
    println!("with the multi-lock: {fixed}");
    fixed.assert_ok();
    assert!(fixed.complete, "every schedule explored");
}
