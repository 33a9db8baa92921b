//! The largest turn the API accepts (SPEC §10, issue 11): a 256 KiB message with an extra
//! system prompt as large as the run record allows, answered with a long reply. On both
//! backends it ends `ok` with the whole reply (the finished run record is shrunk to fit one
//! stored item: its request, which the transcript keeps, is elided), the model is called once,
//! and the session's next turn answers. On DynamoDB the run item of such a turn (~320 KB) is
//! replaced whole at each commit (see the aws store's commit).

use crate::support::LONG;
use agentlane_core::RunStatus;
use agentlane_tests::{Aimock, Fixtures, Scenario, Server, ServerOptions};
use reqwest::StatusCode;
use serde_json::json;

/// The API's message limit (256 KiB).
const MAX_MESSAGE: usize = 256 * 1024;
/// An extra system prompt that, with the message, fills the API's request body limit
/// (256 KiB + 64 KiB).
const EXTRA_PROMPT: usize = 60_000;
/// The model's reply: long enough that reply + request would not fit one record.
const REPLY: usize = 150_000;

fn long_reply() -> String {
    let line = "The long answer goes on, line after line, without end in sight.\n";
    line.repeat(REPLY / line.len() + 1).trim_end().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maximum_size_turn_with_a_long_reply_ends_ok_calling_the_model_once() -> anyhow::Result<()>
{
    // GIVEN a model that answers the big turn at length and says hello otherwise
    let reply = long_reply();
    let mock = Aimock::start(Fixtures::Inline(json!([
        { "match": { "userMessage": "BIGTURN" }, "response": { "content": reply }, "chunkSize": 8192 },
        { "match": {}, "response": { "content": "Hi there! How can I help you today?" } }
    ])))?;
    let scn = Scenario {
        server: Server::start(ServerOptions::new(crate::support::SERVER_BIN).model_server(&mock))?,
        mock,
    };
    let a = scn.a();

    // WHEN a turn with a message of exactly the API's limit and a large extra system prompt
    // is sent, then a small one on the same session
    let message = format!("BIGTURN {}", "y".repeat(MAX_MESSAGE - 8));
    assert_eq!(message.len(), MAX_MESSAGE);
    let (status, accepted) = a
        .post_agent(json!({
            "sessionKey": "big",
            "message": message,
            "extraSystemPrompt": "z".repeat(EXTRA_PROMPT),
        }))
        .await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let big = accepted["runId"].as_str().unwrap().to_owned();
    let next = a.agent("big", "hello").await?;

    // THEN the big turn ends ok with the whole reply
    let run = match a.wait_done(&big, LONG).await {
        Ok(run) => run,
        Err(e) => panic!("{e}\n{}", scn.server.stderr_tail(6000)),
    };
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.error);
    let text = run.reply_text();
    assert_eq!(text.len(), reply.len(), "the reply is whole");
    assert!(text == reply, "the reply is the model's");
    // AND the model was called once for it (once per turn in all: the mock's journal does not
    // always keep the text of a 256 KiB request, so the calls are counted, not searched)
    let answered = a.wait_done(&next.run_id, LONG).await?;
    let requests = scn.mock.model_requests()?;
    let seen: Vec<String> = requests
        .iter()
        .map(|r| {
            r.last_user_text()
                .map_or("<none>".to_owned(), |t| t.chars().take(40).collect())
        })
        .collect();
    // The next turn's history (~120 k tokens) is compacted first: one summary call, whose
    // prompt renders the transcript ("User: BIGTURN ..."), then its own call.
    let summaries = seen
        .iter()
        .filter(|t| t.starts_with("User: BIGTURN"))
        .count();
    assert!(summaries <= 1, "{seen:?}");
    assert_eq!(
        requests.len() - summaries - 1,
        1,
        "one call for the big turn: the model is not called again for an answer it has: {seen:?}"
    );
    // AND the next turn answers
    assert_eq!(answered.status, RunStatus::Ok, "{answered:?}");
    assert_eq!(answered.reply_text(), "Hi there! How can I help you today?");
    Ok(())
}
