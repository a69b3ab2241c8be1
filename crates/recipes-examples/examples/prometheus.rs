//! Exporting the library's metrics to Prometheus: `cargo run --example prometheus`.
//!
//! The library records through the `metrics` facade; any exporter works. This example installs
//! `metrics-exporter-prometheus`, runs a little contention on the in-memory backend (waits, a timeout, a lost lock)
//! and prints what a scrape would return. In a service, serve it instead: enable the exporter's `http-listener`
//! feature and call `PrometheusBuilder::new().with_http_listener(([0, 0, 0, 0], 9000)).install()` inside the runtime.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use recipes_core::{describe_metrics, Locks};
use recipes_mem::MemCluster;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new()
        // Buckets for the wait and hold histograms (without them they render as summaries).
        .set_buckets(&[0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 30.0])?
        .install_recorder()?;
    describe_metrics();

    let cluster = MemCluster::new();
    // Four workers take turns on one fair lock.
    let mut workers = Vec::new();
    for _ in 0..4 {
        let locks = Locks::new(cluster.client());
        workers.push(tokio::spawn(async move {
            let lock = locks.fair("/jobs/nightly")?;
            for _ in 0..3 {
                let guard = lock.acquire().await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.release().await?;
            }
            locks.close().await;
            Ok::<_, recipes_core::Error>(())
        }));
    }
    for w in workers {
        w.await??;
    }

    // A timeout, and a lock lost to an expired session.
    let (a, b) = (cluster.client(), cluster.client());
    let (la, lb) = (Locks::new(a.clone()), Locks::new(b.clone()));
    let held = lb.exclusive("/reports")?.acquire().await?;
    assert!(la
        .exclusive("/reports")?
        .acquire_timeout(Duration::from_millis(50))
        .await?
        .is_none());
    b.expire_session();
    eprintln!("lost: {}", held.lost().await);
    drop(held);

    // What a scrape returns.
    use std::io::Write;
    std::io::stdout().write_all(handle.render().as_bytes())?;
    Ok(())
}
