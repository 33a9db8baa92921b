//! One behavioural suite that every [`Store`](agentlane_core::Store) and
//! [`LaneQueue`](agentlane_core::LaneQueue) adapter passes unchanged.
//!
//! In an adapter's integration test (the test crate needs `tokio` as a dependency):
//!
//! ```ignore
//! agentlane_conformance::store_conformance!(async { Arc::new(make_store().await) as Arc<dyn Store> });
//! agentlane_conformance::queue_conformance!(async { Arc::new(make_queue().await) as Arc<dyn LaneQueue> });
//! ```
//!
//! Each macro generates a module (`store_conformance` / `queue_conformance`) with one
//! multi-threaded `#[tokio::test]` per case; the expression is evaluated afresh for every case, and
//! may use any item in scope where the macro is invoked. The cases are also plain functions:
//! [`store::case_tenant_isolation`]`(store)`, [`queue::case_fifo_within_lane`]`(queue)`, ...
//!
//! Contracts with the factory:
//! - Store cases use fresh random tenants and session keys, so they may share one backend (one
//!   SQLite file, one DynamoDB table). They pass realistic wall-clock `now` values.
//! - Queue cases need a queue each (a fresh SQLite database, a fresh SQS queue): `receive` is not
//!   filtered by lane, so cases sharing a queue would take each other's messages.
//! - Queue visibilities are whole seconds; messages that became due may take up to 6 s to show
//!   up. Every `receive` asks for at most 10 messages and waits at most 15 s.
//! - Adapters apply core's commit rules ([`Commit::check`](agentlane_core::Commit::check)): the
//!   limits, the events-run rule and the size rule are the same everywhere, and the cases hold
//!   every backend to them.
//!
//! This crate is a test suite: a failed call is a failed case, so it unwraps freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod agents;
pub mod alloc;
pub mod cron;
pub mod erase;
pub mod fixtures;
pub mod keys;
pub mod pending;
pub mod queue;
pub mod retention;
pub mod sessions;
pub mod slots;
pub mod spend;
pub mod store;
pub mod tenant_secrets;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// The future of one case.
pub type CaseFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// One case as a function pointer, e.g. `Case<dyn Store>`.
pub type Case<B> = fn(Arc<B>) -> CaseFuture;

/// A case that has not finished after this long fails (instead of hanging the test run).
pub const CASE_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs one case under [`CASE_TIMEOUT`]. Used by the generated tests.
pub async fn run_case(name: &str, case: impl Future<Output = ()>) {
    if tokio::time::timeout(CASE_TIMEOUT, case).await.is_err() {
        panic!("conformance case {name} did not finish within {CASE_TIMEOUT:?}");
    }
}

/// Generates `mod store_conformance` with one `#[tokio::test]` per [`store`] case. The argument is
/// an expression (typically an `async` block) yielding `Arc<dyn Store>`, evaluated per case.
#[macro_export]
macro_rules! store_conformance {
    ($make:expr) => {
        $crate::__store_cases!(tests store_conformance store ($make));
    };
}

/// Generates `mod queue_conformance` with one `#[tokio::test]` per [`queue`] case. The argument is
/// an expression (typically an `async` block) yielding `Arc<dyn LaneQueue>`, evaluated per case;
/// each evaluation must give a queue no other case receives from.
#[macro_export]
macro_rules! queue_conformance {
    ($make:expr) => {
        $crate::__queue_cases!(tests queue_conformance queue ($make));
    };
}

