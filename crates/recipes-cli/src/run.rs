//! `zklock PATH -- COMMAND`: hold the lock while the command runs.

use std::ffi::OsString;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use recipes_core::{Error, LockGuard, LockPath, Recipe};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::watchdog::Watchdog;
use crate::{connect, status, Conn, Fail};

/// How long a command is given to stop after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);

/// Runs `command` while holding the lock; returns the exit status.
pub async fn run(
    c: &Conn,
    path: &LockPath,
    recipe: Recipe,
    wait: Option<Duration>,
    command: &[OsString],
) -> Result<u8, Fail> {
    let (backend, locks) = connect(c).await?;
    let result = locked(&locks, path, recipe, wait, command, c.session_timeout).await;
    // Close the session (and with it any node still ours) before the process exits.
    backend.shutdown(Duration::from_secs(2)).await;
    result
}

fn display(command: &[OsString]) -> String {
    command
        .first()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

async fn locked(
    locks: &recipes_core::Locks,
    path: &LockPath,
    recipe: Recipe,
    wait: Option<Duration>,
    command: &[OsString],
    session_timeout: Duration,
) -> Result<u8, Fail> {
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| software(format!("signal handler: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| software(format!("signal handler: {e}")))?;
    let mut sighup = signal(SignalKind::hangup()).map_err(|e| software(format!("signal handler: {e}")))?;
    let lock = locks.lock(path, recipe)?;

    // Wait for the lock; a signal ends the wait (the acquire is dropped, which removes our node).
    let acquire = async {
        match wait {
            None => lock.acquire().await.map(Some),
            Some(d) => lock.acquire_timeout(d).await,
        }
    };
    let guard = tokio::select! {
        r = acquire => match r {
            Ok(Some(g)) => g,
            Ok(None) => {
                let what = match wait {
                    Some(d) if d.is_zero() => "it is held (tried once)".to_string(),
                    Some(d) => format!("not acquired within {d:?}"),
                    None => "not acquired".to_string(),
                };
                return Err(Fail { status: status::TEMPFAIL, message: format!("lock at {path}: {what}") });
            }
            Err(Error::ConnectionLoss) if wait.is_some_and(|d| d.is_zero()) => {
                return Err(Fail {
                    status: status::UNAVAILABLE,
                    message: format!("lock at {path}: ZooKeeper did not answer the try"),
                });
            }
            Err(e) => return Err(e.into()),
        },
        _ = sigint.recv() => return Err(Fail { status: 130, message: format!("interrupted while waiting for the lock at {path}") }),
        _ = sigterm.recv() => return Err(Fail { status: 143, message: format!("terminated while waiting for the lock at {path}") }),
        _ = sighup.recv() => return Err(Fail { status: 129, message: format!("hung up while waiting for the lock at {path}") }),
    };

    // Started before the command, so that no instant exists where zklock could die with the group unwatched.
    let mut watchdog = Watchdog::start();
    let mut cmd = Command::new(&command[0]);
    // Its own process group, so that stopping it (lock lost) or forwarding a signal reaches everything it started.
    cmd.process_group(0);
    stop_with_us(&mut cmd);
    cmd.args(&command[1..])
        .env("ZKLOCK_PATH", path.as_str())
        .env("ZKLOCK_NODE", guard.node())
        .env("ZKLOCK_FENCING_TOKEN", guard.fencing_token().to_string())
        .env("ZKLOCK_SESSION_TIMEOUT_MS", session_timeout.as_millis().to_string());
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            if let Some(w) = watchdog {
                w.done();
            }
            let _ = guard.release().await;
            let status = if e.kind() == std::io::ErrorKind::NotFound {
                status::NOT_FOUND
            } else {
                status::CANNOT_EXECUTE
            };
            return Err(Fail {
                status,
                message: format!("cannot run {}: {e}", display(command)),
            });
        }
    };
    let group = child.id();
    if let (Some(w), Some(g)) = (watchdog.as_mut(), group) {
        w.watch(g);
    }

    loop {
        tokio::select! {
            st = child.wait() => {
                let code = match st {
                    Ok(st) => exit_code(st),
                    Err(e) => return Err(software(format!("waiting for {}: {e}", display(command)))),
                };
                // The lock is held until everything the command started has ended, too.
                if let Some(g) = group {
                    end_leftovers(g).await;
                }
                if let Some(w) = watchdog {
                    w.done();
                }
                return finish(guard, path, command, code).await;
            }
            reason = guard.lost() => {
                stop(&mut child).await;
                if let Some(w) = watchdog {
                    w.done();
                }
                drop(guard);
                return Err(Fail {
                    status: status::SOFTWARE,
                    message: format!("lock at {path} lost while {} ran ({reason}); the command was stopped", display(command)),
                });
            }
            _ = sigint.recv() => forward(&child, Signal::SIGINT),
            _ = sigterm.recv() => forward(&child, Signal::SIGTERM),
            _ = sighup.recv() => forward(&child, Signal::SIGHUP),
        }
    }
}

/// If zklock itself dies (even by SIGKILL, which it cannot handle), the command is killed too (Linux
/// `PR_SET_PDEATHSIG`): it must not go on working under a lock nobody watches any more. This reaches the command
/// itself; the [`Watchdog`] stops the processes it started.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn stop_with_us(cmd: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before `exec`. It makes only async-signal-safe system calls
    // (prctl, getppid) and allocates nothing (the error is a raw OS error), as `pre_exec` requires.
    unsafe {
        cmd.pre_exec(move || {
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
fn stop_with_us(_cmd: &mut Command) {}

/// Releases the lock after the command exited; a lock that turns out to have been lost is reported.
async fn finish(guard: LockGuard, path: &LockPath, command: &[OsString], code: u8) -> Result<u8, Fail> {
    match guard.release().await {
        Ok(()) => Ok(code),
        Err(e @ (Error::NotHeld { .. } | Error::SessionExpired)) => Err(Fail {
            status: status::SOFTWARE,
            message: format!("lock at {path} was lost before {} finished: {e}", display(command)),
        }),
        Err(e) => {
            // The node goes with the session, which is closed next.
            eprintln!("zklock: warning: releasing the lock at {path}: {e}");
            Ok(code)
        }
    }
}

fn exit_code(st: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        _ => status::SOFTWARE,
    }
}

/// Sends `sig` to the command's process group (the command and everything it started).
fn forward(child: &Child, sig: Signal) {
    if let Some(pid) = child.id() {
        let _ = kill(Pid::from_raw(-(pid as i32)), sig);
    }
}

/// SIGTERM to the command's process group, a short grace, then SIGKILL; waits for the command to be gone.
async fn stop(child: &mut Child) {
    let group = child.id().map(|pid| Pid::from_raw(-(pid as i32)));
    forward(child, Signal::SIGTERM);
    if tokio::time::timeout(TERM_GRACE, child.wait()).await.is_err() {
        forward(child, Signal::SIGKILL);
        let _ = child.wait().await;
    }
    // Whatever the command left behind in its group goes too.
    if let Some(g) = group {
        let _ = kill(g, Signal::SIGKILL);
    }
}

/// Processes the command left running in its group when it exited (`sh -c 'worker &'`) would work on after the lock
/// is released: they get SIGTERM, a short grace, then SIGKILL, before the release.
async fn end_leftovers(group: u32) {
    let g = Pid::from_raw(-(group as i32));
    for (sig, limit) in [(Signal::SIGTERM, TERM_GRACE), (Signal::SIGKILL, Duration::from_secs(1))] {
        if !group_alive(group) {
            return;
        }
        let _ = kill(g, sig);
        let t0 = std::time::Instant::now();
        while group_alive(group) && t0.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Whether a live (not zombie) process is in process group `group`.
#[cfg(target_os = "linux")]
fn group_alive(group: u32) -> bool {
    // A zombie still counts for kill(2), and its reaping is up to whoever adopted it; read /proc instead.
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return kill(Pid::from_raw(-(group as i32)), None).is_ok();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .any(|e| {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                return false;
            };
            // pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                return false;
            };
            let mut f = rest.split_whitespace();
            let state = f.next();
            let pgrp = f.nth(1).and_then(|p| p.parse::<u32>().ok());
            pgrp == Some(group) && state != Some("Z")
        })
}

#[cfg(not(target_os = "linux"))]
fn group_alive(group: u32) -> bool {
    kill(Pid::from_raw(-(group as i32)), None).is_ok()
}

fn software(message: String) -> Fail {
    Fail {
        status: status::SOFTWARE,
        message,
    }
}
