//! The lease of a ZooKeeper session: until when the client may be sure that the leader has not expired it.
//!
//! The leader alone expires sessions. It expires one no earlier than `timeout` after it last *touched* it, and it
//! touches a session connected to a follower only when that follower reports the session's activity, in its answer to
//! the leader's ping (every half tick). A follower cut off from the leader goes on answering reads from its own state
//! for a while (until `syncLimit` ticks pass) while the leader hears nothing: an answered read proves nothing about
//! the leader. So the lease moves forward only on evidence that passed through the leader:
//!
//! - a `sync` or a write, sent at `t`, is answered only after the leader handled it, so the follower's link to the
//!   leader worked at a moment after `t`;
//! - the leader pings the follower every half tick, and the follower answers with the sessions that were active since
//!   the last ping; with a tick of at most half the session timeout (ZooKeeper's default minimum session timeout is two
//!   ticks), every activity at or before `t − timeout/4` was reported in a ping that completed before `t`;
//! - so the leader touched the session at or after the send time of our latest request answered at or before
//!   `t − timeout/4`, and cannot expire it before that time plus `timeout`.
//!
//! The lease's base is that send time; the recipes trust the lock until `base + timeout × (1 − margin)`. A new session
//! is created by the leader itself, so its base is the send time of the connect request.
//!
//! Time is measured on the monotonic clock and corrected for time the machine spent suspended (`CLOCK_BOOTTIME`):
//! the monotonic clock stops during a suspend while the server's does not.

use std::collections::VecDeque;
use std::time::Duration;

use recipes_core::backend::{Lease, SessionId};
use tokio::time::Instant;

/// A moment on both clocks: the monotonic one (timers) and the one that counts suspended time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp {
    pub mono: Instant,
    /// Nanoseconds of `CLOCK_BOOTTIME` (monotonic time plus time suspended).
    pub boot: u128,
}

impl Stamp {
    pub fn now() -> Stamp {
        Stamp {
            mono: Instant::now(),
            boot: boottime_ns(),
        }
    }
}

#[cfg(target_os = "linux")]
fn boottime_ns() -> u128 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME) {
        Ok(ts) => ts.tv_sec() as u128 * 1_000_000_000 + ts.tv_nsec() as u128,
        Err(_) => monotonic_ns(),
    }
}

#[cfg(not(target_os = "linux"))]
fn boottime_ns() -> u128 {
    monotonic_ns()
}

#[allow(dead_code)]
fn monotonic_ns() -> u128 {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos()
}

/// The lease of one session, from the evidence the backend records.
#[derive(Debug)]
pub(crate) struct LeaseClock {
    session: SessionId,
    /// The shortest session timeout a server of the ensemble grants this client (the lease assumes the shortest,
    /// since a reconnection renegotiates it).
    timeout: Duration,
    /// Send times of recent requests the server answered (activity a server saw), oldest first.
    activity: VecDeque<Stamp>,
    /// The send time of the latest request known to have been reported to the leader.
    base: Option<Stamp>,
}

/// How many recent activities are kept at most. Activity is thinned by time (see [`GRAIN_PER_TIMEOUT`]), so this
/// many span several session timeouts: a busy session never pushes out the stamp a quarter timeout old that the
/// lease needs (with a cap by count alone, 256, more than about 170 requests a second on a 6 s session froze the
/// lease at the connect time: found by review).
const ACTIVITY_KEPT: usize = 4096;
/// Activity closer than `timeout / GRAIN_PER_TIMEOUT` after a kept stamp adds nothing: the earlier stamp stands for
/// it, which can only make the lease shorter.
const GRAIN_PER_TIMEOUT: u32 = 512;

impl LeaseClock {
    /// A new session, created by the leader after the connect request was sent at `connect_sent`.
    pub fn created(session: SessionId, timeout: Duration, connect_sent: Stamp) -> Self {
        LeaseClock {
            session,
            timeout,
            activity: VecDeque::from([connect_sent]),
            base: Some(connect_sent),
        }
    }

