//! The retry loop seen from outside: rate limits, overload, bad credentials, empty and
//! reasoning-only answers, stalled streams, a failing chain, the Anthropic provider and context
//! overflow. Each scenario scripts aimock (`tests/fixtures/retry_loop.json`), counts the model
//! requests the server really sent, and checks the attempt ledger, the retry events and how the
//! run ended.
//!
//! aimock's journal redacts credentials, so which key a request carried is read from the run's
//! attempt ledger (`profile`), and errors are positional (`sequenceIndex`): "the first N requests
//! fail", whatever key they carry.

use crate::support::{LONG, SERVER_BIN, assert_run_frame, assistant_deltas, retry_loop_mock};
use agentlane_core::{Event, EventStream, LivenessState, RunStatus};
use agentlane_tests::{
    Aimock, Client, JournalEntry, MODEL, ModelRequest, RunView, Scenario, Server, ServerOptions,
    message_text, phase,
};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The fallback model of the scenarios that configure one.
const FALLBACK: &str = "openai/gpt-4o";

/// The instruction appended after an answer with nothing visible.
const EMPTY_RESPONSE_INSTRUCTION: &str = "Your previous attempt produced no visible answer. \
     Continue from the current state and reply visibly now; do not restart.";

/// The instruction appended after an answer with reasoning but nothing visible.
const REASONING_ONLY_INSTRUCTION: &str = "Your previous turn recorded reasoning but no visible \
     answer. Continue from where you are and give the visible answer now; do not restate your \
     reasoning or start over.";

/// aimock with the retry-loop fixtures and a server pointed at it, retry waits shrunk 100×.
fn retry_scenario(
    configure: impl FnOnce(ServerOptions, &Aimock) -> ServerOptions,
) -> anyhow::Result<Scenario> {
    let mock = retry_loop_mock()?;
    let options = ServerOptions::new(SERVER_BIN)
        .model_server(&mock)
        .env("AGENTLANE_RETRY_DELAY_SCALE", "0.01");
    let server = Server::start(configure(options, &mock))?;
    Ok(Scenario { server, mock })
}

/// `n` OpenAI credentials: `openai#1` .. `openai#n`.
fn openai_keys(options: ServerOptions, n: usize) -> ServerOptions {
    let keys: Vec<String> = (1..=n).map(|i| format!("test-key-{i}")).collect();
    options
        .env("OPENAI_API_KEY", keys[0].clone())
        .env("OPENAI_API_KEYS", keys.join(","))
}

/// Sends `message` on `session` and waits for the run to end.
async fn run_turn(client: &Client, session: &str, message: &str) -> anyhow::Result<RunView> {
    let accepted = client.agent(session, message).await?;
    Ok(client.wait_done(&accepted.run_id, LONG).await?)
}

/// `(model, profile, outcome)` of every attempt.
fn ledger(run: &RunView) -> Vec<(String, String, String)> {
    run.attempts
        .iter()
        .map(|a| {
            (
                a.model.clone(),
                a.profile.clone().unwrap_or_default(),
                a.outcome.clone(),
            )
        })
        .collect()
}

/// One expected ledger row.
fn row(model: &str, profile: &str, outcome: &str) -> (String, String, String) {
    (model.to_owned(), profile.to_owned(), outcome.to_owned())
}

/// The lifecycle `retry` events of a run.
fn retry_events(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| e.stream == EventStream::Lifecycle && phase(e) == Some("retry"))
        .collect()
}

/// `(action, reason)` of every retry decision.
fn decisions(events: &[Event]) -> Vec<(String, String)> {
    let field = |e: &Event, name: &str| {
        e.data
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    };
    retry_events(events)
        .into_iter()
        .map(|e| (field(e, "action"), field(e, "reason")))
        .collect()
}

/// The `delayMs` of every retry decision.
fn delays(events: &[Event]) -> Vec<u64> {
    retry_events(events)
        .into_iter()
        .map(|e| {
            e.data
                .get("delayMs")
                .and_then(Value::as_u64)
                .unwrap_or(u64::MAX)
        })
        .collect()
}

fn decision(action: &str, reason: &str) -> (String, String) {
    (action.to_owned(), reason.to_owned())
}

