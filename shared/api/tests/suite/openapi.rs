//! The OpenAPI document: generated from the code, committed as `docs/openapi.json`, served
//! without a key at `GET /v1/openapi.json`.

use crate::common::Harness;
use axum::body::Body;
use axum::http::{Request, StatusCode};

const REGENERATE: &str = "cargo run -q -p agentlane-cli -- openapi > docs/openapi.json";

fn committed_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

#[test]
fn the_committed_document_is_the_generated_one() {
    let generated = agentlane_api::openapi_json();
    let path = committed_path();
    if std::env::var_os("AGENTLANE_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json differs from the document the code generates; regenerate it with\n  \
         {REGENERATE}\n(or AGENTLANE_UPDATE_OPENAPI=1 cargo nextest run -p agentlane-api -E \
         'test(committed_document)')"
    );
}

#[tokio::test]
async fn the_document_is_served_without_a_key_and_lists_every_route() {
    let h = Harness::new().await;
    let reply = h
        .send(
            Request::get("/v1/openapi.json")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.headers["content-type"].to_str().unwrap(),
        "application/json"
    );
    let doc = reply.json;
    assert_eq!(doc["openapi"], "3.1.0");
    let routes = [
        ("/healthz", "get"),
        ("/v1/openapi.json", "get"),
        ("/v1/agent", "post"),
        ("/v1/agent.wait", "post"),
        ("/v1/runs/{run_id}", "get"),
        ("/v1/runs/{run_id}/events", "get"),
        ("/v1/runs/{run_id}/abort", "post"),
        ("/v1/sessions/{session_key}", "get"),
        ("/v1/sessions/{session_key}", "patch"),
        ("/v1/sessions/{session_key}/transcript", "get"),
        ("/v1/sessions/{session_key}/reset", "post"),
        ("/v1/cron/jobs", "get"),
        ("/v1/cron/jobs", "post"),
        ("/v1/cron/jobs/{job_id}", "get"),
        ("/v1/cron/jobs/{job_id}", "patch"),
        ("/v1/cron/jobs/{job_id}", "delete"),
        ("/v1/cron/jobs/{job_id}/run", "post"),
    ];
    for (path, method) in routes {
        let operation = &doc["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is not documented");
        let responses = operation["responses"].as_object().unwrap();
        assert!(responses.contains_key("500"), "{method} {path}: no 500");
        if path.starts_with("/v1/") && path != "/v1/openapi.json" {
            assert!(responses.contains_key("401"), "{method} {path}: no 401");
            assert_eq!(
                responses["401"]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ErrorBody"
            );
        }
    }
    let count: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        count,
        routes.len(),
        "an undocumented operation was added to the list"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The validators' limits are in the schemas.
    let agent = &doc["components"]["schemas"]["AgentBody"]["properties"];
    assert_eq!(agent["sessionKey"]["maxLength"], 256);
    assert_eq!(agent["idempotencyKey"]["maxLength"], 256);
    let events = &doc["paths"]["/v1/runs/{run_id}/events"]["get"]["responses"]["200"]["content"];
    assert!(
        events["text/event-stream"].is_object(),
        "SSE not documented"
    );
}
