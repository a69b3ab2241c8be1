//! `zklock PATH -- COMMAND`: hold the lock while the command runs.

use std::ffi::OsString;
use std::time::Duration;

use crate::store::Store;
use nix::sys::signal::Signal;
use recipes_core::mutants::{is_active, Mutant};
use recipes_core::{Error, LockGuard, LockPath, Recipe};
use tokio::time::Instant;

use crate::settings::{connect, Conn};
use crate::stop::{kill_deadline, kill_own_descendants, stop_all, MAX_TERM_GRACE};
use crate::take::{take, Signals};
use crate::watchdog::{Report, StartError, Watchdog};
use crate::{status, Fail};

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

/// How `zklock --elect` stands: the candidate's id and data, and whether as Curator's `LeaderLatch`.
#[derive(Debug)]
pub struct Standing {
    /// The candidate's id.
    pub id: String,
    /// The candidate's data (an address to reach the leader at).
    pub data: String,
    /// Curator's `LeaderLatch` names (`--latch`, with `--layout curator`).
    pub latch: bool,
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
    /// Stand in the election at `path` as this candidate instead of taking the lock.
    pub candidate: Option<Standing>,
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

async fn locked(backend: &Store, locks: &recipes_core::Locks, job: &Job) -> Result<u8, Fail> {
    // Should the watchdog be killed, every process of the command comes back to zklock, which then kills them.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let margin = locks.lease_margin().get();
    let grace = self::term_grace(job.term_grace, backend.session_timeout(), margin)?;
    let mut signals = Signals::install()?;
    let waiting_since = Instant::now();
    let guard = take(locks, job, &mut signals).await?;
    if job.verbose {
        eprintln!(
            "zklock: holding the lock at {} as {} (fencing token {}) after waiting {:.3}s",
            job.path,
            guard.node(),
            guard.fencing_token(),
            waiting_since.elapsed().as_secs_f64()
        );
    }
    let env = command_env(backend, &guard, job).await;
    let holding = Holding {
        backend,
        job,
        grace,
        margin,
        deadlines: !is_active(Mutant::NoKillDeadline),
    };
    let (guard, watchdog, deadline_sent) = holding.start(guard, &env).await?;
    holding.supervise(guard, watchdog, deadline_sent, signals).await
}

/// The command's environment. It is told the shortest timeout any server grants: zklock waits (briefly) for every
/// server to have said.
async fn command_env(backend: &Store, guard: &LockGuard, job: &Job) -> Vec<(&'static str, String)> {
    backend.timeouts_probed(PROBE_WAIT).await;
    let timeout = backend.session_timeout();
    let asked = backend.asked_session_timeout();
    if timeout != asked && !job.quiet {
        eprintln!(
            "zklock: warning: asked for a {asked:?} session, the servers grant {timeout:?} (their minSessionTimeout or \
             maxSessionTimeout): the lease and ZKLOCK_SESSION_TIMEOUT_MS use {timeout:?}"
        );
    }
    let mut env = vec![
        ("ZKLOCK_PATH", job.path.as_str().to_owned()),
        ("ZKLOCK_NODE", guard.node().to_owned()),
        ("ZKLOCK_FENCING_TOKEN", guard.fencing_token().to_string()),
        ("ZKLOCK_SESSION_TIMEOUT_MS", timeout.as_millis().to_string()),
    ];
    if let Some(c) = &job.candidate {
        // The term is the fencing token of the leader's node.
        env.push(("ZKLOCK_TERM", guard.fencing_token().to_string()));
        env.push(("ZKLOCK_CANDIDATE", c.id.clone()));
    }
    env
}

/// The lock is held: the command is started and watched over until it ends or the lock is lost.
struct Holding<'a> {
    backend: &'a Store,
    job: &'a Job,
    /// The grace between SIGTERM and SIGKILL, as first computed.
    grace: Duration,
    margin: f64,
    /// Whether the watchdog gets a kill deadline (always, but with a known bug switched back on).
    deadlines: bool,
}

