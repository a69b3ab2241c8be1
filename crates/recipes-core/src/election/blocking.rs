//! The blocking forms of an election's calls, for code outside async (see [`BlockingLock`](crate::BlockingLock)).

use std::time::Duration;

use super::{Candidate, Election, Leader, Leadership};
use crate::blocking::block_on;
use crate::error::{LostReason, Result};

impl Election {
    /// Blocks while reading who leads; see [`leader`](Election::leader).
    ///
    /// # Notable errors
    /// As [`leader`](Election::leader), and [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside an
    /// async runtime.
    pub fn leader_blocking(&self) -> Result<Option<Leader>> {
        block_on(self.leader())?
    }
}

impl Candidate {
    /// Blocks until this candidate leads; see [`leadership`](Candidate::leadership).
    ///
    /// ```
    /// use recipes_core::Locks;
    /// let locks = Locks::new(recipes_mem::MemCluster::new().client());
    /// let me = locks.election("/jobs/compactor")?.candidate("host-a")?;
    /// let leading = me.leadership_blocking()?;
    /// assert!(leading.is_valid());
    /// assert_eq!(locks.election("/jobs/compactor")?.leader_blocking()?.map(|l| l.term), Some(leading.term()));
    /// leading.resign_blocking()?;
    /// # Ok::<(), recipes_core::Error>(())
    /// ```
    ///
    /// # Notable errors
    /// As [`leadership`](Candidate::leadership), and [`Error::BlockingInAsync`](crate::Error::BlockingInAsync)
    /// inside an async runtime.
    pub fn leadership_blocking(&self) -> Result<Leadership> {
        block_on(self.leadership())?
    }

    /// Leads if nobody does now; see [`try_leadership`](Candidate::try_leadership).
    ///
    /// # Notable errors
    /// As [`leadership_blocking`](Candidate::leadership_blocking).
    pub fn try_leadership_blocking(&self) -> Result<Option<Leadership>> {
        block_on(self.try_leadership())?
    }

    /// Blocks at most `timeout`; see [`leadership_timeout`](Candidate::leadership_timeout).
    ///
    /// # Notable errors
    /// As [`leadership_blocking`](Candidate::leadership_blocking).
    pub fn leadership_timeout_blocking(&self, timeout: Duration) -> Result<Option<Leadership>> {
        block_on(self.leadership_timeout(timeout))?
    }
}

impl Leadership {
    /// Blocks until leadership is known lost; see [`lost`](Leadership::lost).
    ///
    /// # Notable errors
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside an async runtime.
    pub fn wait_lost_blocking(&self) -> Result<LostReason> {
        block_on(self.lost())
    }

    /// Resigns and blocks until the node is deleted; see [`resign`](Leadership::resign).
    ///
    /// # Notable errors
    /// As [`resign`](Leadership::resign), and [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside an
    /// async runtime (the leadership is then resigned in the background, as on drop).
    pub fn resign_blocking(self) -> Result<()> {
        block_on(self.resign())?
    }
}
