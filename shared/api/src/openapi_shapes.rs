//! What generators need from the OpenAPI document beyond what the derives write: the variants
//! of the unions as named schemas (a tagged union with its `discriminator`), a `servers`
//! entry, and the frames of each Server-Sent Events answer as schemas.

use crate::error::ErrorBody;
use agentlane_core::{Event, EventStream, RunId, RunStatus};
use serde_json::json;
use utoipa::ToSchema;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{Discriminator, Schema};
use utoipa::openapi::server::ServerBuilder;
use utoipa::openapi::{OpenApi as Document, Ref, RefOr};

/// A union of the document and the names its variants get, in the order the derive writes
/// them; `tag`: the property whose one value names each variant (a `discriminator`).
struct Union {
    name: &'static str,
    tag: Option<&'static str>,
    variants: &'static [&'static str],
}

/// The unions whose variants the derives leave anonymous (`Message0..3` in a generated
/// client): their names, and the tag of each tagged one.
const UNIONS: &[Union] = &[
    Union {
        name: "Message",
        tag: Some("role"),
        variants: &[
            "UserMessage",
            "AssistantMessage",
            "CompactionMessage",
            "ToolMessage",
        ],
    },
    Union {
        name: "Schedule",
        tag: None,
        variants: &["CronSchedule", "EverySchedule", "AtSchedule"],
    },
    Union {
        name: "SecretRef",
        tag: None,
        variants: &["EnvSecretRef", "TenantSecretRef"],
    },
    Union {
        name: "ToolAuth",
        tag: Some("type"),
        variants: &["OAuth2ClientCredentialsAuth"],
    },
];

/// Names the variants of [`UNIONS`], adds the servers and the SSE frames.
pub(crate) fn shape(document: &mut Document) {
    for union in UNIONS {
        name_variants(document, union);
    }
    document.servers = Some(vec![
        ServerBuilder::new()
            .url("http://127.0.0.1:8787")
            .description(Some("`agentlane serve` (the default listen address)"))
            .build(),
        ServerBuilder::new()
            .url("{apiUrl}")
            .description(Some(
                "A deployment: the stack's `ApiUrl` output (HTTP API), or its `StreamUrl` \
                 (Function URL) for SSE and long waits",
            ))
            .parameter(
                "apiUrl",
                utoipa::openapi::server::ServerVariableBuilder::new()
                    .default_value("https://example.execute-api.us-east-1.amazonaws.com")
                    .description(Some("The base URL of the deployment")),
            )
            .build(),
    ]);
    add_sse_frames(document);
}

/// Moves each anonymous variant of `union` into its own schema and refers to it; a tagged
/// union gets its `discriminator` with the mapping of every tag value. A union that is not
/// the derive's `oneOf` of objects, or has another number of variants, is left alone (the
/// document test then names it).
fn name_variants(document: &mut Document, union: &Union) {
    let Some(components) = document.components.as_mut() else {
        return;
    };
    let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get(union.name).cloned() else {
        return;
    };
    if one_of.items.len() != union.variants.len() {
        return;
    }
    let mut one_of = one_of;
    let mut mapping = Vec::new();
    for (item, name) in one_of.items.iter_mut().zip(union.variants) {
        let RefOr::T(schema) = item else {
            continue;
        };
        if let Some(tag) = union.tag
            && let Some(value) = single_value(schema, tag)
        {
            mapping.push((value, format!("#/components/schemas/{name}")));
        }
        components
            .schemas
            .insert((*name).to_owned(), RefOr::T(schema.clone()));
        *item = RefOr::Ref(Ref::from_schema_name(*name));
    }
    if let Some(tag) = union.tag
        && mapping.len() == union.variants.len()
    {
        let mut discriminator = Discriminator::new(tag);
        discriminator.mapping = mapping.into_iter().collect();
        one_of.discriminator = Some(discriminator);
    }
    components
        .schemas
        .insert(union.name.to_owned(), RefOr::T(Schema::OneOf(one_of)));
}

