//! The harness itself: aimock answers and records, fixtures can be added and reset, the
//! pairing check catches a broken history, and a server that fails to start fails loudly.
//! These need aimock but not a working server.

use agentlane_tests::{Aimock, Fixtures, HarnessError, Server, ServerOptions};
use serde_json::{Value, json};

async fn chat(mock: &Aimock, messages: Value, stream: bool) -> anyhow::Result<String> {
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .post(format!("{}/chat/completions", mock.base_url()))
        .bearer_auth("test-key")
        .json(&json!({"model": "gpt-4o-mini", "stream": stream, "messages": messages}))
        .send()
        .await?;
    assert!(response.status().is_success(), "{}", response.status());
    Ok(response.text().await?)
}

#[tokio::test]
async fn aimock_streams_fixture_replies_and_records_each_request() -> anyhow::Result<()> {
    // GIVEN aimock with the shared fixtures
    let mock = Aimock::start(Fixtures::scenarios())?;

    // WHEN a client streams a chat completion that says hello
    let body = chat(&mock, json!([{"role": "user", "content": "hello"}]), true).await?;

    // THEN the reply arrives as SSE chunks and the journal records the request
    assert!(body.contains("data: "), "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    let requests = mock.model_requests()?;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].last_user_text().as_deref(), Some("hello"));
    assert_eq!(requests[0].model(), Some("gpt-4o-mini"));
    assert_eq!(requests[0].status, 200);

    // AND a message no fixture names reaches the catch-all rather than a 404
    let other = chat(&mock, json!([{"role": "user", "content": "zzz"}]), false).await?;
    assert!(
        other.contains("I have nothing scripted for that."),
        "{other}"
    );
    Ok(())
}

#[tokio::test]
async fn added_fixtures_win_until_reset() -> anyhow::Result<()> {
    // GIVEN aimock with the shared fixtures and one added fixture for "hello"
    let mock = Aimock::start(Fixtures::scenarios())?;
    mock.add_fixtures(vec![json!({
        "match": {"userMessage": "hello"},
        "response": {"content": "Overridden."}
    })])?;
    let hello = json!([{"role": "user", "content": "hello"}]);

    // WHEN hello is sent, then the mock is reset and hello is sent again
    let overridden = chat(&mock, hello.clone(), false).await?;
    mock.reset()?;
    assert_eq!(mock.model_requests()?.len(), 0, "reset empties the journal");
    let original = chat(&mock, hello, false).await?;

    // THEN the added fixture answered first, the shared one after the reset
    assert!(overridden.contains("Overridden."), "{overridden}");
    assert!(original.contains("Hi there!"), "{original}");
    Ok(())
}

#[tokio::test]
async fn the_pairing_check_flags_a_request_with_an_unanswered_tool_call() -> anyhow::Result<()> {
    // GIVEN aimock that received a history whose tool call has no result
    let mock = Aimock::start(Fixtures::scenarios())?;
    let broken = json!([
        {"role": "user", "content": "what time is it?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}
        ]},
        {"role": "user", "content": "hello?"}
    ]);
    chat(&mock, broken, false).await?;

    // WHEN the end-of-test check runs
    let verdict = mock.check_every_request();

    // THEN it names the violation
    match verdict {
        Err(HarnessError::Protocol(message)) => {
            assert!(message.contains("call_1"), "{message}")
        }
        other => panic!("expected a pairing violation, got {other:?}"),
    }
    // (forget the broken request so this mock's own drop check passes)
    mock.reset_journal()?;
    Ok(())
}

#[test]
fn a_server_that_exits_before_it_is_ready_fails_with_its_stderr() {
    // GIVEN a "server" binary that cannot serve (sh, asked to run a script named `serve`)
    let options = ServerOptions::new("/bin/sh");

    // WHEN the harness starts it
    let outcome = Server::start(options);

    // THEN starting fails, saying it exited and showing what it printed
    match outcome {
        Err(HarnessError::NotReady { reason, stderr, .. }) => {
            assert!(reason.contains("exited"), "{reason}");
            assert!(stderr.contains("serve"), "{stderr}");
        }
        Err(other) => panic!("expected NotReady, got {other}"),
        Ok(_) => panic!("sh is not a server"),
    }
}
