//! The floor of a *shared view of the queue*, on the raw ZooKeeper client: what one view per session, kept by a
//! persistent recursive watch on the lock path (ZooKeeper 3.6's `addWatch`), could reach, measured beside the floor
//! of one watch per waiter (`floor-contended`). It is an experiment for the design of issue 26's last targets, not a
//! recipe: nobody leaves the queue early here, and a lost connection is not handled.
//!
//! Each session keeps the names under the lock path from its watch's events, in the order the server sends them.
//! ZooKeeper sends a session the events of the changes made before a request ahead of that request's reply, so once a
//! session's own create has come back and its view shows the new node, the view holds every node made before it: the
//! node just ahead of it in the view is its predecessor, with no listing and no watch of its own. A handoff costs two
//! requests (a create and a delete) and a notification of each to every session watching.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use zookeeper_client as zk;

use crate::{packets_received, raw, raw_queue, unique, Contenders, COUNTING, LIVE};

/// One session's view of the queue under a lock path.
#[derive(Default)]
pub struct View {
    state: std::sync::Mutex<State>,
    /// Woken at each node the view learns of (a waiter for its own node to show).
    created: Notify,
}

#[derive(Default)]
struct State {
    /// The names under the lock path, in sequence order.
    names: BTreeSet<String>,
    /// Waiters for a name's deletion.
    gone: HashMap<String, oneshot::Sender<()>>,
}

impl View {
    /// Keeps the view of `path` from `watcher`'s events until the session ends (spawned once per session).
    pub async fn follow(self: Arc<Self>, path: String, mut watcher: zk::PersistentWatcher) {
        let prefix = format!("{path}/");
        loop {
            let event = watcher.changed().await;
            let Some(name) = event.path.strip_prefix(&prefix) else {
                if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                    return;
                }
                continue;
            };
            match event.event_type {
                zk::EventType::NodeCreated => {
                    self.state.lock().unwrap().names.insert(name.to_owned());
                    self.created.notify_waiters();
                }
                zk::EventType::NodeDeleted => {
                    let mut s = self.state.lock().unwrap();
                    s.names.remove(name);
                    if let Some(tx) = s.gone.remove(name) {
                        let _ = tx.send(());
                    }
                }
                _ => {}
            }
        }
    }

    /// The name just ahead of `ours` once the view shows `ours` (every node made before it is in the view then), or
    /// `None` when nothing is ahead; with a receiver that fires at that name's deletion.
    async fn ahead_of(&self, ours: &str) -> Option<oneshot::Receiver<()>> {
        loop {
            let notified = self.created.notified();
            {
                let mut s = self.state.lock().unwrap();
                if s.names.contains(ours) {
                    let pred = s
                        .names
                        .range::<str, _>((Bound::Unbounded, Bound::Excluded(ours)))
                        .next_back()
                        .cloned()?;
                    let (tx, rx) = oneshot::channel();
                    s.gone.insert(pred, tx);
                    return Some(rx);
                }
            }
            notified.await;
        }
    }
}

/// Arms the session's persistent recursive watch on `path` and starts its view.
pub async fn start(c: &zk::Client, path: &str) -> Arc<View> {
    let watcher = c
        .watch(path, zk::AddWatchMode::PersistentRecursive)
        .await
        .expect("addWatch");
    let view = Arc::new(View::default());
    tokio::spawn(view.clone().follow(path.to_owned(), watcher));
    view
}

/// One hold of the fair lock's protocol through the session's view, and its release: create, wait for the
/// predecessor the view shows to go, delete.
pub async fn hold(c: &zk::Client, view: &View, prefix: &str, mode: &zk::CreateOptions<'_>) {
    let (_, seq) = c.create(prefix, b"", mode).await.unwrap();
    let node = format!("{prefix}{seq}");
    let name = node.rsplit('/').next().unwrap_or_default();
    if let Some(gone) = view.ahead_of(name).await {
        gone.await.expect("the view follows the session");
    }
    c.delete(&node, None).await.unwrap();
}

