//! Test support for the edge's own tests: the real router under [`crate::serve`] on a loopback
//! port, over the SQLite backend behind a [`NotifyingStore`], two tenants, and a raw HTTP/1.1
//! client on plain sockets (so tests can also misbehave: stall, send half a request).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use crate::{ApiConfig, ApiKeys, ApiState, Notifier, NotifyingStore, app_with, serve};
use agentlane_core::{Commit, Fence, LaneQueue, Run, RunStatus, Store, SystemClock, TenantId};
use agentlane_store_sqlite::SqliteBackend;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

// Shared with the integration suite (`#[path]`), where its items are the suite's own API.
#[allow(unreachable_pub)]
mod runner;

pub(crate) use runner::{ACME_KEY, BETA_KEY, acme};

/// A server on a loopback port. Dropping it stops it without grace.
pub(crate) struct LiveServer {
    pub addr: SocketAddr,
    /// The store as the runner sees it (signals the server's notifier).
    pub store: Arc<dyn Store>,
    pub queue: Arc<dyn LaneQueue>,
    /// The spend ledger the API reads `/v1/usage` from.
    pub spend: Arc<dyn agentlane_core::SpendLedger>,
    pub notifier: Notifier,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<std::io::Result<()>>>,
    _dir: Option<tempfile::TempDir>,
}

impl LiveServer {
    /// Starts the API with `config` and serves it with `config.limits`.
    pub(crate) async fn start(config: ApiConfig) -> Self {
        Self::start_over(config, |store| store).await
    }

    /// Like [`LiveServer::start`], with the store the API sees wrapped by `wrap`.
    pub(crate) async fn start_over(
        config: ApiConfig,
        wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
    ) -> Self {
        Self::start_fresh(config, wrap, false).await
    }

    /// Like [`LiveServer::start_over`], over a store that queues the turns it accepts itself
    /// (as `serve` opens the embedded one): this process's runners get them.
    pub(crate) async fn start_queueing_over(
        config: ApiConfig,
        wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
    ) -> Self {
        Self::start_fresh(config, wrap, true).await
    }

    /// The API over a store of its own, wrapped by `wrap`; `queueing`: the store queues the
    /// turns it accepts.
    async fn start_fresh(
        config: ApiConfig,
        wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
        queueing: bool,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(SqliteBackend::open(dir.path()).unwrap());
        if queueing {
            backend.queue_accepted_turns();
        }
        Self::start_on(config, backend, wrap, false, Some(dir)).await
    }

    /// Two servers over one store, each with its own in-process admission and the stream and
    /// wait caps kept in the store: two ingress instances of one deployment.
    pub(crate) async fn start_two_instances(config: ApiConfig) -> (Self, Self) {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(SqliteBackend::open(dir.path()).unwrap());
        let second = Self::start_on(config.clone(), backend.clone(), |s| s, true, None).await;
        let first = Self::start_on(config, backend, |s| s, true, Some(dir)).await;
        (first, second)
    }

    async fn start_on(
        config: ApiConfig,
        backend: Arc<SqliteBackend>,
        wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
        shared_slots: bool,
        dir: Option<tempfile::TempDir>,
    ) -> Self {
        let notifier = Notifier::new();
        let store: Arc<dyn Store> = Arc::new(NotifyingStore::new(
            wrap(backend.clone() as Arc<dyn Store>),
            notifier.clone(),
        ));
        let queue: Arc<dyn LaneQueue> = backend.clone();
        let limits = config.limits.clone();
        let keys = ApiKeys::parse(&runner::keys_spec()).unwrap();
        let router = app_with(
            ApiState {
                shared_slots: shared_slots
                    .then(|| backend.clone() as Arc<dyn agentlane_core::SlotStore>),
                store: store.clone(),
                queue: queue.clone(),
                clock: Arc::new(SystemClock),
                keys,
                config,
                cron: backend.clone(),
                catalog: backend.clone(),
                agents: backend.clone(),
                secrets: sqlite_vault(&backend),
                spend: Some(backend.clone()),
            },
            notifier.clone(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            serve(listener, router, &limits, async {
                let _ = stopped.await;
            })
            .await
        });
        Self {
            addr,
            store,
            queue,
            spend: backend,
            notifier,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        }
    }

