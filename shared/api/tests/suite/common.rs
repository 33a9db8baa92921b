//! Test harness: the real router over the SQLite backend (store + queue in a temp dir), a manual clock, two tenants, and
//! helpers that play the runner through the `Store` API.

use agentlane_api::{ApiConfig, ApiKeys, ApiState, app};
use agentlane_core::{
    Clock, Commit, Delivery, Event, EventStream, Fence, LaneQueue, Message, Run, RunId, RunStatus,
    Store, TenantId, TranscriptEntry,
};
use agentlane_store_sqlite::SqliteBackend;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tower::ServiceExt;

#[path = "../../src/testkit/runner.rs"]
mod runner;

pub use runner::{ACME_KEY, BETA_KEY, acme};
pub const T0: u64 = 1_750_000_000_000;

/// A clock tests move by hand.
#[derive(Debug)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

pub struct Harness {
    pub app: Router,
    pub store: Arc<dyn Store>,
    pub queue: Arc<dyn LaneQueue>,
    pub clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

/// What the API answered.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Reply {
    /// Asserts the error shape `{"error": {"code", "message"}}` with this status and code.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
        assert_eq!(self.json["error"]["code"], code, "{}", self.text);
        let message = self.json["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "error without message: {}", self.text);
        assert_eq!(
            self.json.as_object().map(|o| o.len()),
            Some(1),
            "{}",
            self.text
        );
    }
}

impl Harness {
    /// What the queue delivers now (up to 10 messages, then hidden for 30 s).
    pub async fn queued(&self) -> Vec<Delivery> {
        self.queue
            .receive(10, Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap()
    }

    pub async fn new() -> Self {
        Self::with_config(ApiConfig {
            sse_poll_ms: 20,
            ..ApiConfig::default()
        })
        .await
    }

    pub async fn with_config(config: ApiConfig) -> Self {
        Self::build(config, |store| store).await
    }

    /// The API over `wrap(store)`: the harness's own helpers keep the unwrapped store.
    pub async fn build(
        config: ApiConfig,
        wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
    ) -> Self {
        Self::build_app(config, wrap, app).await
    }

    /// The streaming ingress's API ([`agentlane_api::streaming_app`]).
    pub async fn streaming() -> Self {
        let config = ApiConfig {
            sse_poll_ms: 20,
            ..ApiConfig::default()
        };
        Self::build_app(config, |store| store, agentlane_api::streaming_app).await
    }

    /// The router `make` builds over `wrap(store)`.
    pub async fn build_app(
        config: ApiConfig,
        wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
        make: fn(ApiState) -> Router,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock(AtomicU64::new(T0)));
        let backend = Arc::new(SqliteBackend::open_with_clock(dir.path(), clock.clone()).unwrap());
        let store: Arc<dyn Store> = backend.clone();
        let cron: Arc<dyn agentlane_core::cron::CronStore> = backend.clone();
        let agents: Arc<dyn agentlane_core::AgentStore> = backend.clone();
        let catalog: Arc<dyn agentlane_core::SessionCatalog> = backend.clone();
        let secrets = Arc::new(agentlane_secrets::Vault::new(
            backend.clone(),
            Arc::new(agentlane_secrets::LocalKeyFile::in_dir(dir.path())),
        ));
        let queue: Arc<dyn LaneQueue> = backend;
        let keys = ApiKeys::parse(&runner::keys_spec()).unwrap();
        let state = ApiState {
            shared_slots: None,
            spend: None,
            store: wrap(store.clone()),
            queue: queue.clone(),
            clock: clock.clone(),
            cron,
            catalog,
            agents,
            secrets,
            keys,
            config,
        };
        Self {
            app: make(state),
            store,
            queue,
            clock,
            _dir: dir,
        }
    }

    pub async fn send(&self, request: Request<Body>) -> Reply {
        Self::send_to(self.app.clone(), request).await
    }

