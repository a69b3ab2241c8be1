//! What the model's clients do, and the oracles they report to.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use recipes_core::{Error, LockGuard, Locks, LostReason, MultiGuard, OwnerToken, Recipe};
use recipes_explore::Activity;
use recipes_mem::MemCluster;
use tokio::time::Instant;

/// How long a client acquires for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patience {
    /// `acquire()`.
    Forever,
    /// `acquire_timeout(d)`.
    Timeout(Duration),
    /// `try_acquire()`.
    Try,
}

/// A client's program, on the configuration's one lock path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// Acquire, hold, ask `lost()`, release.
    Plain {
        /// The recipe.
        recipe: Recipe,
        /// How long to wait.
        patience: Patience,
    },
    /// Reentrant (an owner token): acquire, hold, re-enter, ask `lost()`, release both holds.
    Reenter,
    /// Write, then take the read side (downgrade), release the write side, hold, release the read side.
    Downgrade,
    /// An acquire whose future is dropped after this long (a caller's own timeout), then nothing.
    Abandon {
        /// The recipe.
        recipe: Recipe,
        /// When the future is dropped.
        after: Duration,
    },
    /// These programs at once, each a task of its own on the client's one session (one `Locks`): tasks of one
    /// process contending for one path. The oracles tell the tasks apart.
    Tasks(Vec<Program>),
    /// As [`Tasks`](Program::Tasks), but each task with a `Locks` of its own on the client's one backend (one
    /// session): in the etcd layout they meet one key name without taking turns (decision 70).
    TasksApart(Vec<Program>),
    /// A semaphore of `permits` permits: claim `n` of them at once (`acquire_many` and its try and timeout forms),
    /// hold, ask `lost()`, release.
    Permits {
        /// The semaphore's permit count (every client of a configuration gives the same).
        permits: u32,
        /// How many permits the claim takes.
        n: u32,
        /// How long to wait.
        patience: Patience,
    },
    /// A multi-lock of the configuration's path and a second path (`PATH2`), both fair: acquire the set, hold, ask
    /// every member's `lost()`, release the set.
    Multi {
        /// How long to wait.
        patience: Patience,
    },
    /// The program on the second path (`PATH2`) rather than the configuration's own.
    Elsewhere(Box<Program>),
    /// An election's candidate on the configuration's path: stand until leading, lead (a hold of the oracles, its
    /// term the token), ask `lost()`, resign.
    Stand,
    /// As [`Program::Stand`], as Curator's `LeaderLatch` (`Election::latch`; the configuration's layout is Curator's).
    StandLatch,
    /// An observer of the election on the configuration's path, standing for nothing: reads the leader `reads` times,
    /// a little apart. Its oracle: the terms it reports never go back.
    Observe {
        /// How many reads.
        reads: u32,
    },
    /// A semaphore claim of `n` of `permits` whose future is dropped after this long (a caller's own timeout), then
    /// nothing.
    AbandonPermits {
        /// The semaphore's permit count.
        permits: u32,
        /// How many permits the claim takes.
        n: u32,
        /// When the future is dropped.
        after: Duration,
    },
}

/// The second lock path, for the programs that take two ([`Program::Multi`], [`Program::Elsewhere`]).
pub(crate) const PATH2: &str = "/model/other";

/// A guard the oracles track: a lock's own, or one member of a multi-lock's set.
pub(crate) enum Guard {
    One(LockGuard),
    Member(Arc<MultiGuard>, usize),
}

impl Guard {
    fn lock(&self) -> &LockGuard {
        match self {
            Guard::One(g) => g,
            Guard::Member(set, i) => &set.guards()[*i],
        }
    }
}

/// The grace an acquire that gives up may take for its cleanup, beyond its deadline (the driver's `CLEANUP_GRACE`).
const CLEANUP_GRACE: Duration = Duration::from_millis(500);

/// What a hold holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holding {
    /// A lock, exclusively (exclusive, fair, reentrant, write).
    Exclusive,
    /// A lock's read side.
    Shared,
    /// `n` of a semaphore's `of` permits.
    Permits { n: u32, of: u32 },
}

