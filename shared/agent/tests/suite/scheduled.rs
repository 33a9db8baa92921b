//! Limits a scheduler puts on a run it fires (a cron job's): an absolute deadline counted from
//! the fire, and a cap on the model's idle timeout.

use crate::support::*;
use agentlane_agent::{RunnerConfig, TurnExit};
use agentlane_conformance::fixtures;
use agentlane_core::{Clock, RunStatus, SystemClock, TurnMessage, TurnRequest};
use std::time::Duration;

/// Accepts `message` with a scheduler's limits: an absolute deadline and an idle cap.
async fn accept_fired(
    f: &Fixture,
    message: &str,
    deadline_at: u64,
    model_idle_timeout_ms: Option<u64>,
) -> TurnMessage {
    f.accept_request(TurnRequest {
        queue_mode: None,
        timeout_seconds: Some(0),
        deadline_at: Some(deadline_at),
        model_idle_timeout_ms,
        ..fixtures::request(message)
    })
    .await
}

#[tokio::test]
async fn an_absolute_deadline_ends_the_run_timeout_even_with_no_timeout_of_its_own() {
    // a deadline 1 s away, no run timeout (0): the slow tool round is cut at the deadline
    let f = fixture(vec![Script::Tools(vec![("c1", "slow", "{}")])], config());
    let msg = accept_fired(&f, "slow", SystemClock.now_ms() + 1_000, None).await;
    assert_eq!(
        f.execute(&msg).await,
        TurnExit::Finished(RunStatus::Timeout)
    );
    // a deadline already past when the run is picked up: no model call at all
    let late = fixture(vec![Script::Text("never")], config());
    let msg = accept_fired(&late, "hi", SystemClock.now_ms() - 1, None).await;
    assert_eq!(
        late.execute(&msg).await,
        TurnExit::Finished(RunStatus::Timeout)
    );
    assert_eq!(late.model.requests().len(), 0);
}

#[tokio::test]
async fn a_fired_runs_idle_cap_cuts_a_stalled_stream_sooner() {
    // the deployment's idle timeout is 30 s; the run's cap is 200 ms
    let f = fixture(
        vec![Script::Stall(Duration::from_secs(20))],
        RunnerConfig {
            model_idle_timeout: Duration::from_secs(30),
            ..config()
        },
    );
    let msg = accept_fired(&f, "hi", SystemClock.now_ms() + 60_000, Some(200)).await;
    let started = std::time::Instant::now();
    f.execute(&msg).await;
    // cut after ~200 ms of silence, not after the 20 s stall or the 30 s default
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let run = finished_run(&f, &msg).await;
    assert_eq!(run.attempts[0].outcome, "timeout", "{:?}", run.attempts);
    assert!(run.attempts[0].duration_ms < 5_000, "{:?}", run.attempts);
}
