//! The watchdog: the command's parent, and the one process that can always find everything the command started.
//!
//! Processes leave the command's process group (GNU `timeout`, `set -m` job control, `setsid`, daemons), so
//! signalling the group misses them, and they would work on under a lock nobody holds. zklock therefore does not start
//! the command itself: it starts this copy of itself (`zklock --internal-watchdog`, renamed `zkl-watchdog`, in a
//! process group of its own so that Ctrl-C and `pkill zklock` miss it), which becomes a *child subreaper* (Linux
//! `PR_SET_CHILD_SUBREAPER`) and starts the command. Every process the command starts, however it forks or whatever
//! group or session it moves to, stays a descendant of the watchdog while it lives: orphans are re-parented to the
//! nearest subreaper. The watchdog finds them through `/proc` and signals each one, and reaps them.
//!
//! It talks to zklock over a socket (one line per message):
//! - zklock → watchdog: `signal <n>` (to the command's own process group: a forwarded SIGINT, SIGTERM or SIGHUP,
//!   followed by SIGCONT so that a stopped command acts on it), `term` / `kill` (to every descendant), `deadline <ms>`
//!   (the moment, on `CLOCK_BOOTTIME`, by which every descendant must be dead unless zklock moves it: zklock moves it
//!   as the lease moves), `done` (zklock is finishing normally). The socket closing without `done` means zklock died
//!   (SIGKILL, a crash, the OOM killer): every descendant gets SIGKILL at once, long before the session, and so the
//!   lock, can pass to anyone else. A deadline that passes means zklock is alive but not acting (stopped by SIGSTOP, a
//!   debugger, starved of CPU): every descendant gets SIGKILL then, before the lease's margin runs out.
//! - watchdog → zklock: `started <pid>` or `failed <notfound|exec> <message>`, `exited <status>` when the command
//!   ends (its exit code, or 128 + the signal that killed it), and `gone` once no descendant is left.
//!
//! zklock is a subreaper too: should the watchdog itself be killed, the command's processes are re-parented to
//! zklock, which kills them all (it sees the socket close without `gone`).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::procs::{boottime_ms, descendants, signal_all};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

/// The hidden first argument that turns zklock into the watchdog:
/// `zkl-watchdog --internal-watchdog <fd> <first deadline> -- <command>…`.
pub const ARG: &str = "--internal-watchdog";

/// How long zklock waits for the watchdog's socket to take an order.
const ORDER_WAIT: Duration = Duration::from_millis(50);

/// The watchdog's process name.
pub const NAME: &str = "zkl-watchdog";

/// `at` in milliseconds of [`boottime_ms`], at least 1 (0 means no deadline).
fn boottime_ms_at(at: tokio::time::Instant) -> u64 {
    let left = at.saturating_duration_since(tokio::time::Instant::now());
    boottime_ms()
        .saturating_add(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
        .max(1)
}

/// How often the watchdog looks at the deadline.
const DEADLINE_LOOK: Duration = Duration::from_millis(5);

/// Kills every descendant of `root` once the deadline (milliseconds of [`boottime_ms`], 0: none yet) has passed; the
/// deadline stays in force, so a process started after a kill is killed too.
fn enforce_deadline(root: i32, deadline: Arc<AtomicU64>) {
    let mut said = false;
    loop {
        std::thread::sleep(DEADLINE_LOOK);
        let d = deadline.load(Ordering::Acquire);
        if d != 0 && boottime_ms() >= d && !descendants(root).is_empty() {
            signal_all(root, Signal::SIGKILL);
            if !said {
                said = true;
                eprintln!(
                    "zkl-watchdog: zklock did not renew its deadline (stopped?) before the lease ran out; every \
                     process the command started was killed"
                );
            }
        }
    }
}

/// The watchdog's main: `args` are what follows [`ARG`]: the socket's descriptor, `--`, the command.
pub fn main(args: Vec<OsString>) -> ExitCode {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_name(c"zkl-watchdog");
        debug_assert_eq!(NAME, "zkl-watchdog");

        let _ = nix::sys::prctl::set_child_subreaper(true);
    }
    let number = |i: usize| args.get(i).and_then(|a| a.to_str()).and_then(|s| s.parse::<u64>().ok());
    let fd = number(0).and_then(|n| i32::try_from(n).ok());
    let first_deadline = number(1);
    let (Some(fd), Some(first_deadline), Some(command)) = (fd, first_deadline, args.get(3..).filter(|c| !c.is_empty()))
    else {
        eprintln!("zkl-watchdog: internal use only");
        return ExitCode::from(crate::status::USAGE);
    };
    let sock = UnixStream::from(adopt_fd(fd));
    // The command must not inherit the socket.
    let _ = nix::fcntl::fcntl(&sock, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    let out = Arc::new(Mutex::new(match sock.try_clone() {
        Ok(s) => s,
        Err(_) => return ExitCode::from(crate::status::SOFTWARE),
    }));
    let say = {
        let out = out.clone();
        move |line: String| {
            let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(o, "{line}").and_then(|()| o.flush());
        }
    };
    let me = std::process::id() as i32;
    // The deadline zklock keeps moving, enforced on a thread of its own, from before the command starts: a zklock
    // stopped at any moment after the start cannot leave the command running past the lease.
    let deadline = Arc::new(AtomicU64::new(first_deadline));
    {
        let deadline = deadline.clone();
        std::thread::spawn(move || enforce_deadline(me, deadline));
    }
    if first_deadline != 0 && boottime_ms() >= first_deadline {
        // zklock was held up (stopped, starved) between the acquire and now, past the lease: the lock may be
        // another's already.
        say("failed deadline the kill deadline passed before the command started".to_owned());
        return ExitCode::SUCCESS;
    }
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]).process_group(0);
    crate::procs::stop_with_parent(&mut cmd);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let kind = if e.kind() == std::io::ErrorKind::NotFound {
                "notfound"
            } else {
                "exec"
            };
            say(format!("failed {kind} {e}"));
            return ExitCode::SUCCESS;
        }
    };
    let pid = child.id() as i32;
    // The std handle is not used to wait: `reap_all` reaps every child, this one included.
    std::mem::forget(child);
    say(format!("started {pid}"));

    // Orders from zklock, on a thread of their own.
    let reader = {
        let sock = match sock.try_clone() {
            Ok(s) => s,
            Err(_) => return ExitCode::from(crate::status::SOFTWARE),
        };
        std::thread::spawn(move || obey(sock, me, pid, &deadline))
    };

    reap_all(pid, &say);
    say("gone".into());
    // Stay until zklock has read it (or is gone), so that its end of the socket sees `gone` before the close.
    let _ = reader.join();
    ExitCode::SUCCESS
}

