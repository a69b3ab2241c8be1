//! The recipes by name: the run-time choice of a recipe, and what each one contends for.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::layout::{Layout, NodeKind};

/// A lock recipe, for frameworks that choose the recipe per resource at run time (e.g. from configuration).
///
/// ```
/// use recipes_core::Recipe;
/// assert_eq!("fair".parse::<Recipe>().unwrap(), Recipe::Fair);
/// assert!("fiar".parse::<Recipe>().is_err());
/// assert_eq!(Recipe::Write.to_string(), "write");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recipe {
    /// One fixed ephemeral node; unfair; every waiter wakes on each release (herd). See [`ExclusiveLock`](crate::ExclusiveLock).
    Exclusive,
    /// Sequential nodes, FIFO, each waiter watches only its predecessor. See [`FairLock`](crate::FairLock).
    Fair,
    /// As fair, and re-entrant per owner. See [`ReentrantLock`](crate::ReentrantLock).
    Reentrant,
    /// The read side of a read/write lock. See [`ReadLock`](crate::ReadLock).
    Read,
    /// The write side of a read/write lock. See [`WriteLock`](crate::WriteLock).
    Write,
    /// A semaphore: up to its permit count of holders at once, in queue order. Not in [`Recipe::ALL`] (the locks):
    /// made with [`Locks::semaphore`](crate::Locks::semaphore), which takes the count. See
    /// [`Semaphore`](crate::Semaphore).
    Semaphore,
}

impl Recipe {
    /// Every lock recipe (a [`Recipe::Semaphore`] needs its permit count besides).
    pub const ALL: [Recipe; 5] = [
        Recipe::Exclusive,
        Recipe::Fair,
        Recipe::Reentrant,
        Recipe::Read,
        Recipe::Write,
    ];

    /// The recipe's name, as parsed by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            Recipe::Exclusive => "exclusive",
            Recipe::Fair => "fair",
            Recipe::Reentrant => "reentrant",
            Recipe::Read => "read",
            Recipe::Write => "write",
            Recipe::Semaphore => "semaphore",
        }
    }
}

impl fmt::Display for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Recipe {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        Recipe::ALL
            .into_iter()
            .chain([Recipe::Semaphore])
            .find(|r| r.name() == lower)
            .ok_or_else(|| Error::UnknownRecipe(s.to_owned()))
    }
}

/// A layout's name, as configuration spells it (any case): `native`, `curator`, `kazoo`. Beside the recipe's, which
/// configuration names with it; the layout module itself knows no error.
impl FromStr for Layout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let lower = s.to_ascii_lowercase();
        Layout::EVERY
            .into_iter()
            .find(|l| l.to_string() == lower)
            .ok_or_else(|| Error::UnknownLayout(s.to_owned()))
    }
}

impl Recipe {
    /// The kind of sequential node the recipe queues, or `None` for the exclusive recipe's one fixed node.
    pub(crate) fn node_kind(self) -> Option<NodeKind> {
        match self {
            Recipe::Exclusive => None,
            Recipe::Fair | Recipe::Reentrant => Some(NodeKind::Lock),
            Recipe::Read => Some(NodeKind::Read),
            Recipe::Write => Some(NodeKind::Write),
            Recipe::Semaphore => Some(NodeKind::Permit),
        }
    }
}
