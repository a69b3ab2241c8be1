//! A checker for lock histories: given acquire / release events with time, client and fencing token, it verifies
//! mutual exclusion (readers may share with readers), the order of fencing tokens, and progress.
//!
//! Events are recorded by the contenders themselves, on one clock, *inside* the critical section (acquire after the
//! lock was granted, release before it is given back), so an overlap in the history is an overlap of critical
//! sections.

use std::collections::BTreeMap;
use std::fmt;

/// Whether a hold excludes everyone or only writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Fair, exclusive, reentrant and write holds.
    Exclusive,
    /// Read holds.
    Shared,
}

/// One event of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `client` entered its critical section at `at` (nanoseconds on the recording clock) with `token`.
    Acquired {
        /// When.
        at: u64,
        /// Who.
        client: usize,
        /// The fencing token of the hold.
        token: u128,
        /// Exclusive or shared.
        mode: Mode,
    },
    /// `client` left its critical section at `at`.
    Released {
        /// When.
        at: u64,
        /// Who.
        client: usize,
    },
}

impl Event {
    /// When it happened.
    pub fn at(&self) -> u64 {
        match self {
            Event::Acquired { at, .. } | Event::Released { at, .. } => *at,
        }
    }
}

/// What is wrong with a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two holds overlapped where one of them was exclusive.
    Overlap {
        /// When the second hold began.
        at: u64,
        /// The client already holding.
        holder: usize,
        /// The client that entered.
        entrant: usize,
    },
    /// An exclusive hold's token was not above every token granted before it.
    TokenOrder {
        /// When.
        at: u64,
        /// The token.
        token: u128,
        /// The highest token granted before.
        before: u128,
    },
    /// A client released without holding, or acquired twice without releasing.
    Malformed {
        /// When.
        at: u64,
        /// Who.
        client: usize,
    },
    /// A client that took part never acquired.
    NoProgress {
        /// Who.
        client: usize,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Checks a history (in any order; it is sorted by time). Events at the same instant are taken as a handoff: the
/// releases of holds that began earlier first, then the acquires, then the releases of holds that began at that
/// instant (a zero-length hold, as of a holder killed right after it entered). `clients` lists the clients that must
/// have acquired at least once.
pub fn check(events: &[Event], clients: &[usize]) -> Vec<Violation> {
    let mut events = events.to_vec();
    events.sort_by_key(Event::at);
    let mut holding: BTreeMap<usize, Mode> = BTreeMap::new();
    let mut acquired: BTreeMap<usize, usize> = BTreeMap::new();
    let mut highest: Option<u128> = None;
    let mut out = Vec::new();
    for instant in events.chunk_by(|a, b| a.at() == b.at()) {
        let begins_now = |c: usize| {
            instant
                .iter()
                .any(|e| matches!(*e, Event::Acquired { client, .. } if client == c))
        };
        let ordered = instant
            .iter()
            .filter(|e| matches!(**e, Event::Released { client, .. } if !begins_now(client)))
            .chain(instant.iter().filter(|e| matches!(e, Event::Acquired { .. })))
            .chain(
                instant
                    .iter()
                    .filter(|e| matches!(**e, Event::Released { client, .. } if begins_now(client))),
            );
        for e in ordered {
            apply(e, &mut holding, &mut acquired, &mut highest, &mut out);
        }
    }
    for &c in clients {
        if acquired.get(&c).copied().unwrap_or(0) == 0 {
            out.push(Violation::NoProgress { client: c });
        }
    }
    out
}

fn apply(
    e: &Event,
    holding: &mut BTreeMap<usize, Mode>,
    acquired: &mut BTreeMap<usize, usize>,
    highest: &mut Option<u128>,
    out: &mut Vec<Violation>,
) {
    match *e {
        Event::Acquired {
            at,
            client,
            token,
            mode,
        } => {
            if holding.contains_key(&client) {
                out.push(Violation::Malformed { at, client });
                return;
            }
            for (&other, &m) in holding.iter() {
                if mode == Mode::Exclusive || m == Mode::Exclusive {
                    out.push(Violation::Overlap {
                        at,
                        holder: other,
                        entrant: client,
                    });
                }
            }
            if mode == Mode::Exclusive {
                if let Some(h) = highest.filter(|h| token <= *h) {
                    out.push(Violation::TokenOrder { at, token, before: h });
                }
            }
            *highest = Some(highest.map_or(token, |h| h.max(token)));
            holding.insert(client, mode);
            *acquired.entry(client).or_default() += 1;
        }
        Event::Released { at, client } => {
            if holding.remove(&client).is_none() {
                out.push(Violation::Malformed { at, client });
            }
        }
    }
}