/// One hold, as the oracles track it.
struct Hold {
    client: usize,
    /// The task of the client that holds it (0 but for [`Program::Tasks`]).
    task: usize,
    holding: Holding,
    /// The lock path (the oracles hold per path).
    path: String,
    node: String,
    token: u128,
    /// The guard while held (taken out to release it).
    guard: Option<Arc<Guard>>,
    /// An exclusive hold handed out on a node an operator had deleted while nodes made before it were there: a node
    /// never first in its line (see `Oracle::deleted_behind`).
    never_first: bool,
}

/// What the clients report, and the oracles over it.
pub(crate) struct Oracle {
    holds: Vec<Hold>,
    pub violations: Vec<String>,
    /// Per lock path: the highest token of an exclusive hold, and of any hold.
    max_tokens: std::collections::HashMap<String, (u128, u128)>,
    pub crashed: HashSet<usize>,
    /// Nodes an operator deleted: (path, czxid). Once a lock node is deleted behind the library's back, the lease no
    /// longer promises exclusion (a holder cannot know until `lost()` looks): the token oracle stops, and the exclusion
    /// oracles stop or leave those holds out (see `check`); `lost()`'s truthfulness, progress and leftovers are still
    /// checked.
    pub deleted: HashSet<(String, u64)>,
    /// Of those, the nodes deleted while a node of the same parent made before them was still there. A node first in
    /// its line stays first until it goes (later nodes are made behind it): these never were, and no reply or event
    /// can have said that they held. An exclusive hold handed out on one is checked as any other (a waiter that
    /// trusted the order of its watches' events after a reconnection, `Mutant::TrustAcrossReconnection`), where a
    /// hold on a node deleted once it was first is left out: the library may have been told so before the delete.
    pub deleted_behind: HashSet<(String, u64)>,
    /// Whether a hold may be passed within a process (tasks of one session, a cohort): such a handoff does not check
    /// that the new holder's node is still there (docs/algorithm.md, optimisation 7, point 5), so after an operator's
    /// delete on ZooKeeper's order the oracles stop, and no hold counts as never first.
    handed_over: bool,
    /// Whether a node first in its line stays first until it goes (the layout orders by creation, see
    /// `deleted_behind`): where it does not, no hold counts as never first.
    first_stays_first: bool,
    /// Tells the explorer that something changed, and writes the notes (acquired, released, errors) into the trace.
    activity: Activity,
    /// The cohorts' bound: no node may be held more times in a row.
    cohort_bound: Option<u32>,
}

impl Oracle {
    pub fn new(activity: Activity, cohort_bound: Option<u32>, handed_over: bool, first_stays_first: bool) -> Self {
        Oracle {
            holds: Vec::new(),
            violations: Vec::new(),
            max_tokens: std::collections::HashMap::new(),
            crashed: HashSet::new(),
            deleted: HashSet::new(),
            deleted_behind: HashSet::new(),
            handed_over,
            first_stays_first,
            activity,
            cohort_bound,
        }
    }

    fn touch(&mut self) {
        self.activity.touch();
    }

    fn note(&mut self, client: usize, what: String) {
        self.activity.note(|| format!("client {client}: {what}"));
    }

    fn violate(&mut self, what: String) {
        self.violations.push(what);
        self.touch();
    }

    /// An acquire returned `guard`: it must be valid, and its token above the tokens of the holds before it (a
    /// semaphore's permits, held beside each other, only above those of exclusive holds).
    fn acquired(&mut self, holder: (usize, usize), holding: Holding, guard: LockGuard, reentry: bool) -> usize {
        self.acquired_guard(holder, holding, Guard::One(guard), reentry)
    }

