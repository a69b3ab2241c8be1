//! Who holds a lock and who waits for it: Curator's `getParticipantNodes`, with each node's role.

use crate::backend::{Backend, BackendExt, ChildOrder, SessionRef};
use crate::error::{Error, Result};
use crate::info::NodeInfo;
use crate::layout::{is_kazoo_lease, may_be_unqueued, Family, Layout, NodeKind, SortKey, EXCLUSIVE_NODE};
use crate::path::LockPath;
use crate::protocol::{contenders_in, decide, Decision, PeerSemaphore};

/// The lock nodes on a path, in the order the lock is granted (see [`Locks::participants`](crate::Locks::participants)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participants {
    /// Holders first, then waiters, in queue order.
    pub nodes: Vec<Participant>,
    /// Children of the path that are not lock nodes of the layout read with (another layout's, or no lock node).
    pub other_children: Vec<String>,
}

impl Participants {
    /// The participants that hold the lock now.
    pub fn holders(&self) -> impl Iterator<Item = &Participant> {
        self.nodes.iter().filter(|p| p.role == Role::Holder)
    }

    /// The participants waiting for it.
    pub fn waiters(&self) -> impl Iterator<Item = &Participant> {
        self.nodes.iter().filter(|p| p.role != Role::Holder)
    }
}

/// One lock node on a path.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// The child name.
    pub node: String,
    /// What it contends for; `None` for the exclusive recipe's fixed node.
    pub kind: Option<NodeKind>,
    /// Whether it holds the lock or waits.
    pub role: Role,
    /// Its creation id: the fencing token of its holder.
    pub czxid: i64,
    /// When it was made, in milliseconds since the Unix epoch, by the server's clock.
    pub ctime_ms: i64,
    /// What its maker wrote in it (recipe, host, pid), when it is a lock node of this library.
    pub info: Option<NodeInfo>,
    /// Whether someone asked its holder to let go (its data is [`REVOKE_MESSAGE`](crate::REVOKE_MESSAGE)).
    pub revocation_requested: bool,
}

impl Participant {
    /// The fencing token of the node's first hold ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)
    /// of its holder; a cohort's later holds of the node carry their pass above it).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::Locks;
    /// let locks = Locks::new(recipes_mem::MemCluster::new().client());
    /// let guard = locks.fair("/reports/daily")?.acquire().await?;
    /// let seen = locks.participants("/reports/daily").await?;
    /// assert_eq!(seen.nodes[0].fencing_token(), guard.fencing_token());
    /// # drop(guard);
    /// # Ok::<(), recipes_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn fencing_token(&self) -> u128 {
        crate::guard::token(self.czxid, 0)
    }
}

/// A participant's role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// It holds the lock.
    Holder,
    /// It waits for the deletion of this node (a child name).
    Waiter {
        /// The node it waits on.
        on: String,
    },
}

/// The most of a node's data decoded (lock nodes carry a few lines; another client may have written much more).
const DATA_READ: usize = 4096;

/// The permit count a native semaphore's path stores (1 when it stores none, or is gone).
pub(crate) async fn stored_permits(on: &SessionRef<'_>, path: &LockPath) -> Result<u32> {
    Ok(on
        .get(path.as_str())
        .await?
        .and_then(|(data, _)| crate::info::decode_permits(&data))
        .unwrap_or(1))
}

/// Whether a child name looks like a lock node of another family than `own` but may not be one: the exclusive
/// recipe's `lock` and a kazoo lease are ephemeral, a Curator semaphore's `leases` holds leases; a lock path nested
/// under such a name (`/jobs/lock` under `/jobs`) is neither, and no reason to refuse ([`is_lock_node`] asks).
pub(crate) fn may_be_nested(name: &str, own: Family, order: ChildOrder) -> bool {
    may_be_unqueued(name)
        && matches!(Family::of_in(name, order), Some(f @ (Family::Exclusive | Family::KazooLease | Family::CuratorSemaphore | Family::EtcdMutex)) if f != own)
}

