//! `GET /metrics`: the server's operational metrics in the Prometheus text format, behind the
//! operator's metrics key (a tenant's key is 403), moving with every turn.

use crate::support::{GREETING, LONG, scenario};
use agentlane_core::RunStatus;
use agentlane_tests::client::Client;
use reqwest::{Method, StatusCode};

/// The value of the sample `series` (name and labels exactly as rendered), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_each_finished_turn_and_its_model_attempt() -> anyhow::Result<()> {
    // GIVEN a server whose model greets anyone who says hello
    let scn = scenario()?;
    let a = scn.a();

    // WHEN tenant A has two turns answered
    for message in ["hello there", "hello again"] {
        let accepted = a.agent("metered", message).await?;
        let run = a.wait_done(&accepted.run_id, LONG).await?;
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
        assert_eq!(run.reply_text(), GREETING);
    }

    // THEN /metrics, read with the operator's key, counts two ok turns and two answered
    // attempts
    let response = scn
        .server
        .operator()
        .raw(Method::GET, "/metrics", None)
        .await?;
    assert_eq!(response.status, StatusCode::OK, "{}", response.body);
    assert!(
        response
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        response.content_type
    );
    let text = &response.body;
    assert!(
        text.contains("# TYPE agentlane_turns_total counter"),
        "{text}"
    );
    assert_eq!(
        sample(text, r#"agentlane_turns_total{status="ok"}"#),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(text, r#"agentlane_attempts_total{outcome="ok"}"#),
        Some(2.0),
        "{text}"
    );
    // AND the last turn's queue age is there (a gauge, in milliseconds)
    let age = sample(text, "agentlane_queue_age_ms").expect(text);
    assert!((0.0..60_000.0).contains(&age), "{age}");
    // AND nothing failed
    assert_eq!(
        sample(text, r#"agentlane_turns_total{status="error"}"#),
        None,
        "{text}"
    );

    // AND without a key the route answers 401, with a tenant's key 403: a tenant never reads
    // the counts of every tenant
    let anonymous = Client::anonymous(a.base_url());
    let response = anonymous.raw(Method::GET, "/metrics", None).await?;
    assert_eq!(
        response.status,
        StatusCode::UNAUTHORIZED,
        "{}",
        response.body
    );
    assert_eq!(response.json()["error"]["code"], "unauthorized");
    for tenant in [&a, &scn.b()] {
        let response = tenant.raw(Method::GET, "/metrics", None).await?;
        assert_eq!(response.status, StatusCode::FORBIDDEN, "{}", response.body);
        assert_eq!(response.json()["error"]["code"], "forbidden");
        assert!(!response.body.contains("agentlane_turns_total"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_metrics_key_no_key_reads_the_metrics() -> anyhow::Result<()> {
    // GIVEN a server configured with no metrics key
    let scn = crate::support::scenario_with(|o| o.env("AGENTLANE_METRICS_KEY", ""))?;

    // WHEN a tenant, or a client with the usual operator key, asks for /metrics
    for client in [scn.a(), scn.server.operator()] {
        let response = client.raw(Method::GET, "/metrics", None).await?;
        // THEN it is refused: 403 for a tenant's key, 401 for a key the server does not know
        assert!(
            matches!(
                response.status,
                StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED
            ),
            "{} {}",
            response.status,
            response.body
        );
        assert!(!response.body.contains("agentlane_turns_total"));
    }
    let tenant = scn.a().raw(Method::GET, "/metrics", None).await?;
    assert_eq!(tenant.status, StatusCode::FORBIDDEN, "{}", tenant.body);
    assert!(
        tenant.body.contains("AGENTLANE_METRICS_KEY"),
        "{}",
        tenant.body
    );
    Ok(())
}
