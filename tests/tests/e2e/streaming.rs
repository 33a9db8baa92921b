//! SSE through the streaming ingress Lambda (Function URL, `InvokeMode: RESPONSE_STREAM`): the
//! real ingress binary in streaming mode, polling a fake Lambda Runtime API, reading the same
//! DynamoDB table (the emulator) the server's runner writes. These scenarios always run on the
//! emulator: a streaming ingress only exists on AWS.

use crate::support::{LONG, SLOW_REPLY, assert_dense, scenario_with};
use agentlane_core::{Event, EventStream};
use agentlane_tests::lambda::{
    FakeRuntime, IngressProcess, Streamed, TimedFrame, function_url_event,
    function_url_event_with_body,
};
use agentlane_tests::{Scenario, TENANT_A};
use serde_json::json;
use std::time::{Duration, Instant, SystemTime};

/// The ingress function under test, built by cargo with these tests.
const INGRESS_BIN: &str = env!("CARGO_BIN_EXE_agentlane-ingress-under-test");

/// Chunks of the "marathon" reply, and the pause before each: about 33 s in all.
const MARATHON_CHUNKS: usize = 30;
const MARATHON_CHUNK_PAUSE_MS: u64 = 1100;

fn marathon_reply() -> String {
    (1..=MARATHON_CHUNKS)
        .map(|i| format!("step{i:02}. "))
        .collect()
}

/// A server on the emulator whose model answers "marathon" (about 33 s) and "ponder" slowly,
/// and the streaming ingress on the same table.
async fn streaming_world() -> anyhow::Result<(Scenario, FakeRuntime, IngressProcess)> {
    streaming_world_with(&[]).await
}

