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
    /// Sends one delta, then nothing for this long.
    Stall(Duration),
}

struct ScriptedModel {
    script: Mutex<VecDeque<Script>>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl ScriptedModel {
    fn new(script: Vec<Script>) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(script.into()),
            requests: Mutex::new(Vec::new()),
        })
    }
    fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait]
impl ModelProvider for ScriptedModel {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn stream(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> Result<ModelStream, ProviderError> {
        agentlane_agent::repair::check_pairing(&request.messages).expect("pairing invariant");
        self.requests.lock().unwrap().push(request);
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
        Ok(ToolOutput {
            content: format!("{}:{arguments}", self.name),
        })
    }
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
        ModelRouter::new("scripted/m1").with_provider(model.clone()),
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
                },
                idempotency_key: None,
                now: SystemClock.now_ms(),
                idempotency_ttl_ms: 1000,
            })
            .await
            .unwrap();
        TurnMessage {
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

    async fn roles(&self) -> Vec<&'static str> {
        self.transcript()
            .await
            .iter()
            .map(|e| match e.message {
                Message::User { .. } => "user",
                Message::Assistant { .. } => "assistant",
                Message::Tool { .. } => "tool",
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
    let t = f.transcript().await;
    let results: Vec<(String, bool)> = t
        .iter()
        .filter_map(|e| match &e.message {
            Message::Tool {
                tool_call_id,
                is_error,
                ..
            } => Some((tool_call_id.clone(), *is_error)),
            _ => None,
        })
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
async fn idle_streams_are_retried_then_the_run_fails_with_a_clear_error() {
    let stall = Script::Stall(Duration::from_secs(30));
    let f = fixture(
        vec![stall.clone(), stall.clone(), stall.clone(), stall],
        RunnerConfig {
            model_idle_timeout: Duration::from_millis(100),
            ..config()
        },
    );
    let msg = f.accept("hi").await;
    // Backoff is 0.5 + 1 + 2 s: this test takes ~4 s.
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Error));
    let run = f
        .store
        .get_run(&f.tenant, &msg.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.attempts.len(), 4);
    assert!(run.attempts.iter().all(|a| a.outcome == "timeout"));
    let err = run.error.unwrap();
    assert_eq!(err.code, "timeout");
    assert!(err.message.contains("idle"), "{}", err.message);
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
            },
            idempotency_key: None,
            now: SystemClock.now_ms(),
            idempotency_ttl_ms: 1000,
        })
        .await
        .unwrap();
    let msg = TurnMessage {
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