/// A waiter that stays: its node made, it waits for the predecessor its session's view shows to go (the memory
/// figure's waiter through a view), then deletes its node.
pub async fn wait_through_view(
    c: Arc<zk::Client>,
    view: Arc<View>,
    prefix: Arc<str>,
    mode: zk::CreateOptions<'static>,
) {
    hold(&c, &view, &prefix, &mode).await;
}

/// A waiter that stays, with one watch of its own: its node made, it watches the node one sequence number before
/// it (in the memory figure nobody else makes nodes under the path, so that is its predecessor), then deletes its
/// node once that one is gone.
pub async fn wait_with_watch(c: Arc<zk::Client>, prefix: Arc<str>, mode: zk::CreateOptions<'static>) {
    let (_, seq) = c.create(&prefix, b"", &mode).await.unwrap();
    let node = format!("{prefix}{seq}");
    let pred = format!("{prefix}{:010}", seq.into_i64() - 1);
    if let (Some(_), watcher) = c.check_and_watch_stat(&pred).await.unwrap() {
        watcher.changed().await;
    }
    c.delete(&node, None).await.unwrap();
}

/// `floor-view`: C clients, each on a session of its own with its view, taking the lock in turn for `seconds`.
pub async fn contended(servers: &str, clients: usize, seconds: f64) {
    let path = unique(&format!("floor-view-{clients}"));
    let mut sessions = Vec::new();
    for _ in 0..clients {
        sessions.push(Arc::new(raw(servers).await));
    }
    let (prefix, mode) = raw_queue(&sessions[0], &path).await;
    let run = Contenders::default();
    let mut tasks = Vec::new();
    for c in &sessions {
        let c = c.clone();
        let view = start(&c, &path).await;
        let (count, stop, measuring) = (run.count.clone(), run.stop.clone(), run.measuring.clone());
        let (prefix, mode) = (prefix.clone(), mode.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                hold(&c, &view, &prefix, &mode).await;
                if measuring.load(Ordering::Relaxed) {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let (n, elapsed, requests) = run.measure(tasks, seconds, || packets_received(servers)).await;
    println!("handoffs_per_s={:.1}", n as f64 / elapsed);
    println!("requests_per_handoff={:.2}", requests as f64 / n.max(1) as f64);
    sessions[0].delete(&path, None).await.ok();
}

/// `floor-memory`: the live heap of N waiters on one session, each with a watch of its own, or through the view.
pub async fn memory(servers: &str, waiters: usize, view: bool) {
    COUNTING.store(true, Ordering::Relaxed);
    let path = unique(&format!("floor-memory-{waiters}"));
    let holder = raw(servers).await;
    let c = Arc::new(raw(servers).await);
    let (prefix, mode) = raw_queue(&holder, &path).await;
    let seen = if view { Some(start(&c, &path).await) } else { None };
    let (_, first) = holder.create(&prefix, b"", &mode).await.unwrap();
    let prefix: Arc<str> = prefix.into();
    let spawn = |tasks: &mut Vec<tokio::task::JoinHandle<()>>| {
        let (c, prefix, mode) = (c.clone(), prefix.clone(), mode.clone());
        tasks.push(match &seen {
            Some(v) => tokio::spawn(wait_through_view(c, v.clone(), prefix, mode)),
            None => tokio::spawn(wait_with_watch(c, prefix, mode)),
        });
    };
    let children = |n: usize| {
        let (c, path) = (c.clone(), path.clone());
        async move {
            for _ in 0..6000 {
                if let Ok(Some(s)) = c.check_stat(&path).await {
                    if s.num_children as usize >= n {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("{n} nodes under {path} within 60 s");
        }
    };
    let mut tasks = Vec::new();
    for _ in 0..10 {
        spawn(&mut tasks);
    }
    children(11).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let live_before = LIVE.load(Ordering::Relaxed);
    for batch in 0..waiters.div_ceil(100) {
        let n = 100.min(waiters - batch * 100);
        for _ in 0..n {
            spawn(&mut tasks);
        }
        children(batch * 100 + n + 11).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let live_after = LIVE.load(Ordering::Relaxed);
    println!(
        "live_bytes_per_waiter={:.0}",
        live_after.wrapping_sub(live_before) as isize as f64 / waiters as f64
    );
    holder.delete(&format!("{prefix}{first}"), None).await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    holder.delete(&path, None).await.ok();
}
