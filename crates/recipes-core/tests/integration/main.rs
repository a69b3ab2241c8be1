//! The integration tests of `recipes-core` (on the in-memory backend), in one binary: each file is a module, and its
//! tests are named `<file>::<test>`.

mod cohort;
mod drain;
mod given_up_release;
mod handoff;
mod handoff_drain;
mod handoff_mark;
mod lease;
mod lost_create_abandoned;
mod metrics;
mod multi_release;
mod observer_reused_names;
mod operator_writes;
mod own_leftover;
mod path;
mod peer_semaphore;
mod reaped_waits;
mod reconnection;
mod recorder_panics;
mod reentrancy;
mod regressions;
mod released_names;
mod revocation;
mod runtimes;
mod scout;
mod spans;
mod stale_names;
mod support;
mod try_bound;
mod turns;
mod view;
