//! The edge's limits through the real server, with their default values (issue 12 §3): a
//! tenant's cap on open SSE streams and on a session's queued runs answer `429 rate_limited`
//! with `Retry-After` while the other tenant goes on; pages stay under 4 MiB and `next`
//! continues; an oversized path answers in the JSON error shape; one `agent.wait` answers a
//! turn with its payloads and usage, and a queued run's wait says `pending`.
//!
//! Request-rate limits, header/body timeouts, the connection cap, waits per tenant and
//! graceful shutdown are shown over real sockets in `agentlane-api`'s `edge_tests` (they need
//! non-default settings that the wiring crate passes through).

use crate::support::{GREETING, LONG, scenario, scenario_with};
use agentlane_core::RunStatus;
use agentlane_tests::{Scenario, WaitStatus};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Default cap on one tenant's open SSE streams.
const STREAM_CAP: usize = 64;
/// Default cap on one session's queued or running runs.
const QUEUE_CAP: usize = 64;
/// No answer is larger than this.
const MAX_PAGE: usize = 4 * 1024 * 1024;

/// A turn that holds its lane for the whole test: the model sends its first chunk, then
/// stays silent (long past any test, short of the 120 s idle timeout).
const HOLD: &str = "hold the lane";

/// aimock with the shared fixtures plus [`HOLD`], and a default server.
fn holding_scenario() -> anyhow::Result<Scenario> {
    let scn = scenario()?;
    scn.mock.add_fixtures(vec![json!({
        "match": {"userMessage": HOLD},
        "response": {"content": "first words, then a very long silence"},
        "streamingProfile": {"ttft": 100, "tps": 0.01}
    })])?;
    Ok(scn)
}

/// Submits a "hello" turn for tenant B and waits for it; returns how long it took.
async fn b_turn(scn: &Scenario, session: &str) -> anyhow::Result<Duration> {
    let b = scn.b();
    let started = Instant::now();
    let accepted = b.agent(session, "hello").await?;
    let wait = b.wait(&accepted.run_id, 60_000).await?;
    assert_eq!(wait.status, WaitStatus::Ok, "{wait:?}");
    Ok(started.elapsed())
}

