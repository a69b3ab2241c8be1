//! The sizes of the futures and values an acquire keeps and moves (issue 26: each waiter's heap, and the bytes an
//! acquire moves).

use super::*;

/// The size of the future `f` would return, without calling it.
fn size<A, Fut>(_f: impl FnOnce(A) -> Fut) -> usize {
    std::mem::size_of::<Fut>()
}

/// A waiting acquire keeps its whole future (the largest of its states) for as long as it waits: the sizes that
/// every waiter pays stay within bounds (issue 26: each waiter's live heap). They caught a fair lock's acquire
/// that carried its cohort's future beside the driver's (7.5 KB) and an `async fn` wrapper that kept its
/// argument future twice. The driver's acquire was 2,264 bytes until the wait in line stopped keeping the replies
/// that armed its watches in scope through the wait (2,064), and 1,936 since two pass-through `async fn` layers
/// became plain functions returning their inner future; `FairLock::acquire` adds nothing to it since. 1,888
/// since the wait for a connection and the deadline's timer are boxed, as are two rare paths of the create (the
/// recovery after a lost reply, the wait for another task's session-named key). 1,552 since the end of an attempt
/// no longer keeps its outcome three times over, the wait in line decides what woke it before it waits again, and
/// the queued acquire's verdicts and listings end their scopes before the next wait (issue 26, sixteenth session).
/// 1,168 since no reply, verdict or argument outlives its wait, the exclusive recipe's wait keeps only its node,
/// the screening of nested names (rare) and the two watches' requests side by side are boxed (twentieth session).
/// 1,080 since the acquire's span is only kept when enabled, and an attempt's rare parts (a procedure's resource,
/// a candidate's lines, a turn) and its cleanup's background tasks are out of line (twenty-first session).
/// 992 since one future owns the attempt and runs it to its end, where a block and two `async fn` layers each
/// kept their own references (twenty-fourth session): a benchmark's waiting task, tokio's cell around the acquire,
/// went from 1,280 to 1,152 bytes (tokio lays its tasks out in steps of 128). 864 since the waits in line, on a
/// deletion and for the session's end are plain functions returning their blocks (an `async fn` keeps each argument
/// twice), an attempt's cleanup borrows the lock's context, path and labels from it at its end instead of keeping
/// copies, and the rare ways of a queued acquire (a refusal, a missing node, a try's count check) are boxed; the
/// cohort's wait, which kept its session watch twice, went from 952 to 712 (twenty-seventh session). The benchmark's
/// waiting task went from 1,152 to 1,024 bytes (its live heap per waiter from 2,778 to 2,650). 848 since the wait in
/// line borrows our node's path from the queued node, and the first listing is no longer matched around a wait.
/// Since decision 0085 (thirty-first session), the wait counts itself among its session's waiters on the path (16
/// bytes) and, through a view, runs boxed (368 bytes, only for waiters in a view).
///
/// A task that releases after it waited keeps the larger of the two futures while it waits: the release's is
/// bounded too (1,616 bytes until its delete was boxed; 400 until the held node in its guard was, 232 since).
#[test]
fn waiting_futures_stay_small() {
    let acquire = size(|(c, p): (&'static Arc<Ctx>, &'static LockPath)| acquire(c, p, Recipe::Fair, Patience::Forever));
    let fair = size(|l: &'static crate::FairLock| l.acquire());
    let cohort =
        size(|(c, x): (&'static Arc<crate::cohort::Cohort>, &'static Arc<Ctx>)| c.acquire(x, Patience::Forever));
    let release = size(|g: crate::LockGuard| g.release());
    let in_view = size(
        |(a, q, arm, l, v): (
            &'static Attempt<'static>,
            &'static super::queue::Queued,
            &'static mut super::scout::Armed,
            &'static super::wait::InLineOn,
            &'static super::view::View,
        )| a.wait_in_view(q, arm, l, v),
    );
    let in_line = size(
        |(a, q, arm, l): (
            &'static Attempt<'static>,
            &'static super::queue::Queued,
            &'static mut super::scout::Armed,
            &'static super::wait::InLineOn,
        )| a.wait_in_line(q, arm, l),
    );
    let sizes = format!(
        "in view {in_view}, in line {in_line}, driver acquire {acquire}, FairLock::acquire {fair}, Cohort::acquire {cohort}, LockGuard::release {release}"
    );
    // 880: at most, a task that holds a lock handle and awaits the acquire (the benchmark's waiter) fits tokio's
    // 1,024-byte cell; 8 more would make it 1,152 (tokio's steps are 128).
    assert!(acquire <= 880, "{sizes}");
    // A wait through the session's view is boxed (decision 0085): its whole state is each such waiter's heap, in place
    // of the two one-shot watches it does not keep.
    assert!(in_view <= 376, "{sizes}");
    assert!(in_line <= 496, "{sizes}");
    assert!(release <= 320, "{sizes}");
    assert!(fair <= acquire, "{sizes}");
    // A fair lock's acquire carries the cohort's future beside the driver's, the larger of the two.
    assert!(cohort <= 768, "{sizes}");
}

/// What every acquire moves on its way out: the held node passes through a dozen layers of futures to the
/// caller's guard, and the settling's future is made, then moved into the attempt's. About 20 moves of the node's
/// 208 bytes, and two of a 496-byte settling (its ways without a hold inline), were 5 KB of the 13.6 KB an
/// uncontended in-memory acquire + release moved (issue 26, twenty-sixth session).
#[test]
fn what_an_acquire_moves_stays_small() {
    let settle = size(|(a, o): (&'static mut Attempt<'static>, Step<Option<HeldNode>>)| a.settle(o));
    let sizes = format!("HeldNode {}, settle {settle}", std::mem::size_of::<HeldNode>());
    assert_eq!(std::mem::size_of::<HeldNode>(), std::mem::size_of::<usize>(), "{sizes}");
    assert!(settle <= 320, "{sizes}");
}
