//! The OpenAPI document: generated from the code, committed as `docs/openapi.json`, served
//! without a key at `GET /v1/openapi.json`.

use crate::common::{ACME_KEY, Harness};
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;
use std::collections::BTreeSet;

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

/// What client generators need: every union variant a named schema (no `Message0..3`), a
/// discriminator where the union is tagged, camelCase path parameters, servers, and the frames
/// of the SSE answer.
#[test]
fn unions_have_named_variants_and_the_event_stream_its_frames() {
    let doc: Value = serde_json::from_str(agentlane_api::openapi_json()).unwrap();
    let schemas = &doc["components"]["schemas"];
    // every oneOf item of a component schema is a $ref or a plain scalar/array/null schema
    for (name, schema) in schemas.as_object().unwrap() {
        for item in schema["oneOf"].as_array().into_iter().flatten() {
            assert!(
                item.get("$ref").is_some() || item["type"] != "object",
                "{name} has an anonymous object variant: {item}"
            );
        }
    }
    let message = &schemas["Message"];
    assert_eq!(message["discriminator"]["propertyName"], "role");
    for (role, variant) in [
        ("user", "UserMessage"),
        ("assistant", "AssistantMessage"),
        ("compaction", "CompactionMessage"),
        ("tool", "ToolMessage"),
    ] {
        assert_eq!(
            message["discriminator"]["mapping"][role],
            format!("#/components/schemas/{variant}")
        );
        assert_eq!(schemas[variant]["properties"]["role"]["enum"][0], role);
    }
    for variant in ["CronSchedule", "EverySchedule", "AtSchedule"] {
        assert!(schemas[variant].is_object(), "{variant}");
    }
    // path parameters are camelCase, and every response link names a parameter its target has
    let mut parameters = std::collections::HashMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        assert!(!path.contains('_') || !path.contains('{'), "{path}");
        for operation in item.as_object().unwrap().values() {
            let names: Vec<String> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["name"].as_str().map(str::to_owned))
                .collect();
            if let Some(id) = operation["operationId"].as_str() {
                parameters.insert(id.to_owned(), names);
            }
        }
    }
    let mut links = 0;
    for item in doc["paths"].as_object().unwrap().values() {
        for operation in item.as_object().unwrap().values() {
            for response in operation["responses"].as_object().into_iter().flatten() {
                for link in response.1["links"].as_object().into_iter().flatten() {
                    let target = link.1["operationId"].as_str().unwrap();
                    for name in link.1["parameters"].as_object().unwrap().keys() {
                        links += 1;
                        assert!(
                            parameters[target].contains(name),
                            "link {} names {name}, which {target} does not have",
                            link.0
                        );
                    }
                }
            }
        }
    }
    assert!(links > 10, "{links} link parameters");
    assert!(doc["servers"].as_array().is_some_and(|s| !s.is_empty()));
    let sse = &doc["paths"]["/v1/runs/{runId}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"];
    assert_eq!(
        sse["x-sse-frame"]["$ref"],
        "#/components/schemas/RunStreamFrame"
    );
    let frames: Vec<&str> = schemas["RunStreamFrame"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["$ref"].as_str())
        .collect();
    assert_eq!(frames.len(), 4, "{frames:?}");
    assert_eq!(
        schemas["RunEventFrame"]["properties"]["data"]["$ref"],
        "#/components/schemas/Event"
    );
}