    /// Asks the server to shut down gracefully; await [`LiveServer::task`] to see it end.
    pub(crate) fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// One request on a fresh connection (`Connection: close`).
    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: &str,
    ) -> Reply {
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        send_request(&mut stream, method, path, key, body).await;
        read_reply(&mut stream).await
    }

    pub(crate) async fn get(&self, path: &str, key: &str) -> Reply {
        self.request("GET", path, Some(key), "").await
    }

    pub(crate) async fn post(&self, path: &str, key: &str, body: Value) -> Reply {
        self.request("POST", path, Some(key), &body.to_string())
            .await
    }

    /// `POST /v1/agent` that must answer 202; the run id.
    pub(crate) async fn submit(&self, key: &str, session: &str, message: &str) -> String {
        let reply = self
            .post(
                "/v1/agent",
                key,
                serde_json::json!({"sessionKey": session, "message": message}),
            )
            .await;
        assert_eq!(reply.status, 202, "{}", reply.body);
        reply.json()["runId"].as_str().unwrap().to_owned()
    }

    pub(crate) async fn run(&self, tenant: &TenantId, run_id: &str) -> Run {
        runner::read_run(self.store.as_ref(), tenant, run_id).await
    }

    /// Takes the run's session lock and commits it with `status`, as the runner would.
    pub(crate) async fn commit_status(
        &self,
        tenant: &TenantId,
        run_id: &str,
        status: RunStatus,
    ) -> Fence {
        let run = self.run(tenant, run_id).await;
        let fence = self.lock(tenant, run.session_key.as_str()).await;
        self.commit_run(&fence, run, status).await;
        fence
    }

    pub(crate) async fn lock(&self, tenant: &TenantId, key: &str) -> Fence {
        let now = agentlane_core::Clock::now_ms(&SystemClock);
        runner::take_lock(self.store.as_ref(), tenant, key, now).await
    }

    pub(crate) async fn commit_run(&self, fence: &Fence, mut run: Run, status: RunStatus) {
        let now = agentlane_core::Clock::now_ms(&SystemClock);
        let terminal = status.is_terminal();
        run.status = status;
        run.started_at.get_or_insert(now);
        if terminal {
            run.ended_at = Some(now);
        }
        let session = runner::session_update(&run, now);
        self.store
            .commit(
                fence,
                Commit {
                    run: Some(run),
                    session: Some(session),
                    release_lock: terminal,
                    ..Commit::default()
                },
            )
            .await
            .unwrap();
    }
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Writes one HTTP/1.1 request with `Connection: close`.
pub(crate) async fn send_request(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    if let Some(key) = key {
        head.push_str(&format!("authorization: Bearer {key}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
}

/// A parsed answer.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// A header's value (names compared case-insensitively).
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    /// Asserts the JSON error shape with this status and code.
    pub(crate) fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.json()["error"]["code"], code, "{self:?}");
        assert!(
            self.json()["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{self:?}"
        );
    }
}

/// Reads a whole `Connection: close` answer (chunked bodies are de-chunked).
pub(crate) async fn read_reply(stream: &mut TcpStream) -> Reply {
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    parse_reply(&raw)
}

/// Parses status line, head and body of a raw answer.
pub(crate) fn parse_reply(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Reply {
        status,
        head: head.to_owned(),
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Whether the server closed `stream` within `within` (EOF or reset), reading and discarding
/// whatever it sent first.
pub(crate) async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// A vault over `backend`, its key file beside the database.
pub(crate) fn sqlite_vault(backend: &Arc<SqliteBackend>) -> Arc<agentlane_secrets::Vault> {
    let dir = backend
        .database_path()
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    Arc::new(agentlane_secrets::Vault::new(
        backend.clone(),
        Arc::new(agentlane_secrets::LocalKeyFile::in_dir(&dir)),
    ))
}
