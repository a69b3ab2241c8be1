//! `zklock`: run a command while holding a ZooKeeper lock, or inspect a lock.
//!
//! ```text
//! zklock [OPTIONS] <PATH> -- <COMMAND> [ARGS]...   run COMMAND while holding the lock at PATH
//! zklock inspect [OPTIONS] <PATH>                  print holders and waiters of PATH, in order
//! zklock revoke [OPTIONS] <PATH>                   ask the holders of PATH to let go
//! zklock --elect <ID> [OPTIONS] <PATH> -- <COMMAND>  run COMMAND while candidate ID leads the election at PATH
//! zklock leader [OPTIONS] <PATH>                   print who leads the election at PATH
//! ```
//!
//! Exit status: the command's; 75 when the wait ran out; 64 for bad usage or an invalid path; 69 when the store
//! (ZooKeeper or etcd) cannot be reached; 70 when the lock was lost while the command ran (the command is sent SIGTERM,
//! then SIGKILL); 76 when the path holds a lock node of another recipe or layout (or a peer layout's counter has
//! wrapped); 77 when the path's ACL (on etcd, the user's roles) does not let these credentials contend, or the servers
//! refused them; 126 / 127 when the command cannot be run. Every error is one line on stderr.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use recipes_core::{Error, LockPath};

mod args;
mod duration;
mod inspect;
mod procs;
mod run;
mod settings;
mod stop;
mod store;
mod take;
mod watchdog;

pub(crate) use args::Common;
use args::{Cli, Sub};
use settings::{conn, permits, recipe, revoke_signal};

/// Exit statuses (sysexits.h).
pub mod status {
    /// Bad usage or an invalid path, recipe or layout.
    pub const USAGE: u8 = 64;
    /// ZooKeeper could not be reached.
    pub const UNAVAILABLE: u8 = 69;
    /// The lock was lost while the command ran (or another internal failure).
    pub const SOFTWARE: u8 = 70;
    /// The wait for the lock ran out.
    pub const TEMPFAIL: u8 = 75;
    /// The lock path is used by another protocol: a lock node of another recipe or layout is on it (or a peer
    /// layout's sequence counter has wrapped): the lock refuses to hold beside it.
    pub const PROTOCOL: u8 = 76;
    /// The lock path's ACL does not let these credentials contend (sysexits' EX_NOPERM).
    pub const NOPERM: u8 = 77;
    /// The command could not be executed.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
    /// Hung up (SIGHUP) while waiting for the lock: 128 + 1, as a shell reports it.
    pub const HANGUP: u8 = 128 + 1;
    /// Interrupted (SIGINT) while waiting for the lock: 128 + 2.
    pub const INTERRUPTED: u8 = 128 + 2;
    /// Terminated (SIGTERM) while waiting for the lock: 128 + 15.
    pub const TERMINATED: u8 = 128 + 15;
}

/// A failure with its exit status; printed as one line.
#[derive(Debug)]
pub struct Fail {
    /// The exit status.
    pub status: u8,
    /// The line to print after `zklock: `.
    pub message: String,
}

impl Fail {
    fn usage(message: impl Into<String>) -> Self {
        Fail {
            status: status::USAGE,
            message: message.into(),
        }
    }
}

/// The exit status for an error of the library.
pub fn status_of(e: &Error) -> u8 {
    match e {
        Error::InvalidPath { .. } | Error::UnknownRecipe(_) | Error::UnknownLayout(_) | Error::InvalidArgument(_) => {
            status::USAGE
        }
        Error::Unreachable { .. } | Error::ConnectionLoss => status::UNAVAILABLE,
        Error::ForeignLock { .. } | Error::SequenceWrapped { .. } => status::PROTOCOL,
        Error::NotAuthorized(_) | Error::AuthenticationFailed { .. } => status::NOPERM,
        _ => status::SOFTWARE,
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail {
            status: status_of(&e),
            message: e.to_string(),
        }
    }
}

fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == watchdog::ARG) {
        return watchdog::main(std::env::args_os().skip(2).collect());
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // One line: clap's message up to its usage block, folded.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(|l| l.trim())
                .filter(|l| !l.is_empty())
                .collect();
            let message = message.join(" ");
            eprintln!("zklock: {} (see zklock --help)", message.trim_start_matches("error: "));
            return ExitCode::from(status::USAGE);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zklock: cannot start the runtime: {e}");
            return ExitCode::from(status::SOFTWARE);
        }
    };
    let result = rt.block_on(async {
        match cli.inspect {
            Some(Sub::Inspect { path, json }) => {
                let path = LockPath::new(&path)?;
                let c = conn(&cli.common)?;
                inspect::inspect(&c, &path, json).await
            }
            Some(Sub::Leader { path, json, latch }) => {
                let path = LockPath::new(&path)?;
                let c = conn(&cli.common)?;
                inspect::leader(&c, &path, json, latch).await
            }
            Some(Sub::Revoke { path, node }) => {
                let path = LockPath::new(&path)?;
                let c = conn(&cli.common)?;
                inspect::revoke(&c, &path, node.as_deref()).await
            }
            None => {
                let path = LockPath::new(cli.path.as_deref().unwrap_or_default())?;
                let recipe = recipe(&cli.recipe)?;
                if cli.elect.is_some() && recipe != recipes_core::Recipe::Fair {
                    return Err(Fail::usage("--elect stands in the election's own queue: leave out -r"));
                }
                let permits = permits(recipe, cli.permits)?;
                let revoke_signal = revoke_signal(&cli.revoke_signal)?;
                let wait = match &cli.wait {
                    None => None,
                    Some(w) => Some(duration::parse(w).map_err(|e| Fail::usage(format!("invalid --wait: {e}")))?),
                };
                let term_grace = match &cli.term_grace {
                    None => None,
                    Some(g) => Some(duration::parse(g).map_err(|e| Fail::usage(format!("invalid --term-grace: {e}")))?),
                };
                let c = conn(&cli.common)?;
                let job = run::Job {
                    path,
                    recipe,
                    permits,
                    revoke_signal,
                    wait,
                    term_grace,
                    command: cli.command,
                    candidate: cli.elect.map(|id| run::Standing {
                        id,
                        data: cli.elect_data.unwrap_or_default(),
                        latch: cli.latch,
                    }),
                    quiet: cli.quiet,
                    verbose: cli.verbose,
                };
                run::run(&c, &job).await
            }
        }
    });
    // Leave nothing running: the session was closed by the subcommand.
    rt.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if !(f.status == status::TEMPFAIL && cli.quiet) {
                eprintln!("zklock: {}", f.message.replace('\n', " "));
            }
            ExitCode::from(f.status)
        }
    }
}
