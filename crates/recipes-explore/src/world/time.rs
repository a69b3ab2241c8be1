//! Letting a schedule's world run: settling after each event, and virtual time.

use tokio::time::Instant;

use super::{World, SETTLED_AFTER};

impl<S: Clone + Send + Sync + 'static> World<'_, S> {
    /// What moves when anything happens: the cluster's activity and in-flight count, the processes' activity.
    pub(super) fn marker(&self) -> (u64, usize, u64) {
        let (activity, in_flight) = self.ctl.progress();
        (activity, in_flight, self.activity.count())
    }

    /// Lets every task run until nothing moves any more, the processes' tasks not even polled.
    pub(super) async fn settle(&mut self) -> Result<(), String> {
        let mut last = (self.marker(), self.activity.polls());
        let mut stable = 0;
        for _ in 0..100_000 {
            tokio::task::yield_now().await;
            let now = (self.marker(), self.activity.polls());
            if now == last {
                stable += 1;
                if stable >= SETTLED_AFTER {
                    self.collect_notes();
                    return Ok(());
                }
            } else {
                stable = 0;
                last = now;
            }
        }
        Err("the world never settles (a task spins)".into())
    }

    pub(super) fn elapsed(&self) -> String {
        format!("[{:>7.3}s]", Instant::now().duration_since(self.start).as_secs_f64())
    }

    /// Lets virtual time run until some task acts, the next timer, or as far as a tick may go (then the world is
    /// quiet).
    pub(super) async fn tick(&mut self, what: &str) {
        let before = self.marker();
        let t0 = Instant::now();
        let horizon = self.start + self.ex.horizon_limit();
        let mut until = (t0 + self.ex.quiet_limit()).min(horizon);
        if let Some(t) = self.ctl.next_timer() {
            until = until.min(t.max(t0));
        }
        let notify = self.ctl.activity_notify();
        let sleep = tokio::time::sleep_until(until);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                biased;
                () = notify.notified() => {
                    if self.marker() != before {
                        break;
                    }
                }
                () = &mut sleep => break,
            }
        }
        let now = Instant::now();
        let timer_due = self.ctl.next_timer().is_some_and(|t| t <= now);
        self.quiet = (self.marker() == before && !timer_due) || now >= horizon;
        self.note(|w| format!("{} {what} +{:.3}s", w.elapsed(), now.duration_since(t0).as_secs_f64()));
    }
}
