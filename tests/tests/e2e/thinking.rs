//! `thinking`: mapped to each provider's reasoning knob, or refused for a model without one.

use crate::support::{GREETING, LONG, SERVER_BIN};
use agentlane_core::RunStatus;
use agentlane_tests::{Aimock, Fixtures, MODEL, Scenario, Server, ServerOptions};
use serde_json::json;

const REASONER: &str = "openai/o3-mini";
const CLAUDE: &str = "anthropic/claude-sonnet-4-5";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_level_reaches_each_provider_or_is_refused_for_a_model_without_one()
-> anyhow::Result<()> {
    // GIVEN a server whose default model (gpt-4o-mini) has no reasoning mode, and which also
    // allows an OpenAI reasoning model and a Claude model served by the same mock
    let mock = Aimock::start(Fixtures::scenarios())?;
    let options = ServerOptions::new(SERVER_BIN)
        .model_server(&mock)
        .env(
            "AGENTLANE_ALLOWED_MODELS",
            format!("{MODEL},{REASONER},{CLAUDE}"),
        )
        .env("ANTHROPIC_BASE_URL", mock.url())
        .env("ANTHROPIC_API_KEY", "x");
    let server = Server::start(options)?;
    let scn = Scenario { server, mock };
    let a = scn.a();

    // WHEN a turn asks the default model to think hard
    let (status, body) = a
        .post_agent(json!({"sessionKey": "think", "message": "hello there", "thinking": "high"}))
        .await?;
    // THEN it is refused up front, naming the field and the model, and nothing is called
    assert_eq!(status.as_u16(), 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("thinking") && message.contains(MODEL),
        "{message}"
    );
    assert!(scn.mock.model_requests()?.is_empty());

    // WHEN the reasoning model is asked for medium effort
    let accepted = a
        .agent_with(json!({"sessionKey": "think", "message": "hello there", "model": REASONER, "thinking": "medium"}))
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    // THEN the run answers, and the model received reasoning_effort "medium"
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), GREETING);
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].model(), Some("o3-mini"));
    assert_eq!(requests[0].body["reasoning_effort"], "medium");

    // WHEN Claude is asked to think a little
    let accepted = a
        .agent_with(json!({"sessionKey": "claude", "message": "hello there", "model": CLAUDE, "thinking": "low"}))
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;
    // THEN the Messages request made room for the level's budget: aimock journals Anthropic
    // requests in its own normalised shape, which keeps `max_tokens` (Claude's 2,048 default
    // answer cap + the 4,096 budget of "low") but not the `thinking` object itself (the providers suite
    // asserts that one on the raw body).
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), GREETING);
    let messages: Vec<_> = scn
        .mock
        .journal()?
        .into_iter()
        .filter(|e| e.method == "POST" && e.path.ends_with("/messages"))
        .collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(
        messages[0].body["max_tokens"],
        2048 + 4096,
        "{:?}",
        messages[0].body
    );
    Ok(())
}
