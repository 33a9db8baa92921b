//! A model stream that ends early is a failed attempt, never an answer (issue 12 §4): aimock
//! cuts the socket after a few chunks (`truncateAfterChunks`, with `latency` so the chunks are
//! flushed first), before OpenAI's `finish_reason`/`[DONE]` or Anthropic's `message_stop`; a
//! small SSE server of this file sends a chunk whose JSON stops halfway. The run retries (cut
//! before any visible text), fails over (cut after some), or ends `error` with a clear message
//! — and the cut text is never persisted as the answer.
//!
//! A transport failure (a cut stream, a chunk that does not parse) gets two same-model retries
//! with backoff, whether or not text had arrived (issue 23 §2); past them the chain goes on.

use crate::support::{LONG, SERVER_BIN, assert_run_frame};
use agentlane_core::{Message, RunStatus};
use agentlane_tests::{
    Aimock, Fixtures, MODEL, RunView, Scenario, Server, ServerOptions, TranscriptView,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The fallback model of the scenarios that configure one.
const FALLBACK: &str = "openai/gpt-4o";
/// What a complete answer says.
const FULL: &str = "The whole answer, from its first word to its last.";
/// What a cut answer would have said.
const CUT: &str = "This answer is cut off after a few words and never finishes.";

/// A fixture answering `message`: `extra` (e.g. truncation) merged into the fixture.
fn fixture(matcher: Value, content: &str, extra: Value) -> Value {
    let mut fixture =
        json!({"match": matcher, "response": {"content": content}, "chunkSize": 8, "latency": 20});
    if let (Some(object), Some(extra)) = (fixture.as_object_mut(), extra.as_object()) {
        for (key, value) in extra {
            object.insert(key.clone(), value.clone());
        }
    }
    fixture
}

/// The shared fixtures plus `fixtures`, and a server pointed at them (retry waits shrunk).
fn scenario(
    fixtures: Vec<Value>,
    configure: impl FnOnce(ServerOptions, &Aimock) -> ServerOptions,
) -> anyhow::Result<Scenario> {
    let mock = Aimock::start(Fixtures::scenarios())?;
    mock.add_fixtures(fixtures)?;
    let options = ServerOptions::new(SERVER_BIN)
        .model_server(&mock)
        .env("AGENTLANE_RETRY_DELAY_SCALE", "0.01");
    let server = Server::start(configure(options, &mock))?;
    Ok(Scenario { server, mock })
}

/// The Anthropic model these scenarios ask for.
const CLAUDE: &str = "anthropic/claude-test";

/// Lets tenants ask for [`CLAUDE`] besides the default model: only the configured default
/// and fallbacks are allowed otherwise (issue 12 §3).
fn allow_claude(options: ServerOptions) -> ServerOptions {
    options.env("AGENTLANE_ALLOWED_MODELS", format!("{MODEL},{CLAUDE}"))
}

fn with_anthropic(options: ServerOptions, mock: &Aimock) -> ServerOptions {
    allow_claude(options)
        .env("ANTHROPIC_BASE_URL", mock.url())
        .env("ANTHROPIC_API_KEY", "x")
}

/// `(model, outcome)` of every attempt.
fn ledger(run: &RunView) -> Vec<(String, String)> {
    run.attempts
        .iter()
        .map(|a| (a.model.clone(), a.outcome.clone()))
        .collect()
}

/// The visible texts of the transcript's assistant entries.
fn assistant_texts(transcript: &TranscriptView) -> Vec<String> {
    transcript
        .entries
        .iter()
        .filter_map(|e| match &e.message {
            Message::Assistant { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

/// Nothing of the cut answer is the run's answer: not its payloads, not the transcript.
fn assert_cut_text_not_kept(run: &RunView, transcript: &TranscriptView) {
    let first_words = &CUT[..16];
    assert!(
        !run.reply_text().contains(first_words),
        "the cut text became the reply: {run:?}"
    );
    for text in assistant_texts(transcript) {
        assert!(
            !text.contains(first_words),
            "the cut text was persisted: {transcript:?}"
        );
    }
}

async fn turn(scn: &Scenario, session: &str, message: &str, model: Option<&str>) -> RunView {
    let mut body = json!({"sessionKey": session, "message": message});
    if let Some(model) = model {
        body["model"] = json!(model);
    }
    let a = scn.a();
    let accepted = a.agent_with(body).await.unwrap();
    a.wait_done(&accepted.run_id, LONG).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_end_openai_cut_before_any_text_is_retried_and_the_retry_answers()
-> anyhow::Result<()> {
    // GIVEN a model whose first answer is cut after its first (empty) chunk, then answers whole
    let scn = scenario(
        vec![
            fixture(
                json!({"userMessage": "cut-early", "sequenceIndex": 0}),
                CUT,
                json!({"truncateAfterChunks": 1}),
            ),
            fixture(json!({"userMessage": "cut-early"}), FULL, json!({})),
        ],
        |o, _| o,
    )?;

    // WHEN a turn runs
    let run = turn(&scn, "early", "cut-early please", None).await;

    // THEN the cut attempt failed as a network error, the retry answered, the run is ok
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(
        ledger(&run),
        [
            (MODEL.into(), "network".into()),
            (MODEL.into(), "ok".into())
        ]
    );
    assert_eq!(run.reply_text(), FULL);
    assert_eq!(scn.mock.model_requests_for("cut-early")?.len(), 2);
    // AND the transcript holds the one whole answer
    let transcript = scn.a().transcript("early").await?;
    assert_eq!(assistant_texts(&transcript), [FULL]);
    assert_run_frame(&scn.a().events(&run.run_id).await?, "ok");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_end_openai_cut_after_some_text_fails_over_to_the_fallback_after_two_retries()
-> anyhow::Result<()> {
    // GIVEN the default model always cuts its answer after a few words, the fallback answers
    let scn = scenario(
        vec![
            fixture(
                json!({"userMessage": "cut-late", "model": "gpt-4o-mini"}),
                CUT,
                json!({"truncateAfterChunks": 4}),
            ),
            fixture(
                json!({"userMessage": "cut-late", "model": "gpt-4o"}),
                FULL,
                json!({}),
            ),
        ],
        |o, _| o.env("AGENTLANE_FALLBACK_MODELS", FALLBACK),
    )?;

    // WHEN a turn runs
    let run = turn(&scn, "late", "cut-late please", None).await;

    // THEN the default model was tried three times (two same-model retries of the transport
    // failure), then the fallback answered; the cut answer is neither the reply nor in the
    // transcript
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.model.as_deref(), Some(FALLBACK));
    assert_eq!(run.reply_text(), FULL);
    assert_eq!(
        ledger(&run),
        [
            (MODEL.into(), "network".into()),
            (MODEL.into(), "network".into()),
            (MODEL.into(), "network".into()),
            (FALLBACK.into(), "ok".into())
        ]
    );
    let transcript = scn.a().transcript("late").await?;
    assert_eq!(assistant_texts(&transcript), [FULL]);
    assert_cut_text_not_kept(&run, &transcript);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_end_openai_cut_with_nowhere_to_go_ends_in_a_clear_error() -> anyhow::Result<()> {
    // GIVEN a model that always cuts its answer after a few words, and no fallback
    let scn = scenario(
        vec![fixture(
            json!({"userMessage": "cut-always"}),
            CUT,
            json!({"truncateAfterChunks": 4}),
        )],
        |o, _| o,
    )?;

    // WHEN a turn runs
    let run = turn(&scn, "doomed", "cut-always please", None).await;

    // THEN after the two same-model retries it ends `error`, saying the model's answer broke
    // off; nothing of it is kept
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(run.attempts.len(), 3, "{run:?}");
    let error = run.error.clone().expect("an error says why");
    assert_eq!(error.code, "network", "{error:?}");
    assert!(error.message.contains("LLM request failed"), "{error:?}");
    let transcript = scn.a().transcript("doomed").await?;
    assert_eq!(transcript.user_texts(), ["cut-always please"]);
    assert!(assistant_texts(&transcript).is_empty(), "{transcript:?}");
    assert_cut_text_not_kept(&run, &transcript);
    assert_run_frame(&scn.a().events(&run.run_id).await?, "error");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_end_anthropic_cut_before_message_stop_is_retried_and_the_retry_answers()
-> anyhow::Result<()> {
    // GIVEN the Messages API cuts its first answer after `message_start` and the block start
    let scn = scenario(
        vec![
            fixture(
                json!({"userMessage": "claude-cut-early", "sequenceIndex": 0}),
                CUT,
                json!({"truncateAfterChunks": 2}),
            ),
            fixture(json!({"userMessage": "claude-cut-early"}), FULL, json!({})),
        ],
        with_anthropic,
    )?;

    // WHEN a turn asks for an Anthropic model
    let run = turn(
        &scn,
        "claude-early",
        "claude-cut-early please",
        Some(CLAUDE),
    )
    .await;

    // THEN the cut stream was a failed attempt and the retry answered
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(
        ledger(&run),
        [
            (CLAUDE.into(), "network".into()),
            (CLAUDE.into(), "ok".into())
        ]
    );
    assert_eq!(run.reply_text(), FULL);
    let transcript = scn.a().transcript("claude-early").await?;
    assert_eq!(assistant_texts(&transcript), [FULL]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_end_anthropic_cut_after_some_text_is_never_the_answer() -> anyhow::Result<()> {
    // GIVEN the Messages API always cuts its answer after a few text deltas
    let scn = scenario(
        vec![fixture(
            json!({"userMessage": "claude-cut-always"}),
            CUT,
            json!({"truncateAfterChunks": 5}),
        )],
        with_anthropic,
    )?;

    // WHEN a turn asks for an Anthropic model
    let run = turn(
        &scn,
        "claude-doomed",
        "claude-cut-always please",
        Some(CLAUDE),
    )
    .await;

    // THEN the run ends `error` and the cut text is kept nowhere
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(run.error.as_ref().map(|e| e.code.as_str()), Some("network"));
    let transcript = scn.a().transcript("claude-doomed").await?;
    assert!(assistant_texts(&transcript).is_empty(), "{transcript:?}");
    assert_cut_text_not_kept(&run, &transcript);
    Ok(())
}

/// One OpenAI chat-completions SSE event.
fn openai_event(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {chunk}\n\n")
}

/// A whole OpenAI answer saying `text`.
fn openai_whole(text: &str) -> String {
    format!(
        "{}{}{}data: [DONE]\n\n",
        openai_event(json!({"role": "assistant", "content": ""}), None),
        openai_event(json!({"content": text}), None),
        openai_event(json!({}), Some("stop")),
    )
}

/// One Anthropic Messages SSE event.
fn anthropic_event(value: Value) -> String {
    let name = value["type"].as_str().unwrap_or_default().to_owned();
    format!("event: {name}\ndata: {value}\n\n")
}

/// An Anthropic answer saying `text`, up to and including `message_delta`; `message_stop`
/// only when `complete`.
fn anthropic_answer(text: &str, complete: bool) -> String {
    let mut body = [
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 3, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
    ]
    .into_iter()
    .map(anthropic_event)
    .collect::<String>();
    if complete {
        body.push_str(&anthropic_event(json!({"type": "message_stop"})));
    }
    body
}

/// A model server (OpenAI and Anthropic paths) answering the `n`th request with
/// `answer(path, n)` as a complete HTTP body, then closing cleanly: what a proxy that drops
/// the end of a stream looks like. Returns its base URL and the request count.
async fn scripted_server(
    answer: fn(&str, usize) -> String,
) -> anyhow::Result<(String, Arc<AtomicUsize>)> {
    use axum::response::IntoResponse;
    let calls = Arc::new(AtomicUsize::new(0));
    let route = |path: &'static str, counter: Arc<AtomicUsize>| {
        axum::routing::post(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move { ([("content-type", "text/event-stream")], answer(path, n)).into_response() }
        })
    };
    let app = axum::Router::new()
        .route("/v1/chat/completions", route("openai", calls.clone()))
        .route("/v1/messages", route("anthropic", calls.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, calls))
}

/// A scenario whose OpenAI and Anthropic providers both point at `url`.
fn scripted_scenario(
    url: &str,
    configure: impl FnOnce(ServerOptions) -> ServerOptions,
) -> anyhow::Result<Scenario> {
    let mock = Aimock::start(Fixtures::scenarios())?;
    let server = Server::start(configure(
        ServerOptions::new(SERVER_BIN)
            .model_server(&mock)
            .env("OPENAI_BASE_URL", format!("{url}/v1"))
            .env("ANTHROPIC_BASE_URL", url)
            .env("ANTHROPIC_API_KEY", "x")
            .env("AGENTLANE_RETRY_DELAY_SCALE", "0.01"),
    ))?;
    Ok(Scenario { server, mock })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_end_openai_stream_closed_cleanly_without_finish_or_done_is_not_an_answer()
-> anyhow::Result<()> {
    // GIVEN a server whose first three answers send some text and end the body cleanly, with no
    // finish_reason and no [DONE]; the fallback model's answer is whole
    let (url, calls) = scripted_server(|_, n| {
        if n < 3 {
            format!(
                "{}{}",
                openai_event(json!({"role": "assistant", "content": ""}), None),
                openai_event(json!({"content": CUT}), None)
            )
        } else {
            openai_whole(FULL)
        }
    })
    .await?;
    let scn = scripted_scenario(&url, |o| o.env("AGENTLANE_FALLBACK_MODELS", FALLBACK))?;

    // WHEN a turn runs
    let run = turn(&scn, "clean-cut", "hello there", None).await;

    // THEN each cut answer was a failed attempt (two same-model retries), and the fallback's
    // whole answer is the reply
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(
        ledger(&run),
        [
            (MODEL.into(), "network".into()),
            (MODEL.into(), "network".into()),
            (MODEL.into(), "network".into()),
            (FALLBACK.into(), "ok".into())
        ]
    );
    assert_eq!(run.reply_text(), FULL);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let transcript = scn.a().transcript("clean-cut").await?;
    assert_eq!(assistant_texts(&transcript), [FULL]);
    assert_cut_text_not_kept(&run, &transcript);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_end_anthropic_stream_closed_cleanly_without_message_stop_is_not_an_answer()
-> anyhow::Result<()> {
    // GIVEN a Messages server that never sends `message_stop` (the body ends cleanly after
    // `message_delta`), and no fallback
    let (url, calls) = scripted_server(|_, _| anthropic_answer(CUT, false)).await?;
    let scn = scripted_scenario(&url, allow_claude)?;

    // WHEN a turn asks for an Anthropic model
    let run = turn(&scn, "no-stop", "hello there", Some(CLAUDE)).await;

    // THEN the run ends `error` (the answer broke off) after the two same-model retries of the
    // transport failure, and the text is not kept
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(run.error.as_ref().map(|e| e.code.as_str()), Some("network"));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "one attempt and two same-model retries"
    );
    let transcript = scn.a().transcript("no-stop").await?;
    assert!(assistant_texts(&transcript).is_empty(), "{transcript:?}");
    assert_cut_text_not_kept(&run, &transcript);

    // AND the same server's complete answer (with message_stop) is accepted
    let (url, _) = scripted_server(|_, _| anthropic_answer(FULL, true)).await?;
    let whole = scripted_scenario(&url, allow_claude)?;
    let run = turn(&whole, "stop", "hello there", Some(CLAUDE)).await;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), FULL);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_end_a_chunk_that_stops_parsing_halfway_is_a_failed_attempt() -> anyhow::Result<()> {
    // GIVEN a model server whose first answer breaks off inside a chunk's JSON
    let (url, calls) = scripted_server(|_, n| {
        if n == 0 {
            format!(
                "{}data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"This ans\n\n",
                openai_event(json!({"role": "assistant", "content": ""}), None)
            )
        } else {
            openai_whole(FULL)
        }
    })
    .await?;
    let scn = scripted_scenario(&url, |o| o)?;

    // WHEN a turn runs
    let run = turn(&scn, "garbled", "hello there", None).await;

    // THEN the broken answer was a failed attempt, the retry answered whole
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(
        ledger(&run),
        [
            (MODEL.into(), "network".into()),
            (MODEL.into(), "ok".into())
        ]
    );
    assert!(
        run.attempts[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("malformed")),
        "{run:?}"
    );
    assert_eq!(run.reply_text(), FULL);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let transcript = scn.a().transcript("garbled").await?;
    assert_eq!(assistant_texts(&transcript), [FULL]);
    Ok(())
}

/// A broken first answer of kind `fault` (`cut`: text then a clean close with no end marker;
/// `garbled`: text then a chunk whose JSON stops halfway), for the OpenAI or the Anthropic path.
fn broken_answer(path: &str, fault: usize) -> String {
    let openai_start = || {
        format!(
            "{}{}",
            openai_event(json!({"role": "assistant", "content": ""}), None),
            openai_event(json!({"content": "This answer "}), None)
        )
    };
    let anthropic_start = || {
        [
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 3, "output_tokens": 0}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "This answer "}}),
        ]
        .into_iter()
        .map(anthropic_event)
        .collect::<String>()
    };
    match (path, fault) {
        ("openai", 0) => openai_start(),
        ("openai", _) => format!(
            "{}data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"is cu\n\n",
            openai_start()
        ),
        (_, 0) => anthropic_start(),
        _ => format!(
            "{}event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_d\n\n",
            anthropic_start()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_end_a_cut_or_garbled_answer_after_text_ends_ok_on_the_same_model_retry()
-> anyhow::Result<()> {
    // GIVEN a model server (both protocols) whose every other answer breaks after some text:
    // requests 0, 2, 4, 6 are cut (clean close, no end marker) or garbled (a chunk that does not
    // parse), alternately; the others are whole
    let (url, calls) = scripted_server(|path, n| {
        if n % 2 == 1 {
            return if path == "openai" {
                openai_whole(FULL)
            } else {
                anthropic_answer(FULL, true)
            };
        }
        broken_answer(path, (n / 2) % 2)
    })
    .await?;
    let scn = scripted_scenario(&url, allow_claude)?;

    // WHEN four turns run, one per (provider, fault), one after the other
    let cases = [
        (None, MODEL, "cut"),
        (None, MODEL, "garbled"),
        (Some(CLAUDE), CLAUDE, "cut"),
        (Some(CLAUDE), CLAUDE, "garbled"),
    ];
    for (i, (asked, model, fault)) in cases.into_iter().enumerate() {
        let session = format!("transport-{i}");
        let run = turn(&scn, &session, "hello there", asked).await;

        // THEN the broken attempt failed as `network` with a clear message and the same model's
        // retry answered: the run is ok with the whole answer only
        assert_eq!(run.status, RunStatus::Ok, "{model} {fault}: {run:?}");
        assert_eq!(
            ledger(&run),
            [
                (model.into(), "network".into()),
                (model.into(), "ok".into())
            ],
            "{model} {fault}"
        );
        let said = run.attempts[0].error.clone().unwrap_or_default();
        let expected = if fault == "cut" {
            "ended before"
        } else {
            "malformed"
        };
        assert!(said.contains(expected), "{model} {fault}: {said}");
        assert_eq!(run.reply_text(), FULL, "{model} {fault}");
        let transcript = scn.a().transcript(&session).await?;
        assert_eq!(assistant_texts(&transcript), [FULL], "{model} {fault}");
        assert_eq!(calls.load(Ordering::SeqCst), 2 * (i + 1));
    }
    Ok(())
}