fn assert_rate_limited(status: StatusCode, retry_after: Option<&str>, body: &Value) {
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let retry: u64 = retry_after.and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(retry >= 1, "Retry-After {retry_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_limits_a_tenant_at_its_stream_cap_gets_429_and_the_other_tenant_is_unaffected()
-> anyhow::Result<()> {
    // GIVEN a turn of tenant A that runs for the whole test, and tenant B's turn latency with
    // nothing else going on
    let scn = holding_scenario()?;
    let a = scn.a();
    let idle = b_turn(&scn, "b-idle").await?;
    let long = a.agent("a-long", HOLD).await?;

    // WHEN A opens its cap of SSE streams on that run, and then one more
    let mut held = Vec::new();
    for _ in 0..STREAM_CAP {
        match a.open_event_stream(&long.run_id).await? {
            Ok(stream) => held.push(stream),
            Err(refused) => panic!("refused under the cap: {}", refused.status()),
        }
    }
    let refused = a
        .open_event_stream(&long.run_id)
        .await?
        .expect_err("one stream over the cap");

    // THEN the extra stream is refused with 429 and Retry-After
    let status = refused.status();
    let retry = refused
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: Value = refused.json().await?;
    assert_rate_limited(status, retry.as_deref(), &body);

    // AND tenant B opens streams and runs turns meanwhile, in reasonable time
    let b_run = scn.b().agent("b-busy", "hello").await?;
    let b_stream = scn.b().open_event_stream(&b_run.run_id).await?;
    assert!(b_stream.is_ok(), "tenant B's stream was refused");
    let busy = b_turn(&scn, "b-busy-2").await?;
    eprintln!("tenant B turn: idle {idle:?}, while A holds {STREAM_CAP} streams {busy:?}");
    assert!(busy < Duration::from_secs(10), "{busy:?}");

    // AND once A closes one, A may open another
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match a.open_event_stream(&long.run_id).await? {
            Ok(stream) => {
                held.push(stream);
                break;
            }
            Err(refused) if Instant::now() < deadline => {
                assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(refused) => panic!("the closed stream's slot never freed: {}", refused.status()),
        }
    }
    assert_eq!(held.len(), STREAM_CAP);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_limits_a_session_at_its_queue_cap_refuses_a_turn_and_others_are_accepted()
-> anyhow::Result<()> {
    // GIVEN a session of tenant A with its cap of runs queued or running behind a turn that
    // holds the lane
    let scn = holding_scenario()?;
    let a = scn.a();
    a.agent("crowded", HOLD).await?;
    for i in 1..QUEUE_CAP {
        a.agent("crowded", &format!("hello {i}")).await?;
    }

    // WHEN one more turn comes for that session
    let (status, body) = a
        .post_agent(json!({"sessionKey": "crowded", "message": "hello again"}))
        .await?;

    // THEN it is refused with 429 and nothing is accepted for it
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("queued or running")),
        "{body}"
    );
    let (_, session) = a
        .json(reqwest::Method::GET, "/v1/sessions/crowded", None)
        .await?;
    assert_eq!(session["runsAccepted"], json!(QUEUE_CAP), "{session}");

    // AND another session of A, and tenant B's session of the same key, take turns
    a.agent("elsewhere", "hello").await?;
    let b_time = b_turn(&scn, "crowded").await?;
    assert!(b_time < Duration::from_secs(10), "{b_time:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_limits_a_transcript_over_4_mib_comes_in_pages_under_4_mib() -> anyhow::Result<()> {
    // GIVEN a session whose transcript holds 29 messages of 150 KB (4.35 MB) and their answers
    // (only the last turn is sent to the model, and the window is large: no compaction)
    let scn = scenario_with(|o| {
        o.env("AGENTLANE_HISTORY_MAX_TURNS", "1")
            .env("AGENTLANE_CONTEXT_WINDOWS", "openai/gpt-4o-mini=100000000")
    })?;
    let a = scn.a();
    for i in 0..29 {
        let message = format!("hello {i} {}", "x".repeat(150_000));
        let accepted = a.agent("huge", &message).await?;
        let run = a.wait_done(&accepted.run_id, LONG).await.unwrap();
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    }

    // WHEN a client reads the transcript page by page, following `next`
    let mut after = None;
    let mut seqs = Vec::new();
    let mut pages = 0;
    loop {
        let response = a
            .raw(
                reqwest::Method::GET,
                &match after {
                    Some(n) => format!("/v1/sessions/huge/transcript?after={n}"),
                    None => "/v1/sessions/huge/transcript".to_owned(),
                },
                None,
            )
            .await?;
        // THEN no page is larger than 4 MiB
        assert_eq!(response.status, StatusCode::OK);
        assert!(
            response.body.len() <= MAX_PAGE,
            "{} bytes",
            response.body.len()
        );
        let page: agentlane_tests::TranscriptView = serde_json::from_str(&response.body)?;
        if page.entries.is_empty() {
            break;
        }
        pages += 1;
        seqs.extend(page.seqs());
        assert_eq!(page.next, seqs.last().copied());
        after = page.next;
    }

    // AND together they hold the whole transcript, in order
    assert!(pages >= 2, "{pages} pages");
    assert_eq!(seqs, (0..58).collect::<Vec<u64>>());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_limits_an_oversized_path_answers_in_the_json_error_shape() -> anyhow::Result<()> {
    let scn = scenario()?;
    let a = scn.a();
    let key = "k".repeat(20_000);
    let (status, body) = a
        .json(
            reqwest::Method::GET,
            &format!("/v1/sessions/{key}/transcript"),
            None,
        )
        .await?;
    assert_eq!(status, StatusCode::URI_TOO_LONG, "{body}");
    assert_eq!(body["error"]["code"], "uri_too_long", "{body}");
    // A long but acceptable key still gets the usual validation answer.
    let (status, body) = a
        .json(
            reqwest::Method::GET,
            &format!("/v1/sessions/{}", "k".repeat(300)),
            None,
        )
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_limits_one_wait_answers_a_turn_and_a_queued_run_is_pending() -> anyhow::Result<()> {
    // GIVEN a slow turn and a turn queued behind it on the same session
    let scn = scenario()?;
    let a = scn.a();
    let first = a.agent("waits", "hello").await?;
    let long = a.agent("waits-2", "a glacial answer please").await?;
    let behind = a.agent("waits-2", "hello").await?;

    // WHEN a client waits once for the first turn
    let done = a.wait(&first.run_id, 60_000).await?;

    // THEN that one answer carries the reply, the usage and the model
    assert_eq!(done.status, WaitStatus::Ok, "{done:?}");
    let payloads = done.payloads.clone().expect("payloads");
    assert_eq!(payloads.len(), 1, "{done:?}");
    assert_eq!(payloads[0].text, GREETING);
    assert!(done.usage.is_some(), "{done:?}");
    assert_eq!(done.model.as_deref(), Some(agentlane_tests::MODEL));
    assert_eq!(done.timeout_phase, None);

    // AND a short wait on the run queued behind the slow one says `pending`, phase `queue`
    let queued = a.wait(&behind.run_id, 200).await?;
    assert_eq!(queued.status, WaitStatus::Pending, "{queued:?}");
    assert_eq!(queued.run_status, RunStatus::Queued);
    assert_eq!(queued.timeout_phase.as_deref(), Some("queue"));
    assert_eq!(queued.payloads, None);
    // AND a short wait on the slow one while it runs says `timeout`, phase `run`
    let running = a.wait(&long.run_id, 1_500).await?;
    if running.run_status == RunStatus::Running {
        assert_eq!(running.status, WaitStatus::Timeout, "{running:?}");
        assert_eq!(running.timeout_phase.as_deref(), Some("run"));
    }
    Ok(())
}