/// Obeys zklock's orders on `sock` (`term`, `kill`, `deadline <ms>`, `signal <n>`, `done`) for the tree under `me`,
/// whose command is `pid`'s process group. zklock gone without a word: nothing it started may work on.
fn obey(sock: UnixStream, me: i32, pid: i32, deadline: &AtomicU64) {
    for line in BufReader::new(sock).lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        match (words.next(), words.next().and_then(|n| n.parse::<u64>().ok())) {
            (Some("done"), _) => return,
            (Some("term"), _) => {
                signal_all(me, Signal::SIGTERM);
                signal_all(me, Signal::SIGCONT);
            }
            (Some("kill"), _) => signal_all(me, Signal::SIGKILL),
            (Some("deadline"), Some(ms)) => deadline.store(ms.max(1), Ordering::Release),
            (Some("signal"), Some(n)) => {
                if let Some(sig) = i32::try_from(n).ok().and_then(|n| Signal::try_from(n).ok()) {
                    let _ = kill(Pid::from_raw(-pid), sig);
                    let _ = kill(Pid::from_raw(-pid), Signal::SIGCONT);
                }
            }
            _ => {}
        }
    }
    signal_all(me, Signal::SIGKILL);
    eprintln!("zkl-watchdog: zklock ended while its command ran; every process the command started was killed");
}

/// Reaps every child (orphans of the command's tree come to us) until none is left, and reports through `say` the
/// end of the command, `pid`.
fn reap_all(pid: i32, say: &impl Fn(String)) {
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(WaitStatus::Exited(p, code)) if p.as_raw() == pid => say(format!("exited {}", code.clamp(0, 255))),
            Ok(WaitStatus::Signaled(p, sig, _)) if p.as_raw() == pid => {
                say(format!("exited {}", (128 + sig as i32).clamp(0, 255)))
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => break, // ECHILD: nothing left
        }
    }
}

/// Takes ownership of the socket's descriptor, passed open by zklock (std offers no safe way to adopt an inherited
/// descriptor; architecture decision 24).
#[allow(unsafe_code)]
fn adopt_fd(fd: i32) -> OwnedFd {
    // SAFETY: zklock opened `fd` for this process alone and passed its number on our command line; nothing else in
    // this process owns or closes it, so taking ownership once, here, is sound.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// zklock's end of the watchdog: the process, and the socket to it.
#[derive(Debug)]
pub struct Watchdog {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>,
    orders: tokio::net::unix::OwnedWriteHalf,
}

/// What the watchdog reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The command ended, with this exit status (128 + n when killed by signal n).
    Exited(u8),
    /// No process the command started is left.
    Gone,
    /// The watchdog itself ended without saying `gone` (it was killed).
    Died,
}

