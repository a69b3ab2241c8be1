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

/// The registry is swept of paths no handle uses any more once it holds this many, then each time it has doubled since
/// the last sweep: sweeping at every new path once this many were in use made each new handle cost a pass over every
/// path in use (quadratic for an application holding many locks at once).
const REGISTRY_SWEEP_FROM: usize = 64;

/// One map of the registry, with the length at which it is swept next.
#[derive(Debug)]
struct Swept<K, V> {
    map: HashMap<K, Weak<V>>,
    sweep_at: usize,
    /// The sweeps so far (for the tests).
    sweeps: usize,
}

impl<K, V> Default for Swept<K, V> {
    fn default() -> Self {
        Swept {
            map: HashMap::new(),
            sweep_at: REGISTRY_SWEEP_FROM,
            sweeps: 0,
        }
    }
}

/// Which owned recipe a registry entry is for: one path has separate hold counts per recipe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum OwnedPath {
    Reentrant(LockPath),
    ReadWrite(LockPath),
}

/// What every handle on a path made from one `Locks` shares, by path: an owned path's hold counts, a cohort per path
/// and recipe, and the path itself when handles are made one after another on it.
#[derive(Debug, Default)]
pub(super) struct Registry {
    holds: Mutex<Swept<OwnedPath, Holds>>,
    cohorts: Mutex<Swept<(LockPath, Recipe), Cohort>>,
    /// The lock path of the handle made last.
    last_path: Mutex<Option<LockPath>>,
}

/// The value under `key`, made by `make` if no handle uses one now (swept of unused entries as the map grows).
fn shared<K: std::hash::Hash + Eq, V>(swept: &Mutex<Swept<K, V>>, key: K, make: impl FnOnce(&K) -> V) -> Arc<V> {
    let mut swept = swept.lock();
    if let Some(v) = swept.map.get(&key).and_then(Weak::upgrade) {
        return v;
    }
    if swept.map.len() >= swept.sweep_at {
        swept.map.retain(|_, w| w.strong_count() > 0);
        swept.sweep_at = (2 * swept.map.len()).max(REGISTRY_SWEEP_FROM);
        swept.sweeps += 1;
    }
    let v = Arc::new(make(&key));
    swept.map.insert(key, Arc::downgrade(&v));
    v
}

impl Registry {
    /// `path` validated, as a lock path: the one of the handle made last when it is the same, so that the handles an
    /// application makes for each task or request on one path share one copy of its name (a waiting task's 64 bytes
    /// of 2,602 in `recipes-bench memory`, issue 26), a new one otherwise.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`](crate::Error::InvalidPath).
    pub fn path(&self, path: &str) -> crate::Result<LockPath> {
        let mut last = self.last_path.lock();
        if let Some(same) = last.as_ref().filter(|p| p.as_str() == path) {
            return Ok(same.clone());
        }
        let made = LockPath::new(path)?;
        *last = Some(made.clone());
        Ok(made)
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn path(i: usize) -> OwnedPath {
        OwnedPath::Reentrant(LockPath::new(format!("/r/{i}")).unwrap())
    }

    /// Paths no handle uses are swept as the map grows, and paths in use are never swept more than the doublings of
    /// their number: 10,000 held at once cost 8 sweeps (each new one cost one before, 9,937 passes over the map).
    #[test]
    fn paths_in_use_are_swept_by_doubling_and_unused_ones_go() {
        let registry = Registry::default();
        let held: Vec<Arc<Holds>> = (0..10_000).map(|i| registry.holds(path(i))).collect();
        let sweeps = registry.holds.lock().sweeps;
        assert!(sweeps <= 10, "{sweeps} sweeps for 10,000 paths in use");
        assert!(
            Arc::ptr_eq(&held[42], &registry.holds(path(42))),
            "a path in use is shared"
        );
        drop(held);
        for i in 10_000..40_000 {
            drop(registry.holds(path(i)));
        }
        let len = registry.holds.lock().map.len();
        assert!(len <= 20_000, "{len} entries left for paths no handle uses");
    }

    /// Handles made one after another on one path share its name; another path, or an invalid one, changes nothing
    /// for the next.
    #[test]
    fn handles_made_in_turn_on_a_path_share_its_name() {
        let registry = Registry::default();
        let a = registry.path("/jobs/etl").unwrap();
        let b = registry.path("/jobs/etl").unwrap();
        assert!(std::ptr::eq(a.as_str(), b.as_str()), "one copy of the name");
        assert!(registry.path("jobs").is_err());
        let c = registry.path("/jobs/etl").unwrap();
        assert!(
            std::ptr::eq(a.as_str(), c.as_str()),
            "an invalid path leaves the last one"
        );
        let other = registry.path("/jobs/other").unwrap();
        assert_eq!(other.as_str(), "/jobs/other");
        let d = registry.path("/jobs/etl").unwrap();
        assert_eq!(d, a);
        assert!(
            !std::ptr::eq(a.as_str(), d.as_str()),
            "the last path made is the one shared"
        );
    }
}