impl Holding<'_> {
    /// The grace now. It may only shrink: the session timeout the lease assumes shrinks when a server grants less.
    fn grace_now(&self) -> Duration {
        let fits = self::term_grace(None, self.backend.session_timeout(), self.margin);
        self.grace.min(fits.unwrap_or(self.grace))
    }

    /// Starts the command under its watchdog, never on a lock that may be another's already. The watchdog kills
    /// everything by the kill deadline unless zklock moves it: a zklock stopped (SIGSTOP, a debugger) cannot leave the
    /// command running past the lease. Returns the guard, the watchdog and the deadline it was given.
    async fn start(
        &self,
        guard: LockGuard,
        env: &[(&'static str, String)],
    ) -> Result<(LockGuard, Watchdog, Instant), Fail> {
        let (path, command) = (&self.job.path, &self.job.command);
        // In force from before the command starts.
        let deadline_sent = kill_deadline(&guard, self.grace_now(), None);
        // zklock may have been held up since the acquire (stopped, starved).
        if !guard.is_valid() {
            drop(guard);
            return Err(Fail {
                status: status::SOFTWARE,
                message: format!(
                    "lock at {path} lost before {} started (its lease ran out while zklock was held up); it was not \
                     started",
                    display(command)
                ),
            });
        }
        // The start is bounded by the kill deadline: a watchdog stopped before it reports cannot hold zklock up while
        // the command it may have started runs on.
        let started = tokio::select! {
            biased;
            started = Watchdog::start(command, env, self.deadlines.then_some(deadline_sent)) => started,
            () = tokio::time::sleep_until(deadline_sent) => Err(StartError::DeadlinePassed),
        };
        match started {
            Ok(w) => Ok((guard, w, deadline_sent)),
            Err(e) => {
                // Whatever the watchdog may have started dies before the lock goes.
                kill_own_descendants();
                let _ = guard.release().await;
                Err(match e {
                    StartError::DeadlinePassed => Fail {
                        status: status::SOFTWARE,
                        message: format!(
                            "lock at {path} lost before {} started (zklock was held up past the lease); it was not \
                             started",
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
                })
            }
        }
    }

    /// Watches over the running command: its exit, the lock's loss, a request to let go (zklock revoke, Curator's
    /// Revoker: passed to the command as a signal), signals to pass on, and the kill deadline to move. The lock goes
    /// when the command and everything it started have ended.
    async fn supervise(
        &self,
        guard: LockGuard,
        mut watchdog: Watchdog,
        mut deadline_sent: Instant,
        mut signals: Signals,
    ) -> Result<u8, Fail> {
        let Job {
            path,
            command,
            revoke_signal,
            quiet,
            ..
        } = self.job;
        let mut revoked = Box::pin(guard.revocation_requested());
        let mut revocable = revoke_signal.is_some();
        loop {
            let refresh = (self.backend.session_timeout() / DEADLINE_REFRESH_PER_TIMEOUT).max(DEADLINE_REFRESH_AT_MOST);
            tokio::select! {
                biased;
                report = watchdog.next() => match report {
                    Report::Exited(code) => {
                        drop(revoked);
                        // The lock is held until everything the command started has ended, too.
                        let grace = self.grace_now();
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
                    let grace = self.grace_now();
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
                _ = signals.int.recv() => watchdog.order(&format!("signal {}", Signal::SIGINT as i32)).await,
                _ = signals.term.recv() => watchdog.order(&format!("signal {}", Signal::SIGTERM as i32)).await,
                _ = signals.hup.recv() => watchdog.order(&format!("signal {}", Signal::SIGHUP as i32)).await,
                // Ctrl-Z must not stop zklock while the command runs on: the lease would run out under it.
                _ = signals.tstp.recv() => eprintln!("zklock: not suspending while the command holds the lock at {path}"),
                () = tokio::time::sleep(refresh) => {
                    let at = kill_deadline(&guard, self.grace_now(), None);
                    if at != deadline_sent && self.deadlines {
                        deadline_sent = at;
                        watchdog.deadline(at).await;
                    }
                }
            }
        }
    }
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

pub(crate) fn software(message: String) -> Fail {
    Fail {
        status: status::SOFTWARE,
        message,
    }
}