    fn acquired_guard(
        &mut self,
        (client, task): (usize, usize),
        holding: Holding,
        guard: Guard,
        reentry: bool,
    ) -> usize {
        let exclusive = holding == Holding::Exclusive;
        let token = guard.lock().fencing_token();
        let node = guard.lock().node().to_owned();
        let path = guard.lock().path().to_string();
        if !guard.lock().is_valid() {
            self.violate(format!(
                "client {client}: an acquire returned a guard that is not valid ({})",
                short(&node)
            ));
        }
        if let Some(k) = self.cohort_bound {
            // The hold's pass of its node, below the creation id (`LockGuard::fencing_token`).
            let pass = (token & u128::from(u32::MAX)) as u32;
            if pass >= k {
                self.violate(format!(
                    "client {client}: a waiter of another session starves: the cohort's node {} is held {} times in \
                     a row, beyond the bound of {k}",
                    short(&node),
                    pass + 1
                ));
            }
        }
        if !reentry && self.deleted.is_empty() {
            let (max_exclusive_token, max_token) = self.max_tokens.get(&path).copied().unwrap_or_default();
            let floor = if exclusive { max_token } else { max_exclusive_token };
            if token <= floor {
                self.violate(format!(
                    "client {client}: fencing token {token} of a new {} hold is not above {floor}",
                    match holding {
                        Holding::Exclusive => "exclusive",
                        Holding::Shared => "shared",
                        Holding::Permits { .. } => "permit",
                    }
                ));
            }
            let (max_exclusive_token, max_token) = self.max_tokens.entry(path.clone()).or_default();
            *max_token = (*max_token).max(token);
            if exclusive {
                *max_exclusive_token = (*max_exclusive_token).max(token);
            }
        }
        let by = if task > 0 {
            format!("task {task}: ")
        } else {
            String::new()
        };
        let what = match holding {
            Holding::Permits { n, of } => format!(", {n} of {of} permits"),
            _ => String::new(),
        };
        self.note(
            client,
            format!(
                "{by}holds {} (token {token}{what}{})",
                short(&node),
                if reentry { ", re-entered" } else { "" }
            ),
        );
        let never_first = exclusive
            && !self.handed_over
            && self.first_stays_first
            && self.deleted_behind.contains(&(node.clone(), creation_id(token)));
        self.holds.push(Hold {
            client,
            task,
            holding,
            path,
            node,
            token,
            guard: Some(Arc::new(guard)),
            never_first,
        });
        self.holds.len() - 1
    }

    fn take(&mut self, id: usize) -> Option<Arc<Guard>> {
        self.holds.get_mut(id).and_then(|h| h.guard.take())
    }

    fn guard(&self, id: usize) -> Option<Arc<Guard>> {
        self.holds.get(id).and_then(|h| h.guard.clone())
    }

    /// The oracles over the current state: exclusion among valid guards (a semaphore's permits held by valid guards
    /// add up to at most its count), and their nodes present.
    ///
    /// After an operator's delete: where the backend conditions deletes on a node's creation (etcd's order), or where
    /// every node deleted had a sequential name (never made again) and no hold passes within a process
    /// (`handed_over`), the holds on the nodes the operator deleted are
    /// left out (their holders cannot know until `lost()` looks; nor can an acquire whose last read of its node was
    /// answered before the delete and arrived after it: so a hold handed out after the delete is left out too, but for
    /// a node never first, see `deleted_behind`), and every other hold is checked as before (found by review,
    /// helper-49: a release deleted a session-mate's key made again after the operator's delete); elsewhere
    /// (ZooKeeper's fixed node keeps that window, docs/algorithm.md) the oracles stop.
    pub fn check(&mut self, cluster: &MemCluster) {
        let by_creation = cluster.child_order() == recipes_core::backend::ChildOrder::Creation;
        let stop = self.handed_over || self.deleted.iter().any(|(node, _)| !sequential(node));
        if !by_creation && !self.deleted.is_empty() && stop {
            return;
        }
        let mut paths: Vec<&str> = self.holds.iter().map(|h| h.path.as_str()).collect();
        paths.sort_unstable();
        paths.dedup();
        let mut problems = Vec::new();
        for path in paths {
            self.check_path(path, cluster, &mut problems);
        }
        for p in problems {
            if !self.violations.contains(&p) {
                self.violate(p);
            }
        }
    }