    /// Sends `request` to `app` (a clone of the harness's, for a request sent from a task).
    pub async fn send_to(app: Router, request: Request<Body>) -> Reply {
        let response = app.oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            text,
            json,
        }
    }

    pub fn request(method: Method, path: &str, key: Option<&str>, body: Body) -> Request<Body> {
        let mut builder = Request::builder().method(method).uri(path);
        if let Some(key) = key {
            builder = builder.header("authorization", format!("Bearer {key}"));
        }
        builder
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    }

    pub async fn get(&self, path: &str, key: &str) -> Reply {
        self.send(Self::request(Method::GET, path, Some(key), Body::empty()))
            .await
    }

    /// `method path` as the tenant of `key`, with `body` as JSON.
    async fn send_body(&self, method: Method, path: &str, key: &str, body: String) -> Reply {
        self.send(Self::request(method, path, Some(key), Body::from(body)))
            .await
    }

    pub async fn post(&self, path: &str, key: &str, body: Value) -> Reply {
        self.send_body(Method::POST, path, key, body.to_string())
            .await
    }

    pub async fn patch(&self, path: &str, key: &str, body: Value) -> Reply {
        self.send_body(Method::PATCH, path, key, body.to_string())
            .await
    }

    pub async fn post_raw(&self, path: &str, key: &str, body: &str) -> Reply {
        self.send_body(Method::POST, path, key, body.to_owned())
            .await
    }

    /// `POST /v1/agent` with `body`.
    pub async fn agent(&self, key: &str, body: Value) -> Reply {
        self.post("/v1/agent", key, body).await
    }

    /// `POST /v1/agent.wait` with `body`.
    pub async fn wait(&self, key: &str, body: Value) -> Reply {
        self.post("/v1/agent.wait", key, body).await
    }

    /// `POST /v1/agent` that must answer 202; returns the body.
    pub async fn submit(&self, key: &str, session_key: &str, message: &str) -> Value {
        let reply = self
            .agent(
                key,
                serde_json::json!({"sessionKey": session_key, "message": message}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
        reply.json
    }

    /// `POST /v1/agent` that must answer 202; returns the run id.
    pub async fn submit_run(&self, key: &str, session_key: &str, message: &str) -> String {
        self.submit(key, session_key, message).await["runId"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub async fn run(&self, tenant: &TenantId, run_id: &str) -> Run {
        runner::read_run(self.store.as_ref(), tenant, run_id).await
    }

    /// Takes the session's write lock as a runner would.
    pub async fn lock(&self, tenant: &TenantId, session_key: &str) -> Fence {
        runner::take_lock(
            self.store.as_ref(),
            tenant,
            session_key,
            self.clock.now_ms(),
        )
        .await
    }

    /// Writes `run` (with `events` and `transcript`) under `fence`, as the runner's commit.
    pub async fn commit(
        &self,
        fence: &Fence,
        run: Run,
        events: Vec<Event>,
        transcript: Vec<TranscriptEntry>,
        release: bool,
    ) {
        let session = runner::session_update(&run, self.clock.now_ms());
        self.store
            .commit(
                fence,
                Commit {
                    run_id: None,
                    transcript,
                    events,
                    run: Some(run),
                    session: Some(session),
                    release_lock: release,
                },
            )
            .await
            .unwrap();
    }

    /// Starts the run as a runner would: takes its session's lock and writes it `running`
    /// (started now) with `events`, keeping the lock. Returns the fence and the run as written.
    pub async fn start(&self, tenant: &TenantId, run_id: &str, events: Vec<Event>) -> (Fence, Run) {
        let mut run = self.run(tenant, run_id).await;
        let fence = self.lock(tenant, run.session_key.as_str()).await;
        run.status = RunStatus::Running;
        run.started_at = Some(self.clock.now_ms());
        self.commit(&fence, run.clone(), events, vec![], false)
            .await;
        (fence, run)
    }

    /// Ends the run `ok` under `fence` with `transcript`, releasing the lock.
    pub async fn end_ok(
        &self,
        fence: &Fence,
        tenant: &TenantId,
        run_id: &str,
        transcript: Vec<TranscriptEntry>,
    ) {
        let mut run = self.run(tenant, run_id).await;
        run.status = RunStatus::Ok;
        self.commit(fence, run, vec![], transcript, true).await;
    }

    /// Plays a whole runner turn: lock, write the run terminal with `events`, release.
    pub async fn finish(
        &self,
        tenant: &TenantId,
        run_id: &str,
        status: RunStatus,
        events: Vec<Event>,
    ) {
        let mut run = self.run(tenant, run_id).await;
        let fence = self.lock(tenant, run.session_key.as_str()).await;
        run.status = status;
        run.started_at = Some(self.clock.now_ms());
        run.ended_at = Some(self.clock.now_ms() + 5);
        self.commit(&fence, run, events, vec![], true).await;
    }
}

/// An assistant event with `seq`.
pub fn event(seq: u64, text: &str) -> Event {
    Event {
        seq,
        stream: EventStream::Assistant,
        ts: T0 + seq,
        data: serde_json::json!({"delta": text}),
    }
}

/// A transcript entry with `seq`.
pub fn entry(seq: u64, run_id: &str, message: Message) -> TranscriptEntry {
    TranscriptEntry {
        seq,
        run_id: RunId::new(run_id),
        ts: T0 + seq,
        message,
    }
}

/// Runs `future` with a deadline so a hung stream fails the test instead of the suite.
pub async fn within<F: std::future::Future>(seconds: u64, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(seconds), future)
        .await
        .expect("timed out")
}
