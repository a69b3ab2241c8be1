//! The history checker's own tests (`src/history.rs`): serial histories pass; an overlap or a stale token put into
//! one is found. Here rather than in the library's unit tests, so that the test build does not compile the whole
//! conformance library a second time for them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use recipes_conformance::history::{check, Event, Mode, Violation};

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
