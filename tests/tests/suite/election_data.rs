//! An election candidate's node data through the `first` mark that a holder writes over its own node (the rule of
//! backends without transactions, switched on here by mutants on the in-memory backend): the mark keeps the
//! candidate's lines, so an observer still reads who leads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recipes_core::Locks;
use recipes_mem::MemCluster;

#[cfg_attr(
    not(recipes_mutants),
    ignore = "switches mutants on: needs RUSTFLAGS=\"--cfg recipes_mutants\""
)]
#[tokio::test]
async fn the_mark_over_a_held_candidates_node_keeps_its_id() {
    use recipes_core::mutants::{self, Mutant};
    // Every node that comes to hold after waiting marks itself, over the data it was made with.
    mutants::set(Mutant::AlwaysMark, true);
    mutants::set(Mutant::MarkWhenHeld, true);
    let cluster = MemCluster::new();
    let (a, b, observer) = (
        Locks::new(cluster.client()),
        Locks::new(cluster.client()),
        Locks::new(cluster.client()),
    );
    let path = "/election-data/leader";
    let first = a.election(path).unwrap().candidate("a").unwrap();
    let second = b
        .election(path)
        .unwrap()
        .candidate("b")
        .unwrap()
        .with_data(b"10.0.0.2:80".to_vec())
        .unwrap();
    let leading = first.leadership().await.unwrap();
    let waiting = tokio::spawn(async move { second.leadership().await.unwrap() });
    for _ in 0..200 {
        if observer.participants(path).await.unwrap().nodes.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    leading.resign().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    // The mark is sent before the leadership is handed out, unacknowledged: it lands before any later read.
    let mut marked = None;
    for _ in 0..200 {
        let seen = observer.participants(path).await.unwrap();
        let info = seen.nodes[0].info.clone().expect("our node's data");
        if info.first {
            marked = Some(info);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let info = marked.expect("the holder marked its node");
    assert_eq!(info.recipe, "election");
    assert_eq!(info.candidate.as_deref(), Some("b"));
    assert_eq!(info.candidate_data, b"10.0.0.2:80");
    let leader = observer
        .election(path)
        .unwrap()
        .leader()
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!(
        (leader.id.as_str(), leader.data.as_slice(), leader.term),
        ("b", b"10.0.0.2:80".as_slice(), next.term())
    );
    next.resign().await.unwrap();
    mutants::set(Mutant::AlwaysMark, false);
    mutants::set(Mutant::MarkWhenHeld, false);
}
