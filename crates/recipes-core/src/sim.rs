//! Hooks for deterministic simulation: what a controlled explorer (`recipes-explore`) needs so that one schedule,
//! run again, makes exactly the same requests.
//!
//! Every acquire attempt names its node with a fresh id, and the ids of a multi-lock's members order its waits.
//! They are random by default; a simulation that replays a schedule from its choices makes them count instead, on
//! the one thread its runtime runs on.
//!
//! ```
//! recipes_core::sim::count_attempt_ids(Some(1));
//! // ... run one schedule on this thread's current-thread runtime ...
//! recipes_core::sim::count_attempt_ids(None); // random again
//! ```

use std::cell::Cell;

thread_local! {
    static COUNTED: Cell<Option<u128>> = const { Cell::new(None) };
}

/// Makes the attempt ids made on this thread count from `start` (spread over the id space, so that their names do
/// not sort in the order they were made), or random again with `None`.
pub fn count_attempt_ids(start: Option<u128>) {
    COUNTED.with(|c| c.set(start));
}

/// A fresh attempt id: random, or the next of this thread's counted ids.
pub(crate) fn attempt_id() -> uuid::Uuid {
    let counted = COUNTED.with(|c| {
        let n = c.get()?;
        c.set(Some(n.wrapping_add(1)));
        Some(n)
    });
    match counted {
        Some(n) => uuid::Uuid::from_u128(n.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835) | 1),
        None => uuid::Uuid::new_v4(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_ids_repeat_and_random_ones_do_not() {
        count_attempt_ids(Some(7));
        let a = (attempt_id(), attempt_id());
        count_attempt_ids(Some(7));
        let b = (attempt_id(), attempt_id());
        count_attempt_ids(None);
        assert_eq!(a, b);
        assert_ne!(a.0, a.1);
        assert_ne!(attempt_id(), attempt_id());
    }
}
