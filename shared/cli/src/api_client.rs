//! A client of the agentlane HTTP API, shared by the `agentlane` client commands and the
//! end-to-end test harness: one base URL, one way of authenticating, the status left to the
//! caller except where a call says otherwise.

use eventsource_stream::{Event as SseFrame, EventStreamError, Eventsource};
use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

mod agents;

/// The longest single `agent.wait` call while waiting for a run (below API Gateway's 30 s).
const WAIT_SLICE: Duration = Duration::from_secs(20);

/// How a client authenticates.
#[derive(Debug, Clone)]
pub enum Auth {
    /// No `Authorization` header.
    None,
    /// `Authorization: Bearer <key>`.
    Bearer(String),
    /// This exact `Authorization` value (e.g. a malformed one).
    Header(String),
}

/// A request body.
#[derive(Debug, Clone)]
pub enum RawBody {
    /// Serialized JSON.
    Json(Value),
    /// Any text, sent as `application/json` (e.g. malformed JSON).
    Text(String),
}

/// What came back, whatever the status.
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// The status.
    pub status: StatusCode,
    /// The `content-type` header, if any.
    pub content_type: Option<String>,
    /// The body text.
    pub body: String,
}

impl RawResponse {
    /// The body as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The `{"error": {"code", "message"}}` of an error answer, as `code: message`.
    fn error_text(&self) -> String {
        let body = self.json();
        let field = |name: &str| {
            body.pointer(&format!("/error/{name}"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match (field("code"), field("message")) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            _ => self.body.chars().take(2000).collect(),
        }
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No status came back (connection refused, reset, timed out).
    #[error("{}", transport_message(method, url, error))]
    Transport {
        /// The request method.
        method: Method,
        /// The full URL.
        url: String,
        /// The transport error (its causes are in the message, so it is not a `source`).
        error: reqwest::Error,
    },
    /// The API answered with an error status.
    #[error("{request}: {}: {}", .response.status, .response.error_text())]
    Status {
        /// Method and path.
        request: String,
        /// The whole answer.
        response: RawResponse,
    },
}

/// One line for a request that got no answer: where it looked, and, when nothing listens
/// there, whether `serve` runs and how to point the client elsewhere.
fn transport_message(method: &Method, url: &str, source: &reqwest::Error) -> String {
    let mut cause = String::new();
    let mut next = std::error::Error::source(source);
    while let Some(inner) = next {
        cause = inner.to_string();
        next = inner.source();
    }
    if cause.is_empty() {
        cause = source.without_url_ref();
    }
    if source.is_connect() {
        let base = url.split("/v1/").next().unwrap_or(url);
        format!(
            "cannot reach the agentlane server at {base} ({cause}): is `agentlane serve` running \
             there? Point the client elsewhere with --url or AGENTLANE_URL"
        )
    } else if source.is_timeout() {
        format!("{method} {url}: no answer in time")
    } else {
        format!("{method} {url}: {cause}")
    }
}

/// `error`'s text without the URL reqwest puts in it.
trait WithoutUrlRef {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrlRef for reqwest::Error {
    fn without_url_ref(&self) -> String {
        let text = self.to_string();
        match self.url() {
            Some(url) => text.replace(&format!(" ({url})"), ""),
            None => text,
        }
    }
}

/// The API at one base URL, as one caller.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    auth: Auth,
    timeout: Option<Duration>,
}

impl ApiClient {
    /// A client of the API at `base` (`http://127.0.0.1:8787`), with no request timeout.
    pub fn new(base: &str, auth: Auth) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: base.trim_end_matches('/').to_owned(),
            auth,
            timeout: None,
        }
    }

    /// Uses `http` for every request (e.g. one that ignores proxies).
    pub fn with_http(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// Fails any request but the event stream that takes longer than `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// A request to `path` with this client's base URL and `Authorization`, for callers that
    /// need the raw response (e.g. a stream held open unread).
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.http.request(method, format!("{}{path}", self.base));
        match &self.auth {
            Auth::None => builder,
            Auth::Bearer(key) => builder.bearer_auth(key),
            Auth::Header(value) => builder.header(AUTHORIZATION, value.clone()),
        }
    }

    fn transport(&self, method: Method, path: &str) -> impl FnOnce(reqwest::Error) -> ApiError {
        let url = format!("{}{path}", self.base);
        move |error| ApiError::Transport { method, url, error }
    }

    /// Any request; the status is not checked.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<RawBody>,
    ) -> Result<RawResponse, ApiError> {
        let mut builder = self.request(method.clone(), path);
        if let Some(timeout) = self.timeout {
            builder = builder.timeout(timeout);
        }
        builder = match body {
            None => builder,
            Some(RawBody::Json(value)) => builder
                .header(CONTENT_TYPE, "application/json")
                .body(value.to_string()),
            Some(RawBody::Text(text)) => {
                builder.header(CONTENT_TYPE, "application/json").body(text)
            }
        };
        let response = builder
            .send()
            .await
            .map_err(self.transport(method.clone(), path))?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response
            .text()
            .await
            .map_err(self.transport(method, path))?;
        Ok(RawResponse {
            status,
            content_type,
            body,
        })
    }

