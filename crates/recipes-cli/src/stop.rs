//! Stopping the command and everything it started: when (the kill deadline, from the lease), and how (SIGTERM, then
//! SIGKILL, through the watchdog and by zklock itself).

use std::time::Duration;

use nix::sys::signal::Signal;
use recipes_core::mutants::{is_active, Mutant};
use recipes_core::{LockGuard, LostReason};
use tokio::time::Instant;

use crate::watchdog::{Report, Watchdog};

/// The longest grace a command gets between SIGTERM and SIGKILL, when the session's margin allows it.
pub const MAX_TERM_GRACE: Duration = Duration::from_secs(3);
/// How long zklock waits for the last process to be gone after SIGKILL before it gives up waiting.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// When everything the command started must be dead: `grace` after the lease ends, which leaves half the margin before
/// the earliest moment the server may expire the session; at once when the lock is already lost to a deletion or an
/// expiry (another client may hold it now), or when that moment has passed.
pub fn kill_deadline(guard: &LockGuard, grace: Duration, reason: Option<LostReason>) -> Instant {
    let now = Instant::now();
    if is_active(Mutant::FixedTermGrace) {
        return now + MAX_TERM_GRACE;
    }
    match reason {
        Some(LostReason::NodeDeleted | LostReason::SessionExpired) => now,
        _ => guard.valid_until().map_or(now, |t| t + grace),
    }
}

/// Stops every process the command started: SIGTERM now, SIGKILL at `kill_at` (at once when that has passed), and
/// waits until none is left. A loss of the lock meanwhile brings the SIGKILL forward to what the loss allows. Returns
/// whether none is left.
pub async fn stop_all(watchdog: &mut Watchdog, guard: &LockGuard, grace: Duration, mut kill_at: Instant) -> bool {
    if Instant::now() < kill_at {
        watchdog.order("term").await;
        let mut watching_loss = true;
        loop {
            tokio::select! {
                biased;
                () = all_gone(watchdog) => return true,
                reason = guard.lost(), if watching_loss => {
                    watching_loss = false;
                    kill_at = kill_at.min(kill_deadline(guard, grace, Some(reason)));
                }
                () = tokio::time::sleep_until(kill_at) => break,
            }
        }
    }
    // Not only through the watchdog, which may be stopped: zklock kills the command's processes itself, first.
    watchdog.kill_tree();
    watchdog.order("kill").await;
    tokio::time::timeout(KILL_WAIT, all_gone(watchdog)).await.is_ok()
}

/// Resolves when the watchdog reports that no process of the command is left (or dies, leaving its orphans to
/// zklock, which kills them).
///
/// # Cancel safety
/// Cancel safe as [`Watchdog::next`]: a report is consumed only when returned.
async fn all_gone(watchdog: &mut Watchdog) {
    loop {
        match watchdog.next().await {
            Report::Gone => return,
            Report::Died => {
                kill_own_descendants();
                return;
            }
            Report::Exited(_) => {}
        }
    }
}

/// SIGKILL to every descendant of zklock (the watchdog's orphans, re-parented to zklock).
pub fn kill_own_descendants() {
    crate::procs::signal_all(std::process::id() as i32, Signal::SIGKILL);
}
