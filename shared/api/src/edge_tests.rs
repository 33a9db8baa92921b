//! The edge over real sockets: the router under [`crate::serve`] on loopback, the SQLite store
//! behind a [`crate::NotifyingStore`], and clients that misbehave. Each limit answers as
//! specified and the other tenant goes on being served.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::ApiConfig;
use crate::limits::{Limits, TenantLimits, TenantOverride};
use crate::testkit::{
    ACME_KEY, BETA_KEY, LiveServer, acme, closed_within, read_reply, send_request,
};
use agentlane_core::{
    Commit, Event, EventStream, Layered, Message, Payload, RunId, RunStatus, Store, StoreCall,
    StoreLayer, StoreResult, TranscriptEntry, Usage,
};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn config(limits: Limits) -> ApiConfig {
    ApiConfig {
        limits,
        sse_keep_alive_ms: 100,
        ..ApiConfig::default()
    }
}

fn tenant_limits(tenant: TenantLimits) -> Limits {
    Limits {
        tenant,
        ..Limits::default()
    }
}

/// How long one request of `key` takes, end to end, on a fresh connection.
async fn latency(server: &LiveServer, key: &str) -> Duration {
    let started = Instant::now();
    let reply = server.get("/v1/sessions/none", key).await;
    assert_eq!(reply.status, 404, "{reply:?}");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_sockets_are_closed_at_the_header_timeout_while_another_tenant_is_served() {
    // GIVEN a server whose request heads must arrive within 400 ms
    let server = LiveServer::start(config(Limits {
        header_read_timeout_ms: 400,
        ..Limits::default()
    }))
    .await;
    let idle = latency(&server, BETA_KEY).await;

    // WHEN 200 clients connect: half send nothing, half send half a request head
    let mut slow = Vec::new();
    for i in 0..200 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        if i % 2 == 0 {
            stream
                .write_all(b"GET /v1/sessions/x HTTP/1.1\r\nhost: t\r\n")
                .await
                .unwrap();
        }
        slow.push(stream);
    }

    // THEN they stay open for now (the server is waiting for the rest of their heads)
    assert!(!closed_within(&mut slow[0], Duration::from_millis(100)).await);
    assert!(!closed_within(&mut slow[1], Duration::from_millis(10)).await);
    // AND another tenant's requests are answered meanwhile, promptly
    for _ in 0..10 {
        let took = latency(&server, BETA_KEY).await;
        assert!(
            took < Duration::from_millis(300).max(idle * 20),
            "beta waited {took:?} (idle {idle:?})"
        );
    }
    // AND every slow socket is closed by the server soon after the timeout
    let started = Instant::now();
    for stream in &mut slow {
        assert!(closed_within(stream, Duration::from_secs(5)).await);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_new_clients_until_a_connection_closes() {
    // GIVEN a server that keeps at most 4 connections open
    let server = LiveServer::start(config(Limits {
        max_connections: 4,
        ..Limits::default()
    }))
    .await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;

    // WHEN a fifth client sends a whole request
    let mut fifth = TcpStream::connect(server.addr).await.unwrap();
    send_request(&mut fifth, "GET", "/healthz", None, "").await;

    // THEN it is not served while the four stay open
    let answered = tokio::time::timeout(Duration::from_millis(400), read_reply(&mut fifth)).await;
    assert!(answered.is_err(), "served over the cap: {answered:?}");

    // WHEN one of them closes, THEN the fifth is served
    drop(idle.pop());
    let mut fifth_again = fifth;
    let reply = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut fifth_again))
        .await
        .expect("served once a slot freed");
    assert_eq!(reply.status, 200, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_answers_408_and_nothing_is_accepted() {
    // GIVEN a server that gives request bodies 300 ms
    let server = LiveServer::start(config(Limits {
        request_body_timeout_ms: 300,
        ..Limits::default()
    }))
    .await;

    // WHEN a client announces 200 bytes of body and sends 20
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /v1/agent HTTP/1.1\r\nhost: t\r\nconnection: close\r\nauthorization: Bearer {ACME_KEY}\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(br#"{"sessionKey":"main","#).await.unwrap();
    let started = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut stream))
        .await
        .expect("answered");

    // THEN it gets 408 in the error shape, after about the timeout, and no session exists
    reply.assert_error(408, "timeout");
    assert!(started.elapsed() >= Duration::from_millis(250));
    server
        .get("/v1/sessions/main", ACME_KEY)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_rate_gets_429_with_retry_after_and_the_other_tenant_does_not() {
    // GIVEN acme may send 3 requests at once and 1 per second
    let mut limits = Limits::default();
    limits.tenants.insert(
        "acme".into(),
        TenantOverride {
            requests_per_second: Some(1),
            burst: Some(3),
            ..TenantOverride::default()
        },
    );
    let server = LiveServer::start(config(limits)).await;

    // WHEN acme sends 4 requests in a row
    for _ in 0..3 {
        assert_eq!(server.get("/v1/sessions/x", ACME_KEY).await.status, 404);
    }
    let refused = server.get("/v1/sessions/x", ACME_KEY).await;

    // THEN the 4th is refused with Retry-After; beta is not affected
    refused.assert_error(429, "rate_limited");
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "{refused:?}");
    for _ in 0..10 {
        assert_eq!(server.get("/v1/sessions/x", BETA_KEY).await.status, 404);
    }
}

/// Opens an SSE stream of `run_id` and returns the socket once the head arrived (status 200),
/// or the whole answer when it was refused.
async fn open_stream(
    server: &LiveServer,
    key: &str,
    run_id: &str,
) -> Result<TcpStream, crate::testkit::Reply> {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "GET /v1/runs/{run_id}/events HTTP/1.1\r\nhost: t\r\naccept: text/event-stream\r\nauthorization: Bearer {key}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf)
            .await
            .unwrap();
        assert!(
            n > 0,
            "closed before a head: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(end) = text.find("\r\n\r\n") {
            if text.starts_with("HTTP/1.1 200") {
                return Ok(stream);
            }
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return Err(crate::testkit::parse_reply(&seen));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_are_capped_per_tenant_and_a_closed_one_frees_its_slot() {
    // GIVEN each tenant may hold 3 SSE streams, and a queued run of each
    let server = LiveServer::start(config(tenant_limits(TenantLimits {
        max_event_streams: 3,
        ..TenantLimits::default()
    })))
    .await;
    let a_run = server.submit(ACME_KEY, "a", "hi").await;
    let b_run = server.submit(BETA_KEY, "b", "hi").await;

    // WHEN acme opens 3 streams and then a 4th
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(open_stream(&server, ACME_KEY, &a_run).await.unwrap());
    }
    let refused = open_stream(&server, ACME_KEY, &a_run).await.unwrap_err();

    // THEN the 4th is refused; beta still opens its streams
    refused.assert_error(429, "rate_limited");
    assert!(refused.header("retry-after").is_some());
    let beta: Vec<TcpStream> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(open_stream(&server, BETA_KEY, &b_run).await.unwrap());
        }
        v
    };

    // WHEN acme closes one stream, THEN a new one opens (within a keep-alive or two)
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match open_stream(&server, ACME_KEY, &a_run).await {
            Ok(stream) => {
                held.push(stream);
                break;
            }
            Err(reply) if Instant::now() < deadline => {
                reply.assert_error(429, "rate_limited");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(reply) => panic!("slot never freed: {reply:?}"),
        }
    }
    assert_eq!((held.len(), beta.len()), (3, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_are_capped_per_tenant() {
    // GIVEN each tenant may wait on one run at a time
    let server = LiveServer::start(config(tenant_limits(TenantLimits {
        max_waits: 1,
        ..TenantLimits::default()
    })))
    .await;
    let run = server.submit(ACME_KEY, "a", "hi").await;
    let b_run = server.submit(BETA_KEY, "b", "hi").await;
    let body = json!({"runId": run, "timeoutMs": 1500});
    let first = {
        let addr = server.addr;
        let body = body.to_string();
        tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            send_request(&mut stream, "POST", "/v1/agent.wait", Some(ACME_KEY), &body).await;
            read_reply(&mut stream).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    // WHEN acme starts a second wait, THEN it is refused; beta's wait is not
    server
        .post("/v1/agent.wait", ACME_KEY, body.clone())
        .await
        .assert_error(429, "rate_limited");
    let beta = server
        .post(
            "/v1/agent.wait",
            BETA_KEY,
            json!({"runId": b_run, "timeoutMs": 50}),
        )
        .await;
    assert_eq!(beta.json()["status"], "pending", "{beta:?}");

    // AND the first wait ends as a queue timeout: pending, the run goes on
    let first = first.await.unwrap();
    assert_eq!(
        first.json(),
        json!({"runId": run, "status": "pending", "runStatus": "queued", "timeoutPhase": "queue"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_its_cap_of_queued_runs_refuses_more_until_one_ends() {
    // GIVEN at most 2 open runs per session
    let server = LiveServer::start(config(tenant_limits(TenantLimits {
        max_queued_runs_per_session: 2,
        ..TenantLimits::default()
    })))
    .await;
    let first = server.submit(ACME_KEY, "busy", "one").await;
    server.submit(ACME_KEY, "busy", "two").await;

    // WHEN a third turn comes for that session
    let refused = server
        .post(
            "/v1/agent",
            ACME_KEY,
            json!({"sessionKey": "busy", "message": "three"}),
        )
        .await;

    // THEN it is refused and nothing was written; other sessions and tenants are accepted
    refused.assert_error(429, "rate_limited");
    assert!(
        refused.body.contains("2 runs queued or running"),
        "{refused:?}"
    );
    let session = server.get("/v1/sessions/busy", ACME_KEY).await.json();
    assert_eq!(session["runsAccepted"], 2);
    server.submit(ACME_KEY, "other", "hi").await;
    server.submit(BETA_KEY, "busy", "hi").await;

    // WHEN the first run ends, THEN the session takes a turn again
    server.commit_status(&acme(), &first, RunStatus::Ok).await;
    server.submit(ACME_KEY, "busy", "three").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_path_answers_414_in_the_error_shape() {
    let server = LiveServer::start(config(Limits::default())).await;
    let key = "k".repeat(20_000);
    let reply = server
        .get(&format!("/v1/sessions/{key}/transcript"), ACME_KEY)
        .await;
    reply.assert_error(414, "uri_too_long");
    let query = server
        .get(
            &format!("/v1/runs/r/events?after={}", "9".repeat(9000)),
            ACME_KEY,
        )
        .await;
    query.assert_error(414, "uri_too_long");
}

fn big_entry(seq: u64, run_id: &str, bytes: usize) -> TranscriptEntry {
    TranscriptEntry {
        seq,
        run_id: RunId::new(run_id),
        ts: seq,
        message: Message::User {
            content: format!("{seq}:{}", "x".repeat(bytes)),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcript_and_event_pages_stay_under_their_byte_budget_and_next_continues() {
    // GIVEN a transcript of 24 entries of 250 KB (6 MB) and a run with 60 events of 10 KB
    let server = LiveServer::start(config(Limits::default())).await;
    let run_id = server.submit(ACME_KEY, "big", "hi").await;
    let run = server.run(&acme(), &run_id).await;
    let fence = server.lock(&acme(), "big").await;
    for chunk in 0..6u64 {
        let transcript = (0..4)
            .map(|i| big_entry(chunk * 4 + i, &run_id, 250_000))
            .collect();
        let events = (0..10)
            .map(|i| Event {
                seq: chunk * 10 + i,
                stream: EventStream::Assistant,
                ts: 0,
                data: json!({"delta": "y".repeat(10_000)}),
            })
            .collect();
        server
            .store
            .commit(
                &fence,
                Commit {
                    run_id: Some(run.run_id.clone()),
                    transcript,
                    events,
                    ..Commit::default()
                },
            )
            .await
            .unwrap();
    }

    // WHEN a client reads the transcript page by page
    let mut seqs = Vec::new();
    let mut after: Option<u64> = None;
    let mut pages = 0;
    loop {
        let path = match after {
            Some(a) => format!("/v1/sessions/big/transcript?after={a}"),
            None => "/v1/sessions/big/transcript".to_owned(),
        };
        let reply = server.get(&path, ACME_KEY).await;
        assert_eq!(reply.status, 200);
        // THEN no page exceeds 4 MiB
        assert!(
            reply.body.len() <= 4 * 1024 * 1024,
            "{} bytes",
            reply.body.len()
        );
        let page = reply.json();
        let entries = page["entries"].as_array().unwrap().clone();
        if entries.is_empty() {
            assert_eq!(page["next"], json!(after));
            break;
        }
        pages += 1;
        seqs.extend(entries.iter().map(|e| e["seq"].as_u64().unwrap()));
        after = page["next"].as_u64();
        assert_eq!(after, seqs.last().copied());
    }
    // AND `next` led through every entry, in order, over several pages
    assert_eq!(seqs, (0..24).collect::<Vec<_>>());
    assert!(pages >= 2, "{pages} pages");

    // AND an events page asked for 1000 events stops at the budget too
    let events = server
        .get(&format!("/v1/runs/{run_id}/events?limit=1000"), ACME_KEY)
        .await;
    let page = events.json();
    assert_eq!(page["events"].as_array().unwrap().len(), 60);
    assert!(events.body.len() <= 4 * 1024 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_page_is_cut_at_the_configured_budget() {
    let server = LiveServer::start(config(Limits {
        max_page_bytes: 64 * 1024,
        ..Limits::default()
    }))
    .await;
    let run_id = server.submit(ACME_KEY, "ev", "hi").await;
    let fence = server.lock(&acme(), "ev").await;
    let events = (0..20)
        .map(|i| Event {
            seq: i,
            stream: EventStream::Assistant,
            ts: 0,
            data: json!({"delta": "z".repeat(10_000)}),
        })
        .collect();
    server
        .store
        .commit(
            &fence,
            Commit {
                run_id: Some(RunId::new(&run_id)),
                events,
                ..Commit::default()
            },
        )
        .await
        .unwrap();
    let first = server
        .get(&format!("/v1/runs/{run_id}/events"), ACME_KEY)
        .await;
    assert!(first.body.len() <= 64 * 1024, "{}", first.body.len());
    let page = first.json();
    let got = page["events"].as_array().unwrap().len() as u64;
    assert!((1..20).contains(&got), "{got}");
    assert_eq!(page["next"], json!(got - 1));
    let rest = server
        .get(
            &format!("/v1/runs/{run_id}/events?after={}", got - 1),
            ACME_KEY,
        )
        .await
        .json();
    assert_eq!(rest["events"][0]["seq"], json!(got));
}

/// Counts `get_run` calls (the reads a wait makes) and can make them slow.
struct CountingStore {
    inner: Arc<dyn Store>,
    reads: Arc<AtomicUsize>,
    delay: Duration,
}

#[async_trait::async_trait]
impl StoreLayer for CountingStore {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    async fn before(&self, call: StoreCall) -> StoreResult<()> {
        if call == StoreCall::GetRun {
            self.reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_in_this_process_answers_a_wait_at_once_without_polling_meanwhile() {
    // GIVEN a run this process's runner holds (committed running through the store)
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let server = LiveServer::start_over(config(Limits::default()), move |inner| {
        Arc::new(Layered(CountingStore {
            inner,
            reads: counter,
            delay: Duration::ZERO,
        }))
    })
    .await;
    let run_id = server.submit(ACME_KEY, "live", "hi").await;
    let mut run = server.run(&acme(), &run_id).await;
    let fence = server.lock(&acme(), "live").await;
    server
        .commit_run(&fence, run.clone(), RunStatus::Running)
        .await;
    assert!(server.notifier.is_live_here(&acme(), &RunId::new(&run_id)));

    // WHEN a client waits while the run works for 600 ms, then the run commits its end
    let addr = server.addr;
    let body = json!({"runId": run_id, "timeoutMs": 10_000}).to_string();
    let wait = tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        send_request(&mut stream, "POST", "/v1/agent.wait", Some(ACME_KEY), &body).await;
        let reply = read_reply(&mut stream).await;
        (reply, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let before = reads.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let idle_reads = reads.load(Ordering::SeqCst) - before;
    run = server.run(&acme(), &run_id).await;
    run.payloads = vec![Payload {
        text: "Hello!".into(),
        is_error: false,
    }];
    run.usage = Usage {
        input_tokens: 12,
        output_tokens: 3,
    };
    run.model = Some("openai/gpt-4o-mini".into());
    let committed = Instant::now();
    server.commit_run(&fence, run, RunStatus::Ok).await;
    let (reply, answered) = wait.await.unwrap();

    // THEN the wait did not read the store while it waited, and answered right after the
    // commit with the final payloads, usage and model
    assert_eq!(idle_reads, 0, "the wait polled a run live in this process");
    let after_commit = answered.saturating_duration_since(committed);
    assert!(
        after_commit < Duration::from_millis(100),
        "{after_commit:?}"
    );
    let body = reply.json();
    assert_eq!(body["status"], "ok", "{reply:?}");
    assert_eq!(body["payloads"], json!([{"text": "Hello!"}]));
    assert_eq!(body["usage"], json!({"inputTokens": 12, "outputTokens": 3}));
    assert_eq!(body["model"], "openai/gpt-4o-mini");
    assert!(body.get("timeoutPhase").is_none(), "{body}");
    assert_eq!(server.notifier.tracked_runs(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_gets_a_commits_events_at_once() {
    // GIVEN a stream on a run this process holds
    let server = LiveServer::start(config(Limits::default())).await;
    let run_id = server.submit(ACME_KEY, "sse", "hi").await;
    let run = server.run(&acme(), &run_id).await;
    let fence = server.lock(&acme(), "sse").await;
    server
        .commit_run(&fence, run.clone(), RunStatus::Running)
        .await;
    let mut stream = open_stream(&server, ACME_KEY, &run_id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // WHEN the runner commits an event and then the end
    let committed = Instant::now();
    let event = Event {
        seq: 0,
        stream: EventStream::Assistant,
        ts: 0,
        data: json!({"delta": "Hi"}),
    };
    server
        .store
        .commit(
            &fence,
            Commit {
                run_id: Some(RunId::new(&run_id)),
                events: vec![event],
                ..Commit::default()
            },
        )
        .await
        .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("\"delta\":\"Hi\"") {
        let n = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
        )
        .await
        .expect("event arrives")
        .unwrap();
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    // THEN the event arrives right after the commit
    assert!(
        committed.elapsed() < Duration::from_millis(100),
        "{:?}",
        committed.elapsed()
    );
    server
        .commit_run(&fence, server.run(&acme(), &run_id).await, RunStatus::Ok)
        .await;
    while !seen.contains("event: end") {
        let n = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
        )
        .await
        .expect("end arrives")
        .unwrap();
        assert!(n > 0);
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_request_in_flight_finish_and_then_stops_accepting() {
    // GIVEN a wait in flight on a running run
    let mut server = LiveServer::start(config(Limits {
        shutdown_grace_ms: 5_000,
        ..Limits::default()
    }))
    .await;
    let run_id = server.submit(ACME_KEY, "bye", "hi").await;
    let fence = server
        .commit_status(&acme(), &run_id, RunStatus::Running)
        .await;
    let addr = server.addr;
    let body = json!({"runId": run_id, "timeoutMs": 10_000}).to_string();
    let wait = tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        send_request(&mut stream, "POST", "/v1/agent.wait", Some(ACME_KEY), &body).await;
        read_reply(&mut stream).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    // WHEN the server is asked to stop, and the run then ends
    server.shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = TcpStream::connect(addr).await;
    let run = server.run(&acme(), &run_id).await;
    server.commit_run(&fence, run, RunStatus::Ok).await;

    // THEN the wait in flight still gets its answer, the server ends, and no new connection
    // is taken
    let reply = tokio::time::timeout(Duration::from_secs(5), wait)
        .await
        .expect("wait answered")
        .unwrap();
    assert_eq!(reply.json()["status"], "ok", "{reply:?}");
    let task = server.task.take().unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("server ended")
        .unwrap()
        .unwrap();
    assert!(refused.is_err(), "a connection was accepted after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_request_timeout_answers_408_but_an_sse_stream_lives_on() {
    // GIVEN a 300 ms request timeout and a store whose run reads take 1 s
    let limits = Limits {
        request_timeout_ms: 300,
        ..Limits::default()
    };
    let slow = LiveServer::start_over(config(limits.clone()), |inner| {
        Arc::new(Layered(CountingStore {
            inner,
            reads: Arc::default(),
            delay: Duration::from_secs(1),
        }))
    })
    .await;

    // WHEN a client reads a run, THEN it gets 408 in the error shape after about 300 ms
    let started = Instant::now();
    slow.get("/v1/runs/run_x", ACME_KEY)
        .await
        .assert_error(408, "timeout");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    // GIVEN the same timeout on a normal store, and an SSE stream on a running run
    let server = LiveServer::start(config(limits)).await;
    let run_id = server.submit(ACME_KEY, "long", "hi").await;
    let fence = server
        .commit_status(&acme(), &run_id, RunStatus::Running)
        .await;
    let mut stream = open_stream(&server, ACME_KEY, &run_id).await.unwrap();

    // WHEN the run ends after a second, THEN the stream, past the timeout, still gets the end
    tokio::time::sleep(Duration::from_secs(1)).await;
    let run = server.run(&acme(), &run_id).await;
    server.commit_run(&fence, run, RunStatus::Ok).await;
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("event: end") {
        let n = tokio::time::timeout(
            Duration::from_secs(3),
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
        )
        .await
        .expect("the end arrives")
        .unwrap();
        assert!(n > 0, "stream closed early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_asking_for_a_model_off_its_list_or_too_long_a_run_gets_400() {
    // GIVEN the configured models (default and fallback), and a tenant with a list of its own
    let mut limits = Limits {
        max_run_timeout_seconds: 3600,
        ..Limits::default()
    };
    limits.tenants.insert(
        "beta".into(),
        TenantOverride {
            allowed_models: Some(vec!["openai/gpt-4o".into()]),
            ..TenantOverride::default()
        },
    );
    let server = LiveServer::start(ApiConfig {
        configured_models: vec!["openai/gpt-4o-mini".into(), "openai/gpt-4o".into()],
        ..config(limits)
    })
    .await;
    let ask = |key: &'static str, model: &'static str, timeout: u64| {
        let server = &server;
        async move {
            server
                .post(
                    "/v1/agent",
                    key,
                    json!({"sessionKey": "m", "message": "hi", "model": model, "timeoutSeconds": timeout}),
                )
                .await
        }
    };

    // THEN acme may use either configured model, not another
    assert_eq!(ask(ACME_KEY, "openai/gpt-4o-mini", 60).await.status, 202);
    assert_eq!(ask(ACME_KEY, "openai/gpt-4o", 60).await.status, 202);
    let off_list = ask(ACME_KEY, "openai/o3", 60).await;
    off_list.assert_error(400, "invalid_request");
    assert!(off_list.body.contains("not allowed"), "{off_list:?}");
    // AND beta only its own
    ask(BETA_KEY, "openai/gpt-4o-mini", 60)
        .await
        .assert_error(400, "invalid_request");
    assert_eq!(ask(BETA_KEY, "openai/gpt-4o", 60).await.status, 202);
    // AND a run may last at most the configured hour
    let too_long = ask(ACME_KEY, "openai/gpt-4o", 3601).await;
    too_long.assert_error(400, "invalid_request");
    assert!(
        too_long.body.contains("at most 3600 (1 hour)"),
        "{too_long:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_writer_lost_the_lock_is_polled_again() {
    // GIVEN a run this process holds
    let server = LiveServer::start(config(Limits::default())).await;
    let run_id = server.submit(ACME_KEY, "stolen", "hi").await;
    let fence = server
        .commit_status(&acme(), &run_id, RunStatus::Running)
        .await;
    let id = RunId::new(&run_id);
    assert!(server.notifier.is_live_here(&acme(), &id));

    // WHEN another writer takes the session after the lease ran out, and this one's next
    // commit is refused
    let later = agentlane_core::Clock::now_ms(&agentlane_core::SystemClock) + 120_000;
    let taken = server
        .store
        .acquire_lock(
            &acme(),
            &agentlane_core::SessionKey::new("stolen"),
            "other-process",
            60_000,
            later,
        )
        .await
        .unwrap();
    assert!(matches!(taken, agentlane_core::LockAttempt::Acquired(_)));
    let run = server.run(&acme(), &run_id).await;
    let refused = server
        .store
        .commit(
            &fence,
            Commit {
                run: Some(run),
                ..Commit::default()
            },
        )
        .await;

    // THEN the run is no longer live here: its waiters poll the store again
    assert_eq!(refused, Err(agentlane_core::StoreError::FenceLost));
    assert!(!server.notifier.is_live_here(&acme(), &id));
}
