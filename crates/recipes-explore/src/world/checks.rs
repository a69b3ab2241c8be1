//! The oracles' side of a schedule: the checks after every step and at the end, and the processes' ends.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tokio::time::Instant;

use super::World;
use crate::{oracles, Builtin, Step};

/// What a panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// Runs a check, a panic in it made a violation.
fn checked(check: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    std::panic::catch_unwind(AssertUnwindSafe(check))
        .unwrap_or_else(|panic| Err(format!("a check panicked: {}", panic_message(&*panic))))
}

impl<S: Clone + Send + Sync + 'static> World<'_, S> {
    /// Looks at the processes that ended: a panic is a violation; an error is written into the trace.
    pub(super) fn reap(&mut self) -> Result<(), String> {
        for i in 0..self.procs.len() {
            let p = &mut self.procs[i];
            if p.reaped || p.crashed() || !p.task.is_finished() {
                continue;
            }
            p.reaped = true;
            match (&mut p.task).now_or_never() {
                Some(Ok(None)) | None => {}
                Some(Ok(Some(error))) => self.note(|_| format!("    process {i} ended with an error: {error}")),
                Some(Err(e)) if e.is_panic() => {
                    return Err(format!("process {i} panicked: {}", panic_message(&*e.into_panic())));
                }
                Some(Err(_)) => {}
            }
        }
        Ok(())
    }

    fn step(&self, at_end: bool) -> Step<'_, S> {
        Step {
            cluster: &self.cluster,
            state: &self.state,
            store: &self.store,
            procs: &self.procs,
            deleted: &self.deleted,
            elapsed: Instant::now().duration_since(self.start),
            at_end,
        }
    }

    /// The oracles that run at every step: the built-in ones, then the application's.
    pub(super) fn check(&mut self) -> Result<(), String> {
        self.reap()?;
        let step = self.step(false);
        oracles::at_step(self.ex, &step, &mut self.tracker.lock())?;
        for check in &self.ex.checks {
            checked(|| check(&step))?;
        }
        Ok(())
    }

    /// At the end: every live process finished, no lock node of a live session is left, and the application's
    /// checks at the end hold.
    pub(super) fn final_checks(&mut self) -> Result<(), String> {
        self.reap()?;
        if self.ex.on(Builtin::AllFinish) {
            let stuck: Vec<usize> = (0..self.procs.len()).filter(|i| self.procs[*i].running()).collect();
            if !stuck.is_empty() {
                let waited = Instant::now().duration_since(self.start);
                return Err(format!(
                    "process{} {stuck:?} never finished: a deadlock, or a wait with no end (nothing moved for {:?} \
                     of virtual time, the explorer's quiet_after; {waited:?} in all)",
                    if stuck.len() > 1 { "es" } else { "" },
                    self.ex.quiet_limit(),
                ));
            }
        }
        if self.ex.on(Builtin::NoNodeLeft) {
            let live: Vec<_> = self
                .procs
                .iter()
                .filter(|p| !p.crashed())
                .map(|p| p.client().session_id())
                .collect();
            let mut left: Vec<String> = self
                .cluster
                .ephemerals()
                .into_iter()
                .filter(|(_, owner)| live.contains(owner))
                .map(|(p, _)| p)
                .collect();
            left.sort();
            if !left.is_empty() {
                return Err(format!("lock nodes left behind by live sessions: {left:?}"));
            }
        }
        let step = self.step(true);
        for check in &self.ex.end_checks {
            checked(|| check(&step))?;
        }
        Ok(())
    }
}
