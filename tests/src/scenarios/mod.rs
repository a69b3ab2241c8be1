//! Every scenario, written once, in one file per theme. Each is a `pub async fn name(h: &dyn Harness)` that takes the
//! backend's [`Harness`] and panics on a violation; all are re-exported here, so each is `scenarios::name` whatever
//! its file.
//!
//! - [`exclusion`]: mutual exclusion on every recipe, and what every lock shares (paths, guards, foreign children).
//! - [`order`]: FIFO order of the waiters, wake-ups per release, fencing tokens.
//! - [`read_write`]: readers and writers, downgrade and upgrade.
//! - [`reentrancy`]: holds counted per task, thread or token.
//! - [`cancellation`]: `try_acquire`, timeouts, acquires and releases dropped midway.
//! - [`sessions`]: session expiry and the lease.
//! - [`faults`]: lost replies, deleted nodes, disconnections, delayed watches.
//! - [`safety`]: regressions of the attacks that once put two holders in.
//! - [`semaphore`]: the semaphore's bound, order, permit count and cleanup.
//! - [`peer_semaphore`]: the semaphore in the Curator and kazoo layouts: bound, cleanup, refusals.
//! - [`multi`]: the multi-lock: all or none, no deadlock, mixed recipes, cleanup.
//! - [`cohort`]: the fair lock's cohorts: passes within a process, the bound, losses and cancellations.
//! - [`election`]: leader election: one leader at a time, terms, observers, resignation, loss, layouts.
//! - [`election_watch`]: an observer's stream of leader changes; the blocking forms of the election's calls.
//! - [`etcd_layout`]: etcd's own lock's layout: one key per session, refusals.
//!
//! `__for_each_scenario!` below lists every scenario by name; [`conformance_suite!`](crate::conformance_suite) makes
//! each one a test on a backend. A new scenario goes into its theme's file and into that list;
//! `tests/suite_complete.rs` fails while a `pub async fn` of this folder is not in the list, or the list names
//! anything else. The helpers shared by several themes live here.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::backend::ChildOrder;
use recipes_core::layout::Layout;
use recipes_core::{LockGuard, Locks, Recipe};
use tokio::task::JoinSet;

use crate::harness::Harness;
use crate::util::{bounded, hold_exclusive, wait_children, Occupancy};

pub mod cancellation;
pub mod cohort;
pub mod election;
pub mod election_watch;
pub mod etcd_layout;
pub mod exclusion;
pub mod faults;
pub mod multi;
pub mod order;
pub mod peer_semaphore;
pub mod read_write;
pub mod reentrancy;
pub mod safety;
pub mod semaphore;
pub mod sessions;

pub use cancellation::*;
pub use cohort::*;
pub use election::*;
pub use election_watch::*;
pub use etcd_layout::*;
pub use exclusion::*;
pub use faults::*;
pub use multi::*;
pub use order::*;
pub use peer_semaphore::*;
pub use read_write::*;
pub use reentrancy::*;
pub use safety::*;
pub use semaphore::*;
pub use sessions::*;

/// The peer layouts (Curator, kazoo) that `locks`' backend can make: none on a backend that orders children by
/// creation (etcd), where they are refused (decision 0068).
pub(crate) fn peer_layouts(locks: &Locks) -> &'static [Layout] {
    match locks.backend().child_order() {
        ChildOrder::Sequence => &[Layout::Curator, Layout::Kazoo],
        _ => &[],
    }
}

/// Every layout that `locks`' backend can make (see [`peer_layouts`]).
pub(crate) fn layouts_here(locks: &Locks) -> Vec<Layout> {
    std::iter::once(Layout::Native)
        .chain(peer_layouts(locks).iter().copied())
        .collect()
}

/// As [`layouts_here`], with etcd's own layout where the backend orders children by creation: the layouts of the
/// fair lock and the election (the etcd layout has no other recipe).
pub(crate) fn queue_layouts_here(locks: &Locks) -> Vec<Layout> {
    let mut all = layouts_here(locks);
    if locks.backend().child_order() == ChildOrder::Creation {
        all.push(Layout::Etcd);
    }
    all
}

