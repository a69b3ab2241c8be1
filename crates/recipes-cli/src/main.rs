//! `zklock`: run a command while holding a ZooKeeper lock, or inspect a lock.
//!
//! ```text
//! zklock [OPTIONS] <PATH> -- <COMMAND> [ARGS]...   run COMMAND while holding the lock at PATH
//! zklock inspect [OPTIONS] <PATH>                  print holders and waiters of PATH, in order
//! ```
//!
//! Exit status: the command's; 75 when the wait ran out; 64 for bad usage or an invalid path; 69 when ZooKeeper
//! cannot be reached; 70 when the lock was lost while the command ran (the command is sent SIGTERM, then SIGKILL);
//! 76 when the path holds a lock node of another recipe or layout (or a peer layout's counter has wrapped); 126 /
//! 127 when the command cannot be run. Every error is one line on stderr.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use recipes_core::{Error, Layout, LockPath, Locks, Recipe};
use recipes_zk::{ZkBackend, ZkOptions};

mod duration;
mod inspect;
mod run;
mod watchdog;

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

const EXAMPLES: &str = "\
Examples:
  # A cron job that must not run twice at once, anywhere:
  zklock -s zk1:2181,zk2:2181 /cron/nightly-report -- /usr/local/bin/nightly-report

  # Give up (exit 75) unless the lock is free within 30 seconds:
  zklock --wait 30s /deploy/web -- ./deploy.sh

  # Try once; exit 75 at once when someone holds the lock:
  zklock --wait 0 /jobs/reindex -- reindex --full

  # Readers share, a writer excludes them all:
  zklock -r read /catalog -- ./export-catalog.sh
  zklock -r write /catalog -- ./rebuild-catalog.sh

  # The command gets ZKLOCK_PATH, ZKLOCK_NODE and ZKLOCK_FENCING_TOKEN:
  zklock /db/migrations -- sh -c 'migrate --fencing-token \"$ZKLOCK_FENCING_TOKEN\"'

  # Who holds a lock, and who waits:
  zklock inspect /deploy/web

Exit status: the command's; 75 the wait ran out; 64 bad usage or invalid path; 69 ZooKeeper unreachable;
70 the lock was lost while the command ran (it is sent SIGTERM, then SIGKILL); 76 the path holds a lock node of
another recipe or layout (one path takes one recipe family and one layout); 126/127 the command cannot run.

The command runs in its own process group: SIGINT, SIGTERM and SIGHUP sent to zklock are passed to that group,
and when the lock is lost the whole group is stopped. The lock is released only once the whole group has ended:
processes the command left running get SIGTERM (then SIGKILL) first. If zklock itself dies, even by SIGKILL, a
small watchdog process (zklock-watchdog) kills the group at once.";

#[derive(Debug, Parser)]
#[command(
    name = "zklock",
    version,
    about = "Run a command while holding a ZooKeeper lock, or inspect a lock.",
    subcommand_negates_reqs = true,
    after_help = EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    inspect: Option<Sub>,
    #[command(flatten)]
    common: Common,
    /// Lock recipe: exclusive | fair | read | write
    #[arg(short = 'r', long, default_value = "fair", value_name = "RECIPE")]
    recipe: String,
    /// Give up after this long (500ms, 10s, 2m; 0 = try once) [default: wait forever]
    #[arg(short = 'w', long, value_name = "DURATION")]
    wait: Option<String>,
    /// When the lock is at risk, how long the command gets between SIGTERM and SIGKILL; it must be dead before the
    /// server may expire the session, so at most a tenth of the session timeout [default: that, at most 3s]
    #[arg(long, value_name = "DURATION")]
    term_grace: Option<String>,
    /// The lock path (absolute ZooKeeper path)
    #[arg(value_name = "PATH", required = true)]
    path: Option<String>,
    /// The command to run while holding the lock, after `--`
    #[arg(value_name = "COMMAND", last = true, required = true, num_args = 1..)]
    command: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Print holders and waiters of PATH, in order
    Inspect {
        /// The lock path
        #[arg(value_name = "PATH")]
        path: String,
    },
}

#[derive(Debug, Args, Clone)]
struct Common {
    /// ZooKeeper connect string
    #[arg(
        short = 's',
        long,
        env = "ZKLOCK_SERVERS",
        default_value = "127.0.0.1:2181",
        value_name = "HOSTS",
        global = true
    )]
    servers: String,
    /// Node layout: native | curator | kazoo
    #[arg(long, default_value = "native", value_name = "LAYOUT", global = true)]
    layout: String,
    /// ZooKeeper session timeout
    #[arg(long, default_value = "10s", value_name = "DURATION", global = true)]
    session_timeout: String,
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

/// Settings shared by both subcommands, validated.
struct Conn {
    options: ZkOptions,
    layout: Layout,
}

fn conn(common: &Common) -> Result<Conn, Fail> {
    let layout: Layout = common.layout.parse()?;
    let session_timeout =
        duration::parse(&common.session_timeout).map_err(|e| Fail::usage(format!("invalid --session-timeout: {e}")))?;
    if session_timeout.is_zero() {
        return Err(Fail::usage("invalid --session-timeout: it must be more than 0"));
    }
    Ok(Conn {
        options: ZkOptions::new(common.servers.clone()).session_timeout(session_timeout),
        layout,
    })
}

async fn connect(c: &Conn) -> Result<(Arc<ZkBackend>, Locks), Fail> {
    let backend = ZkBackend::connect(c.options.clone()).await?;
    let locks = Locks::builder(backend.clone()).layout(c.layout).build();
    Ok((backend, locks))
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
            Some(Sub::Inspect { path }) => {
                let path = LockPath::new(&path)?;
                let c = conn(&cli.common)?;
                inspect::inspect(&c, &path).await
            }
            None => {
                let path = LockPath::new(cli.path.as_deref().unwrap_or_default())?;
                let recipe: Recipe = cli.recipe.parse()?;
                if recipe == Recipe::Reentrant {
                    return Err(Fail::usage(
                        "recipe 'reentrant' makes no sense for one command; use exclusive, fair, read or write",
                    ));
                }
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
                    wait,
                    term_grace,
                    command: cli.command,
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
            eprintln!("zklock: {}", f.message.replace('\n', " "));
            ExitCode::from(f.status)
        }
    }
}