/// The one list of store cases, handed to [`__expand_cases`].
#[doc(hidden)]
#[macro_export]
macro_rules! __store_cases {
    ($($how:tt)*) => {
        $crate::__expand_cases! { $($how)*;
            case_accept_turn_creates_session_and_queued_run,
            case_second_turn_keeps_session_id,
            case_idempotency_key_answers_the_same_run,
            case_idempotency_key_expires_after_ttl,
            case_idempotency_keys_are_per_tenant,
            case_tenant_isolation,
            case_request_abort_unknown_run_is_none,
            case_abort_requested_reads_the_flag,
            case_run_progress_follows_the_run,
            case_lock_is_exclusive_under_concurrent_acquirers,
            case_lock_held_while_lease_valid_and_not_reentrant,
            case_lock_takeover_after_lease_expiry_bumps_fence,
            case_renew_extends_lease_and_stale_renew_fails,
            case_release_then_reacquire,
            case_lock_of_a_key_without_session_is_not_found,
            case_stale_fence_commit_writes_nothing,
            case_commit_is_atomic_on_seq_conflict,
            case_transcript_order_and_paging,
            case_events_order_and_paging,
            case_commit_release_lock_frees_lock,
            case_commit_preserves_abort_requested,
            case_a_paused_run_takes_one_answer_per_pause,
            case_a_stuck_abort_keeps_its_reason_through_commits,
            case_a_large_run_record_is_replaced_and_keeps_the_abort_flag,
            case_a_run_taken_from_its_accepted_record_starts_only_while_the_record_holds,
            case_commit_applies_session_update,
            case_events_go_to_the_named_run,
            case_next_event_seq_follows_the_newest_event,
            case_commit_cannot_write_another_tenants_run,
            case_split_commit_lands_whole_with_the_run_last,
            case_a_failure_between_parts_loses_nothing,
            case_commit_over_the_limits_is_refused_whole,
            case_oversized_records_are_stored_by_the_size_rule,
            case_a_turn_too_large_to_store_is_refused,
            case_reset_session_mints_new_id,
            case_reset_session_busy_while_locked,
            case_reset_session_unknown_key_not_found,
            case_runs_are_numbered_in_session_order_across_resets,
            case_concurrent_accepts_get_distinct_session_seqs,
            case_concurrent_accepts_stop_at_the_session_cap,
            case_acquire_answers_the_session_for_the_order_check,
            case_idempotency_key_with_a_different_request_conflicts,
            case_a_reset_that_waits_holds_the_runs_accepted_before_it,
            case_a_reset_that_gives_up_changes_nothing,
            case_a_running_run_takes_the_steers_accepted_after_it,
            case_a_steer_from_before_a_reset_is_not_taken,
            case_a_sessions_default_queue_mode_applies_to_turns_without_one,
            case_a_collect_carrier_takes_the_collects_and_leaves_the_steers,
            case_an_interrupt_behind_unfinished_runs_marks_the_session,
            case_an_interrupt_takes_the_place_of_an_active_interrupt,
            case_an_interrupt_abort_request_keeps_its_reason,
            case_a_transcript_page_stops_at_its_byte_budget,
            case_an_events_page_stops_at_its_byte_budget,
        }
    };
}

/// The one list of queue cases, handed to [`__expand_cases`].
#[doc(hidden)]
#[macro_export]
macro_rules! __queue_cases {
    ($($how:tt)*) => {
        $crate::__expand_cases! { $($how)*;
            case_fifo_within_lane,
            case_lane_blocked_while_in_flight,
            case_dedup_while_queued,
            case_receive_wait_returns_early,
            case_many_lanes_in_parallel,
            case_redelivery_after_visibility_timeout,
            case_zero_visibility_hands_back_same_message,
            case_visibility_extension_keeps_hidden,
            case_stale_receipt_ack_is_harmless,
            case_ack_and_receive_delivers_the_next_message_once,
        }
    };
}

/// `tests`: a module of `#[tokio::test]`s; `table`: a `Vec` of (name, [`Case`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __expand_cases {
    (tests $module:ident $kind:ident ($make:expr); $($case:ident),+ $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let backend = ($make).await;
                    $crate::run_case(stringify!($case), $crate::$kind::$case(backend)).await;
                }
            )+
        }
    };
    (table $kind:ident $backend:ty; $($case:ident),+ $(,)?) => {
        vec![$(
            (
                stringify!($case),
                (|backend: ::std::sync::Arc<$backend>| -> $crate::CaseFuture {
                    ::std::boxed::Box::pin($crate::$kind::$case(backend))
                }) as $crate::Case<$backend>,
            ),
        )+]
    };
}
