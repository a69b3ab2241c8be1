//! What `zklock` waits for before it runs the command (a lock, a semaphore's permit, or leadership), and the signals
//! that end the wait.

use nix::sys::signal::Signal;
use recipes_core::{Error, LockGuard, Locks};
use tokio::signal::unix::{signal, SignalKind};

use crate::run::{software, Job};
use crate::{status, Fail};

/// The signals zklock handles itself, installed before the wait: a signal while waiting ends the wait; while the
/// command runs, it is passed on (and Ctrl-Z refused: the lease would run out under a stopped zklock).
pub(crate) struct Signals {
    pub(crate) int: tokio::signal::unix::Signal,
    pub(crate) term: tokio::signal::unix::Signal,
    pub(crate) hup: tokio::signal::unix::Signal,
    pub(crate) tstp: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> Result<Self, Fail> {
        let on = |kind: SignalKind| signal(kind).map_err(|e| software(format!("signal handler: {e}")));
        Ok(Signals {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
            tstp: on(SignalKind::from_raw(Signal::SIGTSTP as i32))?,
        })
    }
}

/// Waits for what the job takes: leadership of the election at its path (`--elect`), a semaphore's permit, or the
/// lock; the guard it is held by.
pub(crate) async fn take(locks: &Locks, job: &Job, signals: &mut Signals) -> Result<LockGuard, Fail> {
    match &job.candidate {
        Some(c) => {
            let mut election = locks.election(&job.path)?;
            if c.latch {
                election = election.latch()?;
            }
            let candidate = election
                .candidate(c.id.clone())?
                .with_data(c.data.clone().into_bytes())?;
            let leadership = async {
                match job.wait {
                    None => candidate.leadership().await.map(Some),
                    Some(d) => candidate.leadership_timeout(d).await,
                }
            };
            Ok(wait_for(leadership, job, signals).await?.into_guard())
        }
        None => {
            let lock: std::sync::Arc<dyn recipes_core::Lock> = match job.permits {
                Some(n) => std::sync::Arc::new(locks.semaphore(&job.path, n)?),
                None => locks.lock(&job.path, job.recipe)?,
            };
            let acquire = async {
                match job.wait {
                    None => lock.acquire().await.map(Some),
                    Some(d) => lock.acquire_timeout(d).await,
                }
            };
            wait_for(acquire, job, signals).await
        }
    }
}

/// Waits for the lock (or leadership) as the job asks; a signal ends the wait (the acquire is dropped, which removes
/// our node).
async fn wait_for<G>(
    acquire: impl std::future::Future<Output = Result<Option<G>, Error>>,
    job: &Job,
    signals: &mut Signals,
) -> Result<G, Fail> {
    let (path, wait) = (&job.path, job.wait);
    let what = if job.candidate.is_some() {
        "leadership of the election"
    } else {
        "lock"
    };
    tokio::select! {
        r = acquire => match r {
            Ok(Some(g)) => Ok(g),
            Ok(None) => {
                let why = match wait {
                    Some(d) if d.is_zero() => "it is held (tried once)".to_string(),
                    Some(d) => format!("not acquired within {d:?}"),
                    None => "not acquired".to_string(),
                };
                Err(Fail { status: status::TEMPFAIL, message: format!("{what} at {path}: {why}") })
            }
            Err(Error::ConnectionLoss) if wait.is_some_and(|d| d.is_zero()) => Err(Fail {
                status: status::UNAVAILABLE,
                message: format!("{what} at {path}: the store did not answer the try"),
            }),
            Err(e) => Err(e.into()),
        },
        _ = signals.int.recv() => Err(Fail { status: status::INTERRUPTED, message: format!("interrupted while waiting for the {what} at {path}") }),
        _ = signals.term.recv() => Err(Fail { status: status::TERMINATED, message: format!("terminated while waiting for the {what} at {path}") }),
        _ = signals.hup.recv() => Err(Fail { status: status::HANGUP, message: format!("hung up while waiting for the {what} at {path}") }),
    }
}
