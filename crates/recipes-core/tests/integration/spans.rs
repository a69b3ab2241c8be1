//! What the acquire says through `tracing`, seen by a subscriber of the test's own: the acquire's span and its
//! fields when debug spans are on, nothing written into the caller's span when they are off, and an abandoned
//! acquire's event naming its node.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use recipes_core::Locks;
use recipes_mem::MemCluster;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Instrument, Metadata, Subscriber};
use tracing_core::span::Current;

/// A span's name and the fields recorded on it.
type Span = (&'static Metadata<'static>, HashMap<String, String>);

#[derive(Default)]
struct Seen {
    spans: HashMap<u64, Span>,
    /// Each span's parent, by id.
    parents: HashMap<u64, Option<u64>>,
    stack: Vec<u64>,
    /// Each event's fields (its message under `message`).
    events: Vec<HashMap<String, String>>,
}

/// Records everything; the acquire's span only when `acquire_on`.
#[derive(Clone)]
struct Probe {
    seen: Arc<Mutex<Seen>>,
    next: Arc<AtomicU64>,
    acquire_on: bool,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().to_owned(), format!("{v:?}"));
    }
}

impl Subscriber for Probe {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        !(m.is_span() && m.name() == "acquire" && !self.acquire_on)
    }
    fn new_span(&self, a: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let mut f = HashMap::new();
        a.record(&mut Fields(&mut f));
        let mut seen = self.seen.lock().unwrap();
        let parent = if a.is_contextual() {
            seen.stack.last().copied()
        } else {
            a.parent().map(Id::into_u64)
        };
        seen.parents.insert(id, parent);
        seen.spans.insert(id, (a.metadata(), f));
        Id::from_u64(id)
    }
    fn record(&self, id: &Id, r: &Record<'_>) {
        if let Some(s) = self.seen.lock().unwrap().spans.get_mut(&id.into_u64()) {
            r.record(&mut Fields(&mut s.1));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut f = HashMap::new();
        e.record(&mut Fields(&mut f));
        self.seen.lock().unwrap().events.push(f);
    }
    fn enter(&self, id: &Id) {
        self.seen.lock().unwrap().stack.push(id.into_u64());
    }
    fn exit(&self, id: &Id) {
        let mut seen = self.seen.lock().unwrap();
        if let Some(p) = seen.stack.iter().rposition(|i| *i == id.into_u64()) {
            seen.stack.remove(p);
        }
    }
    fn current_span(&self) -> Current {
        let seen = self.seen.lock().unwrap();
        match seen.stack.last() {
            Some(i) => Current::new(Id::from_u64(*i), seen.spans[i].0),
            None => Current::none(),
        }
    }
}

/// Under the caller's span `outer` (which has a `node` field of its own): one holder, a waiter that is handed the
/// lock, and a waiter whose acquire is dropped while it waits.
async fn run(acquire_on: bool) -> Seen {
    let probe = Probe {
        seen: Arc::default(),
        next: Arc::default(),
        acquire_on,
    };
    let seen = probe.seen.clone();
    let _default = tracing::subscriber::set_default(probe);
    let cluster = MemCluster::new();
    let locks = Locks::new(cluster.client());
    let outer = tracing::info_span!("outer", node = tracing::field::Empty);
    async {
        let first = locks.fair("/spans/p").unwrap().acquire().await.unwrap();
        let lock = locks.fair("/spans/p").unwrap();
        let waiter = tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) }.in_current_span());
        tokio::time::sleep(Duration::from_millis(50)).await;
        let dropped = locks.fair("/spans/p").unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(50), dropped.acquire())
            .await
            .is_err());
        first.release().await.unwrap();
        waiter.await.unwrap().unwrap();
    }
    .instrument(outer)
    .await;
    // The abandoned acquire's cleanup runs in the background.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let out = std::mem::take(&mut *seen.lock().unwrap());
    out
}