/// `checkpoint.retry` of a run (fails the test when absent).
fn retry_state(run: &RunView) -> &Value {
    run.checkpoint
        .as_ref()
        .and_then(|c| c.get("retry"))
        .unwrap_or_else(|| panic!("the run carries checkpoint.retry: {:?}", run.checkpoint))
}

/// A number inside `checkpoint.retry`, by JSON pointer (e.g. `/budgets/emptyResponseRetries`).
fn retry_count(run: &RunView, pointer: &str) -> u64 {
    retry_state(run)
        .pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| {
            panic!(
                "checkpoint.retry{pointer} is a number: {}",
                retry_state(run)
            )
        })
}

/// The HTTP statuses aimock answered, in order.
fn statuses(requests: &[ModelRequest]) -> Vec<u16> {
    requests.iter().map(|r| r.status).collect()
}

/// The `model` field of every request, in order.
fn models(requests: &[ModelRequest]) -> Vec<String> {
    requests
        .iter()
        .map(|r| r.model().unwrap_or("?").to_owned())
        .collect()
}

/// `(role, text)` of the last message of a request.
fn last_message(request: &ModelRequest) -> (String, String) {
    let last = request.messages().last().cloned().unwrap_or(Value::Null);
    let role = last.get("role").and_then(Value::as_str).unwrap_or("?");
    (role.to_owned(), message_text(&last).unwrap_or_default())
}