/// The one value `property` may take in `schema` (a one-value `enum`).
fn single_value(schema: &Schema, property: &str) -> Option<String> {
    let Schema::Object(object) = schema else {
        return None;
    };
    let RefOr::T(Schema::Object(tag)) = object.properties.get(property)? else {
        return None;
    };
    match tag.enum_values.as_deref() {
        Some([serde_json::Value::String(value)]) => Some(value.clone()),
        _ => None,
    }
}

/// One frame of `GET /v1/runs/{runId}/events` as SSE: an event of the run (`id:` its seq,
/// `event:` its stream, `data:` the event as JSON).
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct RunEventFrame {
    /// The event's `seq` (send it back as `Last-Event-ID` to resume).
    id: String,
    event: EventStream,
    data: Event,
}

/// The last frame once the run ended (or paused) and every event before it was sent.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct RunEndFrame {
    #[schema(value_type = String, pattern = "^end$")]
    event: String,
    data: RunEndData,
}

/// `data` of the `end` frame.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct RunEndData {
    run_id: RunId,
    status: RunStatus,
}

/// The last frame of a stream cut by the server's deadline (the streaming Lambda's): no
/// `end`; reconnect after `retry` ms with `Last-Event-ID` = `id` (when any event was sent).
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct RunReconnectFrame {
    #[schema(value_type = String, pattern = "^reconnect$")]
    event: String,
    id: Option<String>,
    /// Milliseconds to wait before reconnecting.
    retry: u64,
    data: RunReconnectData,
}

/// `data` of the `reconnect` frame.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct RunReconnectData {
    run_id: RunId,
    /// `deadline`.
    reason: String,
    last_event_id: Option<u64>,
}

/// A frame that ends the stream on a server failure: `data` is the error body.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct RunErrorFrame {
    #[schema(value_type = String, pattern = "^error$")]
    event: String,
    data: ErrorBody,
}

/// The SSE routes and the schema of their frames: (path, method, frame union).
const SSE_ROUTES: &[(&str, &str)] = &[("/v1/runs/{runId}/events", "RunStreamFrame")];

/// Registers the frame schemas and points each SSE answer at its frames with the
/// `x-sse-frame` extension (OpenAPI 3.1 has no schema for a stream of frames; keep-alive
/// comments, `: keep-alive`, are not frames).
/// Adds `T`'s schema under its name, and the schemas it refers to where absent.
fn register<T: ToSchema>(components: &mut utoipa::openapi::Components) {
    let mut nested: Vec<(String, RefOr<Schema>)> = Vec::new();
    T::schemas(&mut nested);
    for (name, schema) in nested {
        components.schemas.entry(name).or_insert(schema);
    }
    components
        .schemas
        .insert(T::name().into_owned(), T::schema());
}

fn add_sse_frames(document: &mut Document) {
    let components = document.components.get_or_insert_with(Default::default);
    register::<RunEventFrame>(components);
    register::<RunEndFrame>(components);
    register::<RunReconnectFrame>(components);
    register::<RunErrorFrame>(components);
    let union = utoipa::openapi::schema::OneOfBuilder::new()
        .item(Ref::from_schema_name("RunEventFrame"))
        .item(Ref::from_schema_name("RunEndFrame"))
        .item(Ref::from_schema_name("RunReconnectFrame"))
        .item(Ref::from_schema_name("RunErrorFrame"))
        .description(Some(
            "One frame of the run's event stream: events (`event` = their stream), then \
             `end`; or `reconnect` at the server's deadline; or `error`",
        ));
    components
        .schemas
        .insert("RunStreamFrame".to_owned(), union.into());
    for (path, frame) in SSE_ROUTES {
        let Some(item) = document.paths.paths.get_mut(*path) else {
            continue;
        };
        let Some(operation) = item.get.as_mut() else {
            continue;
        };
        let Some(RefOr::T(response)) = operation.responses.responses.get_mut("200") else {
            continue;
        };
        if let Some(RefOr::T(content)) = response.content.get_mut("text/event-stream") {
            let mut extensions = Extensions::default();
            extensions.insert(
                "x-sse-frame".to_owned(),
                json!({"$ref": format!("#/components/schemas/{frame}")}),
            );
            content.extensions = Some(extensions);
        }
    }
}
