//! The backend's own runtime, and what happens to a session whose runtime ends before the backend is closed: the
//! backend opens a new session on its own runtime, as after an expiry (decision 0095).

use std::sync::{Arc, Weak};

use recipes_core::backend::{SessionId, SessionState};
use recipes_core::{Error, Result};
use tracing::{info, warn};

use crate::session::{heartbeat, install, monitor, probe_timeouts, publish, reconnect, session_id, Inner};

/// The backend's own runtime: the connection, heartbeat and monitor of every session that does not run on the caller's
/// ([`SessionRuntime`](recipes_core::backend::SessionRuntime)) run here, whatever runtime (or none) the application
/// calls from, and so do those of a session opened after the caller's runtime ended.
pub(crate) fn io_runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RT: std::sync::OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(IO_THREADS_AT_MOST));
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("recipes-zk")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Error::Backend(format!("could not start the ZooKeeper backend's runtime: {e}")))
}

/// The backend's runtime has one thread per core, up to this many.
const IO_THREADS_AT_MOST: usize = 4;

/// Aborts a task when dropped (a connect abandoned by its caller).
pub(crate) struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The session's monitor was dropped before the backend was closed: the runtime it ran on was shut down (a session on
/// the caller's runtime), and the session's connection with it, or the monitor panicked. Either way nothing follows
/// that session any more. It is over for the backend, as after an expiry: `Expired` is published for it at once (its
/// guards are no longer valid, its waits end), and a new session is opened on the backend's own runtime, where its
/// tasks then run. The old session's nodes go when the server expires it, or at once when its connection still runs
/// (dropping its last client closes it). Without the backend's own runtime, the backend is closed.
pub(crate) fn session_runtime_ended(inner: &Weak<Inner>) {
    let Some(strong) = inner.upgrade() else { return };
    if strong.is_closed() {
        return;
    }
    let ended = strong.status.borrow().id;
    match io_runtime() {
        Ok(rt) => {
            warn!(
                session = format!("{ended:#x}"),
                "the monitor of a ZooKeeper session ended before the backend was closed (its runtime was shut \
                 down?); the session is over, and a new one opens on the backend's own runtime"
            );
            publish(&strong, ended, SessionState::Expired);
            drop(rt.spawn(reopen(inner.clone())));
        }
        Err(e) => {
            warn!(error = %e, "the monitor of a ZooKeeper session ended before the backend was closed; closing it");
            drop(strong.close());
        }
    }
}

/// Opens a new session (retrying with a backoff until the backend is closed or gone) and starts its tasks here, on
/// the backend's own runtime.
async fn reopen(inner: Weak<Inner>) {
    let Some((client, strong)) = reconnect(&inner).await else {
        return;
    };
    let id = session_id(&client);
    let watcher = client.state_watcher();
    if !install(&strong, client, Some(tokio::runtime::Handle::current())) {
        return; // closed meanwhile
    }
    info!(
        session = format!("{id:#x}"),
        "new ZooKeeper session, on the backend's own runtime"
    );
    publish(&strong, id, SessionState::Connected);
    start(&strong, &inner, id, watcher);
}

/// Starts the tasks of session `id` (of `inner`, whose client has `watcher`) on the current runtime: its monitor,
/// its heartbeat, and a round of timeout probes.
pub(crate) fn start(strong: &Arc<Inner>, inner: &Weak<Inner>, id: SessionId, watcher: crate::zk::StateWatcher) {
    tokio::spawn(probe_timeouts(inner.clone(), id));
    tokio::spawn(monitor(inner.clone(), watcher, id));
    tokio::spawn(heartbeat(inner.clone(), strong.moves()));
}
