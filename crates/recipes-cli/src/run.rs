//! `zklock PATH -- COMMAND`: hold the lock while the command runs.

use std::ffi::OsString;
use std::time::Duration;

use nix::sys::signal::Signal;
use recipes_core::mutants::{is_active, Mutant};
use recipes_core::{Backend, Error, LockGuard, LockPath, LostReason, Recipe};
use recipes_zk::ZkBackend;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::settings::{connect, Conn};
use crate::watchdog::{Report, StartError, Watchdog};
use crate::{status, Fail};

/// The longest grace a command gets between SIGTERM and SIGKILL, when the session's margin allows it.
const MAX_TERM_GRACE: Duration = Duration::from_secs(3);
/// How long zklock waits for the last process to be gone after SIGKILL before it gives up waiting.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How long zklock waits, before it starts the command, for servers that have not said which session timeout they
/// grant (the command is told the shortest in `ZKLOCK_SESSION_TIMEOUT_MS`).
const PROBE_WAIT: Duration = Duration::from_secs(1);
/// zklock moves the watchdog's kill deadline at least this many times per session timeout ...
const DEADLINE_REFRESH_PER_TIMEOUT: u32 = 16;
/// ... but not more often than this.
const DEADLINE_REFRESH_AT_MOST: Duration = Duration::from_millis(20);

/// The grace between SIGTERM and SIGKILL for a session of `timeout` with lease margin `margin`.
///
/// The lease ends at `margin × timeout` before the earliest moment the server may expire the session and let another
/// client in. A command told to stop when the lease ends must be dead before that moment: the grace may take at most
/// half of the margin (the other half covers clock rates and the time a kill takes).
///
/// # Notable errors
/// [`Fail`] (usage) when `asked` does not fit.
pub fn term_grace(asked: Option<Duration>, timeout: Duration, margin: f64) -> Result<Duration, Fail> {
    let fits = timeout.mul_f64(margin / 2.0);
    match asked {
        None => Ok(fits.min(MAX_TERM_GRACE)),
        Some(g) if g <= fits => Ok(g),
        Some(g) => Err(Fail {
            status: status::USAGE,
            message: format!(
                "--term-grace {g:?} does not fit: the command must be dead before the server may expire the session, \
                 {:?} after the lease ends ({margin} of the {timeout:?} session timeout the server granted); use at \
                 most {fits:?}, or a longer --session-timeout",
                timeout.mul_f64(margin)
            ),
        }),
    }
}

/// What `zklock PATH -- COMMAND` was asked to do.
#[derive(Debug)]
pub struct Job {
    /// The lock path.
    pub path: LockPath,
    /// The recipe (not reentrant).
    pub recipe: Recipe,
    /// The semaphore's permit count (with [`Recipe::Semaphore`] only).
    pub permits: Option<u32>,
    /// The signal sent to the command when another client asks this holder to let go (`None`: ignore requests).
    pub revoke_signal: Option<Signal>,
    /// How long to wait for the lock (`None`: as long as it takes; zero: try once).
    pub wait: Option<Duration>,
    /// The grace between SIGTERM and SIGKILL asked for (`None`: the default; see [`term_grace`]).
    pub term_grace: Option<Duration>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Say nothing when the wait runs out, nor warn.
    pub quiet: bool,
    /// Say which node holds the lock, its token and the time waited.
    pub verbose: bool,
}

/// Runs the job's command while holding the lock; returns the exit status.
pub async fn run(c: &Conn, job: &Job) -> Result<u8, Fail> {
    let (backend, locks) = connect(c).await?;
    let result = locked(&backend, &locks, job).await;
    // Close the session (and with it any node still ours) before the process exits.
    backend.close().await;
    result
}

