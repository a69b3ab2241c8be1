//! What every handle on a path made from one [`Locks`](crate::Locks) shares: an owned path's hold counts, the
//! cohorts of a fair path or of a read/write path's sides. Entries are weak: a path no handle (nor guard) uses any more is dropped, and swept from the maps as
//! they grow.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::cohort::Cohort;
use crate::lock::Holds;
use crate::path::LockPath;
use crate::recipe::Recipe;

/// The registry is swept of paths no handle uses any more once it holds this many.
const REGISTRY_SWEEP_FROM: usize = 64;

/// Which owned recipe a registry entry is for: one path has separate hold counts per recipe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum OwnedPath {
    Reentrant(LockPath),
    ReadWrite(LockPath),
}

/// What every handle on a path made from one `Locks` shares, by path: an owned path's hold counts, a cohort per path
/// and recipe.
#[derive(Debug, Default)]
pub(super) struct Registry {
    holds: Mutex<HashMap<OwnedPath, Weak<Holds>>>,
    cohorts: Mutex<HashMap<(LockPath, Recipe), Weak<Cohort>>>,
}

/// The value under `key`, made by `make` if no handle uses one now (swept of unused entries as the map grows).
fn shared<K: std::hash::Hash + Eq, V>(map: &Mutex<HashMap<K, Weak<V>>>, key: K, make: impl FnOnce(&K) -> V) -> Arc<V> {
    let mut map = map.lock();
    if let Some(v) = map.get(&key).and_then(Weak::upgrade) {
        return v;
    }
    if map.len() >= REGISTRY_SWEEP_FROM {
        map.retain(|_, w| w.strong_count() > 0);
    }
    let v = Arc::new(make(&key));
    map.insert(key, Arc::downgrade(&v));
    v
}

impl Registry {
    /// The hold counts of an owned path, shared with every other handle on it.
    pub fn holds(&self, key: OwnedPath) -> Arc<Holds> {
        shared(&self.holds, key, |key| match key {
            OwnedPath::Reentrant(p) | OwnedPath::ReadWrite(p) => Holds::new(p.clone()),
        })
    }

    /// The cohort of `recipe` (fair, read or write) at `path`, of at most `bound` holds of a node, shared with every
    /// other handle on it.
    pub fn cohort(&self, path: LockPath, recipe: Recipe, bound: u32) -> Arc<Cohort> {
        shared(&self.cohorts, (path, recipe), |(p, r)| {
            Cohort::new(p.clone(), *r, bound)
        })
    }
}
