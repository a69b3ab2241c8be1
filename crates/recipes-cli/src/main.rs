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
//! Exit status: the command's; 75 when the wait ran out; 64 for bad usage or an invalid path; 69 when ZooKeeper
//! cannot be reached; 70 when the lock was lost while the command ran (the command is sent SIGTERM, then SIGKILL);
//! 76 when the path holds a lock node of another recipe or layout (or a peer layout's counter has wrapped); 77 when
//! the path's ACL does not let these credentials contend; 126 / 127 when the command cannot be run. Every error is one line on stderr.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use recipes_core::{Error, LockPath};

mod duration;
mod inspect;
mod procs;
mod run;
mod settings;
mod stop;
mod take;
mod watchdog;

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

const EXAMPLES: &str = "\
Examples:
  # A cron job that must not run twice at once, anywhere:
  zklock -s zk1:2181,zk2:2181 /cron/nightly-report -- /usr/local/bin/nightly-report

  # Give up (exit 75) unless the lock is free within 30 seconds:
  zklock --wait 30s /deploy/web -- ./deploy.sh

  # From cron: skip quietly (exit 75, no mail) when the previous run still holds the lock:
  zklock -q --wait 0 /cron/hourly-sync -- /usr/local/bin/sync

  # Try once; exit 75 at once when someone holds the lock:
  zklock --wait 0 /jobs/reindex -- reindex --full

  # Readers share, a writer excludes them all:
  zklock -r read /catalog -- ./export-catalog.sh
  zklock -r write /catalog -- ./rebuild-catalog.sh

  # The command gets ZKLOCK_PATH, ZKLOCK_NODE and ZKLOCK_FENCING_TOKEN:
  zklock /db/migrations -- sh -c 'migrate --fencing-token \"$ZKLOCK_FENCING_TOKEN\"'

  # At most 3 deploys at once across the fleet (every client must give the same --permits):
  zklock -r semaphore --permits 3 /fleet/deploys -- ./deploy.sh

  # Who holds a lock, and who waits (--json for scripts); holders asked to let go are marked:
  zklock inspect /deploy/web

  # Run the consumer only while this machine leads the election (one leader among the instances); when
  # leadership is lost the command is stopped and zklock exits 70: let the service manager start it again
  # (systemd: Restart=always), and it stands again behind the others. The command gets ZKLOCK_TERM:
  zklock --elect \"$(hostname)\" --elect-data 10.0.0.7:8080 /services/billing/leader -- ./consume --term-env ZKLOCK_TERM

  # Who leads (75 when nobody stands):
  zklock leader /services/billing/leader

  # Beside Java services that use Curator's LeaderLatch on the same path:
  zklock --layout curator --elect \"$(hostname)\" --latch /services/billing/leader -- ./consume

  # Ask the holder to let go: a zklock holding it sends its command SIGTERM (--revoke-signal) and releases the lock
  # once the command's processes have ended; Curator's makeRevocable holders are asked the same way:
  zklock revoke /deploy/web

Exit status: the command's; 75 the wait ran out; 64 bad usage or invalid path; 69 ZooKeeper unreachable;
70 the lock was lost while the command ran (it is sent SIGTERM, then SIGKILL); 76 the path holds a lock node of
another recipe or layout (one path takes one recipe family and one layout); 77 the path's ACL does not let
these credentials contend, or the servers refused them (--auth, --sasl, --tls-cert, --acl); 126/127 the command cannot run.

