//! The unit tests of one view (`view.rs`): its registrations and its closing, drained by hand without its task.

use super::*;

/// A view of the stream `events`, without its task: the tests drain it themselves.
pub(in crate::driver) fn view_of(events: TreeWatch) -> Arc<View> {
    Arc::new(View {
        inner: Mutex::default(),
        events: Mutex::new(Some(events)),
        task: Mutex::default(),
        stop: Arc::new(Notify::new()),
    })
}

/// A registration is told of the events after it only: one that came before (the deletion of a node whose name
/// the waiter's listing then showed made again) goes to no one (found by review, helper-117).
#[test]
fn a_registration_is_told_nothing_of_events_before_it() {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let view = view_of(Box::pin(rx));
    let node: Arc<str> = Arc::from("/l/L-0123456789abcdef0123456789abcdef-0000000005");
    let deleted = || {
        Ok(TreeEvent {
            path: node.to_string(),
            change: TreeChange::Deleted,
        })
    };
    tx.unbounded_send(deleted()).unwrap();
    let slot = Arc::new(Slot::default());
    assert!(view.register(&slot, &[None, Some(&node), None]));
    view.drain();
    assert_eq!(slot.now(), 0, "told of a deletion before its registration");
    tx.unbounded_send(deleted()).unwrap();
    view.drain();
    assert_eq!(slot.now(), seen::BLOCKER_DELETED);
}

/// A waiter deciding (`gone`: a drain, then its slot) while the view closes sees the event that sat in the watch
/// or the end. When `close` let go of the watch before it ended the view, one deciding between the two steps saw
/// neither, and held with its node gone (found by review, helper-118).
#[test]
fn a_decision_between_closes_two_steps_sees_the_event_or_the_end() {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let view = view_of(Box::pin(rx));
    let own: Arc<str> = Arc::from("/l/L-0123456789abcdef0123456789abcdef-0000000005");
    let slot = Arc::new(Slot::default());
    assert!(view.register(&slot, &[Some(&own), None, None]));
    tx.unbounded_send(Ok(TreeEvent {
        path: own.to_string(),
        change: TreeChange::Deleted,
    }))
    .unwrap();
    // The closing thread (the view's task going with its runtime) is held between its steps here by `inner`.
    let inner = view.inner.lock();
    let closing = std::thread::spawn({
        let view = view.clone();
        move || view.close()
    });
    let until = std::time::Instant::now() + std::time::Duration::from_millis(500);
    let mut between = false;
    while std::time::Instant::now() < until {
        if view.events.try_lock().is_some_and(|e| e.is_none()) {
            between = true;
            break;
        }
        std::thread::yield_now();
    }
    let seen_between = between.then(|| {
        view.drain();
        slot.now()
    });
    drop(inner);
    closing.join().unwrap();
    assert_ne!(
        seen_between,
        Some(0),
        "a waiter deciding here holds: neither its node's deletion nor the end"
    );
    view.drain();
    assert_ne!(slot.now(), 0);
}
