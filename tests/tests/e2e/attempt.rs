//! The attempt seen from outside: `before_tool_call` webhooks (allow, block, fail closed), a
//! tool call the model wrote as text, bootstrap context in the system prompt, the silent
//! `NO_REPLY` answer, what the user gets when a tool failed and the model says nothing, and
//! secrets kept out of tool events. Each scenario scripts aimock (`tests/fixtures/attempt.json`)
//! and counts the model requests the server really sent.

use crate::support::{LONG, SERVER_BIN, assert_run_frame, assistant_deltas};
use agentlane_core::{Event, EventStream, LivenessState, Message, RunStatus};
use agentlane_tests::{
    Aimock, Client, Fixtures, ModelRequest, RunView, Scenario, Server, ServerOptions,
    TranscriptView, is, message_text,
};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tempfile::TempDir;

/// The reason the guard webhook gives when it blocks `http_fetch`.
const BLOCK_REASON: &str = "no web access from this lane";

/// The instruction the runner appends after an answer with nothing visible.
const EMPTY_RESPONSE_INSTRUCTION: &str = "Your previous attempt produced no visible answer. \
     Continue from the current state and reply visibly now; do not restart.";

/// aimock with the attempt fixtures and a server pointed at it.
fn attempt_scenario(
    configure: impl FnOnce(ServerOptions) -> ServerOptions,
) -> anyhow::Result<Scenario> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/attempt.json");
    let mock = Aimock::start(Fixtures::File(fixtures))?;
    let server = Server::start(configure(
        ServerOptions::new(SERVER_BIN).model_server(&mock),
    ))?;
    Ok(Scenario { server, mock })
}

/// Sends `message` on `session` and waits for the run to end.
async fn run_turn(client: &Client, session: &str, message: &str) -> anyhow::Result<RunView> {
    let accepted = client.agent(session, message).await?;
    Ok(client.wait_done(&accepted.run_id, LONG).await?)
}

/// The outcome of every attempt, in order.
fn outcomes(run: &RunView) -> Vec<&str> {
    run.attempts.iter().map(|a| a.outcome.as_str()).collect()
}

/// `(tool_call_id, name, content, is_error)` of every tool result in the transcript.
fn tool_results(transcript: &TranscriptView) -> Vec<(String, String, String, bool)> {
    transcript
        .entries
        .iter()
        .filter_map(|e| match &e.message {
            Message::Tool {
                tool_call_id,
                name,
                content,
                is_error,
            } => Some((
                tool_call_id.clone(),
                name.clone(),
                content.clone(),
                *is_error,
            )),
            _ => None,
        })
        .collect()
}

/// The `tool` messages of a model request, as `(tool_call_id, text)`.
fn tool_messages(request: &ModelRequest) -> Vec<(String, String)> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or("?").to_owned(),
                message_text(m).unwrap_or_default(),
            )
        })
        .collect()
}

/// The tool event of `id` in `phase`.
fn tool_event<'a>(events: &'a [Event], id: &str, wanted: &str) -> &'a Event {
    events
        .iter()
        .find(|e| {
            is(e, EventStream::Tool, wanted)
                && e.data.get("toolCallId").and_then(Value::as_str) == Some(id)
        })
        .unwrap_or_else(|| panic!("a tool {wanted} event for {id}: {events:#?}"))
}

/// How the in-test webhook answers.
#[derive(Debug, Clone, Copy)]
enum HookMode {
    /// Blocks `http_fetch` with [`BLOCK_REASON`]; allows everything else.
    BlockHttpFetch,
    /// Answers every call `500 Internal Server Error`.
    Broken,
}

#[derive(Debug)]
struct HookState {
    mode: HookMode,
    seen: Mutex<Vec<Value>>,
}

/// An operator's `before_tool_call` webhook on 127.0.0.1, recording every request body.
struct Webhook {
    url: String,
    state: Arc<HookState>,
    task: tokio::task::JoinHandle<()>,
}

