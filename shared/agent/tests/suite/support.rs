//! The runner's test support: a scripted model provider, tools, and a fixture over the real
//! embedded store.

use agentlane_agent::{ModelRouter, Runner, RunnerConfig, TurnExit};
use agentlane_conformance::fixtures;
use agentlane_core::{
    Clock, Message, SessionKey, Store, SystemClock, TenantId, ToolCall, TranscriptEntry,
    TurnMessage, TurnRequest,
};
use agentlane_providers::{
    FailoverReason, FinishReason, ModelProvider, ModelRequest, ModelStream, ProviderError,
    StreamEvent, ToolSpec,
};
use agentlane_store_sqlite::SqliteBackend;
use agentlane_tools::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use async_trait::async_trait;
use futures::StreamExt;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One scripted model response.
#[derive(Clone)]
pub enum Script {
    Text(&'static str),
    Tools(Vec<(&'static str, &'static str, &'static str)>),
    Fail(FailoverReason),
    /// Fails with this exact error.
    Error(ProviderError),
    /// Sends one delta, then nothing for this long.
    Stall(Duration),
    /// Sends nothing for this long.
    Silent(Duration),
    /// Sends nothing for this long, then this text.
    Late(Duration, &'static str),
    /// Only reasoning, no visible text.
    ReasoningOnly,
    /// Tool calls built at run time (many of them, say).
    Calls(Vec<ToolCall>),
    /// A response that finishes with no assistant message at all.
    NoMessage,
    /// A final text answer; a summarizing (compaction) call that comes while it, or
    /// [`Script::Calls`], is next gets a summary of its own instead of taking it.
    Final(&'static str),
}

/// What the scripted model answers a summarizing call that takes nothing from the script.
pub const AUTO_SUMMARY: &str = "Summary: the earlier pages were read.";

/// The stream of an answer that asks for `calls`.
fn tool_call_events(calls: Vec<ToolCall>) -> Vec<Result<StreamEvent, ProviderError>> {
    let mut v = Vec::new();
    for (i, call) in calls.into_iter().enumerate() {
        v.push(Ok(StreamEvent::ToolCallStart {
            index: i,
            id: call.id,
            name: call.name,
        }));
        v.push(Ok(StreamEvent::ToolCallArgumentsDelta {
            index: i,
            delta: call.arguments,
        }));
    }
    v.push(Ok(StreamEvent::Finished(FinishReason::ToolCalls)));
    v
}

pub type Shared<T> = Arc<Mutex<T>>;

/// A provider answering from a script shared by every provider of a test (so the order of calls
/// across profiles and fallbacks is the script's order). Records `(provider, request)`.
pub struct ScriptedModel {
    pub name: &'static str,
    pub script: Shared<VecDeque<Script>>,
    pub requests: Shared<Vec<(&'static str, ModelRequest)>>,
    /// A context window (estimated tokens): a longer prompt is refused as a context overflow
    /// without taking from the script.
    pub window: Shared<Option<u64>>,
}

impl ScriptedModel {
    pub fn new(script: Vec<Script>) -> Arc<Self> {
        Arc::new(Self {
            name: "scripted",
            script: Arc::new(Mutex::new(script.into())),
            requests: Arc::new(Mutex::new(Vec::new())),
            window: Arc::new(Mutex::new(None)),
        })
    }
    /// Another provider (name) sharing this one's script and request log.
    pub fn sibling(&self, name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            script: self.script.clone(),
            requests: self.requests.clone(),
            window: self.window.clone(),
        })
    }
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }
    pub fn providers_called(&self) -> Vec<&'static str> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|(n, _)| *n)
            .collect()
    }
}

#[async_trait]
impl ModelProvider for ScriptedModel {
    fn name(&self) -> &str {
        self.name
    }
    async fn stream(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> Result<ModelStream, ProviderError> {
        agentlane_agent::context::repair::check_pairing(&request.messages)
            .expect("pairing invariant");
        let summarizing = request.system == agentlane_agent::context::compaction::COMPACTION_PROMPT;
        let tokens = agentlane_agent::context::tokens::estimate_tokens(&request);
        self.requests.lock().unwrap().push((self.name, request));
        if self.window.lock().unwrap().is_some_and(|w| tokens > w) {
            return Err(ProviderError::new(
                FailoverReason::ContextOverflow,
                "the prompt is longer than the window",
            ));
        }
        let mut script = self.script.lock().unwrap();
        let next =
            if summarizing && matches!(script.front(), Some(Script::Calls(_) | Script::Final(_))) {
                Script::Text(AUTO_SUMMARY)
            } else {
                script.pop_front().expect("script exhausted")
            };
        drop(script);
        let events: Vec<Result<StreamEvent, ProviderError>> = match next {
            // An empty text is an empty text part, as the providers report it.
            Script::Text("") => vec![
                Ok(StreamEvent::EmptyText),
                Ok(StreamEvent::Finished(FinishReason::Stop)),
            ],
            Script::Text(t) | Script::Final(t) => vec![
                Ok(StreamEvent::TextDelta(t[..t.len() / 2].into())),
                Ok(StreamEvent::TextDelta(t[t.len() / 2..].into())),
                Ok(StreamEvent::Finished(FinishReason::Stop)),
            ],
            Script::NoMessage => vec![Ok(StreamEvent::Finished(FinishReason::Stop))],
            Script::Tools(calls) => tool_call_events(
                calls
                    .into_iter()
                    .map(|(id, name, args)| ToolCall {
                        id: id.into(),
                        name: name.into(),
                        arguments: args.into(),
                    })
                    .collect(),
            ),
            Script::Calls(calls) => tool_call_events(calls),
            Script::Fail(reason) => return Err(ProviderError::new(reason, "scripted failure")),
            Script::Error(e) => return Err(e),
            Script::ReasoningOnly => vec![
                Ok(StreamEvent::ReasoningDelta("thinking about it".into())),
                Ok(StreamEvent::Finished(FinishReason::Stop)),
            ],
            Script::Silent(d) => {
                return Ok(futures::stream::once(async move {
                    tokio::time::sleep(d).await;
                    Ok(StreamEvent::Finished(FinishReason::Stop))
                })
                .boxed());
            }
            Script::Late(d, text) => {
                return Ok(futures::stream::once(async move {
                    tokio::time::sleep(d).await;
                    Ok(StreamEvent::TextDelta(text.into()))
                })
                .chain(futures::stream::iter(vec![Ok(StreamEvent::Finished(
                    FinishReason::Stop,
                ))]))
                .boxed());
            }
            Script::Stall(d) => {
                return Ok(futures::stream::iter(vec![Ok(StreamEvent::TextDelta(
                    "partial".into(),
                ))])
                .chain(futures::stream::once(async move {
                    tokio::time::sleep(d).await;
                    Ok(StreamEvent::Finished(FinishReason::Stop))
                }))
                .boxed());
            }
        };
        Ok(futures::stream::iter(events).boxed())
    }
}

/// Echoes its arguments; `slow` sleeps first.
pub struct Echo {
    pub name: &'static str,
    pub delay: Duration,
}

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.into(),
            description: "echo".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }
    async fn call(&self, arguments: &str, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(self.delay).await;
        if arguments.contains("fail") {
            return Err(ToolError::Failed("asked to fail".into()));
        }
        if arguments.contains("page") {
            return Ok(ToolOutput {
                content: format!("{arguments} {}", "p".repeat(2_400)),
            });
        }
        if arguments.contains("huge") {
            return Ok(ToolOutput {
                content: "z".repeat(50_000),
            });
        }
        Ok(ToolOutput {
            content: format!("{}:{arguments}", self.name),
        })
    }
}

/// Accepts a `steer` message (its `message` argument) on the fixture's session, as a user
/// would while the tool works; named `steer_now`, or `steer_now_seq` when it declares itself
/// [sequential](Tool::sequential).
pub struct SteerNow {
    pub store: Arc<dyn Store>,
    pub tenant: TenantId,
    pub key: SessionKey,
    pub sequential: bool,
}

#[async_trait]
impl Tool for SteerNow {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: if self.sequential {
                "steer_now_seq"
            } else {
                "steer_now"
            }
            .into(),
            description: "accepts a steer message".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }
    async fn call(&self, arguments: &str, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let args: serde_json::Value =
            serde_json::from_str(arguments).map_err(|e| ToolError::Failed(e.to_string()))?;
        let mut turn = fixtures::turn(&self.tenant, &self.key, SystemClock.now_ms());
        turn.request = TurnRequest {
            queue_mode: Some(agentlane_core::QueueMode::Steer),
            ..fixtures::request(args["message"].as_str().unwrap_or("steer"))
        };
        self.store
            .accept_turn(turn)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(ToolOutput {
            content: "steer sent".into(),
        })
    }
    fn sequential(&self) -> bool {
        self.sequential
    }
}

