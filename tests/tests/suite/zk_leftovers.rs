//! Run last, by `scripts/test`: after the whole suite, no znode of the suite is left on the server.
//! (Ignored in ordinary runs, since it must follow every other test.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use recipes_conformance::zk::{server, ROOT};
use recipes_core::backend::BackendExt;
use recipes_zk::{ZkBackend, ZkOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/test after every other test"]
async fn no_znodes_left_after_the_suite() {
    let servers = match server() {
        Ok(s) => s,
        Err(why) => {
            eprintln!("SKIPPED no_znodes_left_after_the_suite: {why}");
            return;
        }
    };
    let zk = ZkBackend::connect(ZkOptions::new(servers)).await.expect("connect");
    // Lock nodes are ephemeral and their parents are containers, which the server reaps about once a second
    // (scripts/zk sets znode.container.checkIntervalMs=1000), one level per pass.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut left = Vec::new();
        let mut stack = vec![ROOT.to_owned()];
        while let Some(p) = stack.pop() {
            if let Ok(children) = zk.current().children(&p).await {
                left.push(p.clone());
                stack.extend(children.into_iter().map(|c| format!("{p}/{c}")));
            }
        }
        if left.is_empty() {
            return;
        }
        let ephemeral: Vec<_> = {
            let mut v = Vec::new();
            for p in &left {
                if let Ok(Some((_, stat))) = zk.current().get(p).await {
                    if stat.ephemeral_owner != 0 {
                        v.push(p.clone());
                    }
                }
            }
            v
        };
        // Every test process has ended: a lock node left on a live session cannot be seen here (each harness checks
        // that in its own process, its sessions open). What this sees is an ephemeral of a session that no process
        // closed (its owner exited, and the server has not yet timed it out): a client the suite did not close.
        assert!(
            ephemeral.is_empty(),
            "ephemeral nodes of sessions the suite did not close: {ephemeral:?}"
        );
        assert!(Instant::now() < deadline, "znodes not reaped after the suite: {left:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
