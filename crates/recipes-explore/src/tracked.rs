//! The guards a process hands to the oracles, and the deadlines it asks them to keep.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Weak};
use std::time::Duration;

use recipes_core::{LockGuard, MultiGuard};
use tokio::time::Instant;

/// One hold a tracked guard stands for, as the oracles see it.
#[doc(hidden)]
pub struct HoldView {
    pub path: String,
    pub node: String,
    pub token: u128,
    pub valid: bool,
}

/// A guard the oracles can look into: a [`LockGuard`] or a [`MultiGuard`].
pub trait Holds: Send + Sync + 'static {
    #[doc(hidden)]
    fn views(&self, out: &mut Vec<HoldView>);
}

impl Holds for LockGuard {
    fn views(&self, out: &mut Vec<HoldView>) {
        out.push(HoldView {
            path: self.path().as_str().to_owned(),
            node: self.node().to_owned(),
            token: self.fencing_token(),
            valid: self.is_valid(),
        });
    }
}

impl Holds for MultiGuard {
    fn views(&self, out: &mut Vec<HoldView>) {
        for g in self.guards() {
            g.views(out);
        }
    }
}

/// Whether a tracked guard holds alone or beside others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sharing {
    Exclusive,
    Shared,
}

pub(crate) struct TrackedEntry {
    pub process: usize,
    pub sharing: Sharing,
    pub guard: Weak<dyn Holds>,
}

/// The guards the processes asked the oracles to watch, with deadlines they asked to be kept.
#[derive(Default)]
pub(crate) struct Tracker {
    pub guards: Vec<TrackedEntry>,
    /// (process, what, due, id)
    pub deadlines: Vec<(usize, String, Instant, u64)>,
    /// Steps that ended after their deadline: (process, what, by how much).
    pub overruns: Vec<(usize, String, Duration)>,
    pub next_deadline: u64,
}

impl Tracker {
    /// The nodes of `process`'s live tracked guards and whether each is valid, for a trace.
    pub fn describe(&mut self, process: usize) -> String {
        let guards: Vec<String> = self
            .holds(Some(process))
            .into_iter()
            .map(|(_, _, h)| format!("{} {}", h.node, if h.valid { "valid" } else { "not valid" }))
            .collect();
        match guards.is_empty() {
            true => "no tracked guard".to_owned(),
            false => format!("its guard {}", guards.join(", ")),
        }
    }

    /// The holds of the live tracked guards of `process` (all processes with `None`).
    pub fn holds(&mut self, process: Option<usize>) -> Vec<(usize, Sharing, HoldView)> {
        self.guards.retain(|e| e.guard.strong_count() > 0);
        let mut out = Vec::new();
        let mut views = Vec::new();
        for e in &self.guards {
            if process.is_some_and(|p| p != e.process) {
                continue;
            }
            let Some(g) = e.guard.upgrade() else { continue };
            g.views(&mut views);
            out.extend(views.drain(..).map(|h| (e.process, e.sharing, h)));
        }
        out
    }
}

/// A guard the oracles watch: use it as the guard itself (it dereferences to it), and release it with
/// [`release`](Tracked::release) (or take it back with [`into_inner`](Tracked::into_inner)).
pub struct Tracked<G> {
    guard: Arc<G>,
}

impl<G> Deref for Tracked<G> {
    type Target = G;

    fn deref(&self) -> &G {
        &self.guard
    }
}

impl<G: fmt::Debug> fmt::Debug for Tracked<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Tracked").field(&*self.guard).finish()
    }
}

impl<G> Tracked<G> {
    pub(crate) fn new(guard: Arc<G>) -> Self {
        Tracked { guard }
    }

    /// The guard, no longer watched.
    pub fn into_inner(self) -> G {
        // The tracker keeps only a weak reference.
        match Arc::try_unwrap(self.guard) {
            Ok(g) => g,
            Err(_) => unreachable!("a tracked guard has one strong reference"),
        }
    }
}

impl Tracked<LockGuard> {
    /// Releases the lock ([`LockGuard::release`]).
    pub async fn release(self) -> recipes_core::Result<()> {
        self.into_inner().release().await
    }
}

impl Tracked<MultiGuard> {
    /// Releases every lock of the set ([`MultiGuard::release`]).
    pub async fn release(self) -> recipes_core::Result<()> {
        self.into_inner().release().await
    }
}