fn assert_approx_ms(got: &[u64], want: &[u64]) {
    assert_eq!(
        got.len(),
        want.len(),
        "delays {got:?}, expected about {want:?}"
    );
    for (g, w) in got.iter().zip(want) {
        assert!(
            g.abs_diff(*w) <= 1,
            "delays {got:?}, expected about {want:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_short_rate_limit_retries_the_same_credential_after_a_backoff()
-> anyhow::Result<()> {
    // GIVEN a model that answers 429 with Retry-After: 1 once, then answers
    let scn = retry_scenario(|o, _| o)?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "rl-short", "rl-short: hi").await?;

    // THEN it ends ok with the answer after exactly two model requests
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Answered after a short rate-limit wait.");
    let requests = scn.mock.model_requests()?;
    assert_eq!(statuses(&requests), [429, 200], "{requests:?}");

    // AND the ledger shows the rate limit then the answer, on the same credential
    assert_eq!(
        ledger(&run),
        [
            row(MODEL, "openai#1", "rate_limit"),
            row(MODEL, "openai#1", "ok")
        ]
    );
    assert!(
        run.attempts[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("429"))
    );

    // AND one retry decision (same model) waited the scaled 10 s backoff before the second call
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(decisions(&events), [decision("retry", "rate_limit")]);
    assert_approx_ms(&delays(&events), &[100]);
    assert_eq!(
        retry_events(&events)[0]
            .data
            .get("model")
            .and_then(Value::as_str),
        Some(MODEL)
    );
    let gap = run.attempts[1].started_at - run.attempts[0].started_at;
    assert!(gap >= 99, "the second call waited the backoff: {gap} ms");
    assert_eq!(retry_count(&run, "/budgets/sameModelRateLimitRetries"), 1);
    assert_eq!(retry_count(&run, "/profileIndex"), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_rate_limit_past_the_same_model_budget_rotates_to_the_next_key()
-> anyhow::Result<()> {
    // GIVEN two keys and a model whose first four requests answer 429
    let scn = retry_scenario(|o, _| openai_keys(o, 2))?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "rl-rotate", "rl-rotate: hi").await?;

    // THEN three same-key retries, one rotation, and the second key answers: five requests
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Answered on the second credential.");
    let requests = scn.mock.model_requests()?;
    assert_eq!(statuses(&requests), [429, 429, 429, 429, 200]);
    assert_eq!(
        ledger(&run),
        [
            row(MODEL, "openai#1", "rate_limit"),
            row(MODEL, "openai#1", "rate_limit"),
            row(MODEL, "openai#1", "rate_limit"),
            row(MODEL, "openai#1", "rate_limit"),
            row(MODEL, "openai#2", "ok"),
        ]
    );
    assert_eq!(run.model.as_deref(), Some(MODEL));

    // AND the events show the growing backoffs, then the rotation
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(
        decisions(&events),
        [
            decision("retry", "rate_limit"),
            decision("retry", "rate_limit"),
            decision("retry", "rate_limit"),
            decision("rotate_profile", "rate_limit"),
        ]
    );
    assert_approx_ms(&delays(&events), &[100, 200, 300, 0]);
    assert_eq!(retry_count(&run, "/budgets/sameModelRateLimitRetries"), 3);
    assert_eq!(retry_count(&run, "/budgets/rateLimitRotations"), 1);
    assert_eq!(retry_count(&run, "/profileIndex"), 1);
    assert_eq!(retry_count(&run, "/modelIndex"), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_overloaded_model_falls_back_to_the_next_model() -> anyhow::Result<()> {
    // GIVEN one key, a fallback model, and a default model that answers 529 Overloaded
    let scn = retry_scenario(|o, _| o.env("AGENTLANE_FALLBACK_MODELS", FALLBACK))?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "overload", "overload-fallback: hi").await?;

    // THEN the fallback model answers, on the second and last request
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Answered by the fallback model.");
    assert_eq!(run.model.as_deref(), Some(FALLBACK));
    let requests = scn.mock.model_requests()?;
    assert_eq!(statuses(&requests), [529, 200]);
    assert_eq!(models(&requests), ["gpt-4o-mini", "gpt-4o"]);
    assert_eq!(
        ledger(&run),
        [
            row(MODEL, "openai#1", "overloaded"),
            row(FALLBACK, "openai#1", "ok")
        ]
    );

    // AND one fallback decision, taken on the overloaded model
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(decisions(&events), [decision("fallback", "overloaded")]);
    assert_eq!(
        retry_events(&events)[0]
            .data
            .get("model")
            .and_then(Value::as_str),
        Some(MODEL)
    );
    assert_eq!(retry_count(&run, "/modelIndex"), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_rejected_key_rotates_to_the_next_key() -> anyhow::Result<()> {
    // GIVEN two keys and a model whose first request answers 401
    let scn = retry_scenario(|o, _| openai_keys(o, 2))?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "auth-rotate", "auth-rotate: hi").await?;

    // THEN the second key answers, on the second and last request
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Answered with the second key.");
    let requests = scn.mock.model_requests()?;
    assert_eq!(statuses(&requests), [401, 200]);
    assert_eq!(
        ledger(&run),
        [row(MODEL, "openai#1", "auth"), row(MODEL, "openai#2", "ok")]
    );
    // (aimock records that a credential was sent, but redacts which: the ledger says which)
    let journal: Vec<JournalEntry> = scn.mock.journal()?;
    assert!(
        journal
            .iter()
            .filter(|e| e.path.ends_with("/chat/completions"))
            .all(|e| e.headers.contains_key("authorization")),
        "every model request carries a credential"
    );

    // AND one rotation, without waiting
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(decisions(&events), [decision("rotate_profile", "auth")]);
    assert_approx_ms(&delays(&events), &[0]);
    assert_eq!(retry_count(&run, "/profileIndex"), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_empty_answer_gets_one_directed_retry() -> anyhow::Result<()> {
    // GIVEN a model that first answers nothing at all
    let scn = retry_scenario(|o, _| o)?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "empty", "empty-reply: hi").await?;

    // THEN the run asks once more, telling the model to reply visibly, and gets the answer
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Here is a visible answer at last.");
    let requests = scn.mock.model_requests()?;
    assert_eq!(statuses(&requests), [200, 200]);
    assert_eq!(
        last_message(&requests[0]),
        ("user".to_owned(), "empty-reply: hi".to_owned())
    );
    assert_eq!(
        last_message(&requests[1]),
        ("user".to_owned(), EMPTY_RESPONSE_INSTRUCTION.to_owned())
    );
    // (the empty answer itself is not replayed to the model)
    let roles: Vec<String> = requests[1]
        .roles_and_texts()
        .into_iter()
        .map(|(role, _)| role)
        .filter(|role| role != "system")
        .collect();
    assert_eq!(
        roles,
        ["user", "user"],
        "{:?}",
        requests[1].roles_and_texts()
    );
    assert_eq!(
        ledger(&run),
        [row(MODEL, "openai#1", "ok"), row(MODEL, "openai#1", "ok")]
    );

    // AND one directed retry is visible in the events
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(
        decisions(&events),
        [decision("directed_retry", "empty_response")]
    );
    assert_eq!(
        assistant_deltas(&events),
        "Here is a visible answer at last."
    );
    assert_eq!(retry_count(&run, "/budgets/emptyResponseRetries"), 1);

    // AND the instruction never reaches the transcript
    let transcript = a.transcript("empty").await?;
    assert_eq!(transcript.roles(), ["user", "assistant"]);
    assert_eq!(transcript.user_texts(), ["empty-reply: hi"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_reasoning_only_answer_gets_a_directed_retry() -> anyhow::Result<()> {
    // GIVEN a model that first only reasons, showing no visible text
    let scn = retry_scenario(|o, _| o)?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "reasoning", "reasoning-only: what is 6 times 7?").await?;

    // THEN the run asks for the visible answer with the reasoning-only instruction, and gets it
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "The answer is 42.");
    let requests = scn.mock.model_requests()?;
    assert_eq!(statuses(&requests), [200, 200]);
    assert_eq!(
        last_message(&requests[1]),
        ("user".to_owned(), REASONING_ONLY_INSTRUCTION.to_owned())
    );
    assert_eq!(
        ledger(&run),
        [row(MODEL, "openai#1", "ok"), row(MODEL, "openai#1", "ok")]
    );

    // AND the retry is a reasoning-only directed retry; the reasoning never shows as text
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(
        decisions(&events),
        [decision("directed_retry", "reasoning_only")]
    );
    assert_eq!(assistant_deltas(&events), "The answer is 42.");
    assert_eq!(retry_count(&run, "/budgets/reasoningOnlyRetries"), 1);
    assert_eq!(retry_count(&run, "/budgets/emptyResponseRetries"), 0);

    // AND the instruction never reaches the transcript; the user said one thing
    let transcript = a.transcript("reasoning").await?;
    assert_eq!(
        transcript.user_texts(),
        ["reasoning-only: what is 6 times 7?"]
    );
    assert!(
        transcript
            .entries
            .iter()
            .all(|e| !format!("{:?}", e.message).contains("recorded reasoning but no visible")),
        "{transcript:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_repeated_stream_stalls_trip_the_idle_timeout_breaker_at_five()
-> anyhow::Result<()> {
    // GIVEN three keys, a fallback model (six candidates in all), and a model that sends its
    // first chunk (the role, no visible text) and then stalls far past the idle timeout
    let scn = retry_scenario(|o, _| {
        openai_keys(o, 3)
            .env("AGENTLANE_FALLBACK_MODELS", FALLBACK)
            .env("AGENTLANE_MODEL_IDLE_TIMEOUT_MS", "500")
    })?;
    let a = scn.a();

    // WHEN a turn runs
    let started = Instant::now();
    let run = run_turn(&a, "stall", "stall-forever: hi").await?;

    // THEN the breaker halts it after exactly five stalled requests, not six
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(run.liveness_state, LivenessState::Blocked);
    let error = run.error.clone().expect("a failed run says why");
    assert_eq!(error.code, "idle_timeout_breaker", "{error:?}");
    assert!(error.message.contains("5 consecutive"), "{error:?}");
    let requests = scn.mock.model_requests()?;
    assert_eq!(
        models(&requests),
        [
            "gpt-4o-mini",
            "gpt-4o-mini",
            "gpt-4o-mini",
            "gpt-4o",
            "gpt-4o"
        ]
    );
    assert_eq!(
        ledger(&run),
        [
            row(MODEL, "openai#1", "timeout"),
            row(MODEL, "openai#2", "timeout"),
            row(MODEL, "openai#3", "timeout"),
            row(FALLBACK, "openai#1", "timeout"),
            row(FALLBACK, "openai#2", "timeout"),
        ]
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // AND the stalls produced no visible text (which would have reset the breaker)
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "error");
    assert_eq!(assistant_deltas(&events), "");
    assert_eq!(run.reply_text(), "");

    // AND each stall rotated the key, the last key of the model fell back
    assert_eq!(
        decisions(&events),
        [
            decision("rotate_profile", "timeout"),
            decision("rotate_profile", "timeout"),
            decision("fallback", "timeout"),
            decision("rotate_profile", "timeout"),
        ]
    );
    assert_eq!(retry_count(&run, "/breaker/consecutive"), 5);
    assert_eq!(retry_count(&run, "/modelIndex"), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_every_model_of_the_chain_rejecting_the_key_blocks_the_run() -> anyhow::Result<()>
{
    // GIVEN one key, a fallback model, and both models answering 401
    let scn = retry_scenario(|o, _| o.env("AGENTLANE_FALLBACK_MODELS", FALLBACK))?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "auth-all", "auth-everywhere: hi").await?;

    // THEN it tries each model once, then ends blocked with the credential error
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(run.liveness_state, LivenessState::Blocked);
    let error = run.error.clone().expect("a failed run says why");
    assert_eq!(error.code, "auth", "{error:?}");
    assert!(error.message.contains("credentials"), "{error:?}");
    assert!(error.message.contains("401"), "{error:?}");
    let requests = scn.mock.model_requests()?;
    assert_eq!(statuses(&requests), [401, 401]);
    assert_eq!(models(&requests), ["gpt-4o-mini", "gpt-4o"]);
    assert_eq!(
        ledger(&run),
        [
            row(MODEL, "openai#1", "auth"),
            row(FALLBACK, "openai#1", "auth")
        ]
    );
    assert_eq!(
        run.reply_text(),
        "",
        "no answer is shown: {:?}",
        run.payloads
    );

    // AND the one decision in between was the fallback
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "error");
    assert_eq!(decisions(&events), [decision("fallback", "auth")]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_anthropic_provider_answers_a_text_turn() -> anyhow::Result<()> {
    // GIVEN a server that also knows the Anthropic provider (aimock serves /v1/messages)
    let scn = retry_scenario(|o, mock| {
        o.env("ANTHROPIC_BASE_URL", mock.url())
            .env("ANTHROPIC_API_KEY", "x")
            // Only the default and fallback models may be asked for unless listed.
            .env(
                "AGENTLANE_ALLOWED_MODELS",
                "openai/gpt-4o-mini,anthropic/claude-test",
            )
    })?;
    let a = scn.a();

    // WHEN a turn asks for an Anthropic model
    let accepted = a
        .agent_with(serde_json::json!({
            "sessionKey": "claude",
            "message": "anthropic-hello: hi",
            "model": "anthropic/claude-test",
        }))
        .await?;
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN the Messages API answered, once
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Hello from the Messages API.");
    assert_eq!(run.model.as_deref(), Some("anthropic/claude-test"));
    assert_eq!(
        ledger(&run),
        [row("anthropic/claude-test", "anthropic#1", "ok")]
    );
    let journal = scn.mock.journal()?;
    let messages: Vec<&JournalEntry> = journal
        .iter()
        .filter(|e| e.method == "POST" && e.path == "/v1/messages")
        .collect();
    assert_eq!(messages.len(), 1, "{journal:?}");
    assert_eq!(messages[0].response.status, 200);
    assert_eq!(
        messages[0].body.get("model").and_then(Value::as_str),
        Some("claude-test")
    );
    assert_eq!(scn.mock.model_requests()?.len(), 0, "no OpenAI request");

    // AND the reply streamed as assistant deltas, with no retry
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(assistant_deltas(&events), "Hello from the Messages API.");
    assert!(decisions(&events).is_empty(), "{events:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_context_overflow_on_a_first_turn_ends_the_run_after_one_request()
-> anyhow::Result<()> {
    // GIVEN two keys and a fallback model — neither helps a prompt that is too large — and a
    // model that answers 400 context_length_exceeded, on a new session (no earlier history
    // that a compaction could summarise: compaction is not exercised here)
    let scn = retry_scenario(|o, _| openai_keys(o, 2).env("AGENTLANE_FALLBACK_MODELS", FALLBACK))?;
    let a = scn.a();

    // WHEN a turn runs
    let run = run_turn(&a, "overflow", "context-too-big: hi").await?;

    // THEN it ends at once, blocked, after one request: no retry, no rotation, no fallback,
    // no compaction
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(run.liveness_state, LivenessState::Blocked);
    let error = run.error.clone().expect("a failed run says why");
    assert_eq!(error.code, "context_overflow", "{error:?}");
    assert!(
        error.message.contains("no compaction was tried")
            && !error.message.contains("even after compaction"),
        "the error says what was tried: {error:?}"
    );
    let requests = scn.mock.model_requests()?;
    assert_eq!(statuses(&requests), [400]);
    assert_eq!(ledger(&run), [row(MODEL, "openai#1", "context_overflow")]);
    let events = a.events(&run.run_id).await?;
    assert_run_frame(&events, "error");
    assert!(decisions(&events).is_empty(), "{:?}", decisions(&events));
    Ok(())
}

/// A model server (both protocols) whose answer opens, then sends only a keep-alive (an SSE
/// comment for OpenAI, a `ping` event for Anthropic) every 500 ms for 3 s, then the text and the
/// end: slow, but never silent for long. Returns its base URL.
async fn slow_but_alive_server() -> anyhow::Result<String> {
    use axum::body::Body;
    use futures::StreamExt;
    use serde_json::json;
    fn body(anthropic: bool) -> Body {
        let opening = if anthropic {
            let start = json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 3, "output_tokens": 0}}});
            format!("event: message_start\ndata: {start}\n\n")
        } else {
            let first = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]});
            format!("data: {first}\n\n")
        };
        let keep_alive = if anthropic {
            "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_owned()
        } else {
            ": keep-alive\n\n".to_owned()
        };
        let ending = if anthropic {
            [
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Worth the wait."}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
                json!({"type": "message_stop"}),
            ]
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
            .collect::<String>()
        } else {
            let text = json!({"choices": [{"index": 0, "delta": {"content": "Worth the wait."}, "finish_reason": null}]});
            let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
            format!("data: {text}\n\ndata: {end}\n\ndata: [DONE]\n\n")
        };
        let mut parts = vec![(Duration::ZERO, opening)];
        parts.extend((0..6).map(|_| (Duration::from_millis(500), keep_alive.clone())));
        parts.push((Duration::from_millis(200), ending));
        let chunks = futures::stream::iter(parts).then(|(pause, chunk)| async move {
            tokio::time::sleep(pause).await;
            Ok::<_, std::convert::Infallible>(chunk)
        });
        Body::from_stream(chunks)
    }
    let route = |anthropic: bool| {
        axum::routing::post(move || async move {
            ([("content-type", "text/event-stream")], body(anthropic))
        })
    };
    let app = axum::Router::new()
        .route("/v1/chat/completions", route(false))
        .route("/v1/messages", route(true));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_a_slow_but_alive_stream_outlasts_a_tight_idle_limit_without_retries()
-> anyhow::Result<()> {
    // GIVEN a 1.5 s model idle limit, and a model that sends only keep-alives (every 500 ms)
    // for 3 s before its text and finish, on both protocols
    let url = slow_but_alive_server().await?;
    let claude = "anthropic/claude-test";
    let mock = Aimock::start(agentlane_tests::Fixtures::scenarios())?;
    let server = Server::start(
        ServerOptions::new(SERVER_BIN)
            .model_server(&mock)
            .env("OPENAI_BASE_URL", format!("{url}/v1"))
            .env("ANTHROPIC_BASE_URL", &url)
            .env("ANTHROPIC_API_KEY", "x")
            .env("AGENTLANE_ALLOWED_MODELS", format!("{MODEL},{claude}"))
            .env("AGENTLANE_MODEL_IDLE_TIMEOUT_MS", "1500"),
    )?;
    let scn = Scenario { server, mock };
    let a = scn.a();

    for model in [MODEL, claude] {
        // WHEN a turn runs
        let started = Instant::now();
        let accepted = a
            .agent_with(serde_json::json!({"sessionKey": format!("slow-{model}"), "message": "hi", "model": model}))
            .await?;
        let run = a.wait_done(&accepted.run_id, LONG).await?;

        // THEN it ends ok on its first attempt: the keep-alives kept the watchdog quiet
        assert_eq!(run.status, RunStatus::Ok, "{model}: {run:?}");
        let ledger: Vec<(&str, &str)> = run
            .attempts
            .iter()
            .map(|at| (at.model.as_str(), at.outcome.as_str()))
            .collect();
        assert_eq!(ledger, [(model, "ok")], "{model}: no retry");
        assert_eq!(run.reply_text(), "Worth the wait.");
        assert!(
            started.elapsed() >= Duration::from_secs(3),
            "the answer took longer than the idle limit twice over"
        );
    }
    Ok(())
}

/// `(model, outcome)` of every attempt.
fn outcomes(run: &RunView) -> Vec<(String, String)> {
    run.attempts
        .iter()
        .map(|a| (a.model.clone(), a.outcome.clone()))
        .collect()
}

/// The text of the last message of every model request `mock` received on `path` whose last
/// message contains `marker`, in order.
fn last_texts(mock: &Aimock, path: &str, marker: &str) -> anyhow::Result<Vec<String>> {
    Ok(mock
        .journal()?
        .iter()
        .filter(|e| e.method == "POST" && e.path == path)
        .filter_map(|e| {
            let last = e.body.get("messages")?.as_array()?.last()?.clone();
            message_text(&last)
        })
        .filter(|text| text.contains(marker))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_loop_a_response_without_an_assistant_message_is_resent_once() -> anyhow::Result<()> {
    let claude = "anthropic/claude-test";
    for (model, path) in [(MODEL, "/v1/chat/completions"), (claude, "/v1/messages")] {
        // GIVEN a model whose first response finishes with no assistant message at all (no
        // text part, no reasoning, no tool call), on both protocols
        let scn = retry_scenario(|o, mock| {
            o.env("ANTHROPIC_BASE_URL", mock.url())
                .env("ANTHROPIC_API_KEY", "x")
                .env("AGENTLANE_ALLOWED_MODELS", format!("{MODEL},{claude}"))
        })?;
        let a = scn.a();
        let turn = |session: &str, message: &str| serde_json::json!({"sessionKey": session, "message": message, "model": model});

        // WHEN a turn runs
        let accepted = a
            .agent_with(turn("missing", "no-assistant-once: hi"))
            .await?;
        let run = a.wait_done(&accepted.run_id, LONG).await?;

        // THEN the same request is sent once more, with no instruction, and answers
        assert_eq!(run.status, RunStatus::Ok, "{model}: {run:?}");
        assert_eq!(run.reply_text(), "Answered after a resend.", "{model}");
        assert_eq!(
            last_texts(&scn.mock, path, "no-assistant")?,
            ["no-assistant-once: hi", "no-assistant-once: hi"],
            "{model}: the resend carries the user's message, not a directed instruction"
        );

        // AND the ledger records the missing assistant, then the answer
        let want = |outcome: &str| (model.to_owned(), outcome.to_owned());
        assert_eq!(
            outcomes(&run),
            [want("missing_assistant"), want("ok")],
            "{model}"
        );
        let events = a.events(&run.run_id).await?;
        assert_run_frame(&events, "ok");
        assert_eq!(
            decisions(&events),
            [decision("retry", "missing_assistant")],
            "{model}"
        );
        assert_eq!(retry_count(&run, "/budgets/missingAssistantRetries"), 1);
        assert_eq!(retry_count(&run, "/budgets/emptyResponseRetries"), 0);
        let transcript = a.transcript("missing").await?;
        assert_eq!(transcript.roles(), ["user", "assistant"], "{model}");

        // WHEN the model never gives an assistant message
        let accepted = a.agent_with(turn("never", "no-assistant-ever: hi")).await?;
        let run = a.wait_done(&accepted.run_id, LONG).await?;

        // THEN the budget of one resend is spent and the run ends incomplete after two requests
        assert_eq!(run.status, RunStatus::Error, "{model}: {run:?}");
        let error = run.error.clone().expect("a failed run says why");
        assert_eq!(error.code, "incomplete_turn", "{model}: {error:?}");
        assert_eq!(
            outcomes(&run),
            [want("missing_assistant"), want("missing_assistant")],
            "{model}"
        );
        assert_eq!(
            last_texts(&scn.mock, path, "no-assistant-ever")?.len(),
            2,
            "{model}"
        );
    }
    Ok(())
}