Every process the command starts runs under zkl-watchdog, which finds them all, whatever process group they
move to. SIGINT, SIGTERM and SIGHUP sent to zklock are passed to the command's process group. When the lock is at
risk (the lease ran out), every process gets SIGTERM, then SIGKILL before the server may expire the session; the lock
is released only once every process has ended. If zklock dies, or is stopped, the watchdog kills them all; Ctrl-Z
does not stop zklock while the command runs.";

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
    /// Lock recipe: exclusive | fair | read | write | semaphore (with --permits)
    #[arg(short = 'r', long, default_value = "fair", value_name = "RECIPE")]
    recipe: String,
    /// The semaphore's permit count: at most this many commands hold it at once (with -r semaphore)
    #[arg(long, value_name = "N")]
    permits: Option<u32>,
    /// The signal sent to the command when another client asks this holder to let go (zklock revoke, Curator's
    /// Revoker): TERM | INT | HUP | none (ignore such requests); the lock is released once the command's processes
    /// have ended
    #[arg(long, default_value = "TERM", value_name = "SIGNAL")]
    revoke_signal: String,
    /// Stand as candidate ID in the election at PATH and run the command only while leading (not with -r or
    /// --permits): the command gets ZKLOCK_TERM (the term, a fencing token) and ZKLOCK_CANDIDATE
    #[arg(long, value_name = "ID", conflicts_with = "permits")]
    elect: Option<String>,
    /// The candidate's data, for those who read who leads (an address to reach the leader at); with --elect
    #[arg(long, value_name = "DATA", requires = "elect")]
    elect_data: Option<String>,
    /// Stand as Curator's LeaderLatch does (its `latch-` nodes; with --elect and --layout curator); without it, the
    /// Curator layout's election is its LeaderSelector's
    #[arg(long, requires = "elect")]
    latch: bool,
    /// Give up after this long (500ms, 10s, 2m; 0 = try once) [default: wait forever]
    #[arg(short = 'w', long, value_name = "DURATION", allow_hyphen_values = true)]
    wait: Option<String>,
    /// When the lock is at risk, how long the command gets between SIGTERM and SIGKILL; it must be dead before the
    /// server may expire the session, so at most a tenth of the session timeout [default: that, at most 3s]
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    term_grace: Option<String>,
    /// Say nothing when the wait runs out (exit 75), so that cron does not mail every skipped run
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Say on stderr which node holds the lock, its fencing token and how long the wait took
    #[arg(short = 'v', long)]
    verbose: bool,
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
        /// Print one JSON object (path, layout, holders, waiters, participants, other_children), for scripts
        #[arg(long)]
        json: bool,
    },
    /// Print who leads the election at PATH: its id, term and node (exit 75 when nobody stands)
    Leader {
        /// The election's path
        #[arg(value_name = "PATH")]
        path: String,
        /// Print one JSON object (path, id, data, term, node), for scripts
        #[arg(long)]
        json: bool,
        /// Read an election of Curator's LeaderLatch (its `latch-` nodes; with --layout curator)
        #[arg(long)]
        latch: bool,
    },
    /// Ask the holders of PATH to let go (Curator's revocation protocol); prints the nodes asked
    Revoke {
        /// The lock path
        #[arg(value_name = "PATH")]
        path: String,
        /// Ask the holder of this lock node (a child name of PATH) instead of every current holder
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
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
    /// ZooKeeper session timeout (the servers may grant less)
    #[arg(
        long,
        default_value = "10s",
        value_name = "DURATION",
        global = true,
        allow_hyphen_values = true
    )]
    session_timeout: String,
    /// How long connecting may take (a server that refuses, or whose name does not resolve, fails at once)
    #[arg(
        long,
        default_value = "5s",
        value_name = "DURATION",
        global = true,
        allow_hyphen_values = true
    )]
    connect_timeout: String,
    /// Digest credentials USER:PASSWORD, sent on every connection (better in the environment, out of `ps`)
    #[arg(
        long,
        env = "ZKLOCK_AUTH",
        value_name = "USER:PASSWORD",
        global = true,
        hide_env_values = true
    )]
    auth: Option<String>,
    /// ACL of the nodes zklock creates: open | creator (only these credentials) | creator-read (and anyone may read)
    /// | scheme:id:perms[,…]
    #[arg(long, env = "ZKLOCK_ACL", default_value = "open", value_name = "ACL", global = true)]
    acl: String,
    /// TLS to the servers' secure client ports, trusting the CA certificates in this PEM file
    #[arg(long, env = "ZKLOCK_TLS_CA", value_name = "FILE", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for servers that require one (its subject becomes an x509 identity); needs --tls-key
    #[arg(long, env = "ZKLOCK_TLS_CERT", global = true, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM)
    #[arg(long, env = "ZKLOCK_TLS_KEY", global = true, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// SASL DIGEST-MD5 credentials USER:PASSWORD (a user of the servers' JAAS Server section)
    #[arg(
        long,
        env = "ZKLOCK_SASL",
        value_name = "USER:PASSWORD",
        global = true,
        hide_env_values = true
    )]
    sasl: Option<String>,
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
