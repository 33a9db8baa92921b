//! A small typed client for the agentlane HTTP API, bound to one API key: the CLI's
//! [`ApiClient`] with the answers decoded into the harness's views and every failure a
//! [`HarnessError`].

use crate::error::{HarnessError, HarnessResult, truncate};
use crate::views::{Accepted, EventsPage, RunView, TranscriptView, WaitReply, WaitStatus};
use agentlane_cli::api_client::{ApiClient, ApiError, Auth};
pub use agentlane_cli::api_client::{RawBody, RawResponse};
use agentlane_core::Event;
use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// What an SSE follower received.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SseEvents {
    /// The run's events, in the order received.
    pub events: Vec<Event>,
    /// The data of the closing `event: end` frame (`{runId, status}`), if one came.
    pub end: Option<Value>,
}

impl From<ApiError> for HarnessError {
    fn from(error: ApiError) -> Self {
        match error {
            ApiError::Transport {
                method,
                url,
                error: source,
            } => HarnessError::Http {
                method: method.to_string(),
                url,
                source,
            },
            ApiError::Status { request, response } => HarnessError::UnexpectedStatus {
                request,
                expected: 200,
                status: response.status.as_u16(),
                body: truncate(&response.body, 2000),
            },
        }
    }
}

/// The API at one base URL, as one caller.
#[derive(Debug, Clone)]
pub struct Client {
    api: ApiClient,
}

impl Client {
    /// A client for `base` (`http://127.0.0.1:PORT`) with `Authorization: Bearer <key>`.
    pub fn new(base: &str, api_key: &str) -> Self {
        Self::build(base, Auth::Bearer(api_key.to_owned()))
    }

    /// A client sending no `Authorization` header.
    pub fn anonymous(base: &str) -> Self {
        Self::build(base, Auth::None)
    }

    /// A client sending this exact `Authorization` header value.
    pub fn with_authorization(base: &str, header: &str) -> Self {
        Self::build(base, Auth::Header(header.to_owned()))
    }

    fn build(base: &str, auth: Auth) -> Self {
        // Building a plain client only fails when the TLS backend cannot start; the tests only
        // speak plain HTTP on loopback, so fall back to the default client then.
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap_or_default();
        Client {
            api: ApiClient::new(base, auth)
                .with_http(http)
                .with_timeout(Duration::from_secs(90)),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> &str {
        self.api.base_url()
    }

    /// Any request; the status is not checked.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<RawBody>,
    ) -> HarnessResult<RawResponse> {
        Ok(self.api.send(method, path, body).await?)
    }

    /// A JSON request; returns the status and the body as JSON (`Null` if it is not JSON).
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> HarnessResult<(StatusCode, Value)> {
        let response = self.raw(method, path, body.map(RawBody::Json)).await?;
        let value = response.json();
        Ok((response.status, value))
    }

    /// A request that must answer `expected`, decoded as `T`.
    async fn expect<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        expected: StatusCode,
    ) -> HarnessResult<T> {
        let what = format!("{method} {path}");
        let response = self.raw(method, path, body.map(RawBody::Json)).await?;
        if response.status != expected {
            return Err(HarnessError::UnexpectedStatus {
                request: what,
                expected: expected.as_u16(),
                status: response.status.as_u16(),
                body: truncate(&response.body, 2000),
            });
        }
        serde_json::from_str(&response.body)
            .map_err(|e| HarnessError::decode(what, &response.body, e))
    }

    /// `POST /v1/agent` with any body.
    pub async fn post_agent(&self, body: Value) -> HarnessResult<(StatusCode, Value)> {
        self.json(Method::POST, "/v1/agent", Some(body)).await
    }

    /// `POST /v1/agent` with this body; it must be accepted (202).
    pub async fn agent_with(&self, body: Value) -> HarnessResult<Accepted> {
        self.expect(Method::POST, "/v1/agent", Some(body), StatusCode::ACCEPTED)
            .await
    }

