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
    fn at(&self) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A serial schedule: holds one after the other, readers in groups, tokens increasing.
    fn serial(spec: &[(usize, Mode, u64)]) -> Vec<Event> {
        let mut t = 0;
        let mut out = Vec::new();
        for (i, &(client, mode, len)) in spec.iter().enumerate() {
            let token = i as u128 + 1;
            t += 1;
            out.push(Event::Acquired {
                at: t,
                client,
                token,
                mode,
            });
            t += len;
            out.push(Event::Released { at: t, client });
        }
        out
    }

    proptest! {
        #[test]
        fn serial_histories_are_good(spec in proptest::collection::vec((0usize..6, any::<bool>(), 0u64..50), 1..60)) {
            let spec: Vec<(usize, Mode, u64)> = spec.into_iter()
                .map(|(c, shared, len)| (c, if shared { Mode::Shared } else { Mode::Exclusive }, len))
                .collect();
            let clients: Vec<usize> = spec.iter().map(|s| s.0).collect();
            prop_assert!(check(&serial(&spec), &clients).is_empty());
        }

        #[test]
        fn an_injected_overlap_is_found(spec in proptest::collection::vec((0usize..6, 1u64..50), 2..40), pick in any::<prop::sample::Index>()) {
            // All exclusive; move one acquire back into the previous hold.
            let spec: Vec<(usize, Mode, u64)> = spec.into_iter().map(|(c, len)| (c, Mode::Exclusive, len)).collect();
            let mut h = serial(&spec);
            let acquires: Vec<usize> = h.iter().enumerate().filter(|(_, e)| matches!(e, Event::Acquired { .. })).map(|(i, _)| i).skip(1).collect();
            let i = acquires[pick.index(acquires.len())];
            let prev_release_at = h[i - 1].at();
            let prev_client = match h[i - 1] { Event::Released { client, .. } => client, _ => unreachable!() };
            if let Event::Acquired { at, client, .. } = &mut h[i] {
                prop_assume!(*client != prev_client);
                *at = prev_release_at - 1;
            }
            let found = check(&h, &[]);
            prop_assert!(found.iter().any(|v| matches!(v, Violation::Overlap { .. })), "{:?}", found);
        }

        #[test]
        fn a_stale_token_is_found(spec in proptest::collection::vec((0usize..6, 1u64..50), 2..40), pick in any::<prop::sample::Index>()) {
            let spec: Vec<(usize, Mode, u64)> = spec.into_iter().map(|(c, len)| (c, Mode::Exclusive, len)).collect();
            let mut h = serial(&spec);
            let acquires: Vec<usize> = h.iter().enumerate().filter(|(_, e)| matches!(e, Event::Acquired { .. })).map(|(i, _)| i).skip(1).collect();
            let i = acquires[pick.index(acquires.len())];
            if let Event::Acquired { token, .. } = &mut h[i] {
                *token = 1; // not above the first hold's
            }
            let found = check(&h, &[]);
            let stale = found.iter().any(|v| matches!(v, Violation::TokenOrder { .. }));
            prop_assert!(stale, "{:?}", found);
        }
    }

    #[test]
    fn readers_may_share_writers_may_not() {
        let shared = vec![
            Event::Acquired {
                at: 1,
                client: 1,
                token: 1,
                mode: Mode::Shared,
            },
            Event::Acquired {
                at: 2,
                client: 2,
                token: 2,
                mode: Mode::Shared,
            },
            Event::Released { at: 3, client: 1 },
            Event::Released { at: 4, client: 2 },
        ];
        assert!(check(&shared, &[1, 2]).is_empty());
        let mixed = vec![
            Event::Acquired {
                at: 1,
                client: 1,
                token: 1,
                mode: Mode::Shared,
            },
            Event::Acquired {
                at: 2,
                client: 2,
                token: 2,
                mode: Mode::Exclusive,
            },
            Event::Released { at: 3, client: 1 },
            Event::Released { at: 4, client: 2 },
        ];
        assert_eq!(
            check(&mixed, &[]),
            vec![Violation::Overlap {
                at: 2,
                holder: 1,
                entrant: 2
            }]
        );
        assert_eq!(check(&shared, &[1, 2, 3]), vec![Violation::NoProgress { client: 3 }]);
        let malformed = vec![Event::Released { at: 1, client: 1 }];
        assert_eq!(check(&malformed, &[]), vec![Violation::Malformed { at: 1, client: 1 }]);
    }

    fn x(at: u64, client: usize, token: u128) -> Event {
        Event::Acquired {
            at,
            client,
            token,
            mode: Mode::Exclusive,
        }
    }

    /// A hold that ends at the instant it began (a holder killed right after it entered) is a hold, not a
    /// release before an acquire; inside another hold it is an overlap.
    #[test]
    fn zero_length_holds() {
        let alone = vec![
            x(1, 1, 1),
            Event::Released { at: 1, client: 1 },
            x(2, 2, 2),
            Event::Released { at: 3, client: 2 },
        ];
        assert!(check(&alone, &[1, 2]).is_empty(), "{:?}", check(&alone, &[1, 2]));
        let handoff = vec![
            x(1, 1, 1),
            Event::Released { at: 5, client: 1 },
            x(5, 2, 2),
            Event::Released { at: 5, client: 2 },
        ];
        assert!(check(&handoff, &[]).is_empty(), "{:?}", check(&handoff, &[]));
        let inside = vec![
            x(1, 1, 1),
            x(5, 2, 2),
            Event::Released { at: 5, client: 2 },
            Event::Released { at: 9, client: 1 },
        ];
        assert_eq!(
            check(&inside, &[]),
            vec![Violation::Overlap {
                at: 5,
                holder: 1,
                entrant: 2
            }]
        );
    }
}