    /// A request that must succeed (2xx); its body as JSON.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ApiError> {
        let request = format!("{method} {path}");
        let response = self.send(method, path, body.map(RawBody::Json)).await?;
        if !response.status.is_success() {
            return Err(ApiError::Status { request, response });
        }
        Ok(response.json())
    }

    /// Waits with `agent.wait` until the run ends or `within` passes (no limit when `None`);
    /// returns the last answer (`status` `timeout` or `pending` when it did not end in time).
    pub async fn wait_until_done(
        &self,
        run_id: &str,
        within: Option<Duration>,
    ) -> Result<Value, ApiError> {
        let started = Instant::now();
        loop {
            let slice = within.map_or(WAIT_SLICE, |w| {
                w.saturating_sub(started.elapsed()).min(WAIT_SLICE)
            });
            let slice_ms = u64::try_from(slice.as_millis()).unwrap_or(u64::MAX);
            let reply = self
                .call(
                    Method::POST,
                    "/v1/agent.wait",
                    Some(json!({ "runId": run_id, "timeoutMs": slice_ms })),
                )
                .await?;
            // `timeout` is also the answer for a run that ended `timeout`: only a run still
            // queued or running is worth another wait.
            let still_going = matches!(
                reply.get("status").and_then(Value::as_str),
                Some("timeout" | "pending")
            ) && matches!(
                reply.get("runStatus").and_then(Value::as_str),
                Some("queued" | "running") | None
            );
            let out_of_time = within.is_some_and(|w| started.elapsed() >= w);
            if !still_going || out_of_time {
                return Ok(reply);
            }
        }
    }

    /// The run's events as SSE (`Accept: text/event-stream`): the answer's status and content
    /// type, and its frames until the server closes the stream (no request timeout applies).
    pub async fn event_stream(&self, run_id: &str) -> Result<EventStream, ApiError> {
        self.event_stream_after(run_id, None).await
    }

    /// [`event_stream`](Self::event_stream) resuming after the event `last_event_id` (sent as
    /// `Last-Event-ID`), as after a `reconnect` frame of the streaming Lambda.
    pub async fn event_stream_after(
        &self,
        run_id: &str,
        last_event_id: Option<&str>,
    ) -> Result<EventStream, ApiError> {
        let path = format!("/v1/runs/{run_id}/events");
        let mut request = self
            .request(Method::GET, &path)
            .header(ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request
            .send()
            .await
            .map_err(self.transport(Method::GET, &path))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(ApiError::Status {
                request: format!("GET {path} (SSE)"),
                response: RawResponse {
                    status,
                    content_type: None,
                    body,
                },
            });
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Ok(EventStream {
            content_type,
            frames: response.bytes_stream().eventsource().boxed(),
        })
    }
}

/// An open SSE answer of `GET /v1/runs/{id}/events`.
pub struct EventStream {
    /// The answer's `content-type`.
    pub content_type: String,
    /// The frames: `id: seq`, `event: <stream>`, `data: <event JSON>`, and last `event: end`.
    pub frames: BoxStream<'static, Result<SseFrame, EventStreamError<reqwest::Error>>>,
}
