//! A request's future is boxed by the backend trait, so it is made, then moved whole into its box, once per request:
//! its size is what every request copies. A request kept its sent request and its reply side by side (672 bytes for
//! the create and the list of an acquire, 544 for a release's delete) until the reply's wait became a plain
//! function (issue 26, twenty-sixth session: with the held node boxed, the bytes an uncontended in-memory acquire +
//! release moved went from about 13.6 KB to 6.5 KB, and its time by about 14%).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use recipes_core::backend::{Backend, CreateMode};
use recipes_mem::MemCluster;

#[test]
fn request_futures_stay_small() {
    let cluster = MemCluster::new();
    let client = cluster.client();
    let sid = client.session_status().id;
    // Made, never polled: nothing is sent.
    let create_and_list = client.create_and_list(sid, "/a/b-", b"data", CreateMode::EphemeralSequential);
    let delete = client.delete(sid, "/a/b-0000000000");
    let get = client.get(sid, "/a");
    let sizes = format!(
        "create_and_list {}, delete {}, get {}",
        std::mem::size_of_val(&*create_and_list),
        std::mem::size_of_val(&*delete),
        std::mem::size_of_val(&*get)
    );
    // To see them: change a bound to 0.
    assert!(std::mem::size_of_val(&*create_and_list) <= 448, "{sizes}");
    assert!(std::mem::size_of_val(&*delete) <= 256, "{sizes}");
    assert!(std::mem::size_of_val(&*get) <= 256, "{sizes}");
}