    /// Submits `message` on `session_key`; it must be accepted (202).
    pub async fn agent(&self, session_key: &str, message: &str) -> HarnessResult<Accepted> {
        self.agent_with(json!({ "sessionKey": session_key, "message": message }))
            .await
    }

    /// `POST /v1/agent.wait`.
    pub async fn wait(&self, run_id: &str, timeout_ms: u64) -> HarnessResult<WaitReply> {
        self.expect(
            Method::POST,
            "/v1/agent.wait",
            Some(json!({ "runId": run_id, "timeoutMs": timeout_ms })),
            StatusCode::OK,
        )
        .await
    }

    /// Waits (with `agent.wait`) until the run ends, for at most `within`; returns the run. A
    /// paused run (`requires_action`, which agent.wait answers at once) is waited through.
    pub async fn wait_done(&self, run_id: &str, within: Duration) -> HarnessResult<RunView> {
        let started = std::time::Instant::now();
        loop {
            let left = within.saturating_sub(started.elapsed());
            let last = self.api.wait_until_done(run_id, Some(left)).await?;
            let reply: WaitReply = serde_json::from_value(last.clone())
                .map_err(|e| HarnessError::decode("agent.wait", &last.to_string(), e))?;
            match reply.status {
                WaitStatus::Ok | WaitStatus::Error => return self.run(run_id).await,
                // `timeout` is also how agent.wait reports a run that ended `timeout`
                WaitStatus::Timeout if reply.run_status.is_terminal() => {
                    return self.run(run_id).await;
                }
                WaitStatus::RequiresAction if started.elapsed() < within => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                WaitStatus::Timeout | WaitStatus::Pending | WaitStatus::RequiresAction => {
                    return Err(HarnessError::Timeout {
                        what: format!("run {run_id} to end (last seen: {:?})", reply.run_status),
                        millis: within.as_millis(),
                    });
                }
            }
        }
    }

    /// `GET /v1/runs/{id}?include=internal` (must be 200): with the runner's checkpoint,
    /// which scenarios about the retry loop read.
    pub async fn run(&self, run_id: &str) -> HarnessResult<RunView> {
        self.expect(
            Method::GET,
            &format!("/v1/runs/{run_id}?include=internal"),
            None,
            StatusCode::OK,
        )
        .await
    }

