//! The Rust side of `bench/run`: each subcommand measures one figure and prints one line of `key=value` pairs.
//! The Java side (`bench/CuratorBench.java`) has the same subcommands and output, on Curator 5.4.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

#[cfg(feature = "etcd")]
mod etcd;
mod view;
use recipes_core::backend::{BackendExt, SessionRuntime};
use recipes_core::{Backend, Lock, Locks, Recipe};
use recipes_zk::{ZkBackend, ZkOptions};

/// The system allocator, counting the bytes allocated and not yet freed: the memory figure reports the heap each
/// waiter keeps, beside the resident memory (which also holds what the allocator keeps after frees).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Counting is on only in the memory figure: a counter written by every allocation of both worker threads slowed the
/// in-memory acquire + release from 1.8 to 3.1 µs.
static COUNTING: AtomicBool = AtomicBool::new(false);

fn count(add: usize, sub: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        LIVE.fetch_add(add, Ordering::Relaxed);
        LIVE.fetch_sub(sub, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept beside it. (The only unsafe
// code of the workspace, in a benchmark binary: a global allocator cannot be written without it.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 0);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(0, layout.size());
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 0);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size, layout.size());
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[derive(Parser)]
#[command(about = "lock recipe benchmarks (run them through bench/run)")]
struct Cli {
    #[command(subcommand)]
    figure: Figure,
    /// Where the library's ZooKeeper and etcd sessions run (`SessionRuntime`): default (each backend's: the caller's
    /// runtime for ZooKeeper, its own for etcd), own (a runtime of the backend's own) or caller (this benchmark's
    /// runtime, where the raw client's floors run)
    #[arg(long, global = true, default_value = "default", value_parser = ["default", "own", "caller"])]
    session_runtime: String,
}

/// The `--session-runtime` of this run (`None`: each backend's default).
static SESSION_RUNTIME: std::sync::OnceLock<Option<SessionRuntime>> = std::sync::OnceLock::new();

/// The `--session-runtime` of this run (`None`: each backend's default).
fn session_runtime() -> Option<SessionRuntime> {
    SESSION_RUNTIME.get().copied().flatten()
}

#[derive(Subcommand)]
enum Figure {
    /// The etcd figures (bench/run starts a member of its own)
    #[cfg(feature = "etcd")]
    Etcd {
        #[command(subcommand)]
        figure: etcd::Figure,
    },
    /// Uncontended acquire + release latency
    Uncontended {
        #[arg(long)]
        servers: String,
        #[arg(long)]
        recipe: String,
        #[arg(long, default_value_t = 300)]
        iters: usize,
    },
    /// Handoffs per second with C clients (tasks) on one lock (fair by default), spread over S sessions (default:
    /// one each)
    Contended {
        #[command(flatten)]
        load: Load,
        /// Sessions the clients share (task i uses session i mod S); 0: one session per client
        #[arg(long, default_value_t = 0)]
        sessions: usize,
        /// Cohorts of at most K holds of one node (`LocksBuilder::cohorts`); 0: off. Prints the handoffs that stayed
        /// within a session and those that went through the server, and with several sessions the longest run of
        /// one session's holds and the handoffs between sessions per second
        #[arg(long, default_value_t = 0)]
        cohorts: u32,
        /// The recipe every client takes: fair, or a side of a read/write lock (read, write)
        #[arg(long, default_value = "fair")]
        recipe: String,
    },
    /// Grants per second of a semaphore of P permits with C contenders, each on its own session, each looping
    /// acquire + release (no hold), and server requests per grant
    Semaphore {
        #[arg(long)]
        servers: String,
        #[arg(long)]
        clients: usize,
        #[arg(long)]
        permits: u32,
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
    /// Uncontended acquire + release of a multi-lock of M fair locks on one session, and server requests per
    /// acquire + release
    Multi {
        #[arg(long)]
        servers: String,
        #[arg(long)]
        members: usize,
        #[arg(long, default_value_t = 300)]
        iters: usize,
    },
    /// Time to drain N queued waiters after one release, and server requests per handoff
    Drain {
        #[arg(long)]
        servers: String,
        #[arg(long)]
        waiters: usize,
        #[arg(long, default_value_t = 8)]
        sessions: usize,
        /// The waiters' `Locks` built with `foreign_writes` (a change of a blocker's data is trusted only read back)
        #[arg(long)]
        foreign_writes: bool,
    },
    /// Resident memory per waiting contender (N waiters in this process, one session)
    Memory {
        #[arg(long)]
        servers: String,
        #[arg(long)]
        waiters: usize,
        /// The waiters in a cohort of at most K holds of one node (they wait in this process, without a node each);
        /// 0: off
        #[arg(long, default_value_t = 0)]
        cohorts: u32,
    },
    /// The floor of an uncontended acquire + release, on the raw ZooKeeper client: create and delete an ephemeral
    /// sequential node (two committed writes)
    FloorCreateDelete {
        #[arg(long)]
        servers: String,
        #[arg(long, default_value_t = 300)]
        iters: usize,
    },
    /// The floor of a handoff, on the raw ZooKeeper client: one session deletes a node, another's watch on it fires
    /// (from the delete's send to the event)
    FloorHandoff {
        #[arg(long)]
        servers: String,
        #[arg(long, default_value_t = 300)]
        iters: usize,
    },
    /// The floor of contended handoffs: C clients, each on its own session of the raw ZooKeeper client, running the fair
    /// lock's protocol with nothing else (create an ephemeral sequential node, list once, watch the predecessor,
    /// hold when it is gone, delete), handoffs per second
    FloorContended {
        #[command(flatten)]
        load: Load,
    },
    /// The same protocol through a shared view of the queue: each session keeps the names under the lock path from a
    /// persistent recursive watch, and a client waits on the predecessor its session's view shows (create, delete:
    /// two requests per handoff, and each change sent to every session), handoffs per second
    FloorView {
        #[command(flatten)]
        load: Load,
    },
    /// Live heap per waiting contender on the raw ZooKeeper client (N waiters in this process, one session), each
    /// with one watch of its own on its predecessor, or (`--view`) all of them through their session's view
    FloorMemory {
        #[arg(long)]
        servers: String,
        #[arg(long)]
        waiters: usize,
        #[arg(long)]
        view: bool,
    },
    /// In-memory backend: uncontended acquire + release, against tokio::sync::Mutex as the floor
    MemUncontended {
        #[arg(long, default_value_t = 20000)]
        iters: usize,
    },
    /// In-memory backend: acquire + release on each of N lock paths in turn (each path used once, its container
    /// left to the reaper, as an application locking per resource leaves them)
    MemPaths {
        #[arg(long, default_value_t = 1000)]
        paths: usize,
    },
    /// In-memory backend: drain of N waiters, against tokio::sync::Mutex as the floor
    MemDrain {
        #[arg(long, default_value_t = 1000)]
        waiters: usize,
        /// The sessions the waiters are spread over (one client each)
        #[arg(long, default_value_t = 8)]
        sessions: usize,
        /// The waiters' `Locks` built with `foreign_writes`
        #[arg(long)]
        foreign_writes: bool,
    },
}

/// A contended figure's load: C clients on the servers, counted for a number of seconds.
#[derive(clap::Args, Debug)]
struct Load {
    #[arg(long)]
    servers: String,
    #[arg(long)]
    clients: usize,
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn zk(servers: &str) -> Arc<ZkBackend> {
    let mut options = ZkOptions::new(servers).session_timeout(Duration::from_secs(30));
    if let Some(runtime) = session_runtime() {
        options = options.session_runtime(runtime);
    }
    ZkBackend::connect(options).await.expect("connect")
}

/// A session of the raw ZooKeeper client, as the floor figures use it.
async fn raw(servers: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .connect(servers)
        .await
        .expect("connect")
}

/// A persistent parent `path` (under `/bench`) for the floor figures' nodes, made on the raw client: the prefix of
/// the ephemeral sequential nodes to make under it, and their create options.
async fn raw_queue(c: &zookeeper_client::Client, path: &str) -> (String, zookeeper_client::CreateOptions<'static>) {
    let persistent = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    for p in ["/bench", path] {
        match c.create(p, b"", &persistent).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("create {p}: {e}"),
        }
    }
    let mode = zookeeper_client::CreateMode::EphemeralSequential.with_acls(zookeeper_client::Acls::anyone_all());
    (format!("{path}/n-"), mode)
}

/// One hold of the fair lock's protocol on the raw client, and its release: create, list once, wait for the
/// predecessor's deletion (nobody leaves the queue early here, so its deletion means we hold), delete.
async fn raw_hold(c: &zookeeper_client::Client, path: &str, prefix: &str, mode: &zookeeper_client::CreateOptions<'_>) {
    let (_, seq) = c.create(prefix, b"", mode).await.unwrap();
    let node = format!("{prefix}{seq}");
    let name = node.rsplit('/').next().unwrap_or_default().to_owned();
    let (mut children, _) = c.get_children(path).await.unwrap();
    children.sort();
    let at = children.iter().position(|n| *n == name).expect("our node is listed");
    if at > 0 {
        let pred = format!("{path}/{}", children[at - 1]);
        if let (Some(_), watcher) = c.check_and_watch_stat(&pred).await.unwrap() {
            watcher.changed().await;
        }
    }
    c.delete(&node, None).await.unwrap();
}

fn print_latencies(mut us: Vec<f64>) {
    us.sort_by(f64::total_cmp);
    println!(
        "median_us={:.1} p99_us={:.1}",
        percentile(&us, 0.5),
        percentile(&us, 0.99)
    );
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/bench/rust-{name}-{}-{nanos}", std::process::id())
}

/// `zk_packets_received` from the server's `mntr` (the first server of the connect string).
fn packets_received(servers: &str) -> u64 {
    let addr = servers.split(',').next().unwrap().split('/').next().unwrap();
    let mut s = std::net::TcpStream::connect(addr).expect("mntr connect");
    s.write_all(b"mntr").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received").map(|v| v.trim().parse().unwrap()))
        .expect("zk_packets_received in mntr")
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Deletes the nodes under `path` and `path` itself (a missing node is fine), and returns how many nodes were still
/// under it: once every contender has released and closed its session, a lock path should have none left.
async fn remove(backend: &dyn Backend, path: &str) -> usize {
    let on = backend.current();
    let left = on.children(path).await.unwrap_or_default();
    for c in &left {
        match on.delete(&format!("{path}/{c}")).await {
            Ok(()) | Err(recipes_core::Error::NoNode(_)) => {}
            Err(e) => panic!("delete {path}/{c}: {e}"),
        }
    }
    match on.delete(path).await {
        Ok(()) | Err(recipes_core::Error::NoNode(_)) => {}
        Err(e) => panic!("delete {path}: {e}"),
    }
    left.len()
}

async fn wait_children(backend: &dyn Backend, path: &str, n: usize) {
    let t0 = Instant::now();
    loop {
        if backend.current().children(path).await.map(|c| c.len()).unwrap_or(0) >= n {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "waiters never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn main() {
    let cli = Cli::parse();
    let _ = SESSION_RUNTIME.set(match cli.session_runtime.as_str() {
        "caller" => Some(SessionRuntime::Caller),
        "own" => Some(SessionRuntime::Own),
        _ => None,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        match cli.figure {
            #[cfg(feature = "etcd")]
            Figure::Etcd { figure } => etcd::run(figure).await,
            Figure::Uncontended { servers, recipe, iters } => {
                let b = zk(&servers).await;
                let locks = Locks::new(b.clone());
                let recipe: Recipe = recipe.parse().unwrap();
                let path = unique(&format!("uncontended-{recipe}"));
                // A persistent lock path, as in a steady-state service (both libraries alike): no parent is made or
                // reaped inside the measurement.
                let _ = b
                    .current()
                    .create("/bench", b"", recipes_core::backend::CreateMode::Persistent)
                    .await;
                b.current()
                    .create(&path, b"", recipes_core::backend::CreateMode::Persistent)
                    .await
                    .unwrap();
                let lock = locks.lock(&path, recipe).unwrap();
                for _ in 0..iters / 5 {
                    lock.acquire().await.unwrap().release().await.unwrap();
                }
                let mut us = Vec::with_capacity(iters);
                for _ in 0..iters {
                    let t0 = Instant::now();
                    let g = lock.acquire().await.unwrap();
                    g.release().await.unwrap();
                    us.push(t0.elapsed().as_secs_f64() * 1e6);
                }
                print_latencies(us);
                b.shutdown(Duration::from_secs(2)).await;
            }
            Figure::Contended {
                load:
                    Load {
                        servers,
                        clients,
                        seconds,
                    },
                sessions,
                cohorts,
                recipe,
            } => {
                let recipe: Recipe = recipe.parse().unwrap();
                let path = unique(&format!("contended-{recipe}-{clients}"));
                let run = Contenders::default();
                let mut backends = Vec::new();
                let sessions = if sessions == 0 { clients } else { sessions.min(clients) };
                let mut shared = Vec::new();
                for _ in 0..sessions {
                    let b = zk(&servers).await;
                    backends.push(b.clone());
                    let mut locks = Locks::builder(b);
                    if cohorts > 0 {
                        locks = locks.cohorts(cohorts);
                    }
                    shared.push(locks.build());
                }
                let history = Arc::new(std::sync::Mutex::new(Vec::new()));
                let mut tasks = Vec::new();
                for i in 0..clients {
                    let lock = shared[i % sessions].lock(&path, recipe).unwrap();
                    tasks.push(run.spawn_recorded(lock, i % sessions, history.clone()));
                }
                let (n, elapsed, requests) = run.measure(tasks, seconds, || packets_received(&servers)).await;
                println!("handoffs_per_s={:.1}", n as f64 / elapsed);
                println!("requests_per_handoff={:.2}", requests as f64 / n.max(1) as f64);
                print_history(&history.lock().unwrap(), elapsed);
                for b in backends {
                    b.shutdown(Duration::from_secs(2)).await;
                }
            }
            Figure::Semaphore {
                servers,
                clients,
                permits,
                seconds,
            } => {
                let path = unique(&format!("semaphore-{permits}of{clients}"));
                let run = Contenders::default();
                let mut tasks = Vec::new();
                let mut backends = Vec::new();
                for _ in 0..clients {
                    let b = zk(&servers).await;
                    tasks.push(run.spawn(Arc::new(Locks::new(b.clone()).semaphore(&path, permits).unwrap())));
                    backends.push(b);
                }
                let (n, elapsed, requests) = run.measure(tasks, seconds, || packets_received(&servers)).await;
                let left = remove(&*backends[0], &path).await;
                println!(
                    "grants_per_s={:.1} requests_per_grant={:.2} left_nodes={left}",
                    n as f64 / elapsed,
                    requests as f64 / n.max(1) as f64
                );
                for b in backends {
                    b.shutdown(Duration::from_secs(2)).await;
                }
            }
            Figure::Multi {
                servers,
                members,
                iters,
            } => {
                let b = zk(&servers).await;
                let locks = Locks::new(b.clone());
                let base = unique(&format!("multi-{members}"));
                let paths: Vec<String> = (0..members).map(|i| format!("{base}/m{i}")).collect();
                // Persistent lock paths, as in the uncontended figure (both libraries alike): no parent is made or
                // reaped inside the measurement.
                let _ = b
                    .current()
                    .create("/bench", b"", recipes_core::backend::CreateMode::Persistent)
                    .await;
                for p in std::iter::once(&base).chain(&paths) {
                    b.current()
                        .create(p, b"", recipes_core::backend::CreateMode::Persistent)
                        .await
                        .unwrap();
                }
                let multi = locks.multi(paths.iter().map(|p| (p.as_str(), Recipe::Fair))).unwrap();
                for _ in 0..iters / 5 {
                    multi.acquire().await.unwrap().release().await.unwrap();
                }
                // The whole acquire + release, and its two halves apart (to see which bounds it).
                let (mut us, mut acq, mut rel) = (Vec::new(), Vec::new(), Vec::new());
                let before = packets_received(&servers);
                for _ in 0..iters {
                    let t0 = Instant::now();
                    let g = multi.acquire().await.unwrap();
                    let t1 = Instant::now();
                    g.release().await.unwrap();
                    us.push(t0.elapsed().as_secs_f64() * 1e6);
                    acq.push((t1 - t0).as_secs_f64() * 1e6);
                    rel.push(t1.elapsed().as_secs_f64() * 1e6);
                }
                let after = packets_received(&servers);
                let mut left = 0;
                for p in &paths {
                    left += remove(&*b, p).await;
                }
                left += remove(&*b, &base).await;
                for v in [&mut us, &mut acq, &mut rel] {
                    v.sort_by(f64::total_cmp);
                }
                println!(
                    "median_us={:.1} p99_us={:.1} acquire_median_us={:.1} release_median_us={:.1} requests_per_op={:.2} \
                     left_nodes={left}",
                    percentile(&us, 0.5),
                    percentile(&us, 0.99),
                    percentile(&acq, 0.5),
                    percentile(&rel, 0.5),
                    (after - before) as f64 / iters as f64
                );
                b.shutdown(Duration::from_secs(2)).await;
            }
            Figure::Drain {
                servers,
                waiters,
                sessions,
                foreign_writes,
            } => {
                let path = unique(&format!("drain-{waiters}"));
                let holder = zk(&servers).await;
                let g = Locks::new(holder.clone()).fair(&path).unwrap().acquire().await.unwrap();
                let mut pool = Vec::new();
                for _ in 0..sessions {
                    pool.push(Locks::builder(zk(&servers).await).foreign_writes(foreign_writes).build());
                }
                let done = Arc::new(AtomicU64::new(0));
                let (all_done_tx, mut all_done) = tokio::sync::mpsc::channel::<Instant>(1);
                for i in 0..waiters {
                    let lock = pool[i % sessions].fair(&path).unwrap();
                    let done = done.clone();
                    let tx = all_done_tx.clone();
                    tokio::spawn(async move {
                        let g = lock.acquire().await.unwrap();
                        g.release().await.unwrap();
                        if done.fetch_add(1, Ordering::SeqCst) + 1 == waiters as u64 {
                            let _ = tx.send(Instant::now()).await;
                        }
                    });
                }
                wait_children(&*holder, &path, waiters + 1).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
                let before = packets_received(&servers);
                let t0 = Instant::now();
                g.release().await.unwrap();
                let t1 = all_done.recv().await.unwrap();
                let after = packets_received(&servers);
                println!(
                    "drain_ms={:.1} requests_per_handoff={:.2}",
                    (t1 - t0).as_secs_f64() * 1e3,
                    (after - before) as f64 / waiters as f64
                );
                for l in pool {
                    drop(l);
                }
                holder.shutdown(Duration::from_secs(2)).await;
            }
            Figure::Memory {
                servers,
                waiters,
                cohorts,
            } => {
                COUNTING.store(true, Ordering::Relaxed);
                let path = unique(&format!("memory-{waiters}"));
                let holder = zk(&servers).await;
                let g = Locks::new(holder.clone()).fair(&path).unwrap().acquire().await.unwrap();
                let b = zk(&servers).await;
                let mut builder = Locks::builder(b.clone());
                if cohorts > 0 {
                    builder = builder.cohorts(cohorts);
                }
                let locks = builder.build();
                // A cohort's waiters make no node of their own: only its leader's is there.
                let nodes = |n: usize| if cohorts > 0 { 2 } else { n + 1 };
                // Warm up the allocator and the client with a few waiters first.
                let mut tasks = Vec::new();
                for _ in 0..10 {
                    let lock = locks.fair(&path).unwrap();
                    tasks.push(tokio::spawn(async move {
                        lock.acquire().await.unwrap().release().await.unwrap()
                    }));
                }
                wait_children(&*holder, &path, nodes(10)).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                let before = rss_bytes();
                let live_before = LIVE.load(Ordering::Relaxed);
                // Waiters arrive in batches, as contenders of a real service do, not all in one instant.
                for batch in 0..waiters.div_ceil(100) {
                    let n = 100.min(waiters - batch * 100);
                    for _ in 0..n {
                        let lock = locks.fair(&path).unwrap();
                        tasks.push(tokio::spawn(async move {
                            lock.acquire().await.unwrap().release().await.unwrap()
                        }));
                    }
                    wait_children(&*holder, &path, nodes(batch * 100 + n + 10)).await;
                    if cohorts > 0 {
                        // They queue in the cohort at their first poll, without a request.
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                let after = rss_bytes();
                let live_after = LIVE.load(Ordering::Relaxed);
                println!(
                    "bytes_per_waiter={:.0} live_bytes_per_waiter={:.0}",
                    after.saturating_sub(before) as f64 / waiters as f64,
                    // Wrapping: a free of memory allocated before counting began takes the counter below zero.
                    live_after.wrapping_sub(live_before) as isize as f64 / waiters as f64
                );
                g.release().await.unwrap();
                for t in tasks {
                    t.await.unwrap();
                }
                b.shutdown(Duration::from_secs(2)).await;
                holder.shutdown(Duration::from_secs(2)).await;
            }
            Figure::FloorCreateDelete { servers, iters } => {
                let c = raw(&servers).await;
                let path = unique("floor-create-delete");
                let (prefix, mode) = raw_queue(&c, &path).await;
                let mut us = Vec::with_capacity(iters);
                for i in 0..iters + iters / 5 {
                    let t0 = Instant::now();
                    let (_, seq) = c.create(&prefix, b"", &mode).await.unwrap();
                    c.delete(&format!("{prefix}{seq}"), None).await.unwrap();
                    if i >= iters / 5 {
                        us.push(t0.elapsed().as_secs_f64() * 1e6);
                    }
                }
                print_latencies(us);
                c.delete(&path, None).await.unwrap();
            }
            Figure::FloorContended {
                load:
                    Load {
                        servers,
                        clients,
                        seconds,
                    },
            } => {
                let path = unique(&format!("floor-contended-{clients}"));
                let mut sessions = Vec::new();
                for _ in 0..clients {
                    sessions.push(Arc::new(raw(&servers).await));
                }
                let (prefix, mode) = raw_queue(&sessions[0], &path).await;
                let run = Contenders::default();
                let mut tasks = Vec::new();
                for c in &sessions {
                    let c = c.clone();
                    let (count, stop, measuring) = (run.count.clone(), run.stop.clone(), run.measuring.clone());
                    let (path, prefix, mode) = (path.clone(), prefix.clone(), mode.clone());
                    tasks.push(tokio::spawn(async move {
                        while !stop.load(Ordering::Relaxed) {
                            raw_hold(&c, &path, &prefix, &mode).await;
                            if measuring.load(Ordering::Relaxed) {
                                count.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }));
                }
                let (n, elapsed, requests) = run.measure(tasks, seconds, || packets_received(&servers)).await;
                println!("handoffs_per_s={:.1}", n as f64 / elapsed);
                println!("requests_per_handoff={:.2}", requests as f64 / n.max(1) as f64);
                sessions[0].delete(&path, None).await.ok();
            }
            Figure::FloorView {
                load:
                    Load {
                        servers,
                        clients,
                        seconds,
                    },
            } => view::contended(&servers, clients, seconds).await,
            Figure::FloorMemory {
                servers,
                waiters,
                view,
            } => view::memory(&servers, waiters, view).await,
            Figure::FloorHandoff { servers, iters } => {
                let a = raw(&servers).await;
                let b = raw(&servers).await;
                let path = unique("floor-handoff");
                let (prefix, mode) = raw_queue(&a, &path).await;
                let mut us = Vec::with_capacity(iters);
                for i in 0..iters + iters / 5 {
                    let (_, seq) = a.create(&prefix, b"", &mode).await.unwrap();
                    let node = format!("{prefix}{seq}");
                    let (stat, watcher) = b.check_and_watch_stat(&node).await.unwrap();
                    assert!(stat.is_some(), "the node is there");
                    let t0 = Instant::now();
                    let delete = a.delete(&node, None);
                    let event = watcher.changed();
                    let (deleted, event) = tokio::join!(delete, async {
                        let e = event.await;
                        (e, t0.elapsed())
                    });
                    deleted.unwrap();
                    assert_eq!(event.0.event_type, zookeeper_client::EventType::NodeDeleted);
                    if i >= iters / 5 {
                        us.push(event.1.as_secs_f64() * 1e6);
                    }
                }
                print_latencies(us);
                a.delete(&path, None).await.unwrap();
            }
            Figure::MemUncontended { iters } => {
                let cluster = recipes_mem::MemCluster::new();
                let client = cluster.client();
                // Keep the lock path in place (the in-memory backend reaps empty containers at once, where ZooKeeper
                // takes about a minute): this measures the steady state, as the ZooKeeper figure does.
                client
                    .current()
                    .create("/bench", b"", recipes_core::backend::CreateMode::Persistent)
                    .await
                    .unwrap();
                client
                    .current()
                    .create("/bench/mem", b"", recipes_core::backend::CreateMode::Persistent)
                    .await
                    .unwrap();
                let lock = Locks::new(client).fair("/bench/mem").unwrap();
                for _ in 0..iters / 10 {
                    lock.acquire().await.unwrap().release().await.unwrap();
                }
                let t0 = Instant::now();
                for _ in 0..iters {
                    lock.acquire().await.unwrap().release().await.unwrap();
                }
                let ours = t0.elapsed().as_secs_f64() * 1e9 / iters as f64;
                let m = tokio::sync::Mutex::new(0u64);
                let t0 = Instant::now();
                for _ in 0..iters * 10 {
                    *m.lock().await += 1;
                }
                let floor = t0.elapsed().as_secs_f64() * 1e9 / (iters * 10) as f64;
                println!("ours_ns={ours:.0} floor_ns={floor:.1}");
            }
            Figure::MemPaths { paths } => {
                let cluster = recipes_mem::MemCluster::new();
                let locks = Locks::new(cluster.client());
                let names: Vec<String> = (0..paths).map(|i| format!("/bench/paths/r-{i}")).collect();
                let t0 = Instant::now();
                for name in &names {
                    let lock = locks.fair(name).unwrap();
                    lock.acquire().await.unwrap().release().await.unwrap();
                }
                let ours = t0.elapsed().as_secs_f64() * 1e6 / paths.max(1) as f64;
                println!("ours_us={ours:.2}");
            }
            Figure::MemDrain {
                waiters,
                sessions,
                foreign_writes,
            } => {
                let sessions = sessions.max(1);
                let cluster = recipes_mem::MemCluster::new();
                let holder = Locks::new(cluster.client());
                let g = holder.fair("/bench/drain").unwrap().acquire().await.unwrap();
                let pool: Vec<Locks> = (0..sessions)
                    .map(|_| Locks::builder(cluster.client()).foreign_writes(foreign_writes).build())
                    .collect();
                let done = Arc::new(AtomicU64::new(0));
                let (tx, mut rx) = tokio::sync::mpsc::channel::<Instant>(1);
                for i in 0..waiters {
                    let lock = pool[i % sessions].fair("/bench/drain").unwrap();
                    let (done, tx) = (done.clone(), tx.clone());
                    tokio::spawn(async move {
                        lock.acquire().await.unwrap().release().await.unwrap();
                        if done.fetch_add(1, Ordering::SeqCst) + 1 == waiters as u64 {
                            let _ = tx.send(Instant::now()).await;
                        }
                    });
                }
                while cluster.children("/bench/drain").len() < waiters + 1 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                // The queue settles before the release: every waiter has listed once and waits in line, its two
                // watches armed (ours and its blocker's). Releasing as soon as the nodes existed measured the drain of
                // a queue still listing, which hid the lists a settled queue's drain made again (seventeenth session:
                // 66,000 to 150,000 names for 3,000 waiters on 8 sessions, decision 0075).
                let settled = settle(&cluster, settled_watches(waiters, sessions)).await;
                let listed_before = cluster.listed_names();
                let t0 = Instant::now();
                g.release().await.unwrap();
                let ours = (rx.recv().await.unwrap() - t0).as_secs_f64() * 1e3;
                let listed = cluster.listed_names() - listed_before;
                // Floor: tokio's FIFO mutex with the same number of waiting tasks.
                let m = Arc::new(tokio::sync::Mutex::new(()));
                let guard = m.clone().lock_owned().await;
                let done = Arc::new(AtomicU64::new(0));
                let (tx, mut rx) = tokio::sync::mpsc::channel::<Instant>(1);
                for _ in 0..waiters {
                    let (m, done, tx) = (m.clone(), done.clone(), tx.clone());
                    tokio::spawn(async move {
                        drop(m.lock().await);
                        if done.fetch_add(1, Ordering::SeqCst) + 1 == waiters as u64 {
                            let _ = tx.send(Instant::now()).await;
                        }
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                let t0 = Instant::now();
                drop(guard);
                let floor = (rx.recv().await.unwrap() - t0).as_secs_f64() * 1e3;
                println!(
                    "ours_ms={ours:.2} floor_ms={floor:.3} listed={listed} settled={}",
                    u8::from(settled)
                );
            }
        }
    });
}

/// From how many waiters of one session in line on a path, and from what share of the queue, they share a view of it
/// instead of watches of their own (`VIEW_FROM` and `VIEW_SHARE` in recipes-core's driver/views.rs, decision 0085).
/// The expected count is a lower bound: should the library arm views where this expects none, a drain never settles,
/// and bench/run fails on its `settled=0` (the other way, a drain settles with fewer watches armed than it could have).
/// bench/run's drains run on 8, 12 or 24 sessions, or one per waiter, where neither arms a view.
const VIEW_FROM: usize = 128;
const VIEW_SHARE: usize = 4;

/// The watches a settled queue of `waiters` spread over `sessions` holds at least: two for each waiter that came before
/// its session's view (its node and its blocker), and the view's one tree watch. The waiters come one of each session
/// in turn, so a session's i-th finds about `sessions` × i in line: a view only where that is under `VIEW_SHARE` × i.
fn settled_watches(waiters: usize, sessions: usize) -> usize {
    let views = sessions < VIEW_SHARE;
    (0..sessions)
        .map(|s| waiters / sessions + usize::from(s < waiters % sessions))
        .map(|k| match views && k >= VIEW_FROM {
            true => 2 * (VIEW_FROM - 1) + 1,
            false => 2 * k,
        })
        .sum()
}

/// Waits (at most 60 s) until the in-memory cluster holds at least `watches` watches and neither its count of listed
/// names nor its count of watches changed for 100 ms: a queue of waiters that have all listed and wait in line. The
/// count of watches too: since decision 0079 the first waiters also watch a scout, so `watches` (two per waiter) is
/// reached while the last waiters still arm theirs, and on a loaded machine (the smoke run, beside the model checker)
/// a drain released then measured their arming's lists (14,852 names for 3,000 waiters, against 5,999 settled).
/// Returns whether it settled. (Until the thirty-second session it waited for two watches per waiter, which a queue
/// with views never holds: every drain of 3,000 on eight sessions waited the whole minute, 3 minutes of the smoke run.)
async fn settle(cluster: &recipes_mem::MemCluster, watches: usize) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    let counts = || (cluster.listed_names(), cluster.watches());
    let mut last = (counts(), Instant::now());
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let now = counts();
        if now != last.0 {
            last = (now, Instant::now());
        } else if now.1 >= watches && last.1.elapsed() >= Duration::from_millis(100) {
            return true;
        }
    }
    eprintln!("the queue did not settle within 60 s: measuring as it is");
    false
}

/// Contenders that acquire and release until stopped, counting their grants while measuring.
/// One measured hold of a contended run.
struct Held {
    /// The session (index) that held.
    session: usize,
    /// The creation id of the node that held.
    node: u128,
    /// Whether the hold was passed within a cohort (no server on its way).
    passed: bool,
}

/// Prints what a contended run's history says: the handoffs that stayed within a session (a cohort's passes) and
/// those through the server; the longest run of holds of one node (a cohort's bound) and of one session; and the
/// handoffs between sessions per second.
fn print_history(history: &[Held], elapsed: f64) {
    let local = history.iter().filter(|h| h.passed).count();
    println!("local_handoffs={local}");
    println!("server_handoffs={}", history.len() - local);
    let longest = |same: &dyn Fn(&Held, &Held) -> bool| {
        let (mut longest, mut run) = (0, 0);
        for (i, h) in history.iter().enumerate() {
            run = if i > 0 && same(&history[i - 1], h) { run + 1 } else { 1 };
            longest = longest.max(run);
        }
        longest
    };
    println!("longest_run_of_one_node={}", longest(&|a, b| a.node == b.node));
    println!("longest_run_of_one_session={}", longest(&|a, b| a.session == b.session));
    let between = history.windows(2).filter(|w| w[0].session != w[1].session).count();
    println!("cross_session_handoffs_per_s={:.1}", between as f64 / elapsed);
}

#[derive(Default)]
struct Contenders {
    count: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
}

impl Contenders {
    /// A contender on `lock`.
    fn spawn(&self, lock: Arc<dyn Lock>) -> tokio::task::JoinHandle<()> {
        self.spawn_with(lock, |_| {})
    }

    /// A contender on `lock`, of session `session`, that records each measured hold in `history`: its session, its
    /// node, and whether it was passed within the session (a cohort's pass, which went through no server).
    fn spawn_recorded(
        &self,
        lock: Arc<dyn Lock>,
        session: usize,
        history: Arc<std::sync::Mutex<Vec<Held>>>,
    ) -> tokio::task::JoinHandle<()> {
        self.spawn_with(lock, move |g| {
            // The token is the node's creation id above its pass (above 0 for a cohort's local pass).
            let token = g.fencing_token();
            history.lock().unwrap().push(Held {
                session,
                node: token >> 32,
                passed: token & u128::from(u32::MAX) > 0,
            });
        })
    }

    /// A contender on `lock` that calls `measured` with each hold counted.
    fn spawn_with(
        &self,
        lock: Arc<dyn Lock>,
        measured: impl Fn(&recipes_core::LockGuard) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let (count, stop, measuring) = (self.count.clone(), self.stop.clone(), self.measuring.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let g = lock.acquire().await.unwrap();
                if measuring.load(Ordering::Relaxed) {
                    count.fetch_add(1, Ordering::Relaxed);
                    measured(&g);
                }
                g.release().await.unwrap();
            }
        })
    }

    /// After 500 ms of warm-up, counts the grants for `seconds`, then stops `tasks`: the grants, the seconds measured,
    /// and how much `counter` (read at both ends) grew meanwhile.
    async fn measure(
        &self,
        tasks: Vec<tokio::task::JoinHandle<()>>,
        seconds: f64,
        counter: impl Fn() -> u64,
    ) -> (u64, f64, u64) {
        tokio::time::sleep(Duration::from_millis(500)).await; // warm up
        let before = counter();
        self.measuring.store(true, Ordering::Relaxed);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        self.measuring.store(false, Ordering::Relaxed);
        let n = self.count.load(Ordering::Relaxed);
        let elapsed = t0.elapsed().as_secs_f64();
        let grown = counter().saturating_sub(before);
        self.stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        (n, elapsed, grown)
    }
}
