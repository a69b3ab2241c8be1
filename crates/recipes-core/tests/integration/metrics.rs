//! What the library records through the `metrics` facade, as an exporter (Prometheus) renders it.

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use recipes_core::{describe_metrics, Locks, LostReason};
use recipes_mem::MemCluster;

/// Runs `body` on a paused current-thread runtime with `recorder` installed for this thread only (every task of the
/// runtime runs on it), and returns the rendered text.
fn recorded<F: std::future::Future<Output = ()>>(body: impl FnOnce() -> F) -> String {
    let recorder: PrometheusRecorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        describe_metrics();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime")
            .block_on(body());
    });
    handle.render()
}

/// The value of the sample whose line starts with `series` (name and labels), if rendered.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn acquisitions_waits_timeouts_losses_and_cleanups_are_recorded() {
    let text = recorded(|| async {
        let cluster = MemCluster::new();
        let (a, b) = (cluster.client(), cluster.client());
        let la = Locks::new(a.clone()).fair("/m").unwrap();
        let lb = Locks::new(b.clone()).fair("/m").unwrap();
        let held = la.acquire().await.unwrap();
        assert!(lb.try_acquire().await.unwrap().is_none());
        assert!(lb.acquire_timeout(Duration::from_millis(100)).await.unwrap().is_none());
        let waiting = tokio::spawn(async move { lb.acquire().await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
        let g = waiting.await.unwrap().unwrap();
        b.expire_session();
        assert_eq!(g.lost().await, LostReason::SessionExpired);
        drop(g);
    });
    let at = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"));
    assert_eq!(at(r#"lock_recipes_acquisitions_total{recipe="fair"}"#), 2.0);
    assert_eq!(at(r#"lock_recipes_busy_total{recipe="fair"}"#), 1.0);
    assert_eq!(at(r#"lock_recipes_timeouts_total{recipe="fair"}"#), 1.0);
    assert_eq!(
        at(r#"lock_recipes_lost_total{recipe="fair",reason="session_expired"}"#),
        1.0
    );
    assert!(at(r#"lock_recipes_cleanups_total{recipe="fair"}"#) >= 1.0);
    assert!(at(r#"lock_recipes_wakeups_total{recipe="fair"}"#) >= 1.0);
    // Histograms render as summaries: the count of samples, and their sum (the waiter waited ~0.3 s of paused time).
    assert_eq!(at(r#"lock_recipes_wait_seconds_count{recipe="fair"}"#), 2.0);
    let waited = at(r#"lock_recipes_wait_seconds_sum{recipe="fair"}"#);
    assert!((0.3..1.0).contains(&waited), "{waited}");
    assert_eq!(at(r#"lock_recipes_hold_seconds_count{recipe="fair"}"#), 2.0);
    assert_eq!(at(r#"lock_recipes_held{recipe="fair"}"#), 0.0);
    assert!(text.contains("# HELP lock_recipes_lost_total"), "{text}");
    assert!(
        !text.contains("path="),
        "the path is a label only when asked for:\n{text}"
    );
}

#[test]
fn errors_are_counted_by_kind_and_the_path_label_is_opt_in() {
    let text = recorded(|| async {
        let cluster = MemCluster::new();
        let c = cluster.client();
        let locks = Locks::builder(c.clone()).metrics_path_label(true).build();
        let g = locks.exclusive("/e").unwrap().acquire().await.unwrap();
        // The fair recipe on the exclusive recipe's path: refused.
        let e = locks.fair("/e").unwrap().acquire().await.unwrap_err();
        assert_eq!(e.kind(), "foreign_lock");
        g.release().await.unwrap();
    });
    let at = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"));
    assert_eq!(
        at(r#"lock_recipes_acquisitions_total{recipe="exclusive",path="/e"}"#),
        1.0
    );
    assert_eq!(
        at(r#"lock_recipes_acquire_errors_total{recipe="fair",path="/e",error="foreign_lock"}"#),
        1.0
    );
}