    /// The oracles over the holds of one lock path.
    fn check_path(&self, path: &str, cluster: &MemCluster, problems: &mut Vec<String>) {
        let mut exclusive = std::collections::BTreeSet::new();
        let mut shared = std::collections::BTreeSet::new();
        // Permits held, the smallest count any holder was promised, and by whom (holder, node, weight): clients
        // that ask for different counts must not hold together (each is promised its own).
        let mut permits_held = 0u32;
        let mut permit_count = u32::MAX;
        let mut permit_holders = Vec::new();
        for h in self.holds.iter().filter(|h| h.path == path) {
            let Some(g) = &h.guard else { continue };
            if self.crashed.contains(&h.client) {
                continue;
            }
            let deleted = self.deleted.contains(&(h.node.clone(), creation_id(h.token)));
            if !g.lock().is_valid() || (deleted && !h.never_first) {
                continue;
            }
            // Holders are tasks: two tasks of one client (one session) exclude each other as two clients do.
            match h.holding {
                Holding::Exclusive => {
                    exclusive.insert((h.client, h.task));
                }
                Holding::Shared => {
                    shared.insert((h.client, h.task));
                }
                Holding::Permits { n, of } => {
                    permits_held += n;
                    permit_count = permit_count.min(of);
                    permit_holders.push(format!("client {} ({}: {n} of {of})", h.client, short(&h.node)));
                }
            }
            match cluster.stat(&h.node) {
                Some(st) if st.czxid.max(0) as u64 == creation_id(h.token) => {}
                _ => problems.push(format!(
                    "client {}'s guard is valid but its node {} (token {}) is gone",
                    h.client,
                    short(&h.node),
                    h.token
                )),
            }
        }
        let readers_beside: Vec<_> = shared.difference(&exclusive).collect();
        if exclusive.len() > 1 || (exclusive.len() == 1 && !readers_beside.is_empty()) {
            problems.push(format!(
                "two holders: exclusive {exclusive:?}, shared {readers_beside:?}, all with valid leases"
            ));
        }
        if permits_held > permit_count {
            problems.push(format!(
                "too many permits: {permits_held} of {permit_count} held, by {}, all with valid leases",
                permit_holders.join(", ")
            ));
        }
    }
}

/// Whether a node's name ends in a ZooKeeper sequence (ten digits): a name the server never makes again.
fn sequential(node: &str) -> bool {
    let name = node.rsplit('/').next().unwrap_or(node);
    name.len() >= 10 && name.as_bytes()[name.len() - 10..].iter().all(u8::is_ascii_digit)
}

/// The node's name without its attempt id (random outside the model checker, a count within it): its kind and
/// sequence.
pub(crate) fn short(node: &str) -> String {
    let name = node.rsplit('/').next().unwrap_or(node);
    let hex = |s: &str| s.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-');
    if name.len() > 35 && name.as_bytes()[1] == b'-' && hex(&name[2..34]) {
        format!("{}…{}", &name[..2], &name[34..])
    } else if name.starts_with("_c_") && name.len() > 39 && hex(&name[3..39]) {
        format!("_c_…{}", &name[39..])
    } else if name.len() > 32 && hex(&name[..32]) {
        format!("…{}", &name[32..])
    } else {
        name.to_owned()
    }
}

/// What a client needs to run its program.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub id: usize,
    /// The task within the client (see [`Program::Tasks`]).
    pub task: usize,
    pub locks: Locks,
    pub path: String,
    pub oracle: Arc<Mutex<Oracle>>,
    pub cluster: MemCluster,
    pub session_timeout: Duration,
}

impl Ctx {
    fn oracle(&self) -> std::sync::MutexGuard<'_, Oracle> {
        self.oracle.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note(&self, what: String) {
        let what = if self.task > 0 {
            format!("task {}: {what}", self.task)
        } else {
            what
        };
        self.oracle().note(self.id, what);
    }

    fn holder(&self) -> (usize, usize) {
        (self.id, self.task)
    }

    /// An error that a correct library may return here (the lock was lost, refused, or the session ended).
    fn expected(&self, what: &str, e: &Error) {
        if is_expected(e) {
            self.note(format!("{what}: {e}"));
        } else {
            self.oracle()
                .violate(format!("client {}: {what} failed unexpectedly: {e}", self.id));
        }
    }

    fn hold_time(&self) -> Duration {
        self.session_timeout / 4
    }

    /// Asks `lost()` of hold `id`, bounded by a session timeout: it must resolve when the node is already gone, and
    /// must not claim a deletion that did not happen.
    async fn check_lost(&self, id: usize) {
        let (gone_before, node, token) = {
            let o = self.oracle();
            let Some(h) = o.holds.get(id) else { return };
            let gone = self.cluster.stat(&h.node).is_none_or_changed(h.token);
            (gone, h.node.clone(), h.token)
        };
        let Some(guard) = self.oracle().guard(id) else { return };
        let lost = tokio::time::timeout(self.session_timeout, guard.lock().lost())
            .await
            .ok();
        drop(guard);
        match lost {
            None if gone_before => self.oracle().violate(format!(
                "client {}: lost() did not resolve although its node {} was already gone",
                self.id,
                short(&node)
            )),
            None => {}
            Some(LostReason::NodeDeleted) if !self.cluster.stat(&node).is_none_or_changed(token) => {
                self.oracle().violate(format!(
                    "client {}: lost() said NodeDeleted but node {} exists",
                    self.id,
                    short(&node)
                ))
            }
            Some(r) => self.note(format!("lost(): {r}")),
        }
    }

