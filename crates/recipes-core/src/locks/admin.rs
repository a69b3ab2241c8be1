//! Looking at a lock path and asking its holders to let go: [`Locks::participants`], [`Locks::revoke`] and
//! [`Locks::revoke_node`].

use super::Locks;
use crate::backend::{BackendExt, SessionRef};
use crate::error::{Error, Result};
use crate::layout::{Family, Layout, NodeKind};
use crate::participants::{self, Participants};
use crate::path::LockPath;
use crate::protocol::{contenders_in, decide, Decision};

impl Locks {
    /// Who holds the lock at `path` and who waits, in the order the lock is granted, as this `Locks`' layout reads the
    /// path (Curator's `getParticipantNodes`, with each node's role, fencing token and maker).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::{Locks, Role};
    /// let cluster = recipes_mem::MemCluster::new();
    /// let (a, b) = (Locks::new(cluster.client()), Locks::new(cluster.client()));
    /// let held = a.fair("/reports").unwrap().acquire().await.unwrap();
    /// let lock = b.fair("/reports").unwrap();
    /// let waiting = tokio::spawn(async move { lock.acquire().await });
    /// tokio::task::yield_now().await;
    /// # for _ in 0..100 { if a.participants("/reports").await.unwrap().nodes.len() == 2 { break } tokio::task::yield_now().await; }
    /// let p = a.participants("/reports").await.unwrap();
    /// assert_eq!(p.holders().count(), 1);
    /// assert_eq!(u128::from(p.nodes[0].czxid as u64) << 32, held.fencing_token());
    /// assert!(matches!(p.nodes[1].role, Role::Waiter { .. }));
    /// # drop(held); waiting.await.unwrap().unwrap();
    /// # });
    /// ```
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`]; the backend's errors.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn participants(&self, path: impl AsRef<str>) -> Result<Participants> {
        let path = self.lock_path(path)?;
        participants::participants(&*self.ctx.backend, self.ctx.layout, &path).await
    }

    /// Asks the current holders of the lock (or semaphore) at `path` to let go, by Curator's revocation protocol: each
    /// holder node's data is set to [`REVOKE_MESSAGE`](crate::REVOKE_MESSAGE), which the holder sees through
    /// [`LockGuard::revocation_requested`](crate::LockGuard::revocation_requested) (or Curator's
    /// `RevocationListener`). Returns the nodes asked (empty: nobody held it). The holders decide when to release.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::Locks;
    /// let cluster = recipes_mem::MemCluster::new();
    /// let (a, b) = (Locks::new(cluster.client()), Locks::new(cluster.client()));
    /// assert!(b.revoke("/jobs/compact").await?.is_empty());
    /// let guard = a.fair("/jobs/compact")?.acquire().await?;
    /// let name = guard.node().rsplit('/').next().unwrap().to_owned();
    /// assert_eq!(b.revoke("/jobs/compact").await?, vec![name]);
    /// # Ok::<(), recipes_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`]; [`Error::InvalidArgument`] when the holder is the exclusive recipe's fixed node (while
    /// an acquire whose create reply was lost looks for it, its data is what tells whose it is, so it must not carry
    /// the request); the backend's errors.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future midway may leave some holders asked and others not, nothing else.
    pub async fn revoke(&self, path: impl AsRef<str>) -> Result<Vec<String>> {
        let participants = self.participants(path.as_ref()).await?;
        let mut asked = Vec::new();
        // A Curator semaphore's leases (`leases/<lease>`) are not asked: Curator's semaphore has no revocation.
        for holder in participants.holders().filter(|h| !h.node.contains('/')) {
            if self.revoke_node(path.as_ref(), &holder.node).await? {
                asked.push(holder.node.clone());
            }
        }
        Ok(asked)
    }

    /// Asks the holder of one lock node (a child name of `path`) to let go, as [`revoke`](Locks::revoke) does for
    /// every holder. `false`: the node is gone. Only a lock node is written: a name of a lock node's form whose node
    /// is ephemeral (by the server's own stat, read first); a persistent node of such a name is a lock path nested
    /// in `path` (a nested semaphore keeps its permit count in its data) and is refused.
    ///
    /// A native queue node (`L-`, `R-`, `W-`) is asked only while it holds, as one listing of the path shows: the
    /// node behind a native writer takes a change of its data for a sign that it holds, so a request written over a
    /// waiting node would let that one in beside the holder.
    ///
    /// # Notable errors
    /// As [`revoke`](Locks::revoke); [`Error::InvalidArgument`] for a name that is not a lock node's (a semaphore's
    /// stored count, another application's node), a node of that name that is not ephemeral, or a native queue node
    /// that waits.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future midway may leave the request to let go written or not, nothing else.
    pub async fn revoke_node(&self, path: impl AsRef<str>, node: &str) -> Result<bool> {
        let path = self.lock_path(path)?;
        let not_a_lock_node = || {
            Error::InvalidArgument(format!(
                "{node:?} is not a lock node name (of any recipe or layout) under {path}: only a holder's node can be \
                 asked to let go"
            ))
        };
        let order = self.ctx.backend.child_order();
        let family = Family::of_in(node, order);
        if node.is_empty() || node.contains('/') || matches!(family, None | Some(Family::CuratorSemaphore)) {
            return Err(not_a_lock_node());
        }
        if family == Some(Family::EtcdMutex) {
            // As the exclusive node's (below): named by its session, its data is what tells an acquire whose key it
            // is (found by review: a request written while its create's reply was lost left the acquire waiting on
            // its own key). Go's Mutex has no revocation either.
            return Err(Error::InvalidArgument(format!(
                "{node:?} under {path} is etcd's own lock's key, which cannot be revoked: its data tells an acquire \
                 whose key it is"
            )));
        }
        let on = self.ctx.backend.current();
        let child = path.child(node);
        // A lock node is ephemeral, whatever its name: a persistent node with a lock-like name is a lock path nested
        // here (a nested semaphore's count in its data), not ours to overwrite.
        match on.get(&child).await? {
            None => return Ok(false),
            Some((_, stat)) if stat.ephemeral_owner == 0 => return Err(not_a_lock_node()),
            Some(_) => {}
        }
        if node == crate::layout::EXCLUSIVE_NODE {
            return Err(Error::InvalidArgument(format!(
                "the exclusive lock at {path} cannot be revoked: its node's data tells an acquire whose node it is"
            )));
        }
        if matches!(family, Some(Family::NativeQueue | Family::NativeSemaphore)) {
            match native_holder(&on, &path, node).await? {
                None => return Ok(false),
                Some(true) => {}
                Some(false) => {
                    return Err(Error::InvalidArgument(format!(
                        "{node:?} under {path} waits for the lock, or cannot hold it beside another recipe's or layout's node: only a holder's node can be asked to let go (a \
                         waiter is cancelled by its own process)"
                    )))
                }
            }
        }
        match on.set_data(&child, crate::REVOKE_MESSAGE).await {
            Ok(()) => Ok(true),
            Err(Error::NoNode(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Whether the native queue node `node` under `path` holds the lock now (`None`: it is not there), by one listing of
/// the path and the verdict its own acquire would reach (as [`Locks::participants`] reads it). Holding is for good (a
/// node that holds never waits again: nodes made later sort behind it), so it still holds when a request written
/// next lands, or it is gone.
async fn native_holder(on: &SessionRef<'_>, path: &LockPath, node: &str) -> Result<Option<bool>> {
    let Some(parsed) = Layout::Native.parse(node) else {
        return Ok(None);
    };
    let children = match on.children(path.as_str()).await {
        Ok(c) => c,
        Err(Error::NoNode(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let queue = contenders_in(Layout::Native, on.child_order(), &children);
    // A semaphore's claim holds within the count its path stores (found by review: with one permit, a claim that held
    // beside another was refused as waiting).
    let permits = match parsed.kind {
        NodeKind::Permit => participants::stored_permits(on, path).await?,
        _ => 1,
    };
    match decide(Layout::Native, parsed.kind, &queue, node, permits) {
        Decision::Acquired => {}
        Decision::Wait { .. } => return Ok(Some(false)),
        Decision::Missing => return Ok(None),
    }
    // A live lock node of another recipe or layout on the path (ephemeral, by its own stat: a persistent one is a
    // lock path nested here) makes the node's own acquire refuse and delete it: it never holds, and the node behind
    // it must not be told otherwise.
    for other in children
        .iter()
        .filter(|c| Family::of_in(c, on.child_order()).is_some_and(|f| f != Layout::Native.family(parsed.kind)))
    {
        if let Some((_, stat)) = on.get(&path.child(other)).await? {
            if stat.ephemeral_owner != 0 {
                return Ok(Some(false));
            }
        }
    }
    Ok(Some(true))
}
