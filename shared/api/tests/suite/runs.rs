//! `GET /v1/runs/{id}`, events (JSON pages and SSE), and abort.

use crate::common::*;
use agentlane_core::{RunStatus, TenantId};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use tower::ServiceExt;

#[tokio::test]
async fn a_run_reads_back_without_its_tenant() {
    let h = Harness::new().await;
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    let reply = h.get(&format!("/v1/runs/{run_id}"), ACME_KEY).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json["runId"], run_id);
    assert_eq!(reply.json["status"], "queued");
    assert_eq!(reply.json["livenessState"], "working");
    assert_eq!(reply.json["sessionKey"], "main");
    assert_eq!(reply.json["request"]["message"], "hi");
    assert_eq!(reply.json["abortRequested"], false);
    assert_eq!(reply.json.get("tenant"), None);
    h.get("/v1/runs/run_unknown", ACME_KEY)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn a_run_shows_the_runners_internals_only_when_asked() {
    let h = Harness::new().await;
    let reply = h
        .agent(
            ACME_KEY,
            json!({"sessionKey": "main", "message": "hi", "idempotencyKey": "k-1"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    let run_id = reply.json["runId"].as_str().unwrap().to_owned();
    let plain = h.get(&format!("/v1/runs/{run_id}"), ACME_KEY).await;
    assert_eq!(plain.status, StatusCode::OK, "{}", plain.text);
    assert_eq!(plain.json.get("requestFingerprint"), None, "{}", plain.text);
    assert_eq!(plain.json.get("checkpoint"), None, "{}", plain.text);
    assert_eq!(plain.json["idempotencyKey"], "k-1");
    let internal = h
        .get(&format!("/v1/runs/{run_id}?include=internal"), ACME_KEY)
        .await;
    assert_eq!(internal.status, StatusCode::OK, "{}", internal.text);
    assert!(
        internal.json["requestFingerprint"].is_string(),
        "{}",
        internal.text
    );
    h.get(&format!("/v1/runs/{run_id}?include=everything"), ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn events_page_by_seq() {
    let h = Harness::new().await;
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    let events = (1..=5)
        .map(|seq| event(seq, &format!("part {seq}")))
        .collect();
    h.finish(&acme(), &run_id, RunStatus::Ok, events).await;
    let page = |query: &str| {
        let path = format!("/v1/runs/{run_id}/events{query}");
        let h = &h;
        async move {
            let reply = h.get(&path, ACME_KEY).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            let seqs: Vec<u64> = reply.json["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["seq"].as_u64().unwrap())
                .collect();
            (seqs, reply.json["next"].clone(), reply.json)
        }
    };
    let (seqs, next, body) = page("?limit=2").await;
    assert_eq!((seqs, next), (vec![1, 2], json!(2)));
    assert_eq!(
        body["events"][0],
        json!({"seq": 1, "stream": "assistant", "ts": T0 + 1, "data": {"delta": "part 1"}})
    );
    assert_eq!(page("?after=2&limit=2").await.0, vec![3, 4]);
    let (seqs, next, _) = page("?after=4").await;
    assert_eq!((seqs, next), (vec![5], json!(5)));
    let (seqs, next, _) = page("?after=5").await;
    assert_eq!((seqs, next), (vec![], json!(5)));
    let (seqs, _, _) = page("").await;
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);

    h.get(&format!("/v1/runs/{run_id}/events?limit=0"), ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
    h.get(&format!("/v1/runs/{run_id}/events?after=abc"), ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn events_of_a_run_without_any_have_a_null_next() {
    let h = Harness::new().await;
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    let reply = h.get(&format!("/v1/runs/{run_id}/events"), ACME_KEY).await;
    assert_eq!(reply.json, json!({"events": [], "next": null}));
}

fn sse_request(run_id: &str, last_event_id: Option<&str>) -> Request<Body> {
    let mut builder = Request::get(format!("/v1/runs/{run_id}/events"))
        .header("authorization", format!("Bearer {ACME_KEY}"))
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        builder = builder.header("last-event-id", id);
    }
    builder.body(Body::empty()).unwrap()
}

/// The `(event, id, data)` frames of an SSE body, comments skipped.
fn frames(text: &str) -> Vec<(String, Option<String>, serde_json::Value)> {
    text.split("\n\n")
        .filter(|block| block.lines().any(|l| l.starts_with("data:")))
        .map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_owned())
            };
            (
                field("event:").unwrap(),
                field("id:"),
                serde_json::from_str(&field("data:").unwrap()).unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_event_stream_of_a_finished_run_sends_everything_then_ends() {
    let h = Harness::new().await;
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    h.finish(
        &acme(),
        &run_id,
        RunStatus::Ok,
        vec![event(1, "a"), event(2, "b")],
    )
    .await;
    let reply = within(10, h.send(sse_request(&run_id, None))).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let frames = frames(&reply.text);
    assert_eq!(
        frames,
        vec![
            (
                "assistant".into(),
                Some("1".into()),
                json!({"seq": 1, "stream": "assistant", "ts": T0 + 1, "data": {"delta": "a"}})
            ),
            (
                "assistant".into(),
                Some("2".into()),
                json!({"seq": 2, "stream": "assistant", "ts": T0 + 2, "data": {"delta": "b"}})
            ),
            ("end".into(), None, json!({"runId": run_id, "status": "ok"})),
        ]
    );
    // A reconnect with Last-Event-ID gets only what it missed.
    let resumed = within(10, h.send(sse_request(&run_id, Some("1")))).await;
    let seqs: Vec<_> = frames_ids(&resumed.text);
    assert_eq!(seqs, vec![Some("2".to_owned()), None]);
}

fn frames_ids(text: &str) -> Vec<Option<String>> {
    frames(text).into_iter().map(|(_, id, _)| id).collect()
}

#[tokio::test]
async fn the_event_stream_follows_a_live_run_until_it_ends() {
    let h = Arc::new(Harness::new().await);
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    // The runner starts: the run is running with one event, the lock stays held.
    let (fence, mut run) = h.start(&acme(), &run_id, vec![event(1, "a")]).await;

    let response = h
        .app
        .clone()
        .oneshot(sse_request(&run_id, None))
        .await
        .unwrap();
    let mut body = response.into_body().into_data_stream();
    let first = within(10, body.next()).await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("id: 1"),
        "{first:?}"
    );
    // Later the runner writes another event and finishes.
    run.status = RunStatus::Ok;
    run.ended_at = Some(T0 + 10);
    h.commit(&fence, run, vec![event(2, "b")], vec![], true)
        .await;
    let mut rest = String::new();
    within(10, async {
        while let Some(chunk) = body.next().await {
            rest.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    })
    .await;
    let frames = frames(&rest);
    assert_eq!(frames.len(), 2, "{rest}");
    assert_eq!(frames[0].1.as_deref(), Some("2"));
    assert_eq!(frames[1].0, "end");
    assert_eq!(frames[1].2["status"], "ok");
}

/// An SSE request under a host deadline `in_ms` from now (what the streaming Lambda adds).
fn sse_request_until(run_id: &str, last_event_id: Option<&str>, in_ms: u64) -> Request<Body> {
    let mut request = sse_request(run_id, last_event_id);
    let deadline = std::time::SystemTime::now() + std::time::Duration::from_millis(in_ms);
    request
        .extensions_mut()
        .insert(agentlane_api::ResponseDeadline(deadline));
    request
}

#[tokio::test]
async fn a_stream_cut_by_its_deadline_says_reconnect_and_a_reconnect_resumes_after_it() {
    let h = Arc::new(Harness::new().await);
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    // The runner has written one event and is still going.
    let (fence, mut run) = h.start(&acme(), &run_id, vec![event(1, "a")]).await;

    // A stream whose host ends it in 400 ms sends the event, then `reconnect` with a retry
    // hint and the last id, and closes without `end` although the run goes on.
    let started = std::time::Instant::now();
    let cut = within(10, h.send(sse_request_until(&run_id, None, 400))).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let got = frames(&cut.text);
    assert_eq!(got.len(), 2, "{}", cut.text);
    assert_eq!(got[0].1.as_deref(), Some("1"));
    assert_eq!(got[1].0, "reconnect");
    assert_eq!(got[1].1.as_deref(), Some("1"), "the last id is repeated");
    assert_eq!(
        got[1].2,
        json!({"runId": run_id, "reason": "deadline", "lastEventId": 1})
    );
    assert!(cut.text.contains("retry: 500"), "{}", cut.text);

    // The run goes on and ends; the reconnect gets exactly what came after.
    run.status = RunStatus::Ok;
    run.ended_at = Some(T0 + 10);
    h.commit(&fence, run, vec![event(2, "b")], vec![], true)
        .await;
    let resumed = within(10, h.send(sse_request_until(&run_id, Some("1"), 60_000))).await;
    assert_eq!(frames_ids(&resumed.text), vec![Some("2".to_owned()), None]);
    assert_eq!(frames(&resumed.text)[1].0, "end");
}

#[tokio::test]
async fn a_wait_ends_at_the_host_deadline_with_the_run_as_it_is() {
    let h = Harness::new().await;
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    let mut request = Harness::request(
        axum::http::Method::POST,
        "/v1/agent.wait",
        Some(ACME_KEY),
        Body::from(json!({"runId": run_id, "timeoutMs": 20_000}).to_string()),
    );
    let deadline = std::time::SystemTime::now() + std::time::Duration::from_millis(300);
    request
        .extensions_mut()
        .insert(agentlane_api::ResponseDeadline(deadline));
    let started = std::time::Instant::now();
    let reply = within(10, h.send(request)).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the wait outlived the host deadline"
    );
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json["status"], "pending", "{}", reply.text);
    assert_eq!(reply.json["timeoutPhase"], "queue", "{}", reply.text);
}

#[tokio::test]
async fn the_event_stream_of_an_unknown_run_is_a_json_404() {
    let h = Harness::new().await;
    let reply = h.send(sse_request("run_unknown", None)).await;
    reply.assert_error(404, "not_found");
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    h.send(sse_request(&run_id, Some("x")))
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn abort_flags_a_live_run_and_conflicts_on_a_finished_one() {
    let h = Harness::new().await;
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    let reply = h
        .post(&format!("/v1/runs/{run_id}/abort"), ACME_KEY, json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    assert_eq!(
        reply.json,
        json!({"runId": run_id, "status": "queued", "abortRequested": true})
    );
    assert!(h.run(&acme(), &run_id).await.abort_requested);
    let read = h.get(&format!("/v1/runs/{run_id}"), ACME_KEY).await;
    assert_eq!(read.json["abortRequested"], true);

    h.finish(&acme(), &run_id, RunStatus::Aborted, vec![]).await;
    h.post(&format!("/v1/runs/{run_id}/abort"), ACME_KEY, json!({}))
        .await
        .assert_error(409, "conflict");
    h.post("/v1/runs/run_unknown/abort", ACME_KEY, json!({}))
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn another_tenants_runs_answer_404_like_unknown_ones() {
    let h = Harness::new().await;
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    h.finish(&acme(), &run_id, RunStatus::Ok, vec![event(1, "secret")])
        .await;
    let beta = |reply: Reply| reply.assert_error(404, "not_found");
    beta(h.get(&format!("/v1/runs/{run_id}"), BETA_KEY).await);
    beta(h.get(&format!("/v1/runs/{run_id}/events"), BETA_KEY).await);
    let mut sse = sse_request(&run_id, None);
    sse.headers_mut().insert(
        "authorization",
        format!("Bearer {BETA_KEY}").parse().unwrap(),
    );
    beta(h.send(sse).await);
    beta(
        h.post(&format!("/v1/runs/{run_id}/abort"), BETA_KEY, json!({}))
            .await,
    );
    beta(
        h.wait(BETA_KEY, json!({"runId": run_id, "timeoutMs": 0}))
            .await,
    );
    // Nothing changed for acme.
    assert!(!h.run(&acme(), &run_id).await.abort_requested);
    let own = h.get(&format!("/v1/runs/{run_id}"), ACME_KEY).await;
    assert_eq!(own.status, StatusCode::OK);
    assert!(
        h.store
            .get_run(&TenantId::new("beta"), &agentlane_core::RunId::new(run_id))
            .await
            .unwrap()
            .is_none()
    );
}