#[tokio::test]
async fn the_document_is_served_without_a_key_and_every_operation_lists_the_edge_errors() {
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
    let operations = operations(&doc);
    assert!(!operations.is_empty(), "no operation documented");
    for (method, path) in &operations {
        let operation = &doc["paths"][path][method];
        let responses = operation["responses"].as_object().unwrap();
        assert!(responses.contains_key("500"), "{method} {path}: no 500");
        if path.starts_with("/v1/") && path != "/v1/openapi.json" {
            assert!(responses.contains_key("401"), "{method} {path}: no 401");
            // The OpenAI-compatible routes answer in OpenAI's error shape.
            let openai = operation["tags"] == serde_json::json!(["openai"]);
            let shape = if openai {
                "OpenAiErrorBody"
            } else {
                "ErrorBody"
            };
            for status in ["400", "401", "404", "429"] {
                assert_eq!(
                    responses[status]["content"]["application/json"]["schema"]["$ref"],
                    format!("#/components/schemas/{shape}"),
                    "{method} {path} {status}"
                );
            }
        }
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The validators' limits are in the schemas.
    let agent = &doc["components"]["schemas"]["AgentBody"]["properties"];
    assert_eq!(agent["sessionKey"]["maxLength"], 256);
    assert_eq!(agent["idempotencyKey"]["maxLength"], 256);
    let events = &doc["paths"]["/v1/runs/{runId}/events"]["get"]["responses"]["200"]["content"];
    assert!(
        events["text/event-stream"].is_object(),
        "SSE not documented"
    );
}

/// A route as `(method, path)`: the method lower-case, the path in the document's form.
type Route = (String, String);

/// The operations `doc` documents.
fn operations(doc: &Value) -> BTreeSet<Route> {
    let paths = doc["paths"].as_object().unwrap();
    paths
        .iter()
        .flat_map(|(path, item)| {
            let methods = item.as_object().unwrap().keys();
            methods.map(move |method| (method.clone(), path.clone()))
        })
        .collect()
}

/// The methods a route can be served with (`HEAD` comes with `GET`).
const METHODS: [Method; 7] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::OPTIONS,
    Method::TRACE,
];

/// The routes the harness's router serves. axum has no API that lists a router's paths: they
/// are read from its `Debug` text (the path router's part, before its fallback router), so a
/// change of that text makes the comparison below fail rather than pass. The methods of each
/// path are found by asking: a method not served answers `405`.
async fn served(h: &Harness) -> BTreeSet<Route> {
    let text = format!("{:?}", h.app);
    let (path_router, _) = text
        .split_once("fallback_router")
        .expect("the router's Debug text names its fallback router");
    let paths: BTreeSet<&str> = path_router
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|quoted| quoted.starts_with('/'))
        .collect();
    let mut served = BTreeSet::new();
    for path in paths {
        let concrete: Vec<&str> = path
            .split('/')
            .map(|segment| {
                if segment.starts_with('{') {
                    "x"
                } else {
                    segment
                }
            })
            .collect();
        let concrete = concrete.join("/");
        for method in METHODS {
            let request =
                Harness::request(method.clone(), &concrete, Some(ACME_KEY), Body::from("{}"));
            let reply = h.send(request).await;
            if reply.status != StatusCode::METHOD_NOT_ALLOWED {
                served.insert((method.as_str().to_lowercase(), path.to_owned()));
            }
        }
    }
    served
}

#[tokio::test]
async fn every_served_route_is_documented_and_every_documented_one_served() {
    let h = Harness::new().await;
    let doc: Value = serde_json::from_str(agentlane_api::openapi_json()).unwrap();
    let documented = operations(&doc);
    let undocumented: BTreeSet<Route> = agentlane_api::UNDOCUMENTED
        .iter()
        .map(|(method, path)| ((*method).to_owned(), (*path).to_owned()))
        .collect();
    assert!(
        documented.is_disjoint(&undocumented),
        "a route listed as undocumented is documented"
    );
    let expected: BTreeSet<Route> = documented.union(&undocumented).cloned().collect();
    let served = served(&h).await;
    let not_documented: Vec<&Route> = served.difference(&expected).collect();
    let not_served: Vec<&Route> = expected.difference(&served).collect();
    assert!(
        not_documented.is_empty(),
        "served but not in the document (register it with `routes!` and a `#[utoipa::path]`, \
         or list it in UNDOCUMENTED): {not_documented:?}"
    );
    assert!(
        not_served.is_empty(),
        "in the document but not served: {not_served:?}"
    );
}