fn named<'s>(seen: &'s Seen, name: &str) -> Vec<&'s HashMap<String, String>> {
    seen.spans
        .values()
        .filter(|(m, _)| m.name() == name)
        .map(|(_, f)| f)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_enabled_acquire_span_records_its_node_token_and_wait() {
    let seen = run(true).await;
    let acquires = named(&seen, "acquire");
    assert_eq!(acquires.len(), 3, "one span per acquire");
    let held: Vec<_> = acquires.iter().filter(|f| f.contains_key("node")).collect();
    assert_eq!(
        held.len(),
        2,
        "the two acquires that held recorded their node: {acquires:?}"
    );
    for f in held {
        assert!(f["node"].contains("/spans/p/"), "{f:?}");
        assert!(f.contains_key("token") && f.contains_key("waited_ms"), "{f:?}");
    }
    assert!(
        !named(&seen, "outer")[0].contains_key("node"),
        "the caller's span untouched"
    );
}

#[tokio::test(start_paused = true)]
async fn a_disabled_acquire_span_writes_nothing_into_the_callers_span() {
    let seen = run(false).await;
    assert!(named(&seen, "acquire").is_empty());
    let outer = named(&seen, "outer");
    assert!(
        !outer[0].contains_key("node"),
        "the lock's node recorded in the caller's span: {outer:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_acquire_says_which_node_it_cleans_up() {
    for acquire_on in [true, false] {
        let seen = run(acquire_on).await;
        let abandoned: Vec<_> = seen
            .events
            .iter()
            .filter(|e| e.get("message").is_some_and(|m| m.contains("acquire abandoned")))
            .collect();
        assert_eq!(abandoned.len(), 1, "{:?}", seen.events);
        assert!(
            abandoned[0].get("node").is_some_and(|n| n.contains("/spans/p/")),
            "{abandoned:?}"
        );
    }
}

/// The acquire's span is made when `acquire()` is called, a child of the span current there, not of the one its
/// future is first polled in (decision 78); an acquire dropped before its first poll made its span, and nothing else.
#[tokio::test(start_paused = true)]
async fn the_acquire_span_is_a_child_of_the_span_at_the_call() {
    let probe = Probe {
        seen: Arc::default(),
        next: Arc::default(),
        acquire_on: true,
    };
    let seen = probe.seen.clone();
    let _default = tracing::subscriber::set_default(probe);
    let cluster = MemCluster::new();
    let locks = Locks::new(cluster.client());
    let lock = locks.fair("/spans/call").unwrap();
    let made = tracing::info_span!("made");
    let polled = tracing::info_span!("polled");
    let f = made.in_scope(|| lock.acquire());
    let guard = f.instrument(polled).await.unwrap();
    guard.release().await.unwrap();
    drop(tracing::info_span!("unpolled").in_scope(|| lock.acquire()));
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let id_of = |name: &str| {
        let ids: Vec<u64> = (seen.spans.iter())
            .filter(|(_, (m, _))| m.name() == name)
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(ids.len(), 1, "one span named {name}");
        ids[0]
    };
    let acquires: Vec<(u64, bool)> = (seen.spans.iter())
        .filter(|(_, (m, _))| m.name() == "acquire")
        .map(|(i, (_, f))| (*i, f.contains_key("node")))
        .collect();
    assert_eq!(acquires.len(), 2, "one span per acquire made: {acquires:?}");
    for (id, held) in acquires {
        let parent = seen.parents[&id];
        if held {
            assert_eq!(
                parent,
                Some(id_of("made")),
                "the held acquire's span under the span of its call"
            );
        } else {
            assert_eq!(
                parent,
                Some(id_of("unpolled")),
                "the unpolled acquire's span under the span of its call"
            );
        }
    }
    let children = cluster.children("/spans/call");
    assert!(
        children.is_empty(),
        "no node left by the held or the unpolled acquire: {children:?}"
    );
}
