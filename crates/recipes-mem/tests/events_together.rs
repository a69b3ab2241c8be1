//! The controlled mode's deliveries with `events_of_a_write_together`: one delivery brings a session every watch
//! event of one write, as ZooKeeper sends them in one go (a model checker then also explores a client that reads a
//! change of data and a deletion by one transaction before it acts on either).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::task::Poll;

use recipes_core::backend::{BackendExt, NodeEvent};
use recipes_mem::NetEvent;

use crate::watches_set_again::{made, now};

/// One write (an operator's delete) fires two watches of one session on its node, its data watch and its watch of
/// the deletion alone; the next write fires a third. Together, the first delivery brings both events of the first
/// write and not the third; apart, each delivery brings one.
#[tokio::test(start_paused = true)]
async fn a_delivery_brings_every_event_of_one_write_when_asked() {
    for together in [false, true] {
        let (cluster, _a, b) = made(&["/p/1", "/p/2"]).await;
        let on_b = b.current();
        let (_, mut data) = on_b.get_and_watch("/p/1").await.unwrap().expect("there");
        let mut gone = on_b.watch_gone("/p/1").await.unwrap().expect("there");
        let (_, mut next) = on_b.get_and_watch("/p/2").await.unwrap().expect("there");
        let ctl = cluster.controlled();
        ctl.events_of_a_write_together(together);
        ctl.operator_delete("/p/1").unwrap();
        ctl.operator_delete("/p/2").unwrap();
        let sid = b.session_id();
        assert!(ctl.fire(NetEvent::Deliver(sid)));
        assert!(matches!(now(&mut data).await, Poll::Ready(Ok(NodeEvent::Deleted))));
        assert_eq!(
            now(&mut gone).await.is_ready(),
            together,
            "together {together}: the write's second event"
        );
        assert!(
            now(&mut next).await.is_pending(),
            "together {together}: the next write's event"
        );
        if !together {
            assert!(ctl.fire(NetEvent::Deliver(sid)));
            assert!(matches!(now(&mut gone).await, Poll::Ready(Ok(NodeEvent::Deleted))));
        }
        assert!(ctl.fire(NetEvent::Deliver(sid)));
        assert!(matches!(now(&mut next).await, Poll::Ready(Ok(NodeEvent::Deleted))));
        assert!(
            !ctl.fire(NetEvent::Deliver(sid)),
            "together {together}: nothing more on its way"
        );
    }
}
