//! The listings every recipe makes of its lock path: through connection losses, without the names that look like lock
//! nodes but are not (a nested lock path's), and the lock path's parents made first.

use std::future::Future;

use super::attempt::{Attempt, Step, Stop};
use crate::backend::{BackendExt, CreateMode, SessionId};
use crate::error::Error;
use crate::participants::{is_lock_node, may_be_nested};

impl Attempt<'_> {
    /// Lists the lock path on session `sid`, through connection losses of that session.
    pub async fn list(&self, sid: SessionId) -> Step<Vec<String>> {
        self.list_at(self.path.as_str(), sid).await
    }

    /// `children` of `parent` without the names that look like lock nodes but are not: the exclusive recipe's `lock`
    /// and a kazoo lease are ephemeral, a Curator semaphore's `leases` holds leases; a lock path nested in `parent`
    /// under such a name (`/jobs/lock` under `/jobs`) is neither, and no reason to refuse. Asks the server only when
    /// such a name is there (and not of our own family).
    ///
    /// Not an `async fn`: at once when no name needs a look (checked first, so that a long queue's names are not
    /// parsed once more here), and the look (rare) boxed, so that every acquire that screens does not keep its state
    /// in place, in its waiting state too.
    pub fn screen<'s>(
        &'s self,
        parent: &'s str,
        children: Vec<String>,
        sid: SessionId,
    ) -> impl Future<Output = Step<Vec<String>>> + 's {
        use futures::future::{ready, Either};
        let (own, order) = (self.own_family(), self.backend().child_order());
        if children.iter().any(|c| may_be_nested(c, own, order)) {
            Either::Right(Box::pin(self.screen_nested(parent, children, sid)))
        } else {
            Either::Left(ready(Ok(children)))
        }
    }

    /// `screen` where a name may be a nested lock path's: asks the server.
    async fn screen_nested(&self, parent: &str, children: Vec<String>, sid: SessionId) -> Step<Vec<String>> {
        let (own, order) = (self.own_family(), self.backend().child_order());
        let on = self.backend().on(sid);
        let mut kept = Vec::with_capacity(children.len());
        for name in children {
            if may_be_nested(&name, own, order) {
                let confirmed = loop {
                    match self.call(is_lock_node(&on, parent, &name)).await {
                        Ok(c) => break c,
                        Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(sid).await?,
                        Err(e) => return Err(e),
                    }
                };
                if !confirmed {
                    continue;
                }
            }
            kept.push(name);
        }
        Ok(kept)
    }

    /// Lists `parent` on session `sid`, through connection losses of that session.
    pub async fn list_at(&self, parent: &str, sid: SessionId) -> Step<Vec<String>> {
        loop {
            match self.call(self.backend().on(sid).children(parent)).await {
                Ok(c) => return Ok(c),
                Err(Stop::Fail(Error::NoNode(_))) => return Ok(Vec::new()),
                Err(Stop::Fail(Error::ConnectionLoss)) => self.reconnected(sid).await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates the lock path and its ancestors as container nodes; a semaphore's path with its permit count as data.
    pub async fn ensure_parents(&self, sid: SessionId) -> Step<()> {
        let on = self.backend().on(sid);
        let count = self.permit_count_data();
        for p in self.path.ancestors().chain(std::iter::once(self.path.as_str())) {
            let data = if p == self.path.as_str() { &count[..] } else { b"" };
            match self.call(on.create(p, data, CreateMode::Container)).await {
                Ok(_) | Err(Stop::Fail(Error::NodeExists(_))) => {}
                // The create is retried as a whole (bounded); a lost parent, or one the container reaper deleted
                // between two of these creates, shows up as NoNode again.
                Err(Stop::Fail(Error::ConnectionLoss | Error::NoNode(_))) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