/// [`streaming_world`] with extra environment for the ingress.
async fn streaming_world_with(
    ingress_env: &[(&str, &str)],
) -> anyhow::Result<(Scenario, FakeRuntime, IngressProcess)> {
    let scn = scenario_with(|options| options.on_aws_backend())?;
    scn.mock.add_fixtures(vec![json!({
        "match": {"userMessage": "marathon"},
        "response": {"content": marathon_reply()},
        "chunkSize": 8,
        "latency": MARATHON_CHUNK_PAUSE_MS
    })])?;
    // "ponder": a word at once, then 4 s of silence before each next one
    scn.mock.add_fixtures(vec![json!({
        "match": {"userMessage": "ponder"},
        "response": {"content": "Done thinking."},
        "chunkSize": 4,
        "latency": 4000
    })])?;
    let runtime = FakeRuntime::start().await?;
    let mut env = scn.server.backend_env();
    env.extend(
        ingress_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let ingress = IngressProcess::start_streaming(INGRESS_BIN, &runtime, &env)?;
    Ok((scn, runtime, ingress))
}

/// `GET /v1/runs/{run}/events` as SSE through one invocation cut off `deadline_in` from now.
async fn follow(
    runtime: &FakeRuntime,
    run_id: &str,
    last_event_id: Option<u64>,
    deadline_in: Duration,
) -> anyhow::Result<Streamed> {
    let bearer = format!("Bearer {}", TENANT_A.key);
    let last = last_event_id.map(|id| id.to_string());
    let mut headers = vec![
        ("authorization", bearer.as_str()),
        ("accept", "text/event-stream"),
    ];
    if let Some(last) = &last {
        headers.push(("last-event-id", last.as_str()));
    }
    let path = format!("/v1/runs/{run_id}/events");
    let event = function_url_event("GET", &path, &headers);
    let invocation = runtime.invoke(event, SystemTime::now() + deadline_in);
    Ok(invocation.collect(LONG).await?)
}

/// The run events among `frames` (not `end`, `reconnect` or comments).
fn run_events(frames: &[TimedFrame]) -> Vec<(TimedFrame, Event)> {
    frames
        .iter()
        .filter(|f| !["end", "reconnect", "error", "comment"].contains(&f.event.as_str()))
        .map(|f| {
            let event: Event = serde_json::from_value(f.data.clone()).expect("an event frame");
            assert_eq!(f.id, Some(event.seq.to_string()), "id: is the seq: {f:?}");
            (f.clone(), event)
        })
        .collect()
}

fn assert_streamed_http(streamed: &Streamed) {
    let mode = streamed
        .runtime_headers
        .get("lambda-runtime-function-response-mode")
        .and_then(|v| v.to_str().ok());
    assert_eq!(mode, Some("streaming"), "{:?}", streamed.runtime_headers);
    let encoding = streamed
        .runtime_headers
        .get("transfer-encoding")
        .and_then(|v| v.to_str().ok());
    assert_eq!(encoding, Some("chunked"), "{:?}", streamed.runtime_headers);
    assert_eq!(streamed.prelude["statusCode"], 200, "{}", streamed.prelude);
    let content_type = streamed.prelude["headers"]["content-type"]
        .as_str()
        .unwrap_or_default();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{}",
        streamed.prelude
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_through_the_streaming_lambda_delivers_a_long_runs_events_live_and_resumes_after_the_deadline()
-> anyhow::Result<()> {
    // GIVEN a server on DynamoDB + SQS whose model streams its reply over about 33 s, and the
    // streaming ingress function reading the same table
    let (scn, runtime, _ingress) = streaming_world().await?;
    let a = scn.a();
    let clock = (Instant::now(), SystemTime::now());
    let wall_ms = |at: Instant| {
        (clock.1 + (at - clock.0))
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default()
    };
    let turn = a.agent("marathon", "marathon").await?;

    // WHEN a client follows its events through an invocation whose deadline is 20 s away
    let invoked = Instant::now();
    let first = follow(&runtime, &turn.run_id, None, Duration::from_secs(20)).await?;

    // THEN the function streamed its response (chunked, response mode `streaming`) as SSE
    assert_streamed_http(&first);
    // AND it ended on its own before the deadline with a `reconnect` frame: `retry:` and the
    // last id sent, and no `end` (the run goes on)
    let frames = first.frames();
    let last = frames.last().expect("frames");
    assert_eq!(last.event, "reconnect", "{}", first.text());
    assert_eq!(last.retry, Some(500));
    assert!(frames.iter().all(|f| f.event != "end"), "{}", first.text());
    assert!(
        first.ended_at < invoked + Duration::from_secs(20),
        "the stream outlived the invocation's deadline"
    );
    let before = run_events(&frames);
    assert!(
        before.len() >= 5,
        "events streamed before the cut: {}",
        first.text()
    );
    let last_seq = before.last().map(|(_, e)| e.seq).expect("an event");
    assert_eq!(last.id, Some(last_seq.to_string()));
    assert_eq!(last.data["lastEventId"], last_seq);

    // AND each event reached the client as it happened (not buffered to the end): within
    // 3 s of its timestamp, and the first ones long before the response ended
    let mut max_lag = 0;
    for (frame, event) in &before {
        let lag = wall_ms(frame.at).saturating_sub(event.ts);
        max_lag = max_lag.max(lag);
        assert!(lag < 3_000, "event {} arrived {lag} ms late", event.seq);
    }
    let (first_frame, _) = &before[0];
    assert!(
        first.ended_at - first_frame.at > Duration::from_secs(10),
        "the events were not streamed as they happened"
    );

    // WHEN the client reconnects with Last-Event-ID, on a fresh invocation
    let second = follow(
        &runtime,
        &turn.run_id,
        Some(last_seq),
        Duration::from_secs(120),
    )
    .await?;

    // THEN the stream resumes exactly after that event and follows the run to its end
    assert_streamed_http(&second);
    let frames = second.frames();
    let after = run_events(&frames);
    assert_eq!(after.first().map(|(_, e)| e.seq), Some(last_seq + 1));
    let end = frames.last().expect("frames");
    assert_eq!(end.event, "end", "{}", second.text());
    assert_eq!(end.data, json!({"runId": turn.run_id, "status": "ok"}));
    for (frame, event) in &after {
        let lag = wall_ms(frame.at).saturating_sub(event.ts);
        max_lag = max_lag.max(lag);
        assert!(lag < 3_000, "event {} arrived {lag} ms late", event.seq);
    }

    // AND the two streams together are the run's events exactly once, in order, with the
    // whole reply, over a run longer than 30 s
    let streamed: Vec<Event> = before.into_iter().chain(after).map(|(_, e)| e).collect();
    let seqs: Vec<u64> = streamed.iter().map(|e| e.seq).collect();
    assert_dense(&seqs, "streamed events");
    assert_eq!(streamed, a.events(&turn.run_id).await?);
    let reply: String = streamed
        .iter()
        .filter(|e| e.stream == EventStream::Assistant)
        .filter_map(|e| e.data.get("delta").and_then(|d| d.as_str()))
        .collect();
    assert_eq!(reply, marathon_reply());
    let span = streamed.last().map(|e| e.ts).unwrap_or_default()
        - streamed.first().map(|e| e.ts).unwrap_or_default();
    assert!(span > 30_000, "the run lasted only {span} ms");
    eprintln!(
        "streamed {} events ({} before the cut) over {span} ms; latest arrival {max_lag} ms after the event",
        streamed.len(),
        last_seq + 1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streaming_lambda_answers_bad_requests_with_the_json_error_shape() -> anyhow::Result<()>
{
    // GIVEN the streaming ingress on the emulator
    let (_scn, runtime, _ingress) = streaming_world().await?;

    // WHEN a client asks for the events of an unknown run, then with a wrong key
    let unknown = follow(&runtime, "run_0123456789abcdef0123456789abcdef", None, LONG).await?;
    let event = function_url_event(
        "GET",
        "/v1/runs/run_0123456789abcdef0123456789abcdef/events",
        &[
            ("authorization", "Bearer not-a-key-of-anyone-here"),
            ("accept", "text/event-stream"),
        ],
    );
    let refused = runtime
        .invoke(event, SystemTime::now() + LONG)
        .collect(LONG)
        .await?;

    // THEN the answers are the API's JSON errors (404 not_found, 401 unauthorized), streamed
    for (streamed, status, code) in [
        (&unknown, 404, "not_found"),
        (&refused, 401, "unauthorized"),
    ] {
        assert_eq!(
            streamed.prelude["statusCode"], status,
            "{}",
            streamed.prelude
        );
        let body: serde_json::Value = serde_json::from_str(&streamed.text())?;
        assert_eq!(body["error"]["code"], code, "{body}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_stream_sends_keep_alive_comments_until_its_deadline() -> anyhow::Result<()> {
    // GIVEN the streaming ingress with keep-alives every 500 ms, and a turn whose model says
    // nothing for 4 s
    let (scn, runtime, _ingress) =
        streaming_world_with(&[("AGENTLANE_SSE_KEEP_ALIVE_MS", "500")]).await?;
    let turn = scn.a().agent("quiet", "ponder").await?;

    // WHEN a client follows it through an invocation whose deadline is 6 s away
    let invoked = Instant::now();
    let streamed = follow(&runtime, &turn.run_id, None, Duration::from_secs(6)).await?;

    // THEN while nothing happens the stream carries keep-alive comments, spread over the
    // silence, and it still ends before the deadline with `reconnect`
    let frames = streamed.frames();
    let comments: Vec<&TimedFrame> = frames.iter().filter(|f| f.event == "comment").collect();
    assert!(comments.len() >= 4, "keep-alives: {}", streamed.text());
    let spread = comments[comments.len() - 1].at - comments[0].at;
    assert!(
        spread > Duration::from_secs(2),
        "keep-alives all at once: {spread:?}"
    );
    assert!(
        streamed.text().contains(": keep-alive"),
        "{}",
        streamed.text()
    );
    assert_eq!(frames.last().map(|f| f.event.as_str()), Some("reconnect"));
    assert!(streamed.ended_at < invoked + Duration::from_secs(6));
    Ok(())
}

/// `POST path` with `body` as tenant A through one invocation cut off `deadline_in` from now.
async fn post(
    runtime: &FakeRuntime,
    path: &str,
    body: serde_json::Value,
    deadline_in: Duration,
) -> anyhow::Result<Streamed> {
    let bearer = format!("Bearer {}", TENANT_A.key);
    let event = function_url_event_with_body("POST", path, &[("authorization", &bearer)], &body);
    let invocation = runtime.invoke(event, SystemTime::now() + deadline_in);
    Ok(invocation.collect(LONG).await?)
}

/// The `data:` payloads of a streamed body, in order (`[DONE]` as is).
fn data_lines(streamed: &Streamed) -> Vec<(Instant, String)> {
    streamed
        .frames()
        .iter()
        .filter(|f| f.event != "comment")
        .map(|f| {
            let data = if f.data.is_null() {
                "[DONE]".to_owned()
            } else {
                f.data.to_string()
            };
            (f.at, data)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_completions_through_the_streaming_lambda_accept_their_turns_and_stream_live()
-> anyhow::Result<()> {
    // GIVEN the streaming ingress on the emulator, the runner in the server
    let (scn, runtime, _ingress) = streaming_world().await?;
    let ask = |message: &str, stream: bool| {
        json!({"model": "agentlane", "stream": stream,
               "messages": [{"role": "user", "content": message}]})
    };

    // WHEN an OpenAI client streams a completion of a slow reply through the Function URL
    let streamed = post(
        &runtime,
        "/v1/chat/completions",
        ask("slow please", true),
        LONG,
    )
    .await?;

    // THEN the function accepted the turn and streamed its chunks as the model wrote them,
    // then [DONE]
    assert_streamed_http(&streamed);
    let data = data_lines(&streamed);
    assert_eq!(
        data.last().map(|(_, d)| d.as_str()),
        Some("[DONE]"),
        "{}",
        streamed.text()
    );
    let chunks: Vec<(Instant, serde_json::Value)> = data[..data.len() - 1]
        .iter()
        .map(|(at, d)| (*at, serde_json::from_str(d).unwrap()))
        .collect();
    let content = |c: &serde_json::Value| {
        c["choices"][0]["delta"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let text: String = chunks.iter().map(|(_, c)| content(c)).collect();
    assert_eq!(text, SLOW_REPLY);
    let pieces: Vec<Instant> = chunks
        .iter()
        .filter(|(_, c)| !content(c).is_empty())
        .map(|(at, _)| *at)
        .collect();
    assert!(pieces.len() >= 3, "{}", streamed.text());
    assert!(
        streamed.ended_at - pieces[0] > Duration::from_millis(1500),
        "the chunks were not streamed as they happened: {}",
        streamed.text()
    );
    let run_id = chunks[0].1["id"].as_str().unwrap().to_owned();
    assert_eq!(
        scn.a().run(&run_id).await?.status,
        agentlane_core::RunStatus::Ok
    );

    // AND a completion without stream answers as JSON from the same function
    let whole = post(&runtime, "/v1/chat/completions", ask("hello", false), LONG).await?;
    assert_eq!(whole.prelude["statusCode"], 200, "{}", whole.prelude);
    let answer: serde_json::Value = serde_json::from_str(&whole.text())?;
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        crate::support::GREETING
    );

    // AND the routes it does not serve still refer to the HTTP API
    let refused = post(
        &runtime,
        "/v1/agent",
        json!({"sessionKey": "s", "message": "hi"}),
        LONG,
    )
    .await?;
    assert_eq!(refused.prelude["statusCode"], 404, "{}", refused.prelude);
    assert!(
        refused.text().contains("use the HTTP API"),
        "{}",
        refused.text()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_stream_cut_by_the_lambda_deadline_ends_with_an_error_chunk() -> anyhow::Result<()>
{
    // GIVEN the streaming ingress and a turn whose model says a word every 4 s
    let (scn, runtime, _ingress) = streaming_world().await?;

    // WHEN a client streams its completion through an invocation whose deadline is 5 s away
    let invoked = Instant::now();
    let body = json!({"model": "agentlane", "stream": true,
                      "messages": [{"role": "user", "content": "ponder"}]});
    let streamed = post(
        &runtime,
        "/v1/chat/completions",
        body,
        Duration::from_secs(5),
    )
    .await?;

    // THEN the stream ends before the deadline with OpenAI's error chunk naming the run,
    // without [DONE], and the turn goes on
    assert_streamed_http(&streamed);
    assert!(streamed.ended_at < invoked + Duration::from_secs(5));
    let data = data_lines(&streamed);
    let (_, last) = data.last().expect("frames");
    let error: serde_json::Value = serde_json::from_str(last)?;
    assert_eq!(
        error["error"]["code"],
        "stream_deadline",
        "{}",
        streamed.text()
    );
    assert!(!streamed.text().contains("[DONE]"));
    let first: serde_json::Value = serde_json::from_str(&data[0].1)?;
    let run_id = first["id"].as_str().unwrap();
    assert!(
        error["error"]["message"].as_str().unwrap().contains(run_id),
        "{error}"
    );
    let run = scn.a().run(run_id).await?;
    assert!(!run.status.is_terminal(), "{run:?}");
    Ok(())
}
