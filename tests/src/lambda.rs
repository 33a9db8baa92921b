//! A local fake of the Lambda Runtime API that speaks the response-streaming protocol, and the
//! ingress function (`agentlane-ingress-under-test`) run against it as a child process.
//!
//! The fake hands out invocations on `GET /2018-06-01/runtime/invocation/next` (the event as
//! the body; `Lambda-Runtime-Aws-Request-Id`, `Lambda-Runtime-Deadline-Ms`, ... as headers) and
//! records each `POST /2018-06-01/runtime/invocation/{id}/response` as it arrives: its headers
//! (a streaming function sends `Lambda-Runtime-Function-Response-Mode: streaming` and
//! `Transfer-Encoding: chunked`) and every body chunk with the instant it was received. The
//! body of a streamed HTTP response is a JSON prelude (status, headers), eight NUL bytes, then
//! the payload — what a Function URL forwards to the client.

use crate::error::{HarnessError, HarnessResult};
use crate::process::{LogFiles, kill_and_reap, spawn_logged};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tempfile::TempDir;
use tokio::sync::mpsc;

/// What the function posted for one invocation, as it arrived.
#[derive(Debug)]
pub enum Posted {
    /// The response's request headers (first, once).
    Head(HeaderMap),
    /// One body chunk and when it was received.
    Chunk(Instant, Bytes),
    /// The body ended (`None`) or broke (`Some(reason)`).
    End(Option<String>),
    /// The function reported an invocation error (`/error`).
    Error(String),
}

struct Queued {
    id: String,
    deadline: SystemTime,
    event: Value,
}

#[derive(Clone)]
struct Fake {
    next: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Queued>>>,
    responses: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Posted>>>>,
}

/// The fake Runtime API on `127.0.0.1:<port>`. Dropping it stops the server.
pub struct FakeRuntime {
    address: String,
    queue: mpsc::UnboundedSender<Queued>,
    responses: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Posted>>>>,
    counter: std::sync::atomic::AtomicU64,
    server: tokio::task::JoinHandle<()>,
}

impl FakeRuntime {
    /// Starts the server on a free loopback port (call inside a tokio runtime).
    pub async fn start() -> HarnessResult<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| HarnessError::io("bind the fake Lambda Runtime API", e))?;
        let address = listener
            .local_addr()
            .map_err(|e| HarnessError::io("fake Lambda Runtime API address", e))?
            .to_string();
        let (queue, next) = mpsc::unbounded_channel();
        let responses = Arc::new(Mutex::new(HashMap::new()));
        let fake = Fake {
            next: Arc::new(tokio::sync::Mutex::new(next)),
            responses: responses.clone(),
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(fake);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeRuntime {
            address,
            queue,
            responses,
            counter: std::sync::atomic::AtomicU64::new(0),
            server,
        })
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Queues one invocation with `event` as its payload, cut off at `deadline`, and returns
    /// what the function will post for it.
    pub fn invoke(&self, event: Value, deadline: SystemTime) -> Invocation {
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let id = format!("fake-invocation-{n}");
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.responses).insert(id.clone(), tx);
        let _ = self.queue.send(Queued {
            id: id.clone(),
            deadline,
            event,
        });
        Invocation { id, posted: rx }
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn next_invocation(State(fake): State<Fake>) -> Response {
    let Some(queued) = fake.next.lock().await.recv().await else {
        return StatusCode::GONE.into_response();
    };
    let deadline_ms = queued
        .deadline
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    (
        [
            ("lambda-runtime-aws-request-id", queued.id),
            ("lambda-runtime-deadline-ms", deadline_ms.to_string()),
            (
                "lambda-runtime-invoked-function-arn",
                "arn:aws:lambda:us-east-1:123456789012:function:ingress-stream".to_owned(),
            ),
            (
                "lambda-runtime-trace-id",
                "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1".to_owned(),
            ),
            ("content-type", "application/json".to_owned()),
        ],
        queued.event.to_string(),
    )
        .into_response()
}

async fn response(
    State(fake): State<Fake>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Body,
) -> StatusCode {
    let Some(tx) = lock(&fake.responses).get(&id).cloned() else {
        return StatusCode::NOT_FOUND;
    };
    let _ = tx.send(Posted::Head(headers));
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => {
                let _ = tx.send(Posted::Chunk(Instant::now(), bytes));
            }
            Err(error) => {
                let _ = tx.send(Posted::End(Some(error.to_string())));
                return StatusCode::BAD_REQUEST;
            }
        }
    }
    let _ = tx.send(Posted::End(None));
    StatusCode::ACCEPTED
}

