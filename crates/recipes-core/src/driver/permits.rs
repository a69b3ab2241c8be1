//! A native semaphore's permit count, stored with its lock path and checked by every claim.

use super::attempt::{Attempt, Step, Stop};
use crate::backend::{BackendExt, CreateMode, SessionId};
use crate::error::Error;

impl Attempt<'_> {
    /// What the lock path stores: a native semaphore's permit count in decimal (as kazoo's semaphore does); empty for
    /// a lock, and for the path of a peer semaphore's leases or mutex (the peer semaphore stores its count itself).
    pub(super) fn permit_count_data(&self) -> Vec<u8> {
        self.protocol
            .stored_count()
            .map(crate::info::encode_permits)
            .unwrap_or_default()
    }

    /// Checks that the semaphore path stores our permit count (a missing path passes: our create will make it with
    /// ours). Asked again after our node is made (`ours_made`), when the path cannot go away under it any more; then
    /// a path that stores nothing at all is one of a backend without hierarchy (etcd: our node was made without its
    /// parent), and our count is stored now, as a create that a racing count refuses (`NodeExists`, then read again).
    pub async fn check_permits(&self, sid: SessionId, ours_made: bool) -> Step<()> {
        let Some(permits) = self.protocol.stored_count() else {
            return Ok(());
        };
        let on = self.backend().on(sid);
        // Bounded: each round either reads a count, or stores one (a count, once stored, is never deleted while our
        // node is there); a lost reply of the store is read again after the reconnection, a few times at most.
        let mut rounds = 0;
        let data = loop {
            match self.call(on.get(self.path.as_str())).await {
                Ok(None) if ours_made && rounds < 8 => {
                    rounds += 1;
                    let count = self.permit_count_data();
                    match self
                        .call(on.create(self.path.as_str(), &count, CreateMode::Container))
                        .await
                    {
                        Ok(_) | Err(Stop::Fail(Error::NodeExists(_))) => {}
                        Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(sid).await?,
                        Err(e) => return Err(e),
                    }
                }
                Ok(None) if ours_made => {
                    return Err(Stop::Fail(Error::Backend(format!(
                        "the semaphore's permit count at {} could not be stored",
                        self.path
                    ))))
                }
                Ok(d) => break d,
                Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(sid).await?,
                Err(e) => return Err(e),
            }
        };
        let Some((data, _)) = data else { return Ok(()) };
        let stored = crate::info::decode_permits(&data);
        if stored == Some(permits) {
            return Ok(());
        }
        Err(Stop::Fail(Error::PermitsMismatch {
            path: self.path.to_string(),
            asked: permits,
            stored,
        }))
    }
}