    async fn release(&self, id: usize, what: &str) {
        let guard = self.oracle().take(id);
        let released = match guard.and_then(Arc::into_inner) {
            Some(Guard::One(g)) => g.release().await,
            // The set goes with its last member's hold.
            Some(Guard::Member(set, _)) => match Arc::into_inner(set) {
                Some(set) => set.release().await,
                None => return,
            },
            None => return,
        };
        match released {
            Ok(()) => self.note(format!("released {what}")),
            Err(e) => self.expected(&format!("release {what}"), &e),
        }
    }
}

/// Whether a correct library may fail with `e` (a multi-lock's release: when each member's failure is such).
fn is_expected(e: &Error) -> bool {
    match e {
        Error::SessionExpired
        | Error::ConnectionLoss
        | Error::Closed
        | Error::NotHeld { .. }
        | Error::LockLost { .. }
        | Error::ForeignLock { .. }
        | Error::PermitsMismatch { .. }
        | Error::SequenceWrapped { .. }
        | Error::RetriesExhausted { .. } => true,
        Error::ReleaseFailed { failures } => failures.iter().all(|(_, e)| is_expected(e)),
        _ => false,
    }
}

/// The creation id of the node a fencing token was handed out on (its pass below 32 bits).
fn creation_id(token: u128) -> u64 {
    (token >> 32) as u64
}

trait StatExt {
    fn is_none_or_changed(&self, token: u128) -> bool;
}

impl StatExt for Option<recipes_core::backend::Stat> {
    fn is_none_or_changed(&self, token: u128) -> bool {
        self.is_none_or(|s| s.czxid.max(0) as u64 != creation_id(token))
    }
}

fn holding(recipe: Recipe) -> Holding {
    if recipe == Recipe::Read {
        Holding::Shared
    } else {
        Holding::Exclusive
    }
}

/// Runs a client's program to its end.
pub(crate) async fn run(ctx: Ctx, program: Program) {
    run_task(ctx.clone(), program).await;
    ctx.oracle().touch();
}

fn run_task(ctx: Ctx, program: Program) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(run_program(ctx, program))
}

/// Runs `programs` as tasks of their own on the client's session; `apart`: each with a `Locks` of its own.
async fn tasks(ctx: &Ctx, programs: Vec<Program>, apart: bool) {
    // Tokio tasks of their own (a lock's default owner is the task), aborted with the client's task when it
    // crashes (the guard's drop).
    struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            for t in &self.0 {
                t.abort();
            }
        }
    }
    let mut tasks = AbortOnDrop(Vec::new());
    for (i, p) in programs.into_iter().enumerate() {
        let mut c = ctx.clone();
        c.task = ctx.task * 10 + i + 1;
        if apart {
            c.locks = Locks::builder(ctx.locks.backend().clone())
                .layout(ctx.locks.layout())
                .build();
        }
        tasks.0.push(tokio::spawn(run_task(c, p)));
    }
    for t in &mut tasks.0 {
        if let Err(e) = t.await {
            if e.is_panic() {
                ctx.oracle().violate(format!("client {}: a task panicked: {e}", ctx.id));
            }
        }
    }
}