/// One tool result of a transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultRow {
    pub id: String,
    pub name: String,
    pub content: String,
    pub is_error: bool,
}

pub struct Fixture {
    pub _dir: tempfile::TempDir,
    /// The embedded backend under `store` (also a lane queue).
    pub backend: SqliteBackend,
    pub store: Arc<dyn Store>,
    pub model: Arc<ScriptedModel>,
    pub runner: Runner,
    pub tenant: TenantId,
    pub key: SessionKey,
}

pub fn config() -> RunnerConfig {
    RunnerConfig {
        lock_lease: Duration::from_millis(600),
        lock_acquire_timeout: Duration::from_secs(5),
        model_idle_timeout: Duration::from_millis(300),
        abort_poll: Duration::from_millis(50),
        delta_flush: Duration::ZERO,
        ..RunnerConfig::default()
    }
}

/// [`config`] with a 5 ms pause before an out-of-order message comes back, for the queue-mode
/// and order tests that hand messages back.
pub fn quick() -> RunnerConfig {
    RunnerConfig {
        out_of_order_pause: Duration::from_millis(5),
        ..config()
    }
}

pub fn fixture(script: Vec<Script>, config: RunnerConfig) -> Fixture {
    fixture_with(script, config, |router, model| {
        router.with_provider(model.clone())
    })
}