/// Why the command could not be started.
#[derive(Debug)]
pub enum StartError {
    /// The command was not found.
    NotFound(String),
    /// The command could not be executed.
    Exec(String),
    /// The watchdog could not be started.
    Watchdog(String),
    /// The kill deadline had passed when the watchdog was about to start the command (zklock was held up past the
    /// lease): it did not start it.
    DeadlinePassed,
}

impl Watchdog {
    /// SIGKILL to every process the command started, sent by zklock itself (the watchdog may be stopped): they stay
    /// the watchdog's descendants, whatever it is doing.
    pub fn kill_tree(&self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            signal_all(pid, Signal::SIGKILL);
        }
    }

    /// Starts the watchdog, which starts `command` (with `env` added to the environment) and reports its pid.
    ///
    /// `deadline`: when every descendant must be dead unless zklock moves it (`None`: none until told).
    pub async fn start(
        command: &[OsString],
        env: &[(&str, String)],
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Watchdog, StartError> {
        use tokio::io::AsyncBufReadExt;
        let fail = |e: std::io::Error| StartError::Watchdog(e.to_string());
        let (ours, theirs) = UnixStream::pair().map_err(fail)?;
        // Inherited by the watchdog (and only by it: zklock starts no other process).
        nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
            .map_err(|e| StartError::Watchdog(e.to_string()))?;
        // On Linux, /proc/self/exe: in the forked child it is still zklock's own image, even when the file was
        // replaced or deleted since zklock started (an upgrade).
        let exe = if cfg!(target_os = "linux") {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe().map_err(fail)?
        };
        let mut cmd = tokio::process::Command::new(exe);
        // Its name (and argv[0]) do not contain "zklock": `pkill -STOP zklock` stops zklock, not the process that
        // enforces the deadline of a stopped zklock.
        cmd.arg0(NAME)
            .arg(ARG)
            .arg(theirs.as_raw_fd().to_string())
            .arg(deadline.map_or(0, boottime_ms_at).to_string())
            .arg("--")
            .args(command)
            .process_group(0)
            .kill_on_drop(false);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(fail)?;
        drop(theirs);
        ours.set_nonblocking(true).map_err(fail)?;
        let (read, orders) = tokio::net::UnixStream::from_std(ours).map_err(fail)?.into_split();
        let mut lines = tokio::io::BufReader::new(read).lines();
        let first = lines.next_line().await.map_err(fail)?.unwrap_or_default();
        let mut words = first.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("started"), Some(_pid), _) => Ok(Watchdog { child, lines, orders }),
            (Some("failed"), Some("notfound"), why) => Err(StartError::NotFound(why.unwrap_or_default().to_owned())),
            (Some("failed"), Some("deadline"), _) => Err(StartError::DeadlinePassed),
            (Some("failed"), _, why) => Err(StartError::Exec(why.unwrap_or_default().to_owned())),
            _ => Err(StartError::Watchdog(format!("it reported {first:?}"))),
        }
    }

    /// Tells the watchdog when every descendant must be dead unless a later deadline comes first.
    pub async fn deadline(&mut self, at: tokio::time::Instant) {
        self.order(&format!("deadline {}", boottime_ms_at(at))).await;
    }

    /// Sends an order: `term`, `kill` (every descendant), `signal <n>` (the command's group), `done`.
    ///
    /// Waits at most [`ORDER_WAIT`] for the socket: a stopped watchdog reads nothing, and zklock must go on watching
    /// the lock. An order cut short leaves a partial line, which garbles the next one into a line the watchdog
    /// ignores (every order begins with a letter, so no garbled line reads as a later deadline); zklock kills by
    /// itself what the watchdog may not.
    pub async fn order(&mut self, order: &str) {
        use tokio::io::AsyncWriteExt;
        let line = format!("{order}\n");
        let _ = tokio::time::timeout(ORDER_WAIT, self.orders.write_all(line.as_bytes())).await;
    }

    /// The next report.
    ///
    /// # Cancel safety
    /// Cancel safe: a report is consumed only when returned.
    pub async fn next(&mut self) -> Report {
        loop {
            match self.lines.next_line().await {
                Ok(Some(line)) => {
                    let mut w = line.split_whitespace();
                    match (w.next(), w.next().and_then(|c| c.parse::<u8>().ok())) {
                        (Some("exited"), Some(code)) => return Report::Exited(code),
                        (Some("gone"), _) => return Report::Gone,
                        _ => {}
                    }
                }
                _ => {
                    let _ = self.child.wait().await;
                    return Report::Died;
                }
            }
        }
    }

    /// zklock is finishing normally (after `gone`): the watchdog exits.
    pub async fn done(mut self) {
        self.order("done").await;
        let _ = self.child.wait().await;
    }
}