async fn run_program(ctx: Ctx, program: Program) {
    match program {
        Program::Tasks(programs) => tasks(&ctx, programs, false).await,
        Program::TasksApart(programs) => tasks(&ctx, programs, true).await,
        Program::Plain { recipe, patience } => plain(&ctx, recipe, patience).await,
        Program::Multi { patience } => multi(&ctx, patience).await,
        Program::Elsewhere(p) => {
            let mut c = ctx.clone();
            c.path = PATH2.to_owned();
            run_task(c, *p).await;
        }
        Program::Reenter => reenter(&ctx).await,
        Program::Downgrade => downgrade(&ctx).await,
        Program::Abandon { recipe, after } => {
            let lock = ctx.locks.lock(&ctx.path, recipe).expect("valid path");
            match tokio::time::timeout(after, lock.acquire()).await {
                Err(_) => ctx.note("abandoned its acquire".into()),
                Ok(Ok(g)) => {
                    let id = ctx.oracle().acquired(ctx.holder(), holding(recipe), g, false);
                    tokio::time::sleep(ctx.hold_time()).await;
                    ctx.release(id, "").await;
                }
                Ok(Err(e)) => ctx.expected("acquire", &e),
            }
        }
        Program::Permits { permits, n, patience } => claim_permits(&ctx, permits, n, patience).await,
        Program::Stand | Program::StandLatch => {
            let mut election = ctx.locks.election(&ctx.path).expect("valid path");
            if matches!(program, Program::StandLatch) {
                election = election.latch().expect("the Curator layout");
            }
            let candidate = election.candidate(format!("client-{}", ctx.id)).expect("valid id");
            let start = Instant::now();
            let got = candidate.leadership().await.map(|l| Some(l.into_guard()));
            hold_once(&ctx, Holding::Exclusive, Patience::Forever, start, got).await;
        }
        Program::Observe { reads } => observe(&ctx, reads).await,
        Program::AbandonPermits { permits, n, after } => {
            let semaphore = ctx.locks.semaphore(&ctx.path, permits).expect("valid semaphore");
            match tokio::time::timeout(after, semaphore.acquire_many(n)).await {
                Err(_) => ctx.note("abandoned its claim".into()),
                Ok(Ok(g)) => {
                    let id = ctx
                        .oracle()
                        .acquired(ctx.holder(), Holding::Permits { n, of: permits }, g, false);
                    tokio::time::sleep(ctx.hold_time()).await;
                    ctx.release(id, "").await;
                }
                Ok(Err(e)) => ctx.expected("acquire", &e),
            }
        }
    }
}

async fn plain(ctx: &Ctx, recipe: Recipe, patience: Patience) {
    let lock = ctx.locks.lock(&ctx.path, recipe).expect("valid path");
    let start = Instant::now();
    let got = match patience {
        Patience::Forever => lock.acquire().await.map(Some),
        Patience::Timeout(d) => lock.acquire_timeout(d).await,
        Patience::Try => lock.try_acquire().await,
    };
    hold_once(ctx, holding(recipe), patience, start, got).await;
}