/// A fixture whose model router is built by `route` from the scripted model.
pub fn fixture_with(
    script: Vec<Script>,
    config: RunnerConfig,
    route: impl FnOnce(ModelRouter, &Arc<ScriptedModel>) -> ModelRouter,
) -> Fixture {
    fixture_on(script, config, route, |store| store)
}

/// A fixture whose runner (and the test) use the embedded store as `wrap` returns it (a
/// wrapper that injects faults, say).
pub fn fixture_on(
    script: Vec<Script>,
    config: RunnerConfig,
    route: impl FnOnce(ModelRouter, &Arc<ScriptedModel>) -> ModelRouter,
    wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let backend = SqliteBackend::open(dir.path()).unwrap();
    let store: Arc<dyn Store> = wrap(Arc::new(backend.clone()));
    let model = ScriptedModel::new(script);
    let (tenant, key) = (TenantId::new("acme"), SessionKey::new("s1"));
    let steer_now = |sequential| {
        Arc::new(SteerNow {
            store: store.clone(),
            tenant: tenant.clone(),
            key: key.clone(),
            sequential,
        })
    };
    let tools = ToolRegistry::new()
        .with(steer_now(false))
        .with(steer_now(true))
        .with(Arc::new(Echo {
            name: "echo",
            delay: Duration::from_millis(30),
        }))
        .with(Arc::new(Echo {
            name: "slow",
            delay: Duration::from_secs(30),
        }));
    let runner = Runner::new(
        store.clone(),
        Arc::new(SystemClock),
        route(ModelRouter::new("scripted/m1"), &model),
        tools,
        config,
    );
    Fixture {
        _dir: dir,
        backend,
        store,
        model,
        runner,
        tenant,
        key,
    }
}