/// The scenarios that exercise only the peer layouts (Curator, kazoo), which a backend that orders children by
/// creation cannot make: its harness reports them as not expressible, with [`PEER_LAYOUTS_ONLY_WHY`].
pub const PEER_LAYOUTS_ONLY: &[&str] = &[
    "curator_semaphore_count_survives_the_reaper",
    "election_as_curator_leader_latch",
    "peer_semaphores_leave_nothing_behind",
    "peer_semaphores_never_exceed_permits",
    "peer_semaphores_refuse_what_they_cannot_share",
    "revoke_node_refuses_a_native_node_beside_another_layouts_holder",
];

/// Why [`PEER_LAYOUTS_ONLY`] cannot be expressed on a backend that orders children by creation.
pub const PEER_LAYOUTS_ONLY_WHY: &str = "only the peer layouts (Curator, kazoo) take part, and they name their nodes \
     with ZooKeeper's sequence, which a backend that orders children by creation does not make: it refuses them \
     (decision 0068)";

/// Calls the macro `$m` with `@expand` arguments and the name of every scenario.
#[doc(hidden)]
#[macro_export]
macro_rules! __for_each_scenario {
    ($m:path; $($args:tt)*) => {
        $m!($($args)* {scenarios}
            exclusive_mutual_exclusion etcd_layout_excludes_with_one_key_per_session etcd_layout_refuses_what_it_cannot_share etcd_layout_a_deleted_waiting_key_is_not_taken_back etcd_layout_tries_and_revocations etcd_layout_tasks_of_a_session_take_turns
            etcd_layout_a_lost_guard_keeps_no_turn             a_short_hex_child_is_etcds_lock_only_on_etcd fair_mutual_exclusion reentrant_mutual_exclusion write_mutual_exclusion
            read_write_mutual_exclusion every_recipe_by_name_excludes fair_fifo_order write_fifo_order
            readers_share writer_excludes_readers write_waits_for_all_readers reader_waits_for_earlier_writer
            reader_never_waits_on_later_writer readers_wake_together_after_writer reentrant_counts_per_task
            reentrant_counts_per_thread reentrant_counts_per_token reentrant_other_task_contends
            reentrant_same_owner_concurrent_acquires write_reentrant read_reentrant downgrade_write_to_read
            upgrade_refused try_acquire_on_held_fair try_acquire_on_held_exclusive try_acquire_free_every_recipe
            try_read_beside_reader_but_not_writer timeout_leaves_no_node_fair timeout_leaves_no_node_exclusive
            timeout_leaves_no_node_read dropped_acquire_leaves_no_node dropped_acquire_at_every_point
            a_runtime_dropped_with_a_guard_and_a_waiter_on_it_leaves_no_node
            cancelled_middle_waiter_chain_repairs cancelled_scout_and_blocker_never_let_a_waiter_in_beside_the_holder
            release_after_node_deleted_is_error
            stale_exclusive_release_spares_new_holder session_expiry_fires_lost session_expiry_waiter_takes_over
            node_deleted_fires_lost waiting_acquire_fails_on_session_expiry acquire_after_expiry_uses_new_session
            lost_create_reply_no_orphan_fair lost_create_reply_no_orphan_exclusive
            lost_create_replies_while_queued_no_deadlock fencing_tokens_increase_fair
            fencing_tokens_increase_exclusive fencing_writer_above_earlier_readers fair_wakes_one_waiter_per_release
            exclusive_wakes_every_waiter many_paths_at_once bad_paths_rejected release_on_drop_frees_lock
            guard_moves_between_tasks deep_path_created_and_emptied suspended_within_timeout_keeps_lock
            disconnect_past_timeout_loses_lock delayed_watch_delivery_keeps_exclusion unknown_children_ignored
            blocking_api_refused_inside_runtime timed_acquire_while_disconnected_ends_on_time
            lease_valid_while_held lease_lost_before_another_client_acquires
            fencing_tokens_increase_over_1000_handoffs guarded_operation_under_the_lease
            waiter_node_deleted_never_holds_without_node thousand_abandoned_acquires_leave_no_node
            history_checked_mixed_contention cancelled_release_leaves_no_node
            expired_exclusive_release_spares_next_holder exclusive_lost_sees_a_replaced_node
            reentry_after_loss_is_refused wrapped_sequences_keep_exclusion_in_every_layout
            mixed_recipes_and_layouts_refused mixed_recipes_racing_never_hold_together huge_timeout_is_no_deadline
            configured_resources_and_owners participants_list_holders_and_waiters
            semaphore_never_exceeds_permits semaphore_grants_in_queue_order semaphore_any_release_lets_the_next_in
            semaphore_permit_count_is_one_per_path semaphore_leaves_nothing_behind
            semaphore_and_lock_on_one_path_refused semaphore_peer_bugs_stay_away multi_lock_all_or_none multi_lock_opposite_orders_never_deadlock
            multi_lock_mixed_recipes multi_lock_cancel_and_errors peer_semaphores_never_exceed_permits
            peer_semaphores_leave_nothing_behind peer_semaphores_refuse_what_they_cannot_share
            multi_lock_release_reports_only_the_lost_member multi_lock_never_hands_out_a_lost_member
            curator_semaphore_count_survives_the_reaper multi_lock_timeout_keeps_its_deadline
            nested_path_named_lock_does_not_block_its_parent acquire_in_flight_ends_closed_on_close
            revoke_node_writes_only_lock_nodes multi_lock_ends_with_its_session
            a_node_named_like_a_lock_node_never_says_it_held revoke_node_refuses_a_waiting_node
            a_foreign_write_to_a_waiting_node_never_says_it_held
            foreign_writes_a_write_and_deletion_together_never_let_two_hold
            revoke_node_refuses_a_native_node_beside_another_layouts_holder
            cohort_passes_keep_exclusion_and_token_order cohort_bound_lets_a_waiting_session_in
            cohort_session_expiry_reaches_every_task cohort_cancellations_leave_no_node
            cohort_revocation_ends_the_passes read_write_cohorts_keep_exclusion read_cohort_bound_lets_a_writer_in
            write_cohort_passes_after_a_downgrade kept_own_watch_still_guards_the_waiter
            holder_after_waiting_sees_its_node_deleted changed_then_deleted_waiter_never_holds_without_node
            changed_waiter_still_takes_a_same_session_handoff long_queue_with_cancelled_early_waiters_holds_in_order
            waiter_disconnected_while_its_node_goes_never_holds_without_it election_one_leader_at_a_time
            election_resign_lets_the_next_lead election_leader_lost_on_session_expiry election_bad_candidates_refused
            election_in_every_layout election_observer_refuses_a_wrapped_peer_queue
            election_cut_off_leader_knows_before_the_next_leads election_observer_after_reconnect_never_goes_back
            election_as_curator_leader_latch election_observer_names_the_head_the_lock_waits_on
            election_observer_stands_beside_a_nested_lock_path election_changes_follow_the_leader
            election_blocking_forms election_leader_reconnected_within_its_session_keeps_one_node
            election_resign_over_a_broken_connection_leaves_no_node
        );
    };
}

