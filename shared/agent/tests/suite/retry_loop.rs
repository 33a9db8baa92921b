//! The retry loop as a user sees it: idle timeouts, 429s, auth rotation, fallback, the breaker,
//! directed retries.

use crate::support::*;
use agentlane_agent::{RunnerConfig, TurnExit};
use agentlane_core::{Message, RunStatus};
use agentlane_providers::{FailoverReason, ProviderError};
use std::time::Duration;

#[tokio::test]
async fn an_idle_stream_is_retried_once_on_a_lone_model_then_fails_with_a_clear_error() {
    let silent = Script::Silent(Duration::from_secs(30));
    let f = fixture(
        vec![silent.clone(), silent],
        RunnerConfig {
            model_idle_timeout: Duration::from_millis(100),
            ..config()
        },
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let run = f.run(&msg.run_id).await;
    assert_eq!(
        run.attempts
            .iter()
            .map(|a| a.outcome.as_str())
            .collect::<Vec<_>>(),
        ["timeout", "timeout"]
    );
    let err = run.error.unwrap();
    assert_eq!(err.code, "timeout");
    assert!(err.message.contains("idle"), "{}", err.message);
    assert_eq!(run.liveness_state, agentlane_core::LivenessState::Blocked);
}

#[tokio::test]
async fn a_non_retryable_error_fails_at_once() {
    let f = fixture(vec![Script::Fail(FailoverReason::Auth)], config());
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let run = f.run(&msg.run_id).await;
    assert_eq!(run.error.unwrap().code, "auth");
    assert_eq!(f.model.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_short_window_429_waits_at_least_retry_after_then_retries_the_same_model() {
    let limited = ProviderError::from_http(
        429,
        r#"{"error":{"message":"Rate limit reached for requests per min"}}"#,
        Some(Duration::from_secs(15)),
    );
    let f = fixture(
        vec![Script::Error(limited), Script::Text("made it")],
        config(),
    );
    let msg = f.accept("hi").await;
    let before = tokio::time::Instant::now();
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    // 10 s is the first same-model delay; Retry-After asked for 15 s.
    assert!(
        before.elapsed() >= Duration::from_secs(15),
        "{:?}",
        before.elapsed()
    );
    let run = finished_run(&f, &msg).await;
    assert_eq!(
        ledger(&run),
        owned(&[
            ("scripted/m1", "default", "rate_limit"),
            ("scripted/m1", "default", "ok")
        ])
    );
    assert_eq!(
        run.checkpoint.unwrap()["retry"]["budgets"]["sameModelRateLimitRetries"],
        1
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limits_beyond_the_same_model_budget_rotate_the_auth_profile() {
    let limited = || {
        Script::Error(ProviderError::from_http(
            429,
            "Rate limit: tokens per minute",
            None,
        ))
    };
    let f = fixture_with(
        vec![
            limited(),
            limited(),
            limited(),
            limited(),
            Script::Text("second key works"),
        ],
        config(),
        |router, model| router.with_profiles("scripted", profiles(model, &["key-1", "key-2"])),
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    let run = finished_run(&f, &msg).await;
    let used: Vec<String> = run
        .attempts
        .iter()
        .map(|a| a.profile.clone().unwrap_or_default())
        .collect();
    assert_eq!(used, ["key-1", "key-1", "key-1", "key-1", "key-2"]);
    assert_eq!(run.payloads[0].text, "second key works");
}

#[tokio::test]
async fn an_auth_failure_rotates_to_the_next_profile() {
    let f = fixture_with(
        vec![
            Script::Fail(FailoverReason::Auth),
            Script::Text("ok with key 2"),
        ],
        config(),
        |router, model| router.with_profiles("scripted", profiles(model, &["key-1", "key-2"])),
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        ledger(&finished_run(&f, &msg).await),
        owned(&[
            ("scripted/m1", "key-1", "auth"),
            ("scripted/m1", "key-2", "ok")
        ])
    );
}

#[tokio::test]
async fn an_overloaded_model_falls_back_to_the_next_model_of_the_chain() {
    let f = fixture_with(
        vec![
            Script::Fail(FailoverReason::Overloaded),
            Script::Text("backup here"),
        ],
        config(),
        |router, model| {
            router
                .with_provider(model.clone())
                .with_provider(model.sibling("backup"))
                .with_fallbacks(vec!["backup/m2".into()])
        },
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    let run = finished_run(&f, &msg).await;
    assert_eq!(f.model.providers_called(), ["scripted", "backup"]);
    assert_eq!(run.model.as_deref(), Some("backup/m2"));
    assert_eq!(
        ledger(&run),
        owned(&[
            ("scripted/m1", "default", "overloaded"),
            ("backup/m2", "default", "ok")
        ])
    );
    let events = f
        .store
        .read_events(&f.tenant, &msg.run_id, None, 100)
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.data["phase"] == "retry" && e.data["action"] == "fallback")
    );
}

#[tokio::test(start_paused = true)]
async fn the_idle_timeout_breaker_stops_the_run_after_five_stalls_whatever_is_left_to_try() {
    let silent = Script::Silent(Duration::from_secs(600));
    let f = fixture_with(
        vec![silent; 8],
        RunnerConfig {
            // Virtual time; short so the abort poll does not spin through minutes of it.
            model_idle_timeout: Duration::from_secs(2),
            ..config()
        },
        |router, model| {
            let backup = model.sibling("backup");
            router
                .with_profiles("scripted", profiles(model, &["a", "b", "c"]))
                .with_profiles(
                    "backup",
                    ["d", "e", "f"]
                        .iter()
                        .map(|n| agentlane_agent::models::Profile {
                            name: (*n).into(),
                            provider: backup.clone(),
                        })
                        .collect(),
                )
                .with_fallbacks(vec!["backup/m2".into()])
        },
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let run = finished_run(&f, &msg).await;
    assert_eq!(
        f.model.requests().len(),
        5,
        "no model call after the breaker trips"
    );
    let err = run.error.unwrap();
    assert_eq!(err.code, "idle_timeout_breaker");
    assert_eq!(run.liveness_state, agentlane_core::LivenessState::Blocked);
    assert_eq!(
        run.checkpoint.unwrap()["retry"]["breaker"]["consecutive"],
        5
    );
}

#[tokio::test]
async fn a_response_without_an_assistant_message_is_resent_once_as_it_was() {
    let f = fixture(
        vec![Script::NoMessage, Script::Text("now visible")],
        config(),
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    let requests = f.model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].messages, requests[0].messages,
        "resent unchanged"
    );
    let run = finished_run(&f, &msg).await;
    let outcomes: Vec<&str> = run.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["missing_assistant", "ok"]);
    assert_eq!(f.roles().await, vec!["user", "assistant"]);

    // Twice in a row: the budget of one is spent and the turn ends incomplete.
    let f = fixture(vec![Script::NoMessage, Script::NoMessage], config());
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let run = finished_run(&f, &msg).await;
    assert_eq!(
        run.error.map(|e| e.code).as_deref(),
        Some("incomplete_turn")
    );
    assert_eq!(f.model.requests().len(), 2);
}

#[tokio::test]
async fn an_empty_reply_gets_one_directed_retry_that_is_not_persisted() {
    let f = fixture(
        vec![Script::Text(""), Script::Text("now visible")],
        config(),
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    let requests = f.model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].messages.last().map(|m| m.message()),
        Some(&Message::user(
            agentlane_agent::retry::Continuation::EmptyResponse.instruction()
        ))
    );
    assert_eq!(f.roles().await, vec!["user", "assistant"]);
}

#[tokio::test]
async fn reasoning_without_an_answer_is_retried_twice_then_the_run_says_it_could_not_reply() {
    let f = fixture(
        vec![
            Script::ReasoningOnly,
            Script::ReasoningOnly,
            Script::ReasoningOnly,
        ],
        config(),
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let requests = f.model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[2].messages.last().map(|m| m.message()),
        Some(&Message::user(
            agentlane_agent::retry::Continuation::ReasoningOnly.instruction()
        ))
    );
    let run = finished_run(&f, &msg).await;
    assert_eq!(run.error.unwrap().code, "incomplete_turn");
    assert!(run.payloads[0].is_error);
    assert_eq!(run.liveness_state, agentlane_core::LivenessState::Abandoned);
}