impl Fixture {
    pub async fn accept(&self, message: &str) -> TurnMessage {
        self.accept_as(message, Default::default()).await
    }

    /// Accepts `message` in queue mode `mode`.
    pub async fn accept_as(&self, message: &str, mode: agentlane_core::QueueMode) -> TurnMessage {
        self.accept_request(TurnRequest {
            queue_mode: Some(mode),
            ..fixtures::request(message)
        })
        .await
    }

    /// Accepts `request` on the fixture's session (no idempotency key).
    pub async fn accept_request(&self, request: TurnRequest) -> TurnMessage {
        let mut turn = fixtures::turn(&self.tenant, &self.key, SystemClock.now_ms());
        turn.request = request;
        let out = self.store.accept_turn(turn).await.unwrap();
        TurnMessage {
            session_key: Some(self.key.clone()),
            tenant: self.tenant.clone(),
            run_id: out.run.run_id,
            accepted: None,
        }
    }

    pub async fn execute(&self, msg: &TurnMessage) -> TurnExit {
        self.runner
            .execute(msg, &CancellationToken::new())
            .await
            .unwrap()
    }

    /// The fixture's session (it must exist).
    pub async fn session(&self) -> agentlane_core::Session {
        self.store
            .get_session(&self.tenant, &self.key)
            .await
            .unwrap()
            .unwrap()
    }

    /// The stored run `id` (it must exist).
    pub async fn run(&self, id: &agentlane_core::RunId) -> agentlane_core::Run {
        self.store.get_run(&self.tenant, id).await.unwrap().unwrap()
    }

    pub async fn transcript(&self) -> Vec<TranscriptEntry> {
        let session = self
            .store
            .get_session(&self.tenant, &self.key)
            .await
            .unwrap()
            .unwrap();
        self.store
            .read_transcript(&self.tenant, &session.session_id, None, 10_000)
            .await
            .unwrap()
    }

    /// The tool results of the transcript, in order.
    pub async fn tool_results(&self) -> Vec<ToolResultRow> {
        self.transcript()
            .await
            .into_iter()
            .filter_map(|e| match e.message {
                Message::Tool {
                    tool_call_id,
                    name,
                    content,
                    is_error,
                } => Some(ToolResultRow {
                    id: tool_call_id,
                    name,
                    content,
                    is_error,
                }),
                _ => None,
            })
            .collect()
    }

    pub async fn roles(&self) -> Vec<&'static str> {
        self.transcript()
            .await
            .iter()
            .map(|e| match e.message {
                Message::User { .. } => "user",
                Message::Assistant { .. } => "assistant",
                Message::Tool { .. } => "tool",
                Message::Compaction { .. } => "compaction",
            })
            .collect()
    }
}

pub fn profiles(
    model: &Arc<ScriptedModel>,
    names: &[&str],
) -> Vec<agentlane_agent::models::Profile> {
    names
        .iter()
        .map(|n| agentlane_agent::models::Profile {
            name: (*n).to_owned(),
            provider: model.clone(),
        })
        .collect()
}

pub async fn finished_run(f: &Fixture, msg: &TurnMessage) -> agentlane_core::Run {
    f.store
        .get_run(&f.tenant, &msg.run_id)
        .await
        .unwrap()
        .unwrap()
}

pub fn ledger(run: &agentlane_core::Run) -> Vec<(String, String, String)> {
    run.attempts
        .iter()
        .map(|a| {
            (
                a.model.clone(),
                a.profile.clone().unwrap_or_default(),
                a.outcome.clone(),
            )
        })
        .collect()
}

pub fn owned(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    v.iter()
        .map(|(a, b, c)| ((*a).into(), (*b).into(), (*c).into()))
        .collect()
}

/// Runs `message` as a full turn of the fixture's session and returns its final run.
pub async fn turn(f: &Fixture, message: &str) -> agentlane_core::Run {
    let msg = f.accept(message).await;
    f.execute(&msg).await;
    finished_run(f, &msg).await
}