async fn error(State(fake): State<Fake>, UrlPath(id): UrlPath<String>, body: Bytes) -> StatusCode {
    if let Some(tx) = lock(&fake.responses).get(&id) {
        let _ = tx.send(Posted::Error(String::from_utf8_lossy(&body).into_owned()));
    }
    StatusCode::ACCEPTED
}

async fn init_error(body: Bytes) -> StatusCode {
    eprintln!(
        "ingress init error: {}",
        String::from_utf8_lossy(&body).into_owned()
    );
    StatusCode::ACCEPTED
}

/// One invocation's response as the function posts it.
pub struct Invocation {
    /// The request id the fake gave it.
    pub id: String,
    posted: mpsc::UnboundedReceiver<Posted>,
}

/// One SSE frame of a streamed response and when its last byte arrived.
#[derive(Debug, Clone)]
pub struct TimedFrame {
    /// When the chunk completing the frame was received.
    pub at: Instant,
    /// `event:` (`message` when absent; `comment` for a comment-only frame).
    pub event: String,
    /// `id:`.
    pub id: Option<String>,
    /// `retry:` (ms).
    pub retry: Option<u64>,
    /// `data:` as JSON (`Null` when absent or not JSON).
    pub data: Value,
}

/// A whole streamed response.
#[derive(Debug)]
pub struct Streamed {
    /// Headers of the function's POST to the Runtime API.
    pub runtime_headers: HeaderMap,
    /// The prelude (`statusCode`, `headers`, `cookies`).
    pub prelude: Value,
    /// Payload chunks with their arrival times (the prelude and its delimiter removed).
    pub chunks: Vec<(Instant, Bytes)>,
    /// When the response body ended.
    pub ended_at: Instant,
}

impl Invocation {
    /// Everything the function posts until the body ends, or an error after `within`.
    pub async fn collect(mut self, within: Duration) -> HarnessResult<Streamed> {
        let timeout = |what: &str| {
            HarnessError::io(
                format!("invocation {}: {what}", self.id),
                std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
            )
        };
        let deadline = tokio::time::Instant::now() + within;
        let mut head = None;
        let mut raw: Vec<(Instant, Bytes)> = Vec::new();
        loop {
            let posted = tokio::time::timeout_at(deadline, self.posted.recv())
                .await
                .map_err(|_| timeout("no complete response"))?
                .ok_or_else(|| timeout("the fake runtime stopped"))?;
            match posted {
                Posted::Head(headers) => head = Some(headers),
                Posted::Chunk(at, bytes) => raw.push((at, bytes)),
                Posted::End(None) => break,
                Posted::End(Some(reason)) | Posted::Error(reason) => {
                    return Err(HarnessError::io(
                        format!("invocation {}", self.id),
                        std::io::Error::other(reason),
                    ));
                }
            }
        }
        let ended_at = Instant::now();
        let (prelude, chunks) = split_prelude(raw);
        Ok(Streamed {
            runtime_headers: head.unwrap_or_default(),
            prelude,
            chunks,
            ended_at,
        })
    }
}

/// Splits the streamed body at the 8-NUL delimiter: the JSON prelude, then the payload.
fn split_prelude(raw: Vec<(Instant, Bytes)>) -> (Value, Vec<(Instant, Bytes)>) {
    const DELIMITER: [u8; 8] = [0; 8];
    let mut seen: Vec<u8> = Vec::new();
    let mut chunks = Vec::new();
    let mut prelude = None;
    for (at, bytes) in raw {
        if prelude.is_some() {
            chunks.push((at, bytes));
            continue;
        }
        seen.extend_from_slice(&bytes);
        if let Some(end) = seen.windows(8).position(|w| w == DELIMITER) {
            prelude = Some(serde_json::from_slice(&seen[..end]).unwrap_or(Value::Null));
            let rest = seen.split_off(end + 8);
            if !rest.is_empty() {
                chunks.push((at, Bytes::from(rest)));
            }
        }
    }
    (prelude.unwrap_or(Value::Null), chunks)
}

