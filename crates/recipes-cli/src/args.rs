//! `zklock`'s command line: the arguments, the subcommands and the options every one of them shares, with the
//! examples `--help` prints.

use std::ffi::OsString;

use clap::{Args, Parser, Subcommand};

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

Exit status: the command's; 75 the wait ran out; 64 bad usage or invalid path; 69 the store (ZooKeeper or etcd)
unreachable; 70 the lock was lost while the command ran (it is sent SIGTERM, then SIGKILL); 76 the path holds a lock
node of another recipe or layout (one path takes one recipe family and one layout); 77 the path's ACL (etcd: the
user's roles) does not let these credentials contend, or the servers refused them (--auth, --sasl, --user,
--tls-cert, --acl); 126/127 the command cannot run.

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
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) inspect: Option<Sub>,
    #[command(flatten)]
    pub(crate) common: Common,
    /// Lock recipe: exclusive | fair | read | write | semaphore (with --permits)
    #[arg(short = 'r', long, default_value = "fair", value_name = "RECIPE")]
    pub(crate) recipe: String,
    /// The semaphore's permit count: at most this many commands hold it at once (with -r semaphore)
    #[arg(long, value_name = "N")]
    pub(crate) permits: Option<u32>,
    /// The signal sent to the command when another client asks this holder to let go (zklock revoke, Curator's
    /// Revoker): TERM | INT | HUP | none (ignore such requests); the lock is released once the command's processes
    /// have ended
    #[arg(long, default_value = "TERM", value_name = "SIGNAL")]
    pub(crate) revoke_signal: String,
    /// Stand as candidate ID in the election at PATH and run the command only while leading (not with -r or
    /// --permits): the command gets ZKLOCK_TERM (the term, a fencing token) and ZKLOCK_CANDIDATE
    #[arg(long, value_name = "ID", conflicts_with = "permits")]
    pub(crate) elect: Option<String>,
    /// The candidate's data, for those who read who leads (an address to reach the leader at); with --elect
    #[arg(long, value_name = "DATA", requires = "elect")]
    pub(crate) elect_data: Option<String>,
    /// Stand as Curator's LeaderLatch does (its `latch-` nodes; with --elect and --layout curator); without it, the
    /// Curator layout's election is its LeaderSelector's
    #[arg(long, requires = "elect")]
    pub(crate) latch: bool,
    /// Give up after this long (500ms, 10s, 2m; 0 = try once) [default: wait forever]
    #[arg(short = 'w', long, value_name = "DURATION", allow_hyphen_values = true)]
    pub(crate) wait: Option<String>,
    /// When the lock is at risk, how long the command gets between SIGTERM and SIGKILL; it must be dead before the
    /// server may expire the session, so at most a tenth of the session timeout [default: that, at most 3s]
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub(crate) term_grace: Option<String>,
    /// Say nothing when the wait runs out (exit 75), so that cron does not mail every skipped run
    #[arg(short = 'q', long)]
    pub(crate) quiet: bool,
    /// Say on stderr which node holds the lock, its fencing token and how long the wait took
    #[arg(short = 'v', long)]
    pub(crate) verbose: bool,
    /// The lock path (absolute ZooKeeper path)
    #[arg(value_name = "PATH", required = true)]
    pub(crate) path: Option<String>,
    /// The command to run while holding the lock, after `--`
    #[arg(value_name = "COMMAND", last = true, required = true, num_args = 1..)]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Sub {
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
pub(crate) struct Common {
    /// ZooKeeper connect string (host:port,…/chroot), or etcd://host:port,… for etcd
    #[arg(
        short = 's',
        long,
        env = "ZKLOCK_SERVERS",
        default_value = "127.0.0.1:2181",
        value_name = "HOSTS",
        global = true
    )]
    pub(crate) servers: String,
    /// Node layout: native | curator | kazoo (ZooKeeper's peers) | etcd (etcd's own lock, `etcdctl lock`)
    #[arg(long, default_value = "native", value_name = "LAYOUT", global = true)]
    pub(crate) layout: String,
    /// Session timeout: ZooKeeper's (the servers may grant less), or the etcd lease's TTL (whole seconds, at least 2)
    #[arg(
        long,
        default_value = "10s",
        value_name = "DURATION",
        global = true,
        allow_hyphen_values = true
    )]
    pub(crate) session_timeout: String,
    /// How long connecting may take (a server that refuses, or whose name does not resolve, fails at once)
    #[arg(
        long,
        default_value = "5s",
        value_name = "DURATION",
        global = true,
        allow_hyphen_values = true
    )]
    pub(crate) connect_timeout: String,
    /// Digest credentials USER:PASSWORD, sent on every connection (better in the environment, out of `ps`)
    #[arg(
        long,
        env = "ZKLOCK_AUTH",
        value_name = "USER:PASSWORD",
        global = true,
        hide_env_values = true
    )]
    pub(crate) auth: Option<String>,
    /// ACL of the nodes zklock creates: open | creator (only these credentials) | creator-read (and anyone may read)
    /// | scheme:id:perms[,…]
    #[arg(long, env = "ZKLOCK_ACL", default_value = "open", value_name = "ACL", global = true)]
    pub(crate) acl: String,
    /// TLS to the servers' secure client ports, trusting the CA certificates in this PEM file
    #[arg(long, env = "ZKLOCK_TLS_CA", value_name = "FILE", global = true)]
    pub(crate) tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for servers that require one (its subject becomes an x509 identity); needs --tls-key
    #[arg(long, env = "ZKLOCK_TLS_CERT", global = true, requires = "tls_key")]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM)
    #[arg(long, env = "ZKLOCK_TLS_KEY", global = true, requires = "tls_cert")]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// etcd's own user USER:PASSWORD (etcdctl user add), for members with authentication enabled (etcd only)
    #[arg(
        long,
        env = "ZKLOCK_USER",
        value_name = "USER:PASSWORD",
        global = true,
        hide_env_values = true
    )]
    pub(crate) user: Option<String>,
    /// SASL DIGEST-MD5 credentials USER:PASSWORD (a user of the servers' JAAS Server section)
    #[arg(
        long,
        env = "ZKLOCK_SASL",
        value_name = "USER:PASSWORD",
        global = true,
        hide_env_values = true
    )]
    pub(crate) sasl: Option<String>,
}
