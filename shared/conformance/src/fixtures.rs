//! Builders the cases share: unique names, turns, transcript entries, events, lane messages.
//!
//! Every name is fresh and random, so cases can run side by side on one backend (one SQLite file,
//! one DynamoDB table) without seeing each other's records.

use agentlane_core::{
    Clock, Commit, Event, EventStream, Fence, Lane, LaneMessage, LockAttempt, Message, NewTurn,
    QueueMode, Run, RunId, RunStatus, Session, SessionId, SessionKey, SessionStatus, SessionUpdate,
    Store, SystemClock, TenantId, ToolCall, TranscriptEntry, TurnMessage, TurnRequest,
};
use std::sync::Arc;

/// How long an idempotency key lives in the cases that do not test its expiry (24 h).
pub const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// `prefix-` followed by 16 random hex digits.
pub fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &id[..16])
}

/// A fresh tenant name (valid for `validate_tenant`).
pub fn tenant() -> TenantId {
    TenantId::new(unique("tenant"))
}

/// A fresh session key (valid for `validate_session_key`).
pub fn session_key() -> SessionKey {
    SessionKey::new(unique("agent:main"))
}

/// A fresh tenant, a fresh session key of it, and the wall time: what most cases start from.
pub fn fresh() -> (TenantId, SessionKey, u64) {
    (tenant(), session_key(), wall_ms())
}

/// The session `key` names, which must exist.
pub async fn session(store: &Arc<dyn Store>, tenant: &TenantId, key: &SessionKey) -> Session {
    store
        .get_session(tenant, key)
        .await
        .expect("get_session")
        .expect("the session exists")
}

/// `run` as stored now (it must exist).
pub async fn stored_run(store: &Arc<dyn Store>, run: &Run) -> Run {
    store
        .get_run(&run.tenant, &run.run_id)
        .await
        .expect("get_run")
        .expect("run exists")
}

/// A fresh lane of a fresh tenant and session key.
pub fn lane() -> Lane {
    Lane::for_session(&tenant(), &session_key())
}

/// Wall time in ms. Cases pass realistic times so that adapters which also keep a TTL attribute
/// (DynamoDB) see plausible values.
pub fn wall_ms() -> u64 {
    SystemClock.now_ms()
}

/// A `followup` request with `message`.
pub fn request(message: &str) -> TurnRequest {
    TurnRequest {
        message: message.to_owned(),
        queue_mode: Some(QueueMode::Followup),
        model: None,
        thinking: None,
        timeout_seconds: None,
        extra_system_prompt: None,
        history: Vec::new(),
        deadline_at: None,
        model_idle_timeout_ms: None,
        agent_id: None,
        agent_version: None,
        tools: Vec::new(),
        budget: None,
        max_output_tokens: None,
        output_tokens_ceiling: None,
    }
}

/// A new turn with a fresh run id and a fresh session id to mint, no idempotency key.
pub fn turn(tenant: &TenantId, key: &SessionKey, now: u64) -> NewTurn {
    NewTurn {
        tenant: tenant.clone(),
        session_key: key.clone(),
        run_id: RunId::generate(),
        new_session_id: SessionId::generate(),
        request: request("hello"),
        idempotency_key: None,
        now,
        idempotency_ttl_ms: DAY_MS,
        max_open_runs: 0,
        default_mode: None,
        spend_caps: Vec::new(),
    }
}

/// Accepts a fresh turn and returns its (new) run.
pub async fn accept(store: &Arc<dyn Store>, tenant: &TenantId, key: &SessionKey, now: u64) -> Run {
    let outcome = store
        .accept_turn(turn(tenant, key, now))
        .await
        .expect("accept_turn");
    assert!(outcome.created, "a turn without idempotency key is new");
    outcome.run
}

/// Takes the lock or fails the case.
pub async fn lock(
    store: &Arc<dyn Store>,
    tenant: &TenantId,
    key: &SessionKey,
    owner: &str,
    lease_ms: u64,
    now: u64,
) -> Fence {
    match store
        .acquire_lock(tenant, key, owner, lease_ms, now)
        .await
        .expect("acquire_lock")
    {
        LockAttempt::Acquired(fence, _) => fence,
        LockAttempt::Held {
            owner: holder,
            until,
        } => {
            panic!("{owner} expected the lock, but {holder} holds it until {until}")
        }
    }
}

/// The transcript entry with `seq`: user, assistant-with-tool-call and tool messages in turn.
pub fn entry(seq: u64, run_id: &RunId, ts: u64) -> TranscriptEntry {
    let message = match seq % 3 {
        1 => Message::user(format!("question {seq}")),
        2 => Message::Assistant {
            content: format!("answer {seq}"),
            reasoning: Some("thinking".into()),
            tool_calls: vec![ToolCall {
                id: format!("call_{seq}"),
                name: "clock".into(),
                arguments: "{\"tz\":\"UTC\"}".into(),
            }],
            model: Some("demo/echo".into()),
        },
        _ => Message::Tool {
            tool_call_id: format!("call_{}", seq - 1),
            name: "clock".into(),
            content: format!("result {seq}"),
            is_error: seq.is_multiple_of(2),
        },
    };
    TranscriptEntry {
        seq,
        run_id: run_id.clone(),
        ts,
        message,
    }
}

/// The event with `seq`, cycling through the four streams.
pub fn event(seq: u64, ts: u64) -> Event {
    let stream = match seq % 4 {
        0 => EventStream::Lifecycle,
        1 => EventStream::Assistant,
        2 => EventStream::Tool,
        _ => EventStream::Compaction,
    };
    Event {
        seq,
        stream,
        ts,
        data: serde_json::json!({ "seq": seq, "text": format!("delta {seq}"), "nested": { "ok": true } }),
    }
}

/// `run` as a runner writes it when it picks the run up.
pub fn running(run: &Run, now: u64) -> Run {
    Run {
        status: RunStatus::Running,
        started_at: Some(now),
        pickups: run.pickups + 1,
        model: Some("demo/echo".into()),
        ..run.clone()
    }
}

/// The commit that ends `run` `ok` at `now`: the session idle again, the lock released.
pub fn finished(run: &Run, now: u64) -> Commit {
    Commit {
        run: Some(Run {
            status: RunStatus::Ok,
            ended_at: Some(now),
            ..running(run, now)
        }),
        session: Some(SessionUpdate {
            status: SessionStatus::Idle,
            active_run_id: None,
            last_progress_at: now,
            finished_delta: 1,
        }),
        release_lock: true,
        ..Commit::default()
    }
}

/// A message of `lane` for a fresh run id, with the run id as dedup id.
pub fn message(lane: &Lane) -> LaneMessage {
    let run_id = RunId::generate();
    LaneMessage {
        lane: lane.clone(),
        dedup_id: run_id.as_str().to_owned(),
        body: TurnMessage {
            session_key: None,
            tenant: TenantId::new(lane.as_str().split('/').next().unwrap_or("tenant")),
            run_id,
            accepted: None,
        },
    }
}