#[tokio::test]
async fn the_401_and_429_answers_document_the_headers_the_server_sends() {
    // GIVEN the served document, and a real 401
    let h = Harness::new().await;
    let doc = h
        .send(
            Request::get("/v1/openapi.json")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .json;
    let refused = h.get("/v1/runs/run_x", "not-a-key").await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(refused.headers["www-authenticate"], "Bearer");

    // THEN every authenticated operation documents WWW-Authenticate on 401 and an integer
    // Retry-After (at least 1) on 429
    for (method, path) in operations(&doc) {
        let responses = &doc["paths"][&path][&method]["responses"];
        if !path.starts_with("/v1/") || path == "/v1/openapi.json" {
            continue;
        }
        let auth = &responses["401"]["headers"]["WWW-Authenticate"];
        assert_eq!(auth["schema"]["type"], "string", "{method} {path}: {auth}");
        let retry = &responses["429"]["headers"]["Retry-After"];
        assert_eq!(
            retry["schema"]["type"], "integer",
            "{method} {path}: {retry}"
        );
        assert_eq!(retry["schema"]["minimum"], 1, "{method} {path}: {retry}");
    }
}

/// The document states the validators' bounds, from the constants the validators use: a
/// generated client (or a fuzzer) that keeps to the document is not refused for a number or a
/// length the document allowed.
#[test]
fn the_document_states_the_validators_bounds() {
    use agentlane_core::action::{MAX_ACTION_TIMEOUT_SECONDS, MAX_TURN_TOOLS};
    use agentlane_core::agent::MAX_INSTRUCTIONS_BYTES;
    use agentlane_core::spend::MAX_OUTPUT_TOKENS;
    let doc: Value = serde_json::from_str(agentlane_api::openapi_json()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let n = |v: u64| Value::from(v);
    let cases = [
        (
            "EveryScheduleInput",
            "everySeconds",
            "maximum",
            n(agentlane_scheduler::MAX_EVERY_SECONDS),
        ),
        ("EveryScheduleInput", "everySeconds", "minimum", n(1)),
        (
            "ChatCompletionRequest",
            "max_tokens",
            "maximum",
            n(u64::from(MAX_OUTPUT_TOKENS)),
        ),
        ("ChatCompletionRequest", "max_tokens", "minimum", n(1)),
        (
            "ChatCompletionRequest",
            "max_completion_tokens",
            "maximum",
            n(u64::from(MAX_OUTPUT_TOKENS)),
        ),
        (
            "ResponseRequest",
            "max_output_tokens",
            "maximum",
            n(u64::from(MAX_OUTPUT_TOKENS)),
        ),
        (
            "AgentBody",
            "maxOutputTokens",
            "maximum",
            n(u64::from(MAX_OUTPUT_TOKENS)),
        ),
        ("AgentBody", "tools", "maxItems", n(MAX_TURN_TOOLS as u64)),
        (
            "AgentSpec",
            "instructions",
            "maxLength",
            n(MAX_INSTRUCTIONS_BYTES as u64),
        ),
        ("AgentSpec", "historyMaxTurns", "minimum", n(1)),
        ("AgentTools", "client", "maxItems", n(MAX_TURN_TOOLS as u64)),
        (
            "ApprovalPolicy",
            "timeoutSeconds",
            "maximum",
            n(MAX_ACTION_TIMEOUT_SECONDS),
        ),
        ("ApprovalPolicy", "timeoutSeconds", "minimum", n(1)),
        (
            "HttpToolDef",
            "description",
            "maxLength",
            n(agentlane_tools::http_tool::MAX_DESCRIPTION_BYTES as u64),
        ),
        (
            "HttpToolDef",
            "timeoutMs",
            "maximum",
            n(agentlane_tools::http_tool::MAX_TIMEOUT.as_millis() as u64),
        ),
        ("ClientTool", "name", "maxLength", n(64)),
        ("RunBudget", "maxTokens", "minimum", n(1)),
        ("RunBudget", "maxCostUsd", "exclusiveMinimum", n(0)),
    ];
    for (schema, property, key, expected) in cases {
        assert_eq!(
            schemas[schema]["properties"][property][key], expected,
            "{schema}.{property}.{key}: {}",
            schemas[schema]["properties"][property]
        );
    }
    // The usage page's limit is the list routes' 1-1000.
    let usage = &doc["paths"]["/v1/usage"]["get"]["parameters"];
    let limit = usage
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap();
    assert_eq!(
        (&limit["schema"]["minimum"], &limit["schema"]["maximum"]),
        (&n(1), &n(1000))
    );
}