fn display(command: &[OsString]) -> String {
    command
        .first()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

async fn locked(backend: &ZkBackend, locks: &recipes_core::Locks, job: &Job) -> Result<u8, Fail> {
    let Job {
        path,
        recipe,
        permits,
        revoke_signal,
        wait,
        term_grace,
        command,
        quiet,
        verbose,
    } = job;
    let (recipe, wait, term_grace) = (*recipe, *wait, *term_grace);
    // Should the watchdog be killed, every process of the command comes back to zklock, which then kills them.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let timeout = backend.session_timeout();
    let margin = locks.lease_margin().get();
    let grace = self::term_grace(term_grace, timeout, margin)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| software(format!("signal handler: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| software(format!("signal handler: {e}")))?;
    let mut sighup = signal(SignalKind::hangup()).map_err(|e| software(format!("signal handler: {e}")))?;
    let mut sigtstp =
        signal(SignalKind::from_raw(Signal::SIGTSTP as i32)).map_err(|e| software(format!("signal handler: {e}")))?;
    let lock: std::sync::Arc<dyn recipes_core::Lock> = match permits {
        Some(n) => std::sync::Arc::new(locks.semaphore(path, *n)?),
        None => locks.lock(path, recipe)?,
    };

    // Wait for the lock; a signal ends the wait (the acquire is dropped, which removes our node).
    let waiting_since = Instant::now();
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
        _ = sigint.recv() => return Err(Fail { status: status::INTERRUPTED, message: format!("interrupted while waiting for the lock at {path}") }),
        _ = sigterm.recv() => return Err(Fail { status: status::TERMINATED, message: format!("terminated while waiting for the lock at {path}") }),
        _ = sighup.recv() => return Err(Fail { status: status::HANGUP, message: format!("hung up while waiting for the lock at {path}") }),
    };

    if *verbose {
        eprintln!(
            "zklock: holding the lock at {path} as {} (fencing token {}) after waiting {:.3}s",
            guard.node(),
            guard.fencing_token(),
            waiting_since.elapsed().as_secs_f64()
        );
    }
    // The command is told the shortest timeout any server grants: wait (briefly) for every server to have said.
    backend.timeouts_probed(PROBE_WAIT).await;
    let timeout = backend.session_timeout();
    let asked = backend.options().asked_session_timeout();
    if timeout != asked && !*quiet {
        eprintln!(
            "zklock: warning: asked for a {asked:?} session, the servers grant {timeout:?} (their minSessionTimeout or \
             maxSessionTimeout): the lease and ZKLOCK_SESSION_TIMEOUT_MS use {timeout:?}"
        );
    }
    let env = [
        ("ZKLOCK_PATH", path.as_str().to_owned()),
        ("ZKLOCK_NODE", guard.node().to_owned()),
        ("ZKLOCK_FENCING_TOKEN", guard.fencing_token().to_string()),
        ("ZKLOCK_SESSION_TIMEOUT_MS", timeout.as_millis().to_string()),
    ];
    // The grace may only shrink: the session timeout the lease assumes shrinks when a server grants less.
    let grace_now = || grace.min(self::term_grace(None, backend.session_timeout(), margin).unwrap_or(grace));
    // The watchdog kills everything by the kill deadline unless zklock moves it: a zklock stopped (SIGSTOP, a
    // debugger) cannot leave the command running past the lease. In force from before the command starts.
    let deadlines = !is_active(Mutant::NoKillDeadline);
    let mut deadline_sent = kill_deadline(&guard, grace_now(), None);
    // zklock may have been held up since the acquire (stopped, starved): never start the command on a lock that may
    // be another's already.
    if !guard.is_valid() {
        drop(guard);
        return Err(Fail {
            status: status::SOFTWARE,
            message: format!(
                "lock at {path} lost before {} started (its lease ran out while zklock was held up); it was not started",
                display(command)
            ),
        });
    }
    // The start is bounded by the kill deadline: a watchdog stopped before it reports cannot hold zklock up while
    // the command it may have started runs on.
    let started = tokio::select! {
        biased;
        started = Watchdog::start(command, &env, deadlines.then_some(deadline_sent)) => started,
        () = tokio::time::sleep_until(deadline_sent) => Err(StartError::DeadlinePassed),
    };
    let mut watchdog = match started {
        Ok(w) => w,
        Err(e) => {
            // Whatever the watchdog may have started dies before the lock goes.
            kill_own_descendants();
            let _ = guard.release().await;
            return Err(match e {
                StartError::DeadlinePassed => Fail {
                    status: status::SOFTWARE,
                    message: format!(
                        "lock at {path} lost before {} started (zklock was held up past the lease); it \
                         was not started",
                        display(command)
                    ),
                },
                StartError::NotFound(why) => Fail {
                    status: status::NOT_FOUND,
                    message: format!("cannot run {}: {why}", display(command)),
                },
                StartError::Exec(why) => Fail {
                    status: status::CANNOT_EXECUTE,
                    message: format!("cannot run {}: {why}", display(command)),
                },
                StartError::Watchdog(why) => software(format!("cannot start the watchdog: {why}")),
            });
        }
    };

    // A request to let go (zklock revoke, Curator's Revoker) is passed to the command as a signal; the lock goes when
    // the command and everything it started have ended, as after any exit.
    let mut revoked = Box::pin(guard.revocation_requested());
    let mut revocable = revoke_signal.is_some();
    loop {
        let refresh = (backend.session_timeout() / DEADLINE_REFRESH_PER_TIMEOUT).max(DEADLINE_REFRESH_AT_MOST);
        tokio::select! {
            biased;
            report = watchdog.next() => match report {
                Report::Exited(code) => {
                    drop(revoked);
                    // The lock is held until everything the command started has ended, too.
                    let grace = grace_now();
                    let kill_at = kill_deadline(&guard, grace, None).min(Instant::now() + grace);
                    if !stop_all(&mut watchdog, &guard, grace, kill_at).await {
                        // The watchdog did not confirm (stopped, or processes that will not die): kill every
                        // descendant, the watchdog included, before the lock goes.
                        kill_own_descendants();
                        drop(guard);
                        return Err(software(format!("processes {} left behind would not die", display(command))));
                    }
                    watchdog.done().await;
                    return finish(guard, path, command, code).await;
                }
                Report::Gone => continue,
                Report::Died => {
                    drop(revoked);
                    kill_own_descendants();
                    drop(guard);
                    return Err(software("the watchdog was killed; every process of the command was killed".into()));
                }
            },
            reason = guard.lost() => {
                drop(revoked);
                let grace = grace_now();
                let kill_at = kill_deadline(&guard, grace, Some(reason));
                if stop_all(&mut watchdog, &guard, grace, kill_at).await {
                    watchdog.done().await;
                } else {
                    kill_own_descendants();
                }
                drop(guard);
                return Err(Fail {
                    status: status::SOFTWARE,
                    message: format!("lock at {path} lost while {} ran ({reason}); the command was stopped", display(command)),
                });
            }
            asked = &mut revoked, if revocable => {
                revocable = false;
                if let (Ok(()), Some(sig)) = (asked, *revoke_signal) {
                    if !*quiet {
                        eprintln!("zklock: asked to let go of the lock at {path}: sending {sig} to {}", display(command));
                    }
                    watchdog.order(&format!("signal {}", sig as i32)).await;
                }
            }
            _ = sigint.recv() => watchdog.order(&format!("signal {}", Signal::SIGINT as i32)).await,
            _ = sigterm.recv() => watchdog.order(&format!("signal {}", Signal::SIGTERM as i32)).await,
            _ = sighup.recv() => watchdog.order(&format!("signal {}", Signal::SIGHUP as i32)).await,
            // Ctrl-Z must not stop zklock while the command runs on: the lease would run out under it.
            _ = sigtstp.recv() => eprintln!("zklock: not suspending while the command holds the lock at {path}"),
            () = tokio::time::sleep(refresh) => {
                let at = kill_deadline(&guard, grace_now(), None);
                if at != deadline_sent && deadlines {
                    deadline_sent = at;
                    watchdog.deadline(at).await;
                }
            }
        }
    }
}

/// When everything the command started must be dead: `grace` after the lease ends, which leaves half the margin before
/// the earliest moment the server may expire the session; at once when the lock is already lost to a deletion or an
/// expiry (another client may hold it now), or when that moment has passed.
fn kill_deadline(guard: &LockGuard, grace: Duration, reason: Option<LostReason>) -> Instant {
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
async fn stop_all(watchdog: &mut Watchdog, guard: &LockGuard, grace: Duration, mut kill_at: Instant) -> bool {
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
fn kill_own_descendants() {
    crate::procs::signal_all(std::process::id() as i32, Signal::SIGKILL);
}

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

fn software(message: String) -> Fail {
    Fail {
        status: status::SOFTWARE,
        message,
    }
}
