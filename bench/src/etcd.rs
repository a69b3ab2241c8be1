//! The etcd figures of `bench/run` (issue 27): this library's fair lock on etcd beside etcd's own floor (a put with a
//! lease and a delete, on the raw client the backend is built on) and Go's `concurrency.Mutex` (bench/etcd_mutex.go,
//! the same subcommands and output).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Subcommand;
use recipes_core::{Backend, Layout, Locks};
use recipes_etcd::{EtcdBackend, EtcdOptions};

#[derive(Subcommand)]
pub(crate) enum Figure {
    /// Uncontended acquire + release of a fair lock, one session
    Uncontended {
        #[arg(long)]
        endpoints: String,
        /// native | etcd (etcd's own lock's names)
        #[arg(long, default_value = "native")]
        layout: String,
        #[arg(long, default_value_t = 300)]
        iters: usize,
    },
    /// The floor: a put attached to a lease, then its delete, on the raw client (two committed writes)
    Floor {
        #[arg(long)]
        endpoints: String,
        #[arg(long, default_value_t = 300)]
        iters: usize,
    },
    /// Handoffs per second of C sessions looping acquire + release (no hold) on one fair lock
    Contended {
        #[arg(long)]
        endpoints: String,
        #[arg(long, default_value = "native")]
        layout: String,
        #[arg(long)]
        clients: usize,
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
}

fn path(name: &str) -> String {
    super::unique(&format!("etcd-{name}"))
}

async fn locks(endpoints: &str, layout: &str) -> (Arc<EtcdBackend>, Locks) {
    let mut options = EtcdOptions::new(endpoints);
    if let Some(runtime) = crate::session_runtime() {
        options = options.session_runtime(runtime);
    }
    let b = Arc::new(EtcdBackend::connect(options).await.unwrap());
    let layout: Layout = layout.parse().unwrap();
    (b.clone(), Locks::builder(b).layout(layout).build())
}

pub(crate) async fn run(figure: Figure) {
    match figure {
        Figure::Uncontended {
            endpoints,
            layout,
            iters,
        } => {
            let (b, locks) = locks(&endpoints, &layout).await;
            let lock = locks.fair(path("uncontended")).unwrap();
            for _ in 0..iters / 5 {
                lock.acquire().await.unwrap().release().await.unwrap();
            }
            let mut us = Vec::with_capacity(iters);
            for _ in 0..iters {
                let t0 = Instant::now();
                lock.acquire().await.unwrap().release().await.unwrap();
                us.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            super::print_latencies(us);
            b.close().await;
        }
        Figure::Floor { endpoints, iters } => {
            let urls: Vec<String> = endpoints.split(',').map(str::to_owned).collect();
            let mut c = etcd_client::Client::connect(urls, None).await.unwrap();
            let lease = c.lease_grant(10, None).await.unwrap().id();
            let key = format!("{}/k", path("floor"));
            let mut us = Vec::with_capacity(iters);
            for i in 0..iters + iters / 5 {
                let t0 = Instant::now();
                let options = etcd_client::PutOptions::new().with_lease(lease);
                c.put(key.as_str(), "", Some(options)).await.unwrap();
                c.delete(key.as_str(), None).await.unwrap();
                if i >= iters / 5 {
                    us.push(t0.elapsed().as_secs_f64() * 1e6);
                }
            }
            super::print_latencies(us);
            c.lease_revoke(lease).await.unwrap();
        }
        Figure::Contended {
            endpoints,
            layout,
            clients,
            seconds,
        } => {
            let p = path(&format!("contended-{clients}"));
            let holds = Arc::new(AtomicU64::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let mut sessions = Vec::new();
            for _ in 0..clients {
                sessions.push(locks(&endpoints, &layout).await);
            }
            let mut tasks = Vec::new();
            let start = Arc::new(tokio::sync::Barrier::new(clients + 1));
            for (_, l) in &sessions {
                let lock = l.fair(&p).unwrap();
                let (holds, stop, start) = (holds.clone(), stop.clone(), start.clone());
                tasks.push(tokio::spawn(async move {
                    start.wait().await;
                    while !stop.load(Ordering::Relaxed) {
                        lock.acquire().await.unwrap().release().await.unwrap();
                        holds.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            start.wait().await;
            let t0 = Instant::now();
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
            let n = holds.load(Ordering::Relaxed);
            let elapsed = t0.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            for t in tasks {
                t.await.unwrap();
            }
            println!("handoffs_per_s={:.1} holds={n}", n as f64 / elapsed);
            for (b, _) in sessions {
                b.close().await;
            }
        }
    }
}
