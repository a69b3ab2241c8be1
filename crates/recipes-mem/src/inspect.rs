//! What a test can read of a [`MemCluster`]'s server: its tree, and what the recipes' requests cost it.

use recipes_core::backend::{SessionId, Stat};

use crate::MemCluster;

impl MemCluster {
    /// The names of `path`'s children, sorted by name, or in creation order when the cluster orders by creation (empty
    /// when it does not exist).
    pub fn children(&self, path: &str) -> Vec<String> {
        self.with(|st, _| st.tree.children(path).unwrap_or_default())
    }

    /// How many names the lists of children that sessions sent have returned, in all, since the cluster started:
    /// what the recipes' lists cost (a list of a queue of N names costs N), which a test can bound.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::Locks;
    /// use recipes_mem::MemCluster;
    ///
    /// let cluster = MemCluster::new();
    /// let locks = Locks::new(cluster.client());
    /// let before = cluster.listed_names();
    /// locks.fair("/jobs/nightly")?.acquire().await?.release().await?;
    /// // One list, right after the create: the queue held our node alone.
    /// assert_eq!(cluster.listed_names() - before, 1);
    /// # Ok::<(), recipes_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn listed_names(&self) -> u64 {
        self.peek(|st| st.listed_names)
    }

    /// The requests the server has applied so far, of every session: what a recipe's work costs the server, as
    /// ZooKeeper's `zk_packets_received` counts it (heartbeats are not requests here).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use recipes_core::Locks;
    /// use recipes_mem::MemCluster;
    ///
    /// let cluster = MemCluster::new();
    /// let locks = Locks::new(cluster.client());
    /// let lock = locks.fair("/jobs/nightly")?;
    /// lock.acquire().await?.release().await?; // the lock path is made on the first acquire
    /// let before = cluster.requests();
    /// lock.acquire().await?.release().await?;
    /// // The create and its list, then the delete.
    /// assert_eq!(cluster.requests() - before, 3);
    /// # Ok::<(), recipes_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn requests(&self) -> u64 {
        self.peek(|st| st.requests)
    }

    /// How many watches the server keeps. A watch goes when it fires, when its session ends, and when its receiver
    /// was dropped and its node's list of watches has doubled since it was last pruned (from 8 on): ZooKeeper's client
    /// removes a dropped watcher's watch; pruning as the list doubles keeps a herd on one node linear.
    pub fn watches(&self) -> usize {
        self.peek(|st| st.watches.count())
    }

    /// How many of [`watches`](Self::watches) are tree watches
    /// ([`TreeWatches::watch_tree`](recipes_core::backend::TreeWatches::watch_tree)).
    ///
    /// ```
    /// let cluster = recipes_mem::MemCluster::new();
    /// assert_eq!(cluster.tree_watches(), 0);
    /// ```
    pub fn tree_watches(&self) -> usize {
        self.peek(|st| st.watches.trees())
    }

    /// How many of [`tree_watches`](Self::tree_watches) are silenced: their session then set a one-shot watch on
    /// their root, which on ZooKeeper 3.8 replaces the tree watch in the server's table of data watches
    /// (ZOOKEEPER-4466). They report deletions only, and do not end. No recipe of this library silences its own
    /// views of the queue; an application's watch on a lock path, on the session of its `Locks`, would.
    ///
    /// ```
    /// let cluster = recipes_mem::MemCluster::new();
    /// assert_eq!(cluster.silenced_tree_watches(), 0);
    /// ```
    pub fn silenced_tree_watches(&self) -> usize {
        self.peek(|st| st.watches.silenced_trees())
    }

    /// Whether `path` exists.
    pub fn exists(&self, path: &str) -> bool {
        self.with(|st, _| st.tree.node(path).is_some())
    }

    /// The stat of `path`, when it exists.
    pub fn stat(&self, path: &str) -> Option<Stat> {
        self.with(|st, _| st.tree.node(path).map(|n| n.stat()))
    }

    /// Every node path in the tree (including `/`), sorted.
    pub fn paths(&self) -> Vec<String> {
        self.with(|st, _| st.tree.nodes().map(|(p, _)| p.clone()).collect())
    }

    /// Ephemeral nodes in the tree: `(path, owning session)`.
    pub fn ephemerals(&self) -> Vec<(String, SessionId)> {
        self.with(|st, _| {
            st.tree
                .nodes()
                .filter(|(_, n)| n.ephemeral_owner != 0)
                .map(|(p, n)| (p.clone(), n.ephemeral_owner))
                .collect()
        })
    }
}