/// Whether `parent/name`, a name [`may_be_nested`] suspects, is the lock node it looks like: ephemeral, or (a Curator
/// semaphore's `leases`) holding leases.
pub(crate) async fn is_lock_node(on: &SessionRef<'_>, parent: &str, name: &str) -> Result<bool> {
    let node = format!("{parent}/{name}");
    if Family::of(name) != Some(Family::CuratorSemaphore) {
        return Ok(on.get(&node).await?.is_some_and(|(_, stat)| stat.ephemeral_owner != 0));
    }
    match on.children(&node).await {
        Ok(leases) => Ok(leases.iter().any(|l| Family::of(l) == Some(Family::CuratorLease))),
        Err(Error::NoNode(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads the participants of `path` with `layout`'s rules, on the backend's current session.
pub(crate) async fn participants(backend: &dyn Backend, layout: Layout, path: &LockPath) -> Result<Participants> {
    let on = backend.current();
    let children = match on.children(path.as_str()).await {
        Ok(c) => c,
        Err(Error::NoNode(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut roles: Vec<(String, Option<NodeKind>, Role)> = Vec::new();
    if children.iter().any(|c| c == EXCLUSIVE_NODE) {
        roles.push((EXCLUSIVE_NODE.to_owned(), None, Role::Holder));
    }
    // A peer semaphore's leases: each one a holder (the peers make a lease only to hold it, but for Curator's mutex
    // holder, whose lease waits while the leases are more than the permits). Curator's are below `leases`, named
    // `leases/<lease>` here.
    let mut leases: Vec<String> = Vec::new();
    match PeerSemaphore::of(layout).map(|p| (p, p.leases_under())) {
        Some((peer, None)) => leases.extend(children.iter().filter(|c| peer.is_lease(c)).cloned()),
        Some((_, Some(under))) if children.iter().any(|c| c == under) => {
            let mut found: Vec<(SortKey, String)> = match on.children(&path.child(under)).await {
                Ok(c) => c
                    .into_iter()
                    .filter_map(|n| {
                        let lease = layout.parse(&n).filter(|p| p.kind == NodeKind::Permit)?;
                        Some((lease.key, n))
                    })
                    .collect(),
                Err(Error::NoNode(_)) => Vec::new(),
                Err(e) => return Err(e),
            };
            found.sort();
            leases.extend(found.into_iter().map(|(_, n)| format!("{under}/{n}")));
        }
        _ => {}
    }
    for lease in &leases {
        roles.push((lease.clone(), Some(NodeKind::Permit), Role::Holder));
    }
    let queue = contenders_in(layout, backend.child_order(), &children);
    // A semaphore's permit count is the path's data.
    let permits = if queue.iter().any(|c| c.kind == NodeKind::Permit) {
        stored_permits(&on, path).await?
    } else {
        1
    };
    for c in &queue {
        match decide(layout, c.kind, &queue, &c.name, permits) {
            Decision::Acquired => roles.push((c.name.clone(), Some(c.kind), Role::Holder)),
            Decision::Wait { on } => roles.push((c.name.clone(), Some(c.kind), Role::Waiter { on })),
            Decision::Missing => unreachable!("every contender is in the queue it was parsed from"),
        }
    }
    let mut nodes = Vec::new();
    // Names of a lock node's form whose node is persistent: lock paths nested in this one (`P/lock`, a kazoo-like
    // bare id), no participants.
    let mut nested = Vec::new();
    for (node, kind, role) in roles {
        // A node may go between the list and the read: it is then no participant any more.
        let Some((mut data, stat)) = on.get(&path.child(&node)).await? else {
            continue;
        };
        if stat.ephemeral_owner == 0 && (node == EXCLUSIVE_NODE || is_kazoo_lease(&node)) {
            nested.push(node);
            continue;
        }
        data.truncate(DATA_READ);
        nodes.push(Participant {
            revocation_requested: data == crate::REVOKE_MESSAGE,
            info: NodeInfo::decode(&data),
            node,
            kind,
            role,
            czxid: stat.czxid,
            ctime_ms: stat.ctime,
        });
    }
    let other_children = children
        .into_iter()
        .filter(|c| {
            nested.contains(c) || (c != EXCLUSIVE_NODE && !queue.iter().any(|q| &q.name == c) && !leases.contains(c))
        })
        // A Curator semaphore's `leases`, whose leases are listed.
        .filter(|c| leases.is_empty() || PeerSemaphore::of(layout).and_then(|p| p.leases_under()) != Some(c.as_str()))
        .collect();
    Ok(Participants { nodes, other_children })
}