impl Webhook {
    async fn start(mode: HookMode) -> anyhow::Result<Self> {
        let state = Arc::new(HookState {
            mode,
            seen: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/hook", post(answer))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Webhook { url, state, task })
    }

    /// The bodies received so far, oldest first.
    fn seen(&self) -> Vec<Value> {
        self.state.seen.lock().unwrap().clone()
    }

    /// Writes a config file declaring this webhook at `before_tool_call`; returns its path.
    fn config_file(&self, dir: &TempDir) -> anyhow::Result<PathBuf> {
        let path = dir.path().join("agentlane.toml");
        let toml = format!(
            "[[hooks]]\nname = \"guard\"\nurl = \"{}\"\npoints = [\"before_tool_call\"]\n\
             priority = 10\ntimeoutMs = 5000\n",
            self.url
        );
        std::fs::write(&path, toml)?;
        Ok(path)
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    State(state): State<Arc<HookState>>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let tool = body
        .pointer("/event/toolName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    state.seen.lock().unwrap().push(body);
    match state.mode {
        HookMode::Broken => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": "the policy service is down"})),
        ),
        HookMode::BlockHttpFetch if tool == "http_fetch" => (
            StatusCode::OK,
            Json(json!({"block": true, "blockReason": BLOCK_REASON})),
        ),
        HookMode::BlockHttpFetch => (StatusCode::OK, Json(json!({}))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_webhook_blocks_one_of_two_parallel_calls_and_allows_the_other()
-> anyhow::Result<()> {
    // GIVEN a before_tool_call webhook that blocks http_fetch, configured in AGENTLANE_CONFIG
    let hook = Webhook::start(HookMode::BlockHttpFetch).await?;
    let dir = tempfile::tempdir()?;
    let config = hook.config_file(&dir)?;
    let scn = attempt_scenario(|o| o.env("AGENTLANE_CONFIG", config.display().to_string()))?;
    let a = scn.a();

    // WHEN the model calls http_fetch and current_time in one reply
    let run = run_turn(
        &a,
        "guarded",
        "att-hook-guard: fetch the news and tell the time",
    )
    .await?;

    // THEN the run ends ok with the answer given after both results
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(
        run.reply_text(),
        "I could not fetch the page, but it is noon in UTC."
    );
    assert!(run.payloads.iter().all(|p| !p.is_error), "{run:?}");
    assert_eq!(outcomes(&run), ["tool_calls", "ok"]);

    // AND the webhook was asked about both calls, in call order, for this run
    let seen = hook.seen();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    let asked: Vec<(&str, &str, &str)> = seen
        .iter()
        .map(|b| {
            (
                b["hook"].as_str().unwrap_or("?"),
                b["event"]["toolName"].as_str().unwrap_or("?"),
                b["event"]["toolCallId"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(
        asked,
        [
            ("before_tool_call", "http_fetch", "call_fetch"),
            ("before_tool_call", "current_time", "call_clock"),
        ]
    );
    assert_eq!(
        seen[0]["event"]["arguments"],
        json!({"url": "https://example.com/news"})
    );
    assert_eq!(seen[1]["event"]["arguments"], json!({"timezone": "UTC"}));
    for body in &seen {
        assert_eq!(body["context"]["runId"], run.run_id.as_str(), "{body}");
        assert_eq!(body["context"]["sessionKey"], "guarded", "{body}");
    }

    // AND the transcript holds a blocked error result for http_fetch and a real time
    let transcript = a.transcript("guarded").await?;
    assert_eq!(
        transcript.roles(),
        ["user", "assistant", "tool", "tool", "assistant"]
    );
    let results = tool_results(&transcript);
    assert_eq!(
        (&results[0].0, &results[0].1, &results[0].2, results[0].3),
        (
            &"call_fetch".to_owned(),
            &"http_fetch".to_owned(),
            &format!("blocked: {BLOCK_REASON}"),
            true
        )
    );
    assert_eq!(
        (results[1].0.as_str(), results[1].1.as_str(), results[1].3),
        ("call_clock", "current_time", false)
    );
    assert!(
        !results[1].2.trim().is_empty() && !results[1].2.starts_with("blocked"),
        "current_time really ran: {:?}",
        results[1].2
    );

    // AND the tool events say which call failed
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(
        tool_event(&events, "call_fetch", "end").data["isError"],
        true
    );
    assert_eq!(
        tool_event(&events, "call_clock", "end").data["isError"],
        false
    );

    // AND exactly two model requests; the second carried both results, the block included
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(
        tool_messages(&requests[1]),
        [
            ("call_fetch".to_owned(), format!("blocked: {BLOCK_REASON}")),
            ("call_clock".to_owned(), results[1].2.clone()),
        ]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_failing_webhook_blocks_the_call_and_the_run_still_answers() -> anyhow::Result<()> {
    // GIVEN a before_tool_call webhook that answers 500 to everything
    let hook = Webhook::start(HookMode::Broken).await?;
    let dir = tempfile::tempdir()?;
    let config = hook.config_file(&dir)?;
    let scn = attempt_scenario(|o| o.env("AGENTLANE_CONFIG", config.display().to_string()))?;
    let a = scn.a();

    // WHEN the model calls current_time, a tool the webhook would normally allow
    let run = run_turn(&a, "hook-down", "att-hook-down: what time is it?").await?;

    // THEN the call is blocked (policy hooks fail closed) and the run ends ok with the answer
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "The clock is not available right now.");
    assert_eq!(outcomes(&run), ["tool_calls", "ok"]);
    assert_eq!(hook.seen().len(), 1, "{:#?}", hook.seen());
    let transcript = a.transcript("hook-down").await?;
    let results = tool_results(&transcript);
    assert_eq!(results.len(), 1, "{transcript:#?}");
    let (id, name, content, is_error) = &results[0];
    assert_eq!(
        (id.as_str(), name.as_str(), *is_error),
        ("call_clock", "current_time", true)
    );
    assert!(
        content.starts_with("blocked: ") && content.contains("500"),
        "the result says the call was blocked because the hook failed: {content:?}"
    );

    // AND the model saw that blocked result on its second and last request
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(
        tool_messages(&requests[1]),
        [("call_clock".to_owned(), content.clone())]
    );
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(
        tool_event(&events, "call_clock", "end").data["isError"],
        true
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_tool_call_written_as_text_is_promoted_and_run() -> anyhow::Result<()> {
    // GIVEN a model that writes its tool call as `<tool_call>{...}</tool_call>` text
    let scn = attempt_scenario(|o| o)?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "text-call", "att-text-call: what time is it in UTC?").await?;

    // THEN the server ran current_time and the run ends ok with the model's answer
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "It is noon in UTC, going by the clock.");
    assert!(
        run.payloads.iter().all(|p| !p.text.contains("tool_call")),
        "{run:?}"
    );
    assert_eq!(outcomes(&run), ["tool_calls", "ok"]);

    // AND the transcript records a structured call (not the text) and its result
    let transcript = a.transcript("text-call").await?;
    assert_eq!(
        transcript.roles(),
        ["user", "assistant", "tool", "assistant"]
    );
    let Message::Assistant {
        content,
        tool_calls,
        ..
    } = &transcript.entries[1].message
    else {
        unreachable!("checked by roles")
    };
    assert!(!content.contains("<tool_call>"), "{content:?}");
    assert_eq!(tool_calls.len(), 1, "{tool_calls:?}");
    let call = &tool_calls[0];
    assert_eq!(call.name, "current_time");
    assert_eq!(
        serde_json::from_str::<Value>(&call.arguments)?,
        json!({"timezone": "UTC"})
    );
    let results = tool_results(&transcript);
    assert_eq!(results.len(), 1);
    let (result_id, result_name, result, is_error) = &results[0];
    assert_eq!(
        (result_id.as_str(), result_name.as_str(), *is_error),
        (call.id.as_str(), "current_time", false)
    );

    // AND the second model request replays the call and carries its result
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let second = requests[1].messages();
    let tail = &second[second.len() - 2..];
    assert_eq!(tail[0]["role"], "assistant", "{second:#?}");
    let replayed = tail[0]["tool_calls"]
        .as_array()
        .expect("the promoted call is replayed as a structured call");
    assert_eq!(replayed.len(), 1, "{replayed:?}");
    assert_eq!(replayed[0]["id"], call.id.as_str());
    assert_eq!(replayed[0]["function"]["name"], "current_time");
    assert_eq!(tail[1]["role"], "tool");
    assert_eq!(tail[1]["tool_call_id"], call.id.as_str());
    assert_eq!(message_text(&tail[1]).as_deref(), Some(result.as_str()));

    // AND the events show the promoted call starting and ending
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(
        tool_event(&events, &call.id, "start").data["name"],
        "current_time"
    );
    assert_eq!(tool_event(&events, &call.id, "end").data["isError"], false);
    // AND followers of the events never saw the tool call as text
    assert!(
        !assistant_deltas(&events).contains("tool_call"),
        "{:?}",
        assistant_deltas(&events)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_bootstrap_file_reaches_the_system_prompt() -> anyhow::Result<()> {
    // GIVEN an AGENTS.md the server is told to load as bootstrap context
    let dir = tempfile::tempdir()?;
    let agents = dir.path().join("AGENTS.md");
    let rules = "House rules: answer in haiku; never mention the weather-bird.";
    std::fs::write(&agents, rules)?;
    let configured = agents.display().to_string();
    let scn = attempt_scenario(|o| o.env("AGENTLANE_BOOTSTRAP_FILES", configured.clone()))?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "bootstrap", "att-bootstrap: hello").await?;

    // THEN it answers, after one model request whose system message carries the file
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Noted, I have the house rules.");
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let messages = requests[0].messages();
    assert_eq!(messages[0]["role"], "system", "{messages:#?}");
    let system = message_text(&messages[0]).unwrap_or_default();
    assert!(
        system.contains(&format!("# Context: {configured}\n{rules}")),
        "the system prompt carries the bootstrap file: {system}"
    );
    assert!(
        messages[1..]
            .iter()
            .all(|m| !message_text(m).unwrap_or_default().contains(rules)),
        "only the system message carries it: {messages:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_no_reply_answer_ends_ok_and_shows_nothing() -> anyhow::Result<()> {
    // GIVEN a model that answers exactly NO_REPLY
    let scn = attempt_scenario(|o| o)?;
    let a = scn.a();

    // WHEN a turn runs
    let accepted = a.agent("silent", "att-silent: just listen").await?;
    let wait = a.wait(&accepted.run_id, 60_000).await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN the run ends ok with no payload at all, after one request and no retry
    assert_eq!(wait.run_status, RunStatus::Ok, "{wait:?}");
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert!(
        run.payloads.is_empty(),
        "nothing is shown: {:?}",
        run.payloads
    );
    assert!(run.error.is_none(), "{run:?}");
    assert_eq!(outcomes(&run), ["ok"]);
    assert_eq!(scn.mock.model_requests()?.len(), 1);
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    // AND the silent token never reached the event stream
    assert_eq!(assistant_deltas(&events), "");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_failed_tool_then_silence_ends_with_the_tool_error_reply() -> anyhow::Result<()> {
    // GIVEN a model that fetches a loopback URL (denied by the SSRF guard), then answers
    // nothing, and nothing again after the directed retry
    let scn = attempt_scenario(|o| o)?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "tool-fails", "att-tool-fails: fetch my router page").await?;

    // THEN the guard refused the fetch: an error result in the transcript
    let transcript = a.transcript("tool-fails").await?;
    let results = tool_results(&transcript);
    assert_eq!(results.len(), 1, "{transcript:#?}");
    let (id, name, content, is_error) = &results[0];
    assert_eq!(
        (id.as_str(), name.as_str(), *is_error),
        ("call_local", "http_fetch", true)
    );
    assert!(content.contains("127.0.0.1"), "{content:?}");

    // AND exactly three model requests: the call, the empty answer, the one directed retry
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 3, "{requests:#?}");
    let last = requests[2]
        .messages()
        .last()
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(last["role"], "user");
    assert_eq!(
        message_text(&last).as_deref(),
        Some(EMPTY_RESPONSE_INSTRUCTION)
    );
    assert_eq!(outcomes(&run), ["tool_calls", "ok", "ok"]);

    // AND the user is shown one error payload and no answer text
    assert_eq!(run.payloads.len(), 1, "{run:?}");
    assert!(run.payloads[0].is_error, "{run:?}");
    assert_eq!(run.reply_text(), "");

    // AND the turn ends ok with the tool-error reply (SPEC §3), not a generic failure
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.liveness_state, LivenessState::Working);
    assert_eq!(run.error, None, "{run:?}");
    assert_eq!(
        run.payloads[0].text,
        "⚠️ http_fetch failed and the model gave no reply."
    );
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(
        tool_event(&events, "call_local", "end").data["isError"],
        true
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_secret_in_tool_arguments_never_reaches_the_events() -> anyhow::Result<()> {
    // GIVEN a model that fetches a URL carrying an API key in its query string
    let scn = attempt_scenario(|o| o)?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "secret", "att-secret: get the monday report").await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "That address is not reachable from here.");
    assert_eq!(scn.mock.model_requests()?.len(), 2);

    // THEN the tool start event shows the call with the key redacted
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    let start = tool_event(&events, "call_secret", "start");
    assert_eq!(start.data["name"], "http_fetch");
    assert_eq!(
        start.data["args"],
        json!({"url": "http://127.0.0.1:9/report?api_key=[redacted]&day=monday"})
    );

    // AND the key appears in no event of the run, whatever the stream
    for event in &events {
        let text = serde_json::to_string(event)?;
        assert!(
            !text.contains("SECRET123"),
            "an event leaks the key: {text}"
        );
    }
    assert!(!assistant_deltas(&events).contains("SECRET123"));
    Ok(())
}