    pub fn session(&self) -> SessionId {
        self.session
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The session timeout to assume from now on (never longer than the one known).
    pub fn shorten_timeout(&mut self, timeout: Duration) {
        self.timeout = self.timeout.min(timeout);
    }

    /// The old, wrong rule (a mutant): any answer moves the lease to its send time.
    pub fn created_at(&mut self, sent: Stamp) {
        self.answered(sent);
        if self.base.is_none_or_before(sent) {
            self.base = Some(sent);
        }
    }

    /// A server answered a request of this session sent at `sent`: activity it saw.
    pub fn answered(&mut self, sent: Stamp) {
        if self.base.is_some_and(|b| sent <= b) {
            return;
        }
        let at = self.activity.partition_point(|a| *a <= sent);
        let grain = (self.timeout / GRAIN_PER_TIMEOUT).as_nanos();
        if at > 0 && sent.boot.saturating_sub(self.activity[at - 1].boot) < grain {
            return;
        }
        self.activity.insert(at, sent);
        if self.activity.len() > ACTIVITY_KEPT {
            self.activity.pop_front();
        }
    }

    /// A request that passed through the leader (a `sync` or a write), sent at `sent`, was answered: every activity
    /// at least a quarter of the timeout older was reported to the leader.
    pub fn leader_confirmed(&mut self, sent: Stamp) {
        self.answered(sent);
        let slack = (self.timeout / 4).as_nanos();
        let cutoff = sent.boot.saturating_sub(slack);
        let reported = self.activity.iter().rev().find(|a| a.boot <= cutoff).copied();
        if let Some(r) = reported {
            if self.base.is_none_or_before(r) {
                self.base = Some(r);
            }
            while self.activity.front().is_some_and(|a| *a < r) {
                self.activity.pop_front();
            }
        }
    }

    /// The send time of the latest request a server answered (or the connect request).
    pub fn last_answered(&self) -> Option<Stamp> {
        self.activity.back().copied().or(self.base)
    }

    /// The lease, as the recipes read it: the base, moved back by any time the machine spent suspended since.
    pub fn lease(&self, now: Stamp) -> Lease {
        let answered_send = self.base.map(|b| {
            let suspended = now
                .boot
                .saturating_sub(b.boot)
                .saturating_sub(now.mono.saturating_duration_since(b.mono).as_nanos());
            let suspended = Duration::from_nanos(suspended.min(u64::MAX as u128) as u64);
            b.mono.checked_sub(suspended).unwrap_or(b.mono)
        });
        Lease {
            session: self.session,
            answered_send,
            session_timeout: self.timeout,
        }
    }
}

trait BeforeExt {
    fn is_none_or_before(&self, other: Stamp) -> bool;
}

impl BeforeExt for Option<Stamp> {
    fn is_none_or_before(&self, other: Stamp) -> bool {
        self.is_none_or(|s| s < other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(8);

    fn at(base: Stamp, ms: u64) -> Stamp {
        at_ns(base, ms * 1_000_000)
    }

    fn at_ns(base: Stamp, ns: u64) -> Stamp {
        Stamp {
            mono: base.mono + Duration::from_nanos(ns),
            boot: base.boot + u128::from(ns),
        }
    }

    #[test]
    fn a_new_session_counts_from_its_connect_request() {
        let t0 = Stamp::now();
        let l = LeaseClock::created(7, T, t0);
        assert_eq!(l.lease(at(t0, 100)).answered_send, Some(t0.mono));
    }

    #[test]
    fn answered_reads_prove_nothing_about_the_leader() {
        // A follower cut off from the leader goes on answering reads: the lease must not move.
        let t0 = Stamp::now();
        let mut l = LeaseClock::created(7, T, t0);
        for ms in (1000..20_000).step_by(1000) {
            l.answered(at(t0, ms));
        }
        assert_eq!(l.lease(at(t0, 20_000)).answered_send, Some(t0.mono));
    }

    #[test]
    fn a_sync_confirms_activity_a_quarter_timeout_older() {
        let t0 = Stamp::now();
        let mut l = LeaseClock::created(7, T, t0);
        // Heartbeats (syncs) every T/8 = 1 s.
        for ms in (1000..=6000).step_by(1000) {
            l.leader_confirmed(at(t0, ms));
        }
        // Confirmed at 6 s: activity at or before 6 − 2 = 4 s was reported.
        assert_eq!(l.lease(at(t0, 6000)).answered_send, Some(at(t0, 4000).mono));
        // Reads after that add activity but move nothing.
        l.answered(at(t0, 6500));
        assert_eq!(l.lease(at(t0, 6600)).answered_send, Some(at(t0, 4000).mono));
        // A write (leader-confirmed) at 7 s reports up to 5 s.
        l.leader_confirmed(at(t0, 7000));
        assert_eq!(l.lease(at(t0, 7000)).answered_send, Some(at(t0, 5000).mono));
    }

    #[test]
    fn a_busy_session_keeps_the_evidence_its_lease_needs() {
        // 10,000 answered requests within a quarter of the timeout (T = 8 s: 2 s), then syncs: the base still moves
        // to activity a quarter timeout older (a cap by count alone lost it, and the lease froze at the connect).
        let t0 = Stamp::now();
        let mut l = LeaseClock::created(7, T, t0);
        // An answer every 0.2 ms from 1 s to 5 s (5,000 per second), a sync answered every second from 3 s.
        for i in 0..20_000u64 {
            let ns = 1_000_000_000 + i * 200_000;
            if ns % 1_000_000_000 == 0 && ns >= 3_000_000_000 {
                l.leader_confirmed(at_ns(t0, ns));
            } else {
                l.answered(at_ns(t0, ns));
            }
        }
        l.leader_confirmed(at(t0, 5000));
        let base = l.lease(at(t0, 5000)).answered_send.expect("a base");
        // Confirmed at 5 s: activity at or before 3 s was reported; thinning keeps a stamp at most T/512 earlier.
        let lag = at(t0, 3000).mono.saturating_duration_since(base);
        assert!(lag <= T / 512, "the base lags {lag:?} behind 3 s");
        assert!(l.activity.len() <= 600, "{} stamps kept", l.activity.len());
    }

    #[test]
    fn the_base_never_moves_back() {
        let t0 = Stamp::now();
        let mut l = LeaseClock::created(7, T, at(t0, 5000));
        l.leader_confirmed(at(t0, 6000)); // reports activity up to 4 s: none newer than the base
        assert_eq!(l.lease(at(t0, 6000)).answered_send, Some(at(t0, 5000).mono));
    }

    #[test]
    fn time_suspended_counts_against_the_lease() {
        let t0 = Stamp::now();
        let l = LeaseClock::created(7, T, t0);
        // 1 s of monotonic time, but 30 s of boot time: the machine slept 29 s.
        let now = Stamp {
            mono: t0.mono + Duration::from_secs(1),
            boot: t0.boot + 30_000_000_000,
        };
        let sent = l.lease(now).answered_send.unwrap();
        assert_eq!(t0.mono.duration_since(sent), Duration::from_secs(29));
        assert!(sent + T < now.mono, "the lease is long gone after the sleep");
    }

    #[test]
    fn a_shorter_timeout_shortens_the_lease() {
        let t0 = Stamp::now();
        let mut l = LeaseClock::created(7, T, t0);
        l.shorten_timeout(Duration::from_secs(1));
        l.shorten_timeout(Duration::from_secs(5));
        assert_eq!(l.lease(t0).session_timeout, Duration::from_secs(1));
    }
}