impl Streamed {
    /// The payload as text.
    pub fn text(&self) -> String {
        let bytes: Vec<u8> = self.chunks.iter().flat_map(|(_, b)| b.to_vec()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The payload's SSE frames, each stamped with the arrival of its last chunk.
    pub fn frames(&self) -> Vec<TimedFrame> {
        let mut frames = Vec::new();
        let mut buffer = String::new();
        for (at, bytes) in &self.chunks {
            buffer.push_str(&String::from_utf8_lossy(bytes));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                frames.push(parse_frame(*at, &block));
            }
        }
        frames
    }
}

fn parse_frame(at: Instant, block: &str) -> TimedFrame {
    let field = |name: &str| {
        block
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let comment = block.lines().all(|l| l.starts_with(':') || l.is_empty());
    let event = if comment {
        "comment".to_owned()
    } else {
        field("event:").unwrap_or_else(|| "message".to_owned())
    };
    TimedFrame {
        at,
        event,
        id: field("id:"),
        retry: field("retry:").and_then(|r| r.parse().ok()),
        data: field("data:")
            .and_then(|d| serde_json::from_str(&d).ok())
            .unwrap_or(Value::Null),
    }
}

/// A Function URL event (payload format 2.0) for `method path` with `headers` and a JSON body.
pub fn function_url_event_with_body(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Value {
    let mut event = function_url_event(method, path, headers);
    event["headers"]["content-type"] = json!("application/json");
    event["body"] = json!(body.to_string());
    event
}

/// A Function URL event (payload format 2.0) for `method path` with `headers`.
pub fn function_url_event(method: &str, path: &str, headers: &[(&str, &str)]) -> Value {
    let mut map = serde_json::Map::new();
    map.insert("host".into(), json!("abc123.lambda-url.us-east-1.on.aws"));
    for (name, value) in headers {
        map.insert(name.to_ascii_lowercase(), json!(value));
    }
    json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": map,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "abc123",
            "domainName": "abc123.lambda-url.us-east-1.on.aws",
            "domainPrefix": "abc123",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "agentlane-e2e"
            },
            "requestId": "e2e-request",
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Dec/2026:04:00:00 +0000",
            "timeEpoch": 1_796_097_600_000u64
        },
        "isBase64Encoded": false
    })
}

/// The ingress function in streaming mode, a child process polling a [`FakeRuntime`].
/// Dropping it kills it (and prints its stderr when the test is failing).
pub struct IngressProcess {
    child: Option<Child>,
    logs: LogFiles,
    _dir: TempDir,
}

impl IngressProcess {
    /// Starts `binary` (pass `env!("CARGO_BIN_EXE_agentlane-ingress-under-test")`) with
    /// `AGENTLANE_INGRESS_MODE=streaming`, the Lambda environment pointing at `runtime`, and
    /// `env` (the backend and keys, e.g. [`crate::Server::backend_env`]).
    pub fn start_streaming(
        binary: impl Into<PathBuf>,
        runtime: &FakeRuntime,
        env: &[(String, String)],
    ) -> HarnessResult<Self> {
        let dir = tempfile::Builder::new()
            .prefix("agentlane-ingress-")
            .tempdir()
            .map_err(|e| HarnessError::io("create ingress temp dir", e))?;
        let logs = LogFiles::in_dir(dir.path(), "ingress");
        let mut command = Command::new(binary.into());
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if ["AGENTLANE_", "OPENAI_", "ANTHROPIC_", "AWS_"]
                .iter()
                .any(|prefix| name.starts_with(prefix))
            {
                command.env_remove(name.as_ref());
            }
        }
        command
            .env("AWS_LAMBDA_RUNTIME_API", runtime.address())
            .env("AWS_LAMBDA_FUNCTION_NAME", "agentlane-ingress-stream")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AGENTLANE_INGRESS_MODE", "streaming")
            .env("AGENTLANE_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let child = spawn_logged(&mut command, &logs, "agentlane ingress (streaming)")?;
        Ok(IngressProcess {
            child: Some(child),
            logs,
            _dir: dir,
        })
    }

    /// The end of the function's stderr.
    pub fn stderr_tail(&self, max: usize) -> String {
        self.logs.stderr_tail(max)
    }
}

impl Drop for IngressProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
        if std::thread::panicking() {
            eprintln!(
                "--- ingress stderr (tail) ---\n{}",
                self.logs.stderr_tail(8000)
            );
        }
    }
}
