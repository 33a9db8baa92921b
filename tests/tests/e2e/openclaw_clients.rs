//! What a client written for OpenClaw's gateway sends: session keys holding `/`, `timeout`
//! for `timeoutSeconds`, and an `agent.wait` answer that names the run's liveness.

use crate::support::{GREETING, LONG, scenario};
use agentlane_core::RunStatus;
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openclaw_style_key_with_slashes_and_a_timeout_field_runs_one_session()
-> anyhow::Result<()> {
    // GIVEN a server, and a session key shaped like OpenClaw's (it holds `/`)
    let scn = scenario()?;
    let a = scn.a();
    let key = "agent:main/dm/42";

    // WHEN a turn is sent with OpenClaw's `timeout` field instead of `timeoutSeconds`
    let accepted = a
        .agent_with(json!({ "sessionKey": key, "message": "hello there", "timeout": 120 }))
        .await?;
    assert_eq!(accepted.session_key, key);

    // THEN agent.wait answers the end with the run's livenessState, as OpenClaw's does
    let (status, wait) = a
        .json(
            Method::POST,
            "/v1/agent.wait",
            Some(json!({ "runId": accepted.run_id, "timeoutMs": LONG.as_millis() as u64 })),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{wait}");
    assert_eq!(wait["status"], "ok", "{wait}");
    assert_eq!(wait["livenessState"], "working", "{wait}");
    let run = a.run(&accepted.run_id).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), GREETING);

    // AND the session reads back under its percent-encoded key, as one session
    let transcript = a.transcript(key).await?;
    assert_eq!(transcript.roles(), ["user", "assistant"]);
    let (status, session) = a
        .json(Method::GET, "/v1/sessions/agent:main%2Fdm%2F42", None)
        .await?;
    assert_eq!(status, StatusCode::OK, "{session}");
    assert_eq!(session["sessionKey"], key, "{session}");

    // AND an unencoded `/` is another path, not this session
    let (status, _) = a
        .json(Method::GET, "/v1/sessions/agent:main/dm/42", None)
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // AND both spellings of the timeout at once are refused, with nothing queued
    let (status, body) = a
        .post_agent(json!({
            "sessionKey": key, "message": "again", "timeout": 5, "timeoutSeconds": 5
        }))
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    assert_eq!(a.transcript(key).await?.roles(), ["user", "assistant"]);
    Ok(())
}