/// Expands the list of `__for_each_scenario!` into [`SCENARIO_NAMES`].
macro_rules! scenario_names {
    ({$module:ident} $($name:ident)*) => {
        /// The name of every scenario in the list of `__for_each_scenario!`, in its order:
        /// `tests/tests/suite/suite_complete.rs` compares it with the scenarios written in this folder.
        pub const SCENARIO_NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

crate::__for_each_scenario!(scenario_names;);

/// Awaits `acquire` (at most the harness's patience, as [`bounded`]), which must grant the lock, and releases it.
async fn granted_then_released<E: std::fmt::Debug>(
    h: &dyn Harness,
    what: &str,
    acquire: impl Future<Output = Result<LockGuard, E>>,
) {
    bounded(h, what, acquire).await.unwrap().release().await.unwrap();
}

const HOLD: Duration = Duration::from_millis(5);

async fn contend_exclusive(h: &dyn Harness, recipe: Recipe, clients: usize, rounds: usize) -> Arc<Occupancy> {
    let path = h.path(&format!("mutex-{recipe}"));
    let occ = Occupancy::new();
    let mut set = JoinSet::new();
    for _ in 0..clients {
        let c = h.client().await;
        let lock = c.locks.lock(&path, recipe).unwrap();
        let occ = occ.clone();
        set.spawn(async move {
            for _ in 0..rounds {
                let g = lock.acquire().await.expect("acquire");
                if recipe == Recipe::Reentrant {
                    // Re-enter once inside the critical section.
                    let inner = lock.acquire().await.expect("re-enter");
                    assert_eq!(inner.hold_count(), 2);
                    inner.release().await.expect("release inner");
                }
                hold_exclusive(&occ, g, HOLD).await;
            }
            drop(c);
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("client task");
    }
    assert_eq!(occ.violations(), 0, "{recipe}: two holders at once");
    assert_eq!(occ.entries(), (clients * rounds) as u64);
    wait_children(h, &path, 0).await;
    occ
}
