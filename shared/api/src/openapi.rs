//! The OpenAPI 3.1 document of the API, generated from the handlers' `#[utoipa::path]`
//! annotations and the request/response types' `ToSchema` derives, so it cannot drift from
//! the code: its operations are those the router registers (`crate::routes::table`), each
//! with the annotation of its handler. Served at `GET /v1/openapi.json` (no auth) and committed
//! as `docs/openapi.json` (regenerate with `agentlane openapi > docs/openapi.json`; a test
//! fails when they differ).

use crate::error::ErrorBody;
use crate::openai::OpenAiErrorBody;
use crate::routes;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

/// The document's frame: its info, tags, security and the error schema. [`document`] adds the
/// routes (with the schemas they use) and the [`Conventions`].
#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentlane",
        description = "The HTTP API of agentlane, a serverless runtime for conversational AI \
agents: submit turns, wait for them, read runs, events (JSON pages or SSE), transcripts and \
sessions, manage cron jobs; talk to agents with OpenAI's SDKs (`/v1/models`, \
`/v1/chat/completions`, `/v1/responses`). Every error is `{\"error\": {\"code\", \"message\"}}`, \
but on the OpenAI-compatible routes, which answer in OpenAI's shape \
(`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`). All `/v1` routes but this \
document take `Authorization: Bearer <key>`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(ErrorBody, OpenAiErrorBody)),
    security(("bearer" = [])),
    tags(
        (name = "agent", description = "Submit turns and wait for them"),
        (name = "runs", description = "Runs, their events and abort"),
        (name = "sessions", description = "Sessions, transcripts and resets"),
        (name = "cron", description = "Scheduled, isolated turns"),
        (name = "secrets", description = "A tenant's secrets: written once, never shown back, sent only by its own agents' tools"),
        (name = "openai", description = "OpenAI-compatible: each agent is a model; chat \
completions and responses are turns. Errors in OpenAI's shape"),
        (name = "health", description = "Liveness and this document"),
    )
)]
pub struct ApiDoc;

/// Adds the bearer scheme and, to every operation, the error answers any request can get
/// (the edge's limits and failures), so the document lists every status the server sends.
struct Conventions;

/// `(status, when)` of the errors every operation can answer.
const COMMON_ERRORS: &[(&str, &str)] = &[
    (
        "408",
        "`timeout`: the request or its body did not complete in time",
    ),
    ("414", "`uri_too_long`: the path and query are too long"),
    ("500", "`internal`: see the server logs"),
];

/// `(status, when)` of the further errors of authenticated operations.
const AUTHENTICATED_ERRORS: &[(&str, &str)] = &[
    (
        "400",
        "`invalid_request`: a malformed parameter or body; the message says what to fix",
    ),
    ("401", "`unauthorized`: missing or unknown API key"),
    (
        "404",
        "`not_found`: no such resource for this tenant (malformed ids included)",
    ),
    (
        "413",
        "`payload_too_large`: the body or a field is too large",
    ),
    (
        "429",
        "`rate_limited`: a tenant limit is reached or the backend throttles; see `Retry-After`",
    ),
    (
        "503",
        "`unavailable`: the store or the queue cannot be reached; see `Retry-After`",
    ),
];

impl Modify for Conventions {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key of `AGENTLANE_API_KEYS` (or `<data-dir>/api-key`)",
                    ))
                    .build(),
            ),
        );
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.post,
                &mut item.patch,
                &mut item.delete,
                &mut item.put,
            ];
            for operation in operations.into_iter().flatten() {
                // `security(())` marks the routes that need no key.
                let open = operation
                    .security
                    .as_ref()
                    .is_some_and(|s| s.iter().all(is_empty_requirement));
                let extra = if open {
                    COMMON_ERRORS.to_vec()
                } else {
                    [AUTHENTICATED_ERRORS, COMMON_ERRORS].concat()
                };
                let shape = if is_openai(operation) {
                    ErrorShape::OpenAi
                } else {
                    ErrorShape::Api
                };
                for (status, description) in extra {
                    operation
                        .responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error_response(status, description, shape));
                }
            }
        }
    }
}

fn is_empty_requirement(requirement: &utoipa::openapi::security::SecurityRequirement) -> bool {
    serde_json::to_value(requirement)
        .map(|v| v.as_object().is_some_and(|o| o.is_empty()))
        .unwrap_or(false)
}

