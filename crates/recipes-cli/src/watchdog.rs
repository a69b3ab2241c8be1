//! The watchdog: a small process that outlives zklock only to stop the command's whole process group when zklock
//! dies without finishing (SIGKILL, a crash, the OOM killer).
//!
//! `PR_SET_PDEATHSIG` reaches the command itself but not the processes it started (`sh -c 'worker & wait'`), and
//! those would go on working under a lock whose session nobody keeps any more: once the session expires another
//! client acquires, and two work at once. zklock therefore starts this copy of itself before the command and keeps
//! the write end of a pipe to it. The watchdog learns the command's process group through the pipe and waits for
//! the pipe to close. When zklock finished normally it says `done` first and the watchdog exits quietly; when the
//! pipe closes without `done`, zklock died, and the watchdog kills the group at once, long before the session
//! (and so the lock) can pass to anyone else.
//!
//! The watchdog runs in a process group of its own, so that signals meant for zklock's group (Ctrl-C at a terminal)
//! do not stop it, and is named `zklock-watchdog` so that `pkill zklock` leaves it alone.

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The hidden first argument that turns zklock into the watchdog.
pub const ARG: &str = "--internal-watchdog";

/// The watchdog's main: read the group, wait for `done` or the end of the pipe.
pub fn main() -> ExitCode {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_name(c"zklock-watchdog");
    let mut group: Option<i32> = None;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "done" => return ExitCode::SUCCESS,
            n => {
                if let Ok(g) = n.parse::<i32>() {
                    if g > 1 {
                        group = Some(g);
                    }
                }
            }
        }
    }
    if let Some(g) = group {
        if kill(Pid::from_raw(-g), Signal::SIGKILL).is_ok() {
            eprintln!(
                "zklock-watchdog: zklock ended while its command ran; the command's process group {g} was killed"
            );
        }
    }
    ExitCode::SUCCESS
}

/// zklock's end of the watchdog. Dropped without [`Watchdog::done`] (a panic), it lets the watchdog kill the group.
#[derive(Debug)]
pub struct Watchdog {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts the watchdog; `None` (after a warning) when it cannot be started: the command then has only
    /// `PR_SET_PDEATHSIG` to stop it with zklock.
    pub fn start() -> Option<Watchdog> {
        // On Linux, /proc/self/exe: in the forked child it is still zklock's own image, even when the file was
        // replaced or deleted since zklock started (an upgrade).
        let exe = if cfg!(target_os = "linux") {
            Ok(std::path::PathBuf::from("/proc/self/exe"))
        } else {
            std::env::current_exe()
        };
        let exe = match exe {
            Ok(exe) => exe,
            Err(e) => {
                eprintln!("zklock: warning: no watchdog (cannot find zklock's own executable: {e})");
                return None;
            }
        };
        let spawned = Command::new(&exe)
            .arg(ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(mut child) => {
                let pipe = child.stdin.take();
                Some(Watchdog { child, pipe })
            }
            Err(e) => {
                eprintln!("zklock: warning: no watchdog (cannot start {}: {e})", exe.display());
                None
            }
        }
    }

    /// Tells the watchdog which process group to kill should zklock die.
    pub fn watch(&mut self, group: u32) {
        if let Some(p) = self.pipe.as_mut() {
            let _ = writeln!(p, "{group}").and_then(|()| p.flush());
        }
    }

    /// zklock is finishing normally: the watchdog exits without killing anything.
    pub fn done(mut self) {
        if let Some(mut p) = self.pipe.take() {
            let _ = p.write_all(b"done\n").and_then(|()| p.flush());
        }
        let _ = self.child.wait();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Closing the pipe without `done` lets the watchdog act; reap it so that no zombie is left.
        drop(self.pipe.take());
        let _ = self.child.wait();
    }
}