    /// Polls the run every 50 ms until `done` holds, for at most `within`.
    pub async fn poll_run(
        &self,
        run_id: &str,
        within: Duration,
        what: &str,
        done: impl Fn(&RunView) -> bool,
    ) -> HarnessResult<RunView> {
        let deadline = Instant::now() + within;
        loop {
            let run = self.run(run_id).await?;
            if done(&run) {
                return Ok(run);
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!("run {run_id}: {what} (last seen: {:?})", run.status),
                    millis: within.as_millis(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One page of `GET /v1/runs/{id}/events` (from the start when `after` is `None`).
    pub async fn events_page(&self, run_id: &str, after: Option<u64>) -> HarnessResult<EventsPage> {
        let path = match after {
            None => format!("/v1/runs/{run_id}/events"),
            Some(after) => format!("/v1/runs/{run_id}/events?after={after}"),
        };
        self.expect(Method::GET, &path, None, StatusCode::OK).await
    }

    /// Every event of a run so far, following the `next` cursor.
    pub async fn events(&self, run_id: &str) -> HarnessResult<Vec<Event>> {
        let mut all: Vec<Event> = Vec::new();
        let mut after = None;
        for _ in 0..10_000 {
            let page = self.events_page(run_id, after).await?;
            if page.events.is_empty() {
                return Ok(all);
            }
            all.extend(page.events);
            match page.next {
                Some(next) if Some(next) != after => after = Some(next),
                _ => return Ok(all),
            }
        }
        Err(HarnessError::Protocol(format!(
            "events of {run_id}: the `next` cursor never ran out"
        )))
    }

    /// The events as SSE (`Accept: text/event-stream`), read until the server closes the
    /// stream; fails if it stays open longer than `within`. Each frame is `id: seq`,
    /// `event: <stream>`, `data: <event JSON>`; the last is `event: end` with
    /// `{runId, status}` (an `event: error` frame fails the call).
    pub async fn events_sse(&self, run_id: &str, within: Duration) -> HarnessResult<SseEvents> {
        let path = format!("/v1/runs/{run_id}/events");
        let mut stream = self.api.event_stream(run_id).await?;
        if !stream.content_type.starts_with("text/event-stream") {
            return Err(HarnessError::Protocol(format!(
                "GET {path} with Accept: text/event-stream answered content-type {:?}",
                stream.content_type
            )));
        }
        let read = async {
            let mut out = SseEvents::default();
            while let Some(frame) = stream.frames.next().await {
                let frame = frame.map_err(|e| HarnessError::Protocol(format!("SSE: {e}")))?;
                if frame.data.trim().is_empty() {
                    continue;
                }
                if out.end.is_some() {
                    return Err(HarnessError::Protocol(format!(
                        "SSE frame after `end`: {} {}",
                        frame.event, frame.data
                    )));
                }
                match frame.event.as_str() {
                    "end" => {
                        let end = serde_json::from_str(&frame.data)
                            .map_err(|e| HarnessError::decode("SSE end frame", &frame.data, e))?;
                        out.end = Some(end);
                    }
                    "error" => {
                        return Err(HarnessError::Protocol(format!(
                            "SSE error frame: {}",
                            frame.data
                        )));
                    }
                    name => {
                        let event: Event = serde_json::from_str(&frame.data)
                            .map_err(|e| HarnessError::decode("SSE event data", &frame.data, e))?;
                        if name != event.stream.as_str() || frame.id != event.seq.to_string() {
                            return Err(HarnessError::Protocol(format!(
                                "SSE frame `event: {name}`, `id: {}` does not match its data {}",
                                frame.id, frame.data
                            )));
                        }
                        out.events.push(event);
                    }
                }
            }
            Ok::<_, HarnessError>(out)
        };
        tokio::time::timeout(within, read)
            .await
            .map_err(|_| HarnessError::Timeout {
                what: format!("the SSE stream of {run_id} to close"),
                millis: within.as_millis(),
            })?
    }

    /// `GET /v1/sessions/{key}/transcript` (must be 200).
    pub async fn transcript(&self, session_key: &str) -> HarnessResult<TranscriptView> {
        self.expect(
            Method::GET,
            &format!(
                "/v1/sessions/{}/transcript",
                agentlane_core::validate::path_segment(session_key)
            ),
            None,
            StatusCode::OK,
        )
        .await
    }

    /// A page of the session's transcript after `after` (`GET .../transcript?after=N`).
    pub async fn transcript_after(
        &self,
        session_key: &str,
        after: Option<u64>,
    ) -> HarnessResult<TranscriptView> {
        let query = after.map(|a| format!("?after={a}")).unwrap_or_default();
        self.expect(
            Method::GET,
            &format!(
                "/v1/sessions/{}/transcript{query}",
                agentlane_core::validate::path_segment(session_key)
            ),
            None,
            StatusCode::OK,
        )
        .await
    }

    /// Opens the run's SSE stream and hands it back unread: it stays open while held. A
    /// refusal comes back as `Err` with the answer unread (status, `Retry-After`, body).
    pub async fn open_event_stream(
        &self,
        run_id: &str,
    ) -> HarnessResult<Result<reqwest::Response, reqwest::Response>> {
        let path = format!("/v1/runs/{run_id}/events");
        let response = self
            .api
            .request(Method::GET, &path)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|source| HarnessError::Http {
                method: "GET".to_owned(),
                url: format!("{}{path}", self.api.base_url()),
                source,
            })?;
        Ok(if response.status() == StatusCode::OK {
            Ok(response)
        } else {
            Err(response)
        })
    }

    /// `POST /v1/runs/{id}/abort`; returns the status.
    pub async fn abort(&self, run_id: &str) -> HarnessResult<StatusCode> {
        let response = self
            .raw(
                Method::POST,
                &format!("/v1/runs/{run_id}/abort"),
                Some(RawBody::Json(json!({}))),
            )
            .await?;
        Ok(response.status)
    }
}
