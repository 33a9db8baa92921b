//! The runner against the real embedded store, driven by a scripted model (unit-level: the
//! HTTP-level scenarios live in the workspace `tests/` package).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentlane_agent::turn::TurnExit;
use agentlane_agent::{ModelRouter, Runner, RunnerConfig};
use agentlane_core::{
    Clock, Commit, EventStream, LockAttempt, Message, NewTurn, RunId, RunStatus, SessionId,
    SessionKey, Store, SystemClock, TenantId, ToolCall, TranscriptEntry, TurnMessage, TurnRequest,
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
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// One scripted model response.
#[derive(Clone)]
enum Script {
    Text(&'static str),
    Tools(Vec<(&'static str, &'static str, &'static str)>),
    Fail(FailoverReason),
    /// Fails with this exact error.
    Error(ProviderError),
    /// Sends one delta, then nothing for this long.
    Stall(Duration),
    /// Sends nothing for this long.
    Silent(Duration),
    /// Only reasoning, no visible text.
    ReasoningOnly,
}

type Shared<T> = Arc<Mutex<T>>;

/// A provider answering from a script shared by every provider of a test (so the order of calls
/// across profiles and fallbacks is the script's order). Records `(provider, request)`.
struct ScriptedModel {
    name: &'static str,
    script: Shared<VecDeque<Script>>,
    requests: Shared<Vec<(&'static str, ModelRequest)>>,
}

impl ScriptedModel {
    fn new(script: Vec<Script>) -> Arc<Self> {
        Arc::new(Self {
            name: "scripted",
            script: Arc::new(Mutex::new(script.into())),
            requests: Arc::new(Mutex::new(Vec::new())),
        })
    }
    /// Another provider (name) sharing this one's script and request log.
    fn sibling(&self, name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            script: self.script.clone(),
            requests: self.requests.clone(),
        })
    }
    fn requests(&self) -> Vec<ModelRequest> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }
    fn providers_called(&self) -> Vec<&'static str> {
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
        agentlane_agent::repair::check_pairing(&request.messages).expect("pairing invariant");
        self.requests.lock().unwrap().push((self.name, request));
        let next = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .expect("script exhausted");
        let events: Vec<Result<StreamEvent, ProviderError>> = match next {
            Script::Text(t) => vec![
                Ok(StreamEvent::TextDelta(t[..t.len() / 2].into())),
                Ok(StreamEvent::TextDelta(t[t.len() / 2..].into())),
                Ok(StreamEvent::Finished(FinishReason::Stop)),
            ],
            Script::Tools(calls) => {
                let mut v = Vec::new();
                for (i, (id, name, args)) in calls.into_iter().enumerate() {
                    v.push(Ok(StreamEvent::ToolCallStart {
                        index: i,
                        id: id.into(),
                        name: name.into(),
                    }));
                    v.push(Ok(StreamEvent::ToolCallArgumentsDelta {
                        index: i,
                        delta: args.into(),
                    }));
                }
                v.push(Ok(StreamEvent::Finished(FinishReason::ToolCalls)));
                v
            }
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
struct Echo {
    name: &'static str,
    delay: Duration,
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

/// One tool result of a transcript.
#[derive(Debug, Clone, PartialEq)]
struct ToolResultRow {
    id: String,
    name: String,
    content: String,
    is_error: bool,
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    model: Arc<ScriptedModel>,
    runner: Runner,
    tenant: TenantId,
    key: SessionKey,
}

fn config() -> RunnerConfig {
    RunnerConfig {
        lock_lease: Duration::from_millis(600),
        lock_acquire_timeout: Duration::from_secs(5),
        model_idle_timeout: Duration::from_millis(300),
        abort_poll: Duration::from_millis(50),
        delta_flush: Duration::ZERO,
        ..RunnerConfig::default()
    }
}

fn fixture(script: Vec<Script>, config: RunnerConfig) -> Fixture {
    fixture_with(script, config, |router, model| {
        router.with_provider(model.clone())
    })
}

/// A fixture whose model router is built by `route` from the scripted model.
fn fixture_with(
    script: Vec<Script>,
    config: RunnerConfig,
    route: impl FnOnce(ModelRouter, &Arc<ScriptedModel>) -> ModelRouter,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let backend = SqliteBackend::open(dir.path()).unwrap();
    let store: Arc<dyn Store> = Arc::new(backend);
    let model = ScriptedModel::new(script);
    let tools = ToolRegistry::new()
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
        store,
        model,
        runner,
        tenant: TenantId::new("acme"),
        key: SessionKey::new("s1"),
    }
}

impl Fixture {
    async fn accept(&self, message: &str) -> TurnMessage {
        let out = self
            .store
            .accept_turn(NewTurn {
                tenant: self.tenant.clone(),
                session_key: self.key.clone(),
                run_id: RunId::generate(),
                new_session_id: SessionId::generate(),
                request: TurnRequest {
                    message: message.into(),
                    queue_mode: Default::default(),
                    model: None,
                    thinking: None,
                    timeout_seconds: None,
                    extra_system_prompt: None,
                    deadline_at: None,
                    model_idle_timeout_ms: None,
                },
                idempotency_key: None,
                now: SystemClock.now_ms(),
                idempotency_ttl_ms: 1000,
            })
            .await
            .unwrap();
        TurnMessage {
            session_key: Some(self.key.clone()),
            tenant: self.tenant.clone(),
            run_id: out.run.run_id,
        }
    }

    async fn execute(&self, msg: &TurnMessage) -> TurnExit {
        self.runner
            .execute(msg, &CancellationToken::new())
            .await
            .unwrap()
    }

    async fn transcript(&self) -> Vec<TranscriptEntry> {
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
    async fn tool_results(&self) -> Vec<ToolResultRow> {
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

    async fn roles(&self) -> Vec<&'static str> {
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

#[tokio::test]
async fn a_text_turn_ends_ok_with_the_reply_events_and_transcript() {
    let f = fixture(vec![Script::Text("Hello there, human.")], config());
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));

    let run = f
        .store
        .get_run(&f.tenant, &msg.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Ok);
    assert_eq!(run.payloads.len(), 1);
    assert_eq!(run.payloads[0].text, "Hello there, human.");
    assert_eq!(run.model.as_deref(), Some("scripted/m1"));
    assert_eq!(run.attempts.len(), 1);
    assert_eq!(f.roles().await, vec!["user", "assistant"]);
    let events = f
        .store
        .read_events(&f.tenant, &msg.run_id, None, 100)
        .await
        .unwrap();
    assert_eq!(events.first().unwrap().data["phase"], "start");
    assert_eq!(events.last().unwrap().data["phase"], "end");
    assert!(events.iter().any(|e| e.stream == EventStream::Assistant));
    assert!(
        events.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "dense event seqs"
    );
    let session = f
        .store
        .get_session(&f.tenant, &f.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.lock_owner, None, "lock released");
    assert_eq!(session.runs_finished, 1);
}

#[tokio::test]
async fn parallel_tool_calls_run_and_results_keep_call_order() {
    let f = fixture(
        vec![
            Script::Tools(vec![
                ("c1", "echo", r#"{"n":1}"#),
                ("c2", "echo", r#"{"n":2}"#),
                ("c3", "nope", "{}"),
            ]),
            Script::Text("done"),
        ],
        config(),
    );
    let msg = f.accept("use tools").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        f.roles().await,
        vec!["user", "assistant", "tool", "tool", "tool", "assistant"]
    );
    let results: Vec<(String, bool)> = f
        .tool_results()
        .await
        .into_iter()
        .map(|r| (r.id, r.is_error))
        .collect();
    assert_eq!(
        results,
        vec![
            ("c1".into(), false),
            ("c2".into(), false),
            ("c3".into(), true)
        ]
    );
    let second = &f.model.requests()[1];
    assert!(
        matches!(&second.messages[2], Message::Tool { content, .. } if content == r#"echo:{"n":1}"#)
    );
}

#[tokio::test]
async fn a_redelivered_finished_turn_does_nothing() {
    let f = fixture(vec![Script::Text("once")], config());
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(f.execute(&msg).await, TurnExit::AlreadyDone);
    assert_eq!(f.model.requests().len(), 1);
    assert_eq!(f.roles().await, vec!["user", "assistant"]);
}

#[tokio::test]
async fn a_crashed_pickup_is_resumed_without_duplicating_entries() {
    let f = fixture(vec![Script::Text("recovered answer")], config());
    let msg = f.accept("look something up").await;
    // GIVEN a pickup that wrote the user message and a tool call, then died holding the lock.
    let clock = SystemClock;
    let LockAttempt::Acquired(dead) = f
        .store
        .acquire_lock(&f.tenant, &f.key, "dead-runner", 300, clock.now_ms())
        .await
        .unwrap()
    else {
        panic!("lock should be free")
    };
    let session = f
        .store
        .get_session(&f.tenant, &f.key)
        .await
        .unwrap()
        .unwrap();
    let entry = |seq, message| TranscriptEntry {
        seq,
        run_id: msg.run_id.clone(),
        ts: 1,
        message,
    };
    f.store
        .commit(
            &dead,
            Commit {
                transcript: vec![
                    entry(0, Message::user("look something up")),
                    entry(
                        1,
                        Message::Assistant {
                            content: String::new(),
                            reasoning: None,
                            tool_calls: vec![ToolCall {
                                id: "c1".into(),
                                name: "slow".into(),
                                arguments: "{}".into(),
                            }],
                            model: None,
                        },
                    ),
                ],
                ..Commit::default()
            },
        )
        .await
        .unwrap();
    let _ = session;
    // WHEN the message is redelivered after the lease expired
    let started = Instant::now();
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert!(started.elapsed() < Duration::from_secs(5));
    // THEN the dangling call got an aborted result, the model continued, nothing was repeated
    assert_eq!(
        f.roles().await,
        vec!["user", "assistant", "tool", "assistant"]
    );
    let t = f.transcript().await;
    assert!(t.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    assert!(
        matches!(&t[2].message, Message::Tool { is_error: true, tool_call_id, .. } if tool_call_id == "c1")
    );
    let run = f
        .store
        .get_run(&f.tenant, &msg.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.pickups, 1);
    assert_eq!(run.payloads[0].text, "recovered answer");
    // and the dead pickup's fence can write nothing any more
    let late = f
        .store
        .commit(
            &dead,
            Commit {
                transcript: vec![entry(9, Message::user("late"))],
                ..Commit::default()
            },
        )
        .await;
    assert_eq!(late, Err(agentlane_core::StoreError::FenceLost));
}

#[tokio::test]
async fn abort_stops_a_streaming_run_within_a_second() {
    let f = fixture(
        vec![Script::Stall(Duration::from_secs(30))],
        RunnerConfig {
            model_idle_timeout: Duration::from_secs(60),
            ..config()
        },
    );
    let msg = f.accept("talk slowly").await;
    let store = f.store.clone();
    let (tenant, run_id) = (f.tenant.clone(), msg.run_id.clone());
    let aborter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        store.request_abort(&tenant, &run_id).await.unwrap();
        Instant::now()
    });
    let exit = f.execute(&msg).await;
    let ended = Instant::now();
    let asked = aborter.await.unwrap();
    assert_eq!(exit, TurnExit::Finished(RunStatus::Aborted));
    assert!(
        ended - asked < Duration::from_secs(1),
        "took {:?}",
        ended - asked
    );
    assert_eq!(f.roles().await, vec!["user"], "no partial assistant entry");
}

#[tokio::test]
async fn an_idle_stream_is_retried_once_on_a_lone_model_then_fails_with_a_clear_error() {
    let silent = Script::Silent(Duration::from_secs(30));
    let f = fixture(
        vec![silent.clone(), silent],
        RunnerConfig {
            model_idle_timeout: Duration::from_millis(100),
            ..config()
        },
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let run = f
        .store
        .get_run(&f.tenant, &msg.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        run.attempts
            .iter()
            .map(|a| a.outcome.as_str())
            .collect::<Vec<_>>(),
        ["timeout", "timeout"]
    );
    let err = run.error.unwrap();
    assert_eq!(err.code, "timeout");
    assert!(err.message.contains("idle"), "{}", err.message);
    assert_eq!(run.liveness_state, agentlane_core::LivenessState::Blocked);
}

#[tokio::test]
async fn a_non_retryable_error_fails_at_once() {
    let f = fixture(vec![Script::Fail(FailoverReason::Auth)], config());
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let run = f
        .store
        .get_run(&f.tenant, &msg.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.error.unwrap().code, "auth");
    assert_eq!(f.model.requests().len(), 1);
}

#[tokio::test]
async fn a_run_past_its_timeout_ends_with_status_timeout() {
    let f = fixture(vec![Script::Tools(vec![("c1", "slow", "{}")])], config());
    let out = f
        .store
        .accept_turn(NewTurn {
            tenant: f.tenant.clone(),
            session_key: f.key.clone(),
            run_id: RunId::generate(),
            new_session_id: SessionId::generate(),
            request: TurnRequest {
                message: "slow".into(),
                queue_mode: Default::default(),
                model: None,
                thinking: None,
                timeout_seconds: Some(1),
                extra_system_prompt: None,
                deadline_at: None,
                model_idle_timeout_ms: None,
            },
            idempotency_key: None,
            now: SystemClock.now_ms(),
            idempotency_ttl_ms: 1000,
        })
        .await
        .unwrap();
    let msg = TurnMessage {
        session_key: None,
        tenant: f.tenant.clone(),
        run_id: out.run.run_id,
    };
    assert_eq!(
        f.execute(&msg).await,
        TurnExit::Finished(RunStatus::Timeout)
    );
    // the interrupted tool call still has its result: the transcript stays paired
    assert_eq!(f.roles().await, vec!["user", "assistant", "tool"]);
}

#[tokio::test]
async fn a_shutdown_hands_the_run_back_and_a_later_pickup_finishes_it() {
    let f = fixture(
        vec![
            Script::Tools(vec![("c1", "slow", "{}")]),
            Script::Text("finished later"),
        ],
        config(),
    );
    let msg = f.accept("long job").await;
    let shutdown = CancellationToken::new();
    let s = shutdown.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.cancel();
    });
    assert_eq!(
        f.runner.execute(&msg, &shutdown).await.unwrap(),
        TurnExit::HandBack
    );
    let run = f
        .store
        .get_run(&f.tenant, &msg.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        f.roles().await,
        vec!["user", "assistant", "tool", "assistant"]
    );
}

fn profiles(model: &Arc<ScriptedModel>, names: &[&str]) -> Vec<agentlane_agent::models::Profile> {
    names
        .iter()
        .map(|n| agentlane_agent::models::Profile {
            name: (*n).to_owned(),
            provider: model.clone(),
        })
        .collect()
}

async fn finished_run(f: &Fixture, msg: &TurnMessage) -> agentlane_core::Run {
    f.store
        .get_run(&f.tenant, &msg.run_id)
        .await
        .unwrap()
        .unwrap()
}

fn ledger(run: &agentlane_core::Run) -> Vec<(String, String, String)> {
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

fn owned(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    v.iter()
        .map(|(a, b, c)| ((*a).into(), (*b).into(), (*c).into()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_short_window_429_waits_at_least_retry_after_then_retries_the_same_model() {
    let limited = ProviderError::from_http(
        429,
        r#"{"error":{"message":"Rate limit reached for requests per min"}}"#,
        Some(Duration::from_secs(15)),
    );
    let f = fixture(
        vec![Script::Error(limited), Script::Text("made it")],
        config(),
    );
    let msg = f.accept("hi").await;
    let before = tokio::time::Instant::now();
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    // 10 s is the first same-model delay; Retry-After asked for 15 s.
    assert!(
        before.elapsed() >= Duration::from_secs(15),
        "{:?}",
        before.elapsed()
    );
    let run = finished_run(&f, &msg).await;
    assert_eq!(
        ledger(&run),
        owned(&[
            ("scripted/m1", "default", "rate_limit"),
            ("scripted/m1", "default", "ok")
        ])
    );
    assert_eq!(
        run.checkpoint.unwrap()["retry"]["budgets"]["sameModelRateLimitRetries"],
        1
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limits_beyond_the_same_model_budget_rotate_the_auth_profile() {
    let limited = || {
        Script::Error(ProviderError::from_http(
            429,
            "Rate limit: tokens per minute",
            None,
        ))
    };
    let f = fixture_with(
        vec![
            limited(),
            limited(),
            limited(),
            limited(),
            Script::Text("second key works"),
        ],
        config(),
        |router, model| router.with_profiles("scripted", profiles(model, &["key-1", "key-2"])),
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    let run = finished_run(&f, &msg).await;
    let used: Vec<String> = run
        .attempts
        .iter()
        .map(|a| a.profile.clone().unwrap_or_default())
        .collect();
    assert_eq!(used, ["key-1", "key-1", "key-1", "key-1", "key-2"]);
    assert_eq!(run.payloads[0].text, "second key works");
}

#[tokio::test]
async fn an_auth_failure_rotates_to_the_next_profile() {
    let f = fixture_with(
        vec![
            Script::Fail(FailoverReason::Auth),
            Script::Text("ok with key 2"),
        ],
        config(),
        |router, model| router.with_profiles("scripted", profiles(model, &["key-1", "key-2"])),
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        ledger(&finished_run(&f, &msg).await),
        owned(&[
            ("scripted/m1", "key-1", "auth"),
            ("scripted/m1", "key-2", "ok")
        ])
    );
}

#[tokio::test]
async fn an_overloaded_model_falls_back_to_the_next_model_of_the_chain() {
    let f = fixture_with(
        vec![
            Script::Fail(FailoverReason::Overloaded),
            Script::Text("backup here"),
        ],
        config(),
        |router, model| {
            router
                .with_provider(model.clone())
                .with_provider(model.sibling("backup"))
                .with_fallbacks(vec!["backup/m2".into()])
        },
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    let run = finished_run(&f, &msg).await;
    assert_eq!(f.model.providers_called(), ["scripted", "backup"]);
    assert_eq!(run.model.as_deref(), Some("backup/m2"));
    assert_eq!(
        ledger(&run),
        owned(&[
            ("scripted/m1", "default", "overloaded"),
            ("backup/m2", "default", "ok")
        ])
    );
    let events = f
        .store
        .read_events(&f.tenant, &msg.run_id, None, 100)
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.data["phase"] == "retry" && e.data["action"] == "fallback")
    );
}

#[tokio::test(start_paused = true)]
async fn the_idle_timeout_breaker_stops_the_run_after_five_stalls_whatever_is_left_to_try() {
    let silent = Script::Silent(Duration::from_secs(600));
    let f = fixture_with(
        vec![silent; 8],
        RunnerConfig {
            // Virtual time; short so the abort poll does not spin through minutes of it.
            model_idle_timeout: Duration::from_secs(2),
            ..config()
        },
        |router, model| {
            let backup = model.sibling("backup");
            router
                .with_profiles("scripted", profiles(model, &["a", "b", "c"]))
                .with_profiles(
                    "backup",
                    ["d", "e", "f"]
                        .iter()
                        .map(|n| agentlane_agent::models::Profile {
                            name: (*n).into(),
                            provider: backup.clone(),
                        })
                        .collect(),
                )
                .with_fallbacks(vec!["backup/m2".into()])
        },
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let run = finished_run(&f, &msg).await;
    assert_eq!(
        f.model.requests().len(),
        5,
        "no model call after the breaker trips"
    );
    let err = run.error.unwrap();
    assert_eq!(err.code, "idle_timeout_breaker");
    assert_eq!(run.liveness_state, agentlane_core::LivenessState::Blocked);
    assert_eq!(
        run.checkpoint.unwrap()["retry"]["breaker"]["consecutive"],
        5
    );
}

#[tokio::test]
async fn an_empty_reply_gets_one_directed_retry_that_is_not_persisted() {
    let f = fixture(
        vec![Script::Text(""), Script::Text("now visible")],
        config(),
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    let requests = f.model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].messages.last(),
        Some(&Message::user(
            agentlane_agent::failover::Continuation::EmptyResponse.instruction()
        ))
    );
    assert_eq!(f.roles().await, vec!["user", "assistant"]);
}

#[tokio::test]
async fn reasoning_without_an_answer_is_retried_twice_then_the_run_says_it_could_not_reply() {
    let f = fixture(
        vec![
            Script::ReasoningOnly,
            Script::ReasoningOnly,
            Script::ReasoningOnly,
        ],
        config(),
    );
    let msg = f.accept("hi").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let requests = f.model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[2].messages.last(),
        Some(&Message::user(
            agentlane_agent::failover::Continuation::ReasoningOnly.instruction()
        ))
    );
    let run = finished_run(&f, &msg).await;
    assert_eq!(run.error.unwrap().code, "incomplete_turn");
    assert!(run.payloads[0].is_error);
    assert_eq!(run.liveness_state, agentlane_core::LivenessState::Abandoned);
}

/// Runs `message` as a full turn of the fixture's session and returns its final run.
async fn turn(f: &Fixture, message: &str) -> agentlane_core::Run {
    let msg = f.accept(message).await;
    f.execute(&msg).await;
    finished_run(f, &msg).await
}

#[tokio::test]
async fn a_context_overflow_compacts_the_earlier_history_and_the_run_continues() {
    let f = fixture(
        vec![
            Script::Text("first answer"),
            Script::Text("second answer"),
            Script::Fail(FailoverReason::ContextOverflow),
            Script::Text("The user asked two things; both were answered."),
            Script::Text("third answer, after compaction"),
            Script::Text("fourth answer"),
        ],
        config(),
    );
    turn(&f, "first question").await;
    turn(&f, "second question").await;
    let run = turn(&f, "third question").await;
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.error);
    assert_eq!(run.payloads[0].text, "third answer, after compaction");
    assert_eq!(
        run.checkpoint.as_ref().unwrap()["retry"]["budgets"]["overflowCompactions"],
        1
    );

    let requests = f.model.requests();
    assert_eq!(requests.len(), 5, "2 turns + overflow + compaction + retry");
    let summarizing = &requests[3];
    assert_eq!(
        summarizing.system,
        agentlane_agent::compaction::COMPACTION_PROMPT
    );
    assert!(summarizing.tools.is_empty());
    assert!(
        matches!(&summarizing.messages[0], Message::User { content } if content.contains("first question") && content.contains("second answer"))
    );
    let retried = &requests[4].messages;
    assert!(
        matches!(&retried[0], Message::Compaction { summary, .. } if summary.starts_with("The user asked"))
    );
    assert_eq!(retried[1], Message::user("third question"));
    assert_eq!(
        retried[2],
        Message::user(agentlane_agent::failover::Continuation::AfterCompaction.instruction())
    );
    assert_eq!(
        f.roles().await,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "compaction",
            "assistant"
        ]
    );
    let events = f
        .store
        .read_events(&f.tenant, &run.run_id, None, 100)
        .await
        .unwrap();
    let phases: Vec<&str> = events
        .iter()
        .filter(|e| e.stream == EventStream::Compaction)
        .filter_map(|e| e.data["phase"].as_str())
        .collect();
    assert_eq!(phases, ["start", "end"]);

    // The next turn sees the summary instead of the compacted entries.
    turn(&f, "fourth question").await;
    let next = &f.model.requests()[5].messages;
    assert!(matches!(&next[0], Message::Compaction { .. }));
    assert_eq!(
        next.len(),
        4,
        "summary, third question + answer, fourth question: {next:?}"
    );
}

#[tokio::test]
async fn an_overflow_on_a_first_turn_cannot_compact_and_ends_the_run_clearly() {
    let f = fixture(
        vec![Script::Fail(FailoverReason::ContextOverflow)],
        config(),
    );
    let run = turn(&f, "a huge first message").await;
    assert_eq!(run.status, RunStatus::Error);
    assert_eq!(run.error.unwrap().code, "context_overflow");
    assert_eq!(run.liveness_state, agentlane_core::LivenessState::Blocked);
    assert_eq!(
        f.model.requests().len(),
        1,
        "no compaction call without earlier history"
    );
}

#[tokio::test]
async fn the_same_tool_call_three_times_right_after_compaction_stops_the_run() {
    let same_call = |id| Script::Tools(vec![(id, "echo", r#"{"q":"same"}"#)]);
    let f = fixture(
        vec![
            Script::Text("earlier answer"),
            Script::Fail(FailoverReason::ContextOverflow),
            Script::Text("summary"),
            same_call("c1"),
            same_call("c2"),
            same_call("c3"),
            Script::Text("never reached"),
        ],
        config(),
    );
    turn(&f, "earlier question").await;
    let run = turn(&f, "loop please").await;
    assert_eq!(run.status, RunStatus::Error);
    let err = run.error.unwrap();
    assert_eq!(err.code, "tool_loop");
    assert!(err.message.contains("echo"), "{}", err.message);
    assert_eq!(
        f.model.requests().len(),
        6,
        "stopped before a fourth call of the loop"
    );
}

#[tokio::test]
async fn oversized_tool_results_are_capped_and_cut_to_fit_before_the_next_call() {
    let f = fixture_with(
        vec![
            Script::Tools(vec![
                ("c1", "echo", r#"{"huge":1}"#),
                ("c2", "echo", r#"{"huge":2}"#),
            ]),
            Script::Text("done"),
        ],
        config(),
        |router, model| {
            router
                .with_provider(model.clone())
                .with_context_window("scripted/m1", 8_000)
        },
    );
    let run = turn(&f, "fetch two big things").await;
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.error);
    // persisted results are capped at 30 % of an 8 000-token window (9 600 characters)
    let persisted: Vec<usize> = f
        .tool_results()
        .await
        .iter()
        .map(|r| r.content.chars().count())
        .collect();
    assert_eq!(persisted.len(), 2);
    assert!(
        persisted.iter().all(|n| *n < 9_800 && *n > 9_600),
        "{persisted:?}"
    );
    // and the next call's prompt was cut further so it fits the budget
    let second = &f.model.requests()[1];
    let sent: usize = second
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.chars().count()),
            _ => None,
        })
        .sum();
    assert!(
        sent < 16_000,
        "the tool results sent were {sent} characters"
    );
    let events = f
        .store
        .read_events(&f.tenant, &run.run_id, None, 100)
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.stream == EventStream::Compaction && e.data["phase"] == "truncate")
    );
}

#[tokio::test]
async fn malformed_and_text_tool_calls_are_normalized_before_they_run() {
    let f = fixture(
        vec![
            // a structured call with broken JSON, and a name with a `functions.` prefix
            Script::Tools(vec![
                ("c1", "echo", r#"{"a": 1,"#),
                ("c2", "functions.echo", r#"{"b":2}"#),
            ]),
            // a tool call written as text
            Script::Text(r#"<tool_call>{"name": "echo", "arguments": {"c": 3}}</tool_call>"#),
            Script::Text("all done"),
        ],
        config(),
    );
    let run = turn(&f, "use the tools").await;
    assert_eq!(run.status, RunStatus::Ok, "{:?}", run.error);
    let results: Vec<(String, bool, String)> = f
        .tool_results()
        .await
        .into_iter()
        .map(|r| (r.name, r.is_error, r.content))
        .collect();
    // the truncated JSON was repaired and ran; the prefixed name was trimmed; the text call was promoted
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0], ("echo".into(), false, r#"echo:{"a":1}"#.into()));
    assert_eq!(results[1], ("echo".into(), false, r#"echo:{"b":2}"#.into()));
    assert_eq!(results[2], ("echo".into(), false, r#"echo:{"c":3}"#.into()));
}

#[tokio::test]
async fn arguments_that_cannot_be_repaired_get_an_error_result_and_do_not_run() {
    let f = fixture(
        vec![
            Script::Tools(vec![
                ("c1", "echo", "not json at all"),
                ("c2", "echo", r#"{"ok":true}"#),
            ]),
            Script::Text("handled"),
        ],
        config(),
    );
    let run = turn(&f, "go").await;
    assert_eq!(run.status, RunStatus::Ok);
    let results: Vec<(String, bool)> = f
        .tool_results()
        .await
        .into_iter()
        .map(|r| (r.id, r.is_error))
        .collect();
    assert_eq!(results, [("c1".into(), true), ("c2".into(), false)]);
    let second = &f.model.requests()[1];
    assert!(second.messages.iter().any(|m| matches!(m, Message::Tool { content, is_error: true, .. } if content.contains("invalid JSON"))));
}

#[tokio::test]
async fn bootstrap_context_is_in_the_system_prompt_and_history_is_limited_by_turns() {
    let f = fixture(
        vec![Script::Text("one"), Script::Text("two")],
        RunnerConfig {
            bootstrap_context: vec![("AGENTS.md".into(), "Answer in French.".into())],
            history_max_turns: Some(1),
            ..config()
        },
    );
    turn(&f, "first").await;
    let run = turn(&f, "second").await;
    assert_eq!(run.status, RunStatus::Ok);
    let second = &f.model.requests()[1];
    assert!(
        second
            .system
            .contains("# Context: AGENTS.md\nAnswer in French."),
        "{}",
        second.system
    );
    assert_eq!(
        second.messages,
        vec![Message::user("second")],
        "only the last turn is sent"
    );
    assert_eq!(f.roles().await.len(), 4, "the transcript keeps everything");
}

mod with_hooks {
    use super::*;
    use agentlane_agent::hooks::{
        FinalizeAction, Hook, HookContext, HookError, HookEvent, HookOutcome, HookPoint,
        HookRegistry, ModelOverride, PromptAdditions, ReplyClaim, RunGate, SendingVerdict,
        ToolCallVerdict,
    };

    /// A policy hook scripted per test.
    struct Policy {
        points: Vec<HookPoint>,
        answer: fn(&HookEvent) -> HookOutcome,
    }

    #[async_trait]
    impl Hook for Policy {
        fn name(&self) -> &str {
            "policy"
        }
        fn points(&self) -> &[HookPoint] {
            &self.points
        }
        async fn call(&self, _: &HookContext, event: &HookEvent) -> Result<HookOutcome, HookError> {
            Ok((self.answer)(event))
        }
    }

    fn hooked(
        script: Vec<Script>,
        points: Vec<HookPoint>,
        answer: fn(&HookEvent) -> HookOutcome,
    ) -> Fixture {
        let mut f = fixture(script, config());
        f.runner = f
            .runner
            .clone()
            .with_hooks(HookRegistry::new().with(Arc::new(Policy { points, answer })));
        f
    }

    #[tokio::test]
    async fn a_blocked_tool_call_does_not_run_and_the_model_sees_why() {
        let f = hooked(
            vec![
                Script::Tools(vec![
                    ("c1", "echo", r#"{"x":1}"#),
                    ("c2", "echo", r#"{"safe":1}"#),
                ]),
                Script::Text("ok"),
            ],
            vec![HookPoint::BeforeToolCall],
            |e| match e {
                HookEvent::BeforeToolCall(c) if c.arguments.get("x").is_some() => {
                    HookOutcome::ToolCall(ToolCallVerdict {
                        block: Some(true),
                        block_reason: Some("x is not allowed".into()),
                        params: None,
                    })
                }
                _ => HookOutcome::ToolCall(ToolCallVerdict {
                    params: Some(serde_json::json!({"safe": 2})),
                    ..Default::default()
                }),
            },
        );
        let run = turn(&f, "go").await;
        assert_eq!(run.status, RunStatus::Ok);
        let results: Vec<(bool, String)> = f
            .tool_results()
            .await
            .into_iter()
            .map(|r| (r.is_error, r.content))
            .collect();
        assert_eq!(
            results,
            [
                (true, "blocked: x is not allowed".into()),
                (false, r#"echo:{"safe":2}"#.into())
            ]
        );
    }

    #[tokio::test]
    async fn a_run_blocked_by_a_hook_ends_without_keeping_the_prompt_or_calling_the_model() {
        let f = hooked(vec![], vec![HookPoint::BeforeAgentRun], |_| {
            HookOutcome::RunGate(RunGate::Block {
                reason: "policy".into(),
                message: Some("Not today.".into()),
            })
        });
        let run = turn(&f, "forbidden request").await;
        assert_eq!(run.status, RunStatus::Error);
        let err = run.error.unwrap();
        assert_eq!(
            (err.code.as_str(), err.message.as_str()),
            ("hook_block", "Not today.")
        );
        assert!(f.transcript().await.is_empty());
        assert!(f.model.requests().is_empty());
    }

    #[tokio::test]
    async fn a_finalize_revision_runs_another_attempt_with_the_instruction() {
        let f = hooked(
            vec![Script::Text("draft answer"), Script::Text("revised answer")],
            vec![HookPoint::BeforeAgentFinalize],
            |e| match e {
                HookEvent::BeforeAgentFinalize(ev) if ev.revisions == 0 => {
                    HookOutcome::Finalize(FinalizeAction::Revise {
                        instruction: "Cite a source.".into(),
                    })
                }
                _ => HookOutcome::Finalize(FinalizeAction::Finalize),
            },
        );
        let run = turn(&f, "question").await;
        assert_eq!(run.payloads[0].text, "revised answer");
        let second = &f.model.requests()[1];
        let last = second.messages.last().unwrap();
        assert!(
            matches!(last, Message::User { content } if content.ends_with("Cite a source.") && content.starts_with(agentlane_agent::turn::REVISION_PREFIX))
        );
        assert_eq!(f.roles().await, ["user", "assistant", "assistant"]);
    }

    #[tokio::test]
    async fn prompt_build_additions_reach_the_model_but_not_the_transcript() {
        let f = hooked(
            vec![Script::Text("fine")],
            vec![HookPoint::BeforePromptBuild],
            |_| {
                HookOutcome::Prompt(PromptAdditions {
                    prepend_context: vec!["User tier: gold.".into()],
                    append_system_context: vec!["Never reveal internal ids.".into()],
                    ..Default::default()
                })
            },
        );
        turn(&f, "hello").await;
        let request = &f.model.requests()[0];
        assert!(
            request.system.ends_with("Never reveal internal ids."),
            "{}",
            request.system
        );
        assert!(
            matches!(&request.messages[0], Message::User { content } if content.contains("User tier: gold.") && content.ends_with("hello"))
        );
        assert!(
            matches!(&f.transcript().await[0].message, Message::User { content } if content == "hello")
        );
    }

    #[tokio::test]
    async fn a_claimed_turn_replies_without_a_model_call_and_sending_hooks_shape_the_reply() {
        let f = hooked(
            vec![],
            vec![HookPoint::BeforeAgentReply, HookPoint::MessageSending],
            |e| match e {
                HookEvent::BeforeAgentReply(_) => HookOutcome::Reply(ReplyClaim {
                    handled: true,
                    reply: Some("canned answer".into()),
                }),
                _ => HookOutcome::Sending(SendingVerdict {
                    cancel: false,
                    content: Some("canned answer (via hook)".into()),
                }),
            },
        );
        let run = turn(&f, "faq question").await;
        assert_eq!(run.status, RunStatus::Ok);
        assert_eq!(run.payloads[0].text, "canned answer (via hook)");
        assert_eq!(run.model.as_deref(), Some("hook/policy"));
        assert!(f.model.requests().is_empty());
        assert_eq!(f.roles().await, ["user", "assistant"]);
    }

    #[tokio::test]
    async fn a_model_resolve_hook_picks_the_model_of_the_run() {
        let mut f = fixture_with(
            vec![Script::Text("from backup")],
            config(),
            |router, model| {
                router
                    .with_provider(model.clone())
                    .with_provider(model.sibling("backup"))
            },
        );
        f.runner = f
            .runner
            .clone()
            .with_hooks(HookRegistry::new().with(Arc::new(Policy {
                points: vec![HookPoint::BeforeModelResolve],
                answer: |_| {
                    HookOutcome::ModelOverride(ModelOverride {
                        model: Some("backup/m9".into()),
                    })
                },
            })));
        let run = turn(&f, "hi").await;
        assert_eq!(run.model.as_deref(), Some("backup/m9"));
        assert_eq!(f.model.providers_called(), ["backup"]);
    }
}

impl Fixture {
    /// Accepts `message` with a scheduler's limits: an absolute deadline and an idle cap.
    async fn accept_fired(
        &self,
        message: &str,
        deadline_at: u64,
        model_idle_timeout_ms: Option<u64>,
    ) -> TurnMessage {
        let out = self
            .store
            .accept_turn(NewTurn {
                tenant: self.tenant.clone(),
                session_key: self.key.clone(),
                run_id: RunId::generate(),
                new_session_id: SessionId::generate(),
                request: TurnRequest {
                    message: message.into(),
                    queue_mode: Default::default(),
                    model: None,
                    thinking: None,
                    timeout_seconds: Some(0),
                    extra_system_prompt: None,
                    deadline_at: Some(deadline_at),
                    model_idle_timeout_ms,
                },
                idempotency_key: None,
                now: SystemClock.now_ms(),
                idempotency_ttl_ms: 1000,
            })
            .await
            .unwrap();
        TurnMessage {
            session_key: Some(self.key.clone()),
            tenant: self.tenant.clone(),
            run_id: out.run.run_id,
        }
    }
}

#[tokio::test]
async fn an_absolute_deadline_ends_the_run_timeout_even_with_no_timeout_of_its_own() {
    // a deadline 1 s away, no run timeout (0): the slow tool round is cut at the deadline
    let f = fixture(vec![Script::Tools(vec![("c1", "slow", "{}")])], config());
    let msg = f
        .accept_fired("slow", SystemClock.now_ms() + 1_000, None)
        .await;
    assert_eq!(
        f.execute(&msg).await,
        TurnExit::Finished(RunStatus::Timeout)
    );
    // a deadline already past when the run is picked up: no model call at all
    let late = fixture(vec![Script::Text("never")], config());
    let msg = late
        .accept_fired("hi", SystemClock.now_ms() - 1, None)
        .await;
    assert_eq!(
        late.execute(&msg).await,
        TurnExit::Finished(RunStatus::Timeout)
    );
    assert_eq!(late.model.requests().len(), 0);
}

#[tokio::test]
async fn a_fired_runs_idle_cap_cuts_a_stalled_stream_sooner() {
    // the deployment's idle timeout is 30 s; the run's cap is 200 ms
    let f = fixture(
        vec![Script::Stall(Duration::from_secs(20))],
        RunnerConfig {
            model_idle_timeout: Duration::from_secs(30),
            ..config()
        },
    );
    let msg = f
        .accept_fired("hi", SystemClock.now_ms() + 60_000, Some(200))
        .await;
    let started = std::time::Instant::now();
    f.execute(&msg).await;
    // cut after ~200 ms of silence, not after the 20 s stall or the 30 s default
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let run = finished_run(&f, &msg).await;
    assert_eq!(run.attempts[0].outcome, "timeout", "{:?}", run.attempts);
    assert!(run.attempts[0].duration_ms < 5_000, "{:?}", run.attempts);
}
