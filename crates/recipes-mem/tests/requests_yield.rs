//! A request is a yield point, as a request to ZooKeeper (which waits on a socket) is: a task that loops on requests
//! answered at once still lets the other tasks of its runtime run, and a timeout around the loop can fire. (A review
//! found the in-memory server's answer-at-once path without one: a livelocked recipe would have hung a test instead
//! of failing it.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use recipes_core::backend::BackendExt;
use recipes_mem::MemCluster;

#[tokio::test]
async fn a_loop_of_requests_lets_other_tasks_run() {
    let cluster = MemCluster::new();
    let client = cluster.client();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    // The test's runtime has one thread: the spawned task runs only when this one yields.
    let mut requests = 0;
    while !ran.load(Ordering::SeqCst) && requests < 1_000 {
        client.current().get("/").await.unwrap();
        requests += 1;
    }
    assert!(
        ran.load(Ordering::SeqCst),
        "the other task never ran in {requests} requests"
    );
}
