//! The processes a command leaves: finding every descendant of a process through `/proc`, signalling them all, the
//! clock both zklock and the watchdog read, and tying a child's life to its parent's. Used by zklock and by its
//! watchdog alike.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use recipes_core::mutants::{is_active, Mutant};

/// How many rounds of SIGKILL a `kill` makes against processes that fork as fast as they are killed.
const KILL_ROUNDS: u32 = 200;
/// Milliseconds of `CLOCK_BOOTTIME`: a clock every process reads alike, which also counts time the machine spent
/// suspended (as the server's clock does).
pub fn boottime_ms() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME) {
        Ok(ts) => ts.tv_sec() as u64 * 1000 + ts.tv_nsec() as u64 / 1_000_000,
        Err(_) => 0,
    }
}

/// The processes whose ancestry leads to `root` (not `root` itself, not zombies), read from `/proc`.
pub fn descendants(root: i32) -> Vec<i32> {
    let mut parent_of: Vec<(i32, i32)> = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...; comm may contain spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next();
        let Some(ppid) = f.next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if state != Some("Z") {
            parent_of.push((pid, ppid));
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (child, _) in parent_of.iter().filter(|(_, pp)| *pp == p) {
            if !out.contains(child) {
                out.push(*child);
                frontier.push(*child);
            }
        }
    }
    out
}

/// The parent of `pid`, from `/proc`.
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Sends `sig` to every descendant of `root`; with SIGKILL, again and again until none is left (each one is stopped
/// first, so that none can fork between two looks).
pub fn signal_all(root: i32, sig: Signal) {
    if is_active(Mutant::GroupOnlyStop) {
        // The old, wrong rule: only the process groups led by `root`'s own children (the command's group).
        for p in descendants(root).into_iter().filter(|p| parent(*p) == Some(root)) {
            let _ = kill(Pid::from_raw(-p), sig);
        }
        return;
    }
    if sig != Signal::SIGKILL {
        for p in descendants(root) {
            let _ = kill(Pid::from_raw(p), sig);
        }
        return;
    }
    // Done after two empty looks in a row: one look at /proc is not atomic, and may miss a child listed before its
    // parent died.
    let mut empty = 0;
    for _ in 0..KILL_ROUNDS {
        let all = descendants(root);
        if all.is_empty() {
            empty += 1;
            if empty == 2 {
                return;
            }
            continue;
        }
        empty = 0;
        for p in &all {
            let _ = kill(Pid::from_raw(*p), Signal::SIGSTOP);
        }
        for p in &all {
            let _ = kill(Pid::from_raw(*p), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// If its parent dies (even by SIGKILL, which it cannot handle), the command is killed too (Linux `PR_SET_PDEATHSIG`):
/// it must not go on working under a lock nobody watches any more. This reaches the command itself; the watchdog stops
/// the processes it started.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn stop_with_parent(cmd: &mut std::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before `exec`. It makes only async-signal-safe system calls
    // (prctl, getppid) and allocates nothing (the error is a raw OS error), as `pre_exec` requires.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            if nix::unistd::getppid() != parent {
                // zklock died between the fork and the prctl: do not start the command at all.
                return Err(std::io::Error::from_raw_os_error(nix::errno::Errno::ESRCH as i32));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn stop_with_parent(_cmd: &mut std::process::Command) {}