/// Reads the election's leader `reads` times: the terms reported never go back (a later read sees at least the
/// state of an earlier one, and a node made later sorts behind every node before it).
async fn observe(ctx: &Ctx, reads: u32) {
    let election = ctx.locks.election(&ctx.path).expect("valid path");
    let mut last: Option<u128> = None;
    for _ in 0..reads {
        match election.leader().await {
            Ok(Some(l)) => {
                if let Some(before) = last.filter(|before| l.term < *before) {
                    ctx.oracle().violate(format!(
                        "client {}: the observer reported term {} after term {before}",
                        ctx.id, l.term
                    ));
                }
                ctx.note(format!("observed {} leading (term {})", l.id, l.term));
                last = Some(l.term);
            }
            Ok(None) => ctx.note("observed no leader".into()),
            Err(e) => ctx.expected("leader", &e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A multi-lock of the configuration's path and [`PATH2`], held once: every member is a hold of its own to the
/// oracles (exclusion and tokens per path, every member valid when handed out), `lost()` asked of each, and the set
/// released as one.
async fn multi(ctx: &Ctx, patience: Patience) {
    let set = ctx
        .locks
        .multi([(ctx.path.as_str(), Recipe::Fair), (PATH2, Recipe::Fair)])
        .expect("valid set");
    let start = Instant::now();
    let got = match patience {
        Patience::Forever => set.acquire().await.map(Some),
        Patience::Timeout(d) => set.acquire_timeout(d).await,
        Patience::Try => set.try_acquire().await,
    };
    let Some(set) = kept_deadline(ctx, patience, start, got) else {
        return;
    };
    let set = Arc::new(set);
    let ids: Vec<usize> = (0..set.guards().len())
        .map(|i| {
            ctx.oracle()
                .acquired_guard(ctx.holder(), Holding::Exclusive, Guard::Member(set.clone(), i), false)
        })
        .collect();
    drop(set);
    tokio::time::sleep(ctx.hold_time()).await;
    for &id in &ids {
        ctx.check_lost(id).await;
    }
    for &id in &ids {
        ctx.release(id, "").await;
    }
}

/// A semaphore's claim of `n` of its `permits`, held once.
async fn claim_permits(ctx: &Ctx, permits: u32, n: u32, patience: Patience) {
    let semaphore = ctx.locks.semaphore(&ctx.path, permits).expect("valid semaphore");
    let start = Instant::now();
    let got = match patience {
        Patience::Forever => semaphore.acquire_many(n).await.map(Some),
        Patience::Timeout(d) => semaphore.acquire_many_timeout(n, d).await,
        Patience::Try => semaphore.try_acquire_many(n).await,
    };
    hold_once(ctx, Holding::Permits { n, of: permits }, patience, start, got).await;
}

/// What follows an acquire that began at `start`: it kept its deadline; the hold, `lost()`, the release.
async fn hold_once(
    ctx: &Ctx,
    holding: Holding,
    patience: Patience,
    start: Instant,
    got: Result<Option<LockGuard>, Error>,
) {
    let Some(guard) = kept_deadline(ctx, patience, start, got) else {
        return;
    };
    let id = ctx.oracle().acquired(ctx.holder(), holding, guard, false);
    tokio::time::sleep(ctx.hold_time()).await;
    ctx.check_lost(id).await;
    ctx.release(id, "").await;
}

/// The outcome of an acquire that began at `start`, checked: it kept its deadline, and `acquire()` failed only as it
/// may. The guard, if any.
fn kept_deadline<G>(ctx: &Ctx, patience: Patience, start: Instant, got: Result<Option<G>, Error>) -> Option<G> {
    if let Patience::Timeout(d) = patience {
        let took = start.elapsed();
        if took > d + CLEANUP_GRACE + Duration::from_millis(1) {
            ctx.oracle()
                .violate(format!("client {}: acquire_timeout({d:?}) took {took:?}", ctx.id));
        }
    }
    match got {
        Ok(Some(g)) => Some(g),
        Ok(None) => {
            ctx.note("did not get the lock".into());
            None
        }
        // `acquire()` waits through connection losses: only the end of its session (or a refusal) stops it.
        Err(Error::ConnectionLoss) if patience == Patience::Forever => {
            ctx.oracle()
                .violate(format!("client {}: acquire() failed with ConnectionLoss", ctx.id));
            None
        }
        Err(e) => {
            ctx.expected("acquire", &e);
            None
        }
    }
}

async fn reenter(ctx: &Ctx) {
    let token = OwnerToken::new();
    let lock = ctx
        .locks
        .reentrant(&ctx.path)
        .expect("valid path")
        .with_owner(token.into());
    let outer = match lock.acquire().await {
        Ok(g) => ctx.oracle().acquired(ctx.holder(), Holding::Exclusive, g, false),
        Err(e) => return ctx.expected("acquire", &e),
    };
    tokio::time::sleep(ctx.hold_time()).await;
    match lock.acquire().await {
        Ok(g) => {
            let inner = ctx.oracle().acquired(ctx.holder(), Holding::Exclusive, g, true);
            ctx.check_lost(inner).await;
            ctx.release(inner, "inner").await;
        }
        Err(e) => ctx.expected("re-enter", &e),
    }
    ctx.release(outer, "outer").await;
}

async fn downgrade(ctx: &Ctx) {
    let token = OwnerToken::new();
    let rw = ctx.locks.read_write(&ctx.path).expect("valid path");
    let w = match rw.write().with_owner(token.into()).acquire().await {
        Ok(g) => ctx.oracle().acquired(ctx.holder(), Holding::Exclusive, g, false),
        Err(e) => return ctx.expected("write", &e),
    };
    tokio::time::sleep(ctx.hold_time()).await;
    let r = match rw.read().with_owner(token.into()).acquire().await {
        Ok(g) => Some(ctx.oracle().acquired(ctx.holder(), Holding::Shared, g, true)),
        Err(e) => {
            ctx.expected("downgrade", &e);
            None
        }
    };
    ctx.release(w, "write").await;
    if let Some(r) = r {
        tokio::time::sleep(ctx.hold_time()).await;
        ctx.check_lost(r).await;
        ctx.release(r, "read").await;
    }
}