/// The headers some error answers carry: 401 names the auth scheme, 429 and 503 say when to
/// retry.
fn error_headers(status: &str) -> Vec<(&'static str, utoipa::openapi::header::Header)> {
    use utoipa::openapi::Type;
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::schema::ObjectBuilder;
    match status {
        "401" => vec![(
            "WWW-Authenticate",
            HeaderBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                .description(Some("`Bearer`: the scheme the API expects"))
                .build(),
        )],
        "429" | "503" => vec![(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(1)),
                ))
                .description(Some("Whole seconds to wait before retrying (at least 1)"))
                .build(),
        )],
        _ => Vec::new(),
    }
}

/// The error body an operation answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorShape {
    /// `{"error": {"code", "message"}}`.
    Api,
    /// OpenAI's, on the OpenAI-compatible routes (tag `openai`); their edge errors (a
    /// request or body timeout, a URI too long, a failing layer) keep the API's shape.
    OpenAi,
}

fn is_openai(operation: &utoipa::openapi::path::Operation) -> bool {
    operation
        .tags
        .as_ref()
        .is_some_and(|tags| tags.iter().any(|t| t == "openai"))
}

fn schema_ref(name: std::borrow::Cow<'static, str>) -> RefOr<utoipa::openapi::Schema> {
    RefOr::Ref(utoipa::openapi::Ref::from_schema_name(name))
}

fn error_response(
    status: &str,
    description: &str,
    shape: ErrorShape,
) -> RefOr<utoipa::openapi::Response> {
    let mut response = ResponseBuilder::new();
    for (name, header) in error_headers(status) {
        response = response.header(name, header);
    }
    let schema = match (shape, status) {
        (ErrorShape::Api, _) | (ErrorShape::OpenAi, "414") => schema_ref(ErrorBody::name()),
        // The handler's own (OpenAI's) or the edge's (the timeout and error layers).
        (ErrorShape::OpenAi, "408" | "500") => utoipa::openapi::schema::OneOfBuilder::new()
            .item(schema_ref(OpenAiErrorBody::name()))
            .item(schema_ref(ErrorBody::name()))
            .into(),
        (ErrorShape::OpenAi, _) => schema_ref(OpenAiErrorBody::name()),
    };
    response
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(schema)).build(),
        )
        .build()
        .into()
}

/// The document: [`ApiDoc`], every route the router registers with its annotation, and the
/// error answers of [`Conventions`].
pub fn document() -> Document {
    let routes::Table { waits, rest } = routes::table::<true>();
    let mut document = ApiDoc::openapi();
    document.merge(rest.into_openapi());
    document.merge(waits.into_openapi());
    Conventions.modify(&mut document);
    flatten_agent_schemas(&mut document);
    crate::openapi_shapes::shape(&mut document);
    document
}

/// `Agent` and `NewAgentBody` are a few fields plus those of an `AgentSpec`, which admits no
/// other field: as the `allOf` utoipa writes for a flattened struct, the parts contradict each
/// other (the spec forbids `agentId`). Each is written out as one object instead.
fn flatten_agent_schemas(document: &mut Document) {
    use utoipa::openapi::schema::Schema;
    let Some(components) = document.components.as_mut() else {
        return;
    };
    let Some(RefOr::T(Schema::Object(spec))) = components.schemas.get("AgentSpec") else {
        return;
    };
    let spec = spec.clone();
    for name in ["Agent", "NewAgentBody"] {
        let Some(RefOr::T(Schema::AllOf(all))) = components.schemas.get(name) else {
            continue;
        };
        let mut flat = spec.clone();
        for item in &all.items {
            if let RefOr::T(Schema::Object(part)) = item {
                for (field, schema) in &part.properties {
                    flat.properties.insert(field.clone(), schema.clone());
                }
                flat.required.extend(part.required.iter().cloned());
            }
        }
        flat.description = all.description.clone();
        components
            .schemas
            .insert(name.into(), RefOr::T(Schema::Object(flat)));
    }
}

/// The document as pretty JSON with a trailing newline, generated from the code: what
/// `agentlane openapi` prints and `docs/openapi.json` holds (a test compares them).
pub fn openapi_json() -> &'static str {
    use std::sync::OnceLock;
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        // A document of plain strings and maps always serialises.
        let mut text = document()
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"openapi: {e}\"}}"));
        text.push('\n');
        text
    })
}

/// The committed `docs/openapi.json`, what `GET /v1/openapi.json` serves: the text
/// [`openapi_json`] generates (a test fails when they differ), without the code that generates
/// it in the server, so the Lambda functions link none of it.
pub const SERVED_DOCUMENT: &str = include_str!("../../../docs/openapi.json");

/// `GET /v1/openapi.json`, no auth: this document.
#[utoipa::path(get, path = "/v1/openapi.json", operation_id = "openapi", tag = "health",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", body = Object)))]
pub async fn serve_document() -> Response {
    ([(CONTENT_TYPE, "application/json")], SERVED_DOCUMENT).into_response()
}
