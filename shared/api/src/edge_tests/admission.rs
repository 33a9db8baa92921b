//! Per-tenant admission: request rate, event streams, waits, queued runs per session, models
//! and run timeouts; the other tenant is served meanwhile.

use super::*;
use crate::admission::SHARED_WAIT_GRACE;

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
    held.push(open_stream_once_freed(&server, ACME_KEY, &a_run).await);
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
        json!({"runId": run, "status": "pending", "runStatus": "queued", "livenessState": "working", "timeoutPhase": "queue"})
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
async fn concurrent_submits_to_one_session_stop_exactly_at_its_cap() {
    // GIVEN at most 3 open runs per session
    let server = LiveServer::start(config(tenant_limits(TenantLimits {
        max_queued_runs_per_session: 3,
        ..TenantLimits::default()
    })))
    .await;

    // WHEN 13 turns for that session arrive at the same time
    let replies = futures::future::join_all((0..13).map(|i| {
        server.post(
            "/v1/agent",
            ACME_KEY,
            json!({"sessionKey": "crowded", "message": format!("turn {i}")}),
        )
    }))
    .await;

    // THEN exactly 3 are accepted, the 10 others get the cap's 429 JSON error with
    // Retry-After, and the session counts 3 turns
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    assert_eq!(accepted, 3, "{replies:?}");
    for refused in replies.iter().filter(|r| r.status != 202) {
        refused.assert_error(429, "rate_limited");
        assert!(
            refused.body.contains("3 runs queued or running"),
            "{refused:?}"
        );
        assert!(refused.header("retry-after").is_some(), "{refused:?}");
    }
    let session = server.get("/v1/sessions/crowded", ACME_KEY).await.json();
    assert_eq!(session["runsAccepted"], 3);
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
async fn the_stream_cap_holds_across_instances_that_share_the_store() {
    // GIVEN two instances of the API over one store (as two ingress Lambda instances, each
    // serving one request at a time), each tenant allowed 2 SSE streams
    let (one, two) = LiveServer::start_two_instances(config(tenant_limits(TenantLimits {
        max_event_streams: 2,
        ..TenantLimits::default()
    })))
    .await;
    let a_run = one.submit(ACME_KEY, "a", "hi").await;
    let b_run = one.submit(BETA_KEY, "b", "hi").await;

    // WHEN acme holds one stream on each instance and opens a third on either
    let mut held = vec![
        open_stream(&one, ACME_KEY, &a_run).await.unwrap(),
        open_stream(&two, ACME_KEY, &a_run).await.unwrap(),
    ];

    // THEN both instances refuse it (each alone is under its cap); beta still opens its two
    for server in [&one, &two] {
        let refused = open_stream(server, ACME_KEY, &a_run).await.unwrap_err();
        refused.assert_error(429, "rate_limited");
        assert!(refused.header("retry-after").is_some());
    }
    let beta = [
        open_stream(&two, BETA_KEY, &b_run).await.unwrap(),
        open_stream(&one, BETA_KEY, &b_run).await.unwrap(),
    ];

    // WHEN acme closes its stream on the first instance, THEN the second lets a new one in
    drop(held.remove(0));
    held.push(open_stream_once_freed(&two, ACME_KEY, &a_run).await);
    assert_eq!((held.len(), beta.len()), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_cap_holds_across_instances_that_share_the_store() {
    // GIVEN two instances over one store, each tenant allowed 1 wait at a time
    let (one, two) = LiveServer::start_two_instances(config(tenant_limits(TenantLimits {
        max_waits: 1,
        ..TenantLimits::default()
    })))
    .await;
    let a_run = one.submit(ACME_KEY, "a", "hi").await;

    // WHEN acme waits (long) on the first instance, and past its grace on the second
    let first = {
        let addr = one.addr;
        let run = a_run.clone();
        tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let body = json!({"runId": run, "timeoutMs": 5_000}).to_string();
            send_request(&mut stream, "POST", "/v1/agent.wait", Some(ACME_KEY), &body).await;
            read_reply(&mut stream).await
        })
    };
    tokio::time::sleep(SHARED_WAIT_GRACE + Duration::from_millis(300)).await;
    let started = Instant::now();
    let second = two
        .post(
            "/v1/agent.wait",
            ACME_KEY,
            json!({"runId": a_run, "timeoutMs": 3_000}),
        )
        .await;

    // THEN the second is refused once it outlives its grace, while the first waits
    second.assert_error(429, "rate_limited");
    assert!(
        started.elapsed() >= SHARED_WAIT_GRACE,
        "{:?}",
        started.elapsed()
    );
    // AND a wait that ends within its grace is answered: it never took a shared slot
    let short = two
        .post(
            "/v1/agent.wait",
            ACME_KEY,
            json!({"runId": a_run, "timeoutMs": 100}),
        )
        .await;
    assert_eq!(short.json()["status"], "pending", "{short:?}");
    // AND beta's waits are not refused
    let b_run = two.submit(BETA_KEY, "b", "hi").await;
    let beta = two
        .post(
            "/v1/agent.wait",
            BETA_KEY,
            json!({"runId": b_run, "timeoutMs": 100}),
        )
        .await;
    assert_eq!(beta.status, 200, "{beta:?}");
    let first = first.await.unwrap();
    assert_eq!(first.status, 200, "{first:?}");
}
