//! Resubmitting with the same idempotency key returns the same run and runs nothing twice.

use crate::support::{GREETING, LONG, scenario};
use agentlane_core::RunStatus;
use agentlane_tests::Accepted;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotency_key_gives_the_same_run_and_one_model_call() -> anyhow::Result<()> {
    // GIVEN a client that submits a turn with an idempotency key
    let scn = scenario()?;
    let a = scn.a();
    let body = json!({
        "sessionKey": "retrying-client",
        "message": "hello, only once please",
        "idempotencyKey": "client-retry-1"
    });
    let (status, first) = a.post_agent(body.clone()).await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let first: Accepted = serde_json::from_value(first)?;

    // WHEN it sends the very same request again (a retry after a lost answer), before and after
    // the run ended
    let (status, again) = a.post_agent(body.clone()).await?;
    assert!(status.is_success(), "{status} {again}");
    let again: Accepted = serde_json::from_value(again)?;
    let run = a.wait_done(&first.run_id, LONG).await?;
    let (status, late) = a.post_agent(body.clone()).await?;
    assert!(status.is_success(), "{status} {late}");
    let late: Accepted = serde_json::from_value(late)?;

    // THEN every answer names the same run, which ran once
    assert_eq!(again.run_id, first.run_id);
    assert_eq!(late.run_id, first.run_id);
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), GREETING);

    // WHEN a different key carries the same words, and tenant B reuses A's key
    let other = a
        .agent_with(json!({
            "sessionKey": "retrying-client",
            "message": "hello, only once please",
            "idempotencyKey": "client-retry-2"
        }))
        .await?;
    let b_turn = scn.b().agent_with(body.clone()).await?;

    // THEN each of those is a new run (keys are per tenant, and not about the words)
    assert_ne!(other.run_id, first.run_id);
    assert_ne!(b_turn.run_id, first.run_id);
    assert_eq!(
        a.wait_done(&other.run_id, LONG).await?.status,
        RunStatus::Ok
    );
    assert_eq!(
        scn.b().wait_done(&b_turn.run_id, LONG).await?.status,
        RunStatus::Ok
    );

    // AND A's transcript holds exactly two user entries, one per distinct run, each answered
    let transcript = a.transcript("retrying-client").await?;
    assert_eq!(
        transcript.roles(),
        ["user", "assistant", "user", "assistant"]
    );
    assert_eq!(transcript.entries_of(&first.run_id).len(), 2);
    assert_eq!(transcript.entries_of(&other.run_id).len(), 2);

    // AND the model was asked three times in all: A's run once, A's second key, B's run
    let calls = scn.mock.model_requests_for("hello, only once please")?;
    assert_eq!(calls.len(), 3, "{calls:#?}");
    Ok(())
}
