//! The faults of a schedule: which the explorer may inject now, and injecting one.

use std::sync::atomic::Ordering;

use recipes_core::backend::SessionState;
use recipes_core::Backend;

use super::World;
use crate::choice::Choice;
use crate::Fault;

impl<S: Clone + Send + Sync + 'static> World<'_, S> {
    /// Adds the faults the budget allows now to `out`; `in_flight`: requests are on their way (a delay may strike).
    pub(super) fn fault_choices(&self, out: &mut Vec<Choice>, in_flight: bool) {
        if self.faults_left > 0 && self.unfinished() {
            for kind in &self.ex.fault_kinds {
                match kind {
                    Fault::Delay => {
                        if in_flight {
                            out.push(Choice::Delay);
                        }
                    }
                    Fault::OperatorDelete => out.extend(self.deletable().into_iter().map(|(_, c)| Choice::Delete(c))),
                    Fault::OperatorWrite => out.extend(self.deletable().into_iter().map(|(_, c)| Choice::Write(c))),
                    kind => {
                        for (i, p) in self.procs.iter().enumerate() {
                            // Expire ends a session under a connected client, which learns at once. Behind a cut
                            // connection the server expires a session only after its timeout: that is a partition,
                            // not an expiry (one there would break the lease's promise on purpose).
                            let connected = p.client().session_status().state == SessionState::Connected;
                            if p.running() && (connected || *kind != Fault::Expire) {
                                out.push(Choice::Fault(*kind, i));
                            }
                        }
                    }
                }
            }
        }
    }

    /// The nodes an operator may delete or write, by creation id: the children of the explorer's lock paths, or every
    /// ephemeral node.
    fn deletable(&self) -> Vec<(String, i64)> {
        let paths: Vec<String> = match &self.ex.delete_under {
            Some(parents) => parents
                .iter()
                .flat_map(|p| self.cluster.children(p).into_iter().map(move |n| format!("{p}/{n}")))
                .collect(),
            None => self.cluster.ephemerals().into_iter().map(|(p, _)| p).collect(),
        };
        let mut nodes: Vec<(String, i64)> = paths
            .into_iter()
            .filter_map(|p| self.cluster.stat(&p).map(|s| (p, s.czxid)))
            .collect();
        nodes.sort_unstable_by_key(|(_, c)| *c);
        nodes
    }

    /// Injects the fault `choice` names (a delay, an operator's delete or write, or a fault of one process).
    pub(super) async fn apply_fault(&mut self, choice: Choice) {
        self.faults_left -= 1;
        match choice {
            Choice::Delay => self.tick("FAULT delay: time runs with requests in flight;").await,
            Choice::Delete(czxid) => {
                if let Some((node, _)) = self.deletable().into_iter().find(|(_, c)| *c == czxid) {
                    self.note(|w| format!("{} FAULT an operator deletes {node}", w.elapsed()));
                    if self.ctl.operator_delete(&node).is_ok() {
                        self.deleted.push((node, czxid));
                    }
                }
            }
            Choice::Write(czxid) => {
                if let Some((node, _)) = self.deletable().into_iter().find(|(_, c)| *c == czxid) {
                    self.note(|w| {
                        format!(
                            "{} FAULT an operator writes a request to let go into {node}",
                            w.elapsed()
                        )
                    });
                    let _ = self.ctl.operator_set_data(&node, recipes_core::REVOKE_MESSAGE);
                }
            }
            Choice::Fault(kind, i) => {
                let timeout = self.ex.session_timeout;
                let sid = self.procs[i].client().session_id();
                self.note(|w| format!("{} FAULT {kind:?} of process {i} (session s{sid:x})", w.elapsed()));
                let p = &self.procs[i];
                match kind {
                    Fault::Expire => p.client().expire_session(),
                    Fault::Partition => p.client().disconnect_for(timeout * 3),
                    Fault::Blip => p.client().disconnect_for(timeout / 10),
                    Fault::Crash => {
                        // First, so that nothing of the process (a task spawned by a drop below) acts after.
                        p.inner.crashed.store(true, Ordering::SeqCst);
                        p.client().crash();
                        p.task.abort();
                        for t in p.inner.tasks.lock().drain(..) {
                            t.abort();
                        }
                    }
                    Fault::OperatorDelete | Fault::OperatorWrite | Fault::Delay => {
                        unreachable!("chosen as their own choices")
                    }
                }
            }
            _ => unreachable!("not a fault: {choice:?}"),
        }
    }
}
