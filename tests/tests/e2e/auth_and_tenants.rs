//! Authentication, and one tenant never seeing another's sessions or runs.

use crate::support::{GREETING, LONG, scenario};
use agentlane_core::RunStatus;
use agentlane_tests::{Client, RawBody, TENANT_A};
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_valid_api_key_get_401() -> anyhow::Result<()> {
    // GIVEN a running server
    let scn = scenario()?;
    let url = scn.server.url().to_owned();
    let callers = [
        ("no Authorization header", Client::anonymous(&url)),
        (
            "an unknown key",
            Client::new(&url, "not-a-key-of-anyone-0000"),
        ),
        (
            "a known key with a suffix",
            Client::new(&url, &format!("{}x", TENANT_A.key)),
        ),
        (
            "a Basic header",
            Client::with_authorization(&url, &format!("Basic {}", TENANT_A.key)),
        ),
        (
            "an empty bearer",
            Client::with_authorization(&url, "Bearer "),
        ),
    ];
    for (who, client) in callers {
        for (method, path, body) in [
            (
                Method::POST,
                "/v1/agent",
                Some(json!({"sessionKey": "s", "message": "hello"})),
            ),
            (Method::GET, "/v1/runs/run_x", None),
            (Method::GET, "/v1/sessions/s/transcript", None),
        ] {
            // WHEN a caller with {who} calls the API
            let response = client
                .raw(method.clone(), path, body.map(RawBody::Json))
                .await?;

            // THEN it gets 401 unauthorized and nothing happens
            assert_eq!(
                response.status,
                StatusCode::UNAUTHORIZED,
                "{who}: {method} {path}: {}",
                response.body
            );
            assert_eq!(response.json()["error"]["code"], "unauthorized", "{who}");
        }
    }
    assert_eq!(scn.mock.model_requests()?.len(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_cannot_read_wait_for_or_abort_a_run() -> anyhow::Result<()> {
    // GIVEN tenant A's finished turn on session "private"
    let scn = scenario()?;
    let (a, b) = (scn.a(), scn.b());
    let turn = a.agent("private", "hello from A").await?;
    let run = a.wait_done(&turn.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok);
    let run_path = format!("/v1/runs/{}", turn.run_id);

    // WHEN tenant B reads, waits for, or aborts A's run, or reads A's session
    for (method, path, body) in [
        (Method::GET, run_path.clone(), None),
        (Method::GET, format!("{run_path}/events"), None),
        (Method::POST, format!("{run_path}/abort"), Some(json!({}))),
        (
            Method::POST,
            "/v1/agent.wait".to_owned(),
            Some(json!({"runId": turn.run_id, "timeoutMs": 10})),
        ),
        (
            Method::GET,
            "/v1/sessions/private/transcript".to_owned(),
            None,
        ),
        (Method::GET, "/v1/sessions/private".to_owned(), None),
    ] {
        let (status, body) = b.json(method.clone(), &path, body).await?;

        // THEN B is told it does not exist
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
        assert_eq!(
            body["error"]["code"], "not_found",
            "{method} {path}: {body}"
        );
    }

    // AND A's run and transcript are untouched
    let after = a.run(&turn.run_id).await?;
    assert_eq!(after.status, RunStatus::Ok);
    assert_eq!(after.reply_text(), GREETING);
    assert_eq!(a.transcript("private").await?.entries.len(), 2);

    // AND when B uses the same session key, B gets a session of its own
    let b_turn = b.agent("private", "hello from B").await?;
    assert_ne!(b_turn.session_id, turn.session_id);
    assert_eq!(
        b.wait_done(&b_turn.run_id, LONG).await?.status,
        RunStatus::Ok
    );
    let b_transcript = b.transcript("private").await?;
    assert_eq!(b_transcript.user_texts(), ["hello from B"]);
    assert_eq!(
        a.transcript("private").await?.user_texts(),
        ["hello from A"]
    );

    // AND B's model call did not carry A's conversation
    let b_calls = scn.mock.model_requests_for("hello from B")?;
    assert_eq!(b_calls.len(), 1);
    assert!(
        !b_calls[0]
            .roles_and_texts()
            .iter()
            .any(|(_, text)| text.contains("hello from A")),
        "{:?}",
        b_calls[0].roles_and_texts()
    );
    Ok(())
}
