//! The built-in oracles that run at every step (those at the end are in the world's final checks).

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::explorer::Explorer;
use crate::tracked::{Sharing, Tracker};
use crate::{Builtin, Step};

/// The fencing token's creation id (the token is the node's creation id times 2³², plus a cohort's pass).
fn creation_id(token: u128) -> i64 {
    (token >> 32) as i64
}

pub(crate) fn at_step<S>(ex: &Explorer<S>, step: &Step<'_, S>, tracker: &mut Tracker) -> Result<(), String> {
    let on = |b: Builtin| ex.on(b);
    if on(Builtin::OneHolder) && !tracker.guards.is_empty() {
        one_holder(step, tracker)?;
    }
    if on(Builtin::WritesInLockOrder) {
        if let Some(v) = step.store.violation() {
            return Err(v);
        }
    }
    if on(Builtin::Deadlines) {
        if let Some((p, what, by)) = tracker.overruns.first() {
            return Err(format!("process {p}: {what} ran past its deadline (by {by:?})"));
        }
        let now = Instant::now();
        if let Some((p, what, due, _)) = tracker.deadlines.iter().find(|d| d.2 < now) {
            return Err(format!(
                "process {p}: {what} ran past its deadline (by {:?})",
                now.duration_since(*due)
            ));
        }
    }
    Ok(())
}

/// Among the valid guards of live processes, at most one exclusive hold per lock, and none beside a shared hold of
/// another node. Holds on nodes an operator deleted are left out: the lease no longer promises anything once a node
/// is deleted behind the library's back (its holder learns through `lost()`).
fn one_holder<S>(step: &Step<'_, S>, tracker: &mut Tracker) -> Result<(), String> {
    let mut by_path: BTreeMap<String, Vec<(usize, Sharing, String, u128)>> = BTreeMap::new();
    for (process, sharing, h) in tracker.holds(None) {
        if !h.valid || step.crashed(process) {
            continue;
        }
        if step
            .deleted
            .iter()
            .any(|(node, czxid)| *node == h.node && *czxid == creation_id(h.token))
        {
            continue;
        }
        let holds = by_path.entry(h.path).or_default();
        if !holds
            .iter()
            .any(|(_, _, node, token)| *node == h.node && *token == h.token)
        {
            holds.push((process, sharing, h.node, h.token));
        }
    }
    for (path, holds) in by_path {
        let exclusive: Vec<_> = holds.iter().filter(|h| h.1 == Sharing::Exclusive).collect();
        let clash = match exclusive.as_slice() {
            [] => None,
            [one] => holds
                .iter()
                .find(|h| h.1 == Sharing::Shared && h.2 != one.2)
                .map(|shared| (*one, shared)),
            [a, b, ..] => Some((*a, *b)),
        };
        if let Some((a, b)) = clash {
            return Err(format!(
                "two holders of {path} with valid guards: process {} ({}, token {:#x}) and process {} ({}, token \
                 {:#x})",
                a.0, a.2, a.3, b.0, b.2, b.3
            ));
        }
    }
    Ok(())
}
