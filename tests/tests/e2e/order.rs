//! Order and identity the store keeps: a reset with turns queued behind a running one, and an
//! idempotency key reused for a different request.

use crate::support::{GLACIAL_REPLY, GREETING, LONG, scenario};
use agentlane_core::RunStatus;
use agentlane_tests::Accepted;
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_waits_for_the_running_turn_and_aborts_the_turns_queued_before_it()
-> anyhow::Result<()> {
    // GIVEN a glacial turn (about 8 s) running on a session and two turns queued behind it
    let scn = scenario()?;
    let a = scn.a();
    let slow = a.agent("reset-me", "a glacial answer please").await?;
    a.poll_run(&slow.run_id, LONG, "running", |r| {
        r.status == RunStatus::Running
    })
    .await?;
    let queued = [
        a.agent("reset-me", "hello").await?,
        a.agent("reset-me", "hello").await?,
    ];

    // WHEN the session is reset
    let (status, reset) = a
        .json(Method::POST, "/v1/sessions/reset-me/reset", Some(json!({})))
        .await?;

    // THEN the reset waited for the running turn, which ended ok on the old session
    assert_eq!(status, StatusCode::OK, "{reset}");
    let slow_run = a.run(&slow.run_id).await?;
    assert_eq!(slow_run.status, RunStatus::Ok, "{slow_run:?}");
    assert_eq!(slow_run.reply_text(), GLACIAL_REPLY);
    let new_id = reset["sessionId"].as_str().unwrap_or_default().to_owned();
    assert_ne!(new_id, slow.session_id);

    // AND the queued turns end aborted (session_reset) without a model call
    for turn in &queued {
        let run = a.wait_done(&turn.run_id, LONG).await?;
        assert_eq!(run.status, RunStatus::Aborted, "{run:?}");
        assert_eq!(
            run.error.as_ref().map(|e| e.code.as_str()),
            Some("session_reset")
        );
        assert!(run.attempts.is_empty(), "{run:?}");
    }
    assert!(scn.mock.model_requests_for("hello")?.is_empty());

    // AND a new turn starts the new session from seq 0, the old transcript left whole
    let fresh = a.agent("reset-me", "hello").await?;
    assert_eq!(fresh.session_id, new_id);
    let run = a.wait_done(&fresh.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), GREETING);
    let transcript = a.transcript("reset-me").await?;
    assert_eq!(transcript.session_id, new_id);
    assert_eq!(transcript.roles(), ["user", "assistant"]);
    assert_eq!(
        transcript.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [0, 1]
    );
    let (status, old) = a
        .json(
            Method::GET,
            &format!(
                "/v1/sessions/reset-me/transcript?sessionId={}",
                slow.session_id
            ),
            None,
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{old}");
    let old_runs: Vec<&str> = old["entries"]
        .as_array()
        .map(|v| v.iter().filter_map(|e| e["runId"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(old_runs, [slow.run_id.as_str(), slow.run_id.as_str()]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_reused_for_another_request_is_a_conflict() -> anyhow::Result<()> {
    let scn = scenario()?;
    let a = scn.a();
    let body = json!({"sessionKey": "idem", "message": "hello", "idempotencyKey": "k-9"});
    let first: Accepted = a.agent_with(body.clone()).await?;

    // WHEN the key comes back with another message, or on another session
    for other in [
        json!({"sessionKey": "idem", "message": "hello again", "idempotencyKey": "k-9"}),
        json!({"sessionKey": "elsewhere", "message": "hello", "idempotencyKey": "k-9"}),
    ] {
        let (status, reply) = a.post_agent(other).await?;
        // THEN it is refused, naming the conflict
        assert_eq!(status, StatusCode::CONFLICT, "{reply}");
        assert_eq!(reply["error"]["code"], "conflict");
    }

    // AND only the first turn exists and ran, once
    let again: Accepted = a.agent_with(body).await?;
    assert_eq!(again.run_id, first.run_id);
    assert_eq!(
        a.wait_done(&first.run_id, LONG).await?.status,
        RunStatus::Ok
    );
    let transcript = a.transcript("idem").await?;
    assert_eq!(transcript.roles(), ["user", "assistant"]);
    let (status, _) = a.json(Method::GET, "/v1/sessions/elsewhere", None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(scn.mock.model_requests_for("hello")?.len(), 1);
    Ok(())
}
