//! The `Store` cases. Each takes a store (fresh or shared: every case uses its own random tenant
//! and session keys) and panics on the first broken expectation.

mod accept;
mod actions;
mod commit;
mod events;
mod lanes;
mod lock;
mod pages;
mod parts;
mod reset;
mod sizes;
mod steer;

pub use accept::{
    case_abort_requested_reads_the_flag, case_accept_turn_creates_session_and_queued_run,
    case_idempotency_key_answers_the_same_run, case_idempotency_key_expires_after_ttl,
    case_idempotency_keys_are_per_tenant, case_request_abort_unknown_run_is_none,
    case_run_progress_follows_the_run, case_second_turn_keeps_session_id, case_tenant_isolation,
};
pub use actions::case_a_paused_run_takes_one_answer_per_pause;
pub use commit::{
    case_a_large_run_record_is_replaced_and_keeps_the_abort_flag,
    case_a_run_taken_from_its_accepted_record_starts_only_while_the_record_holds,
    case_a_stuck_abort_keeps_its_reason_through_commits, case_commit_applies_session_update,
    case_commit_is_atomic_on_seq_conflict, case_commit_preserves_abort_requested,
    case_commit_release_lock_frees_lock, case_events_order_and_paging,
    case_stale_fence_commit_writes_nothing, case_transcript_order_and_paging,
};
pub use events::{
    case_commit_cannot_write_another_tenants_run, case_events_go_to_the_named_run,
    case_next_event_seq_follows_the_newest_event,
};
pub use lanes::{
    case_a_reset_that_gives_up_changes_nothing,
    case_a_reset_that_waits_holds_the_runs_accepted_before_it,
    case_acquire_answers_the_session_for_the_order_check,
    case_concurrent_accepts_get_distinct_session_seqs,
    case_concurrent_accepts_stop_at_the_session_cap,
    case_idempotency_key_with_a_different_request_conflicts,
    case_runs_are_numbered_in_session_order_across_resets,
};
pub use lock::{
    case_lock_held_while_lease_valid_and_not_reentrant,
    case_lock_is_exclusive_under_concurrent_acquirers,
    case_lock_of_a_key_without_session_is_not_found,
    case_lock_takeover_after_lease_expiry_bumps_fence, case_release_then_reacquire,
    case_renew_extends_lease_and_stale_renew_fails,
};
pub use pages::{
    case_a_transcript_page_stops_at_its_byte_budget, case_an_events_page_stops_at_its_byte_budget,
    read_large_entries,
};
pub use parts::{
    case_a_failure_between_parts_loses_nothing, case_commit_over_the_limits_is_refused_whole,
    case_split_commit_lands_whole_with_the_run_last,
};
pub use reset::{
    case_reset_session_busy_while_locked, case_reset_session_mints_new_id,
    case_reset_session_unknown_key_not_found,
};
pub use sizes::{
    case_a_turn_too_large_to_store_is_refused, case_oversized_records_are_stored_by_the_size_rule,
};
pub use steer::{
    case_a_collect_carrier_takes_the_collects_and_leaves_the_steers,
    case_a_running_run_takes_the_steers_accepted_after_it,
    case_a_sessions_default_queue_mode_applies_to_turns_without_one,
    case_a_steer_from_before_a_reset_is_not_taken,
    case_an_interrupt_abort_request_keeps_its_reason,
    case_an_interrupt_behind_unfinished_runs_marks_the_session,
    case_an_interrupt_takes_the_place_of_an_active_interrupt,
};

use agentlane_core::Store;
use std::sync::Arc;

/// Every store case, by name.
pub fn all() -> Vec<(&'static str, crate::Case<dyn Store>)> {
    crate::__store_cases!(table store dyn Store)
}

/// Runs every store case at the same time against one store (as they would share one table),
/// and fails naming each case that failed.
pub async fn run_all_shared(store: Arc<dyn Store>) {
    let running: Vec<_> = all()
        .into_iter()
        .map(|(name, case)| {
            (
                name,
                tokio::spawn(crate::run_case(name, case(store.clone()))),
            )
        })
        .collect();
    let mut failed = Vec::new();
    for (name, task) in running {
        if task.await.is_err() {
            failed.push(name);
        }
    }
    assert!(
        failed.is_empty(),
        "store cases failed on a shared store: {failed:?}"
    );
}
