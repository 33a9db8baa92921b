//! Hook test support: a scripted hook that answers with a closure (optionally late) and
//! records what it saw, and event builders.

use agentlane_agent::hooks::*;
use agentlane_core::{RunId, SessionId, SessionKey, TenantId};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub type Answer = Box<dyn Fn(&HookEvent) -> Result<HookOutcome, HookError> + Send + Sync>;

/// A hook that answers with a closure, optionally after a delay, and records what it saw.
pub struct Scripted {
    pub name: String,
    pub priority: i32,
    pub points: Vec<HookPoint>,
    pub delay: Duration,
    pub timeout: Option<Duration>,
    pub answer: Answer,
    pub calls: AtomicUsize,
    pub seen: Mutex<Vec<HookEvent>>,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    pub fn new(
        name: &str,
        priority: i32,
        point: HookPoint,
        answer: impl Fn(&HookEvent) -> Result<HookOutcome, HookError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_owned(),
            priority,
            points: vec![point],
            delay: Duration::ZERO,
            timeout: None,
            answer: Box::new(answer),
            calls: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
            log: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    pub fn log(mut self, log: &Arc<Mutex<Vec<String>>>) -> Self {
        self.log = log.clone();
        self
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn seen(&self) -> Vec<HookEvent> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Hook for Scripted {
    fn name(&self) -> &str {
        &self.name
    }
    fn priority(&self) -> i32 {
        self.priority
    }
    fn points(&self) -> &[HookPoint] {
        &self.points
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    async fn call(&self, _ctx: &HookContext, event: &HookEvent) -> Result<HookOutcome, HookError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.log.lock().unwrap().push(self.name.clone());
        self.seen.lock().unwrap().push(event.clone());
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        (self.answer)(event)
    }
}

pub fn registry(hooks: &[&Arc<Scripted>]) -> HookRegistry {
    let mut r = HookRegistry::new();
    for h in hooks {
        r.register((*h).clone());
    }
    r
}

pub fn ctx() -> HookContext {
    HookContext {
        tenant: TenantId::new("t1"),
        session_key: SessionKey::new("main"),
        session_id: SessionId::new("s1"),
        run_id: Some(RunId::new("run_1")),
    }
}

pub fn tool_event() -> ToolCallEvent {
    ToolCallEvent {
        tool_name: "shell".into(),
        tool_call_id: "call_1".into(),
        arguments: json!({"cmd": "rm -rf /"}),
    }
}

pub fn verdict(block: Option<bool>, reason: Option<&str>, params: Option<Value>) -> HookOutcome {
    HookOutcome::ToolCall(ToolCallVerdict {
        block,
        block_reason: reason.map(str::to_owned),
        params,
    })
}

pub fn prompt_event() -> PromptBuildEvent {
    PromptBuildEvent {
        prompt: "hi".into(),
        system_prompt: "base".into(),
    }
}

pub fn fails(_: &HookEvent) -> Result<HookOutcome, HookError> {
    Err(HookError::Failed("boom".into()))
}

pub fn cont(_: &HookEvent) -> Result<HookOutcome, HookError> {
    Ok(HookOutcome::Continue)
}

pub fn sending(ev: &HookEvent) -> String {
    match ev {
        HookEvent::MessageSending(m) => m.text.clone(),
        other => panic!("unexpected event {other:?}"),
    }
}
