//! The turn: take the session lock, bring the run to a terminal status (or hand it back), and
//! release the lock. Safe to run again for the same run at any point: the transcript tells how
//! far an earlier pickup got, so a redelivered message never repeats or loses an entry.

use crate::attempt::{AttemptError, stream_attempt};
use crate::audit;
use crate::compaction;
use crate::config::RunnerConfig;
use crate::failover::{
    Action, CompactionTrigger, Completion, Continuation, MAX_OVERFLOW_COMPACTIONS,
    POST_COMPACTION_GUARD_WINDOW, RetryState, Situation, Stage, max_iterations,
};
use crate::history::{assemble, limit_turns};
use crate::hooks::{
    AgentEndEvent, AgentReplyEvent, AgentRunEvent, CompactionEvent, CompactionResultEvent,
    FinalizeAction, FinalizeEvent, HookContext, HookPoint, HookRegistry, MAX_FINALIZE_REVISIONS,
    MessageEvent, ModelResolveEvent, PersistEvent, PromptAdditions, PromptBuildEvent, ReplyClaimed,
    ReplyTrigger, RunGate, SendDecision, SessionStartEvent, ToolCallDecision, ToolCallEvent,
    ToolResultEvent, parse_arguments,
};
use crate::lock::{self, AcquireError};
use crate::models::Profile;
use crate::models::{ModelRouter, ResolvedModel};
use crate::normalize::{Change, normalize};
use crate::precheck::{self, Route};
use crate::repair::{missing_results, repair_pairing};
use crate::reply::{is_silent, shape_payloads};
use crate::tokens::{estimate_parts, estimate_tokens};
use crate::tool_exec::{ToolRun, run_batch};
use crate::writer::{Positions, RunWriter};
use agentlane_core::{
    AttemptRecord, Clock, EventStream, LivenessState, Message, Run, RunError, RunStatus,
    SessionStatus, Store, StoreError, ToolCall, TranscriptEntry, TurnMessage,
};
use agentlane_providers::ModelRequest;
use agentlane_tools::ToolRegistry;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How a pickup of a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnExit {
    /// This pickup wrote the terminal status.
    Finished(RunStatus),
    /// Nothing to do: the run was already terminal, or does not exist.
    AlreadyDone,
    /// The run is not finished and should be picked up again soon (shutdown, or the session's
    /// lock stayed busy). The lane stays blocked meanwhile.
    HandBack,
    /// The lock was lost to another writer: this pickup wrote nothing more. Leave the message
    /// alone; it comes back after its visibility timeout and finds the run's real state.
    Abandoned,
}

/// Failures of a pickup that are not the run's own fault (store unavailable, ...).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a run was stopped from outside its loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Abort,
    Timeout,
    LockLost,
    Shutdown,
}

/// A cancellation token that remembers the first reason it was cancelled for.
#[derive(Clone, Default)]
pub struct StopSignal {
    token: CancellationToken,
    reason: Arc<Mutex<Option<StopReason>>>,
}

impl StopSignal {
    pub fn trigger(&self, reason: StopReason) {
        if let Ok(mut r) = self.reason.lock() {
            r.get_or_insert(reason);
        }
        self.token.cancel();
    }
    pub fn reason(&self) -> Option<StopReason> {
        self.reason.lock().ok().and_then(|r| *r)
    }
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

/// Put before a `before_agent_finalize` revision instruction.
pub const REVISION_PREFIX: &str = "Apply this revision request to your previous final answer. Do \
not repeat completed work or rerun tools unless the revision requires it.";

/// The reply when the model keeps answering nothing visible.
pub const INCOMPLETE_REPLY: &str = "⚠️ Agent couldn't generate a response. Please try again.";

fn continuation_name(c: Continuation) -> &'static str {
    match c {
        Continuation::ReasoningOnly => "reasoning_only",
        Continuation::EmptyResponse => "empty_response",
        Continuation::AfterCompaction => "compaction_continuation",
    }
}

/// Where the current run sits in its session's history (for compaction).
struct RunScope {
    /// Index in the history of the run's first message.
    run_start: usize,
    /// Seq of the last transcript entry before the run; `None` when the run is the first.
    through_seq: Option<u64>,
}

/// The attempt a failure decision is about.
struct Attempted<'a> {
    model: &'a ResolvedModel,
    profile: &'a Profile,
    idle: Duration,
    reason: &'a str,
}

fn overflow_failure(why: &str) -> LoopEnd {
    LoopEnd::Failed(RunError::new(
        "context_overflow",
        format!(
            "Context overflow: the prompt is too large for the model ({why}). Reset the session \
             or use a model with a larger context window."
        ),
    ))
}

/// How the loop ended.
enum LoopEnd {
    Final {
        text: String,
        last_tool_error: Option<(String, String)>,
        /// The final assistant message, written with the terminal status in one commit.
        pending: Option<Message>,
    },
    Failed(RunError),
    /// Directed retries are spent and the model still shows nothing.
    Incomplete,
    Stopped(StopReason),
}

/// Runs turns. Cheap to clone; shared by all lane workers of a process.
#[derive(Clone)]
pub struct Runner {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    models: ModelRouter,
    tools: ToolRegistry,
    config: Arc<RunnerConfig>,
    hooks: HookRegistry,
    instance: String,
}

impl Runner {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        models: ModelRouter,
        tools: ToolRegistry,
        config: RunnerConfig,
    ) -> Self {
        Self {
            store,
            clock,
            models,
            tools,
            config: Arc::new(config),
            hooks: HookRegistry::new(),
            instance: format!("runner-{}", uuid::Uuid::new_v4().simple()),
        }
    }

    pub fn config(&self) -> &RunnerConfig {
        &self.config
    }

    /// The plugin hooks called at the points of SPEC §11.
    pub fn with_hooks(mut self, hooks: HookRegistry) -> Self {
        self.hooks = hooks;
        self
    }

    /// Adds (or replaces, by name) a model provider.
    pub fn with_provider(mut self, provider: Arc<dyn agentlane_providers::ModelProvider>) -> Self {
        self.models = self.models.with_provider(provider);
        self
    }

    /// Brings the run named by `message` as far as it can go. `shutdown` asks the run to hand
    /// back (its state is kept; a later pickup resumes it).
    pub async fn execute(
        &self,
        message: &TurnMessage,
        shutdown: &CancellationToken,
    ) -> Result<TurnExit, RunnerError> {
        // The session key comes with the message; older messages need a read of the run first.
        let key = match &message.session_key {
            Some(key) => key.clone(),
            None => match self.store.get_run(&message.tenant, &message.run_id).await? {
                None => {
                    tracing::warn!(run = %message.run_id, "lane message names an unknown run; dropping it");
                    return Ok(TurnExit::AlreadyDone);
                }
                Some(run) if run.status.is_terminal() => return Ok(TurnExit::AlreadyDone),
                Some(run) => run.session_key,
            },
        };
        let owner = format!("{}:{}", self.instance, uuid::Uuid::new_v4().simple());
        let acquired = tokio::select! {
            _ = shutdown.cancelled() => return Ok(TurnExit::HandBack),
            a = lock::acquire(
                self.store.as_ref(),
                self.clock.as_ref(),
                &message.tenant,
                &key,
                &owner,
                self.config.lock_lease,
                self.config.lock_acquire_timeout,
            ) => a,
        };
        let fence = match acquired {
            Ok(fence) => fence,
            Err(AcquireError::Busy { owner, until }) => {
                tracing::info!(run = %message.run_id, %owner, until, "session busy; handing the turn back");
                return Ok(TurnExit::HandBack);
            }
            Err(AcquireError::Store(StoreError::NotFound(_))) => {
                tracing::warn!(run = %message.run_id, "lane message names an unknown session; dropping it");
                return Ok(TurnExit::AlreadyDone);
            }
            Err(AcquireError::Store(e)) => return Err(e.into()),
        };
        // Read the run under the lock: it may have ended while we waited for the lock.
        let run = match self.store.get_run(&message.tenant, &message.run_id).await {
            Ok(Some(run)) if !run.status.is_terminal() && run.session_key == key => run,
            other => {
                self.store.release_lock(&fence).await.ok();
                return match other {
                    Err(e) => Err(e.into()),
                    Ok(_) => Ok(TurnExit::AlreadyDone),
                };
            }
        };

        let stop = StopSignal::default();
        let stop_helpers = CancellationToken::new();
        let _stop_helpers_on_drop = stop_helpers.clone().drop_guard();
        let lost = CancellationToken::new();
        lock::spawn_heartbeat(
            self.store.clone(),
            self.clock.clone(),
            fence.clone(),
            self.config.lock_lease,
            lost.clone(),
            stop_helpers.clone(),
        );
        self.spawn_watchers(&run, &stop, &lost, shutdown, &stop_helpers);

        let result = self.drive(run, fence, &stop).await;
        match result {
            Ok(exit) => Ok(exit),
            Err(StoreError::FenceLost) => Ok(TurnExit::Abandoned),
            Err(e) => Err(e.into()),
        }
    }

    /// Abort polling, lock loss and shutdown all feed the run's stop signal.
    fn spawn_watchers(
        &self,
        run: &Run,
        stop: &StopSignal,
        lost: &CancellationToken,
        shutdown: &CancellationToken,
        helpers: &CancellationToken,
    ) {
        let (store, tenant, run_id) = (self.store.clone(), run.tenant.clone(), run.run_id.clone());
        let (stop, lost, shutdown, helpers) = (
            stop.clone(),
            lost.clone(),
            shutdown.clone(),
            helpers.clone(),
        );
        let poll = self.config.abort_poll;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = helpers.cancelled() => return,
                    _ = lost.cancelled() => { stop.trigger(StopReason::LockLost); return; }
                    _ = shutdown.cancelled() => { stop.trigger(StopReason::Shutdown); return; }
                    _ = tokio::time::sleep(poll) => {}
                }
                if let Ok(true) = store.abort_requested(&tenant, &run_id).await {
                    stop.trigger(StopReason::Abort);
                    return;
                }
            }
        });
    }

    /// Everything done under the lock.
    async fn drive(
        &self,
        run: Run,
        fence: agentlane_core::Fence,
        stop: &StopSignal,
    ) -> Result<TurnExit, StoreError> {
        let entries = self.read_whole_transcript(&run).await?;
        // A run that never started has no events yet: skip the read.
        let next_event_seq = if run.status == RunStatus::Queued && run.pickups == 0 {
            0
        } else {
            self.store
                .read_events(&run.tenant, &run.run_id, None, usize::MAX)
                .await?
                .last()
                .map_or(0, |e| e.seq + 1)
        };
        let positions = Positions {
            next_seq: entries.last().map_or(0, |e| e.seq + 1),
            next_event_seq,
        };
        let mut writer = RunWriter::new(
            self.store.clone(),
            self.clock.clone(),
            fence,
            run,
            positions,
            self.config.delta_flush_bytes,
            self.config.delta_flush,
        );
        let run_id = writer.run.run_id.clone();
        let assembled = assemble(&entries);
        let mut history: Vec<Message> = assembled.iter().map(|e| e.message.clone()).collect();
        let is_ours = |e: &TranscriptEntry| {
            e.run_id == run_id && !matches!(e.message, Message::Compaction { .. })
        };
        let mut scope = RunScope {
            run_start: assembled
                .iter()
                .position(|e| is_ours(e))
                .unwrap_or(history.len()),
            // The entries before the run's user message (which is written first).
            through_seq: entries
                .iter()
                .find(|e| is_ours(e))
                .map_or(positions.next_seq, |e| e.seq)
                .checked_sub(1),
        };
        drop(assembled);
        let has_user = entries
            .iter()
            .any(|e| e.run_id == run_id && matches!(e.message, Message::User { .. }));

        if writer.run.abort_requested && !has_user {
            // Aborted before it started: the prompt is not retained.
            return self
                .finish(&mut writer, LoopEnd::Stopped(StopReason::Abort))
                .await;
        }

        let ctx = HookContext::for_run(&writer.run);
        if !has_user && !self.hooks.is_empty() {
            let prompt = writer.run.request.message.clone();
            if let Some(claim) = self
                .hooks
                .before_agent_reply(
                    &ctx,
                    AgentReplyEvent {
                        trigger: ReplyTrigger::User,
                        prompt: prompt.clone(),
                    },
                )
                .await
            {
                return self.claimed(&mut writer, claim).await;
            }
            if let RunGate::Block { reason, message } = self
                .hooks
                .before_agent_run(
                    &ctx,
                    AgentRunEvent {
                        prompt,
                        model: writer.run.request.model.clone(),
                    },
                )
                .await
            {
                // Blocked before it started: the prompt is not retained.
                let text = message.unwrap_or(reason);
                return self
                    .finish(
                        &mut writer,
                        LoopEnd::Failed(RunError::new("hook_block", text)),
                    )
                    .await;
            }
        }

        if !has_user && self.hooks.has(HookPoint::BeforeModelResolve) {
            let event = ModelResolveEvent {
                prompt: writer.run.request.message.clone(),
                requested_model: writer.run.request.model.clone(),
            };
            if let Some(model) = self.hooks.before_model_resolve(&ctx, event).await {
                // Recorded on the run, so a later pickup keeps the hook's choice.
                writer.run.request.model = Some(model);
            }
        }
        if entries.is_empty() && !self.hooks.is_empty() {
            // The first run of this session id.
            self.hooks
                .session_start(&ctx, SessionStartEvent { resumed_from: None })
                .await;
        }

        // Start (or resume) the run.
        let now = writer.now();
        let resumed = has_user;
        writer.run.status = RunStatus::Running;
        writer.run.liveness_state = LivenessState::Working;
        writer.run.started_at.get_or_insert(now);
        writer.run.pickups += 1;
        if writer.run.model.is_none() {
            writer.run.model = Some(
                self.models
                    .chain(writer.run.request.model.as_deref())
                    .swap_remove(0),
            );
        }
        let mut start = Vec::new();
        if !has_user {
            start.push(Message::user(writer.run.request.message.clone()));
        } else {
            // A previous pickup died mid-run: give every dangling tool call a result.
            start.extend(missing_results(&history));
        }
        history.extend(start.iter().cloned());
        writer.event(
            EventStream::Lifecycle,
            json!({
                "phase": "start",
                "startedAt": writer.run.started_at,
                "model": writer.run.model,
                "resumed": resumed,
                "pickup": writer.run.pickups,
            }),
        );
        writer
            .commit(start, true, Some(SessionStatus::Processing), false)
            .await?;
        if !resumed && !self.hooks.is_empty() {
            self.hooks
                .message_received(
                    &ctx,
                    MessageEvent {
                        text: writer.run.request.message.clone(),
                    },
                )
                .await;
        }

        let deadline = self.deadline(&writer.run);
        let end = match deadline {
            Some(d) if d <= writer.now() => LoopEnd::Stopped(StopReason::Timeout),
            _ => {
                let timer = deadline.map(|d| {
                    let stop = stop.clone();
                    let wait = Duration::from_millis(d.saturating_sub(writer.now()));
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        stop.trigger(StopReason::Timeout);
                    })
                });
                let end = self
                    .run_loop(&mut writer, &mut history, &mut scope, stop)
                    .await;
                if let Some(t) = timer {
                    t.abort();
                }
                end?
            }
        };
        self.finish(&mut writer, end).await
    }

    /// When the run must end (ms since epoch): its timeout from its first start, or the
    /// absolute deadline its request carries (a cron fire's), whichever comes first.
    fn deadline(&self, run: &Run) -> Option<u64> {
        let timeout = match run.request.timeout_seconds {
            Some(0) => return run.request.deadline_at,
            Some(s) => Duration::from_secs(s),
            None => self.config.default_run_timeout,
        };
        let own = run
            .started_at
            .map(|s| s.saturating_add(timeout.as_millis() as u64));
        match (own, run.request.deadline_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    async fn read_whole_transcript(&self, run: &Run) -> Result<Vec<TranscriptEntry>, StoreError> {
        let mut all = Vec::new();
        loop {
            let page = self
                .store
                .read_transcript(
                    &run.tenant,
                    &run.session_id,
                    all.last().map(|e: &TranscriptEntry| e.seq),
                    1000,
                )
                .await?;
            let done = page.len() < 1000;
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }

    /// Model attempts and tool rounds until a final answer, a failure, or a stop. Every
    /// failure goes through [`RetryState`], the one place that decides what comes next.
    async fn run_loop(
        &self,
        writer: &mut RunWriter,
        history: &mut Vec<Message>,
        scope: &mut RunScope,
        stop: &StopSignal,
    ) -> Result<LoopEnd, StoreError> {
        let mut state: RetryState = writer
            .run
            .checkpoint
            .as_ref()
            .and_then(|c| c.get("retry"))
            .and_then(|r| serde_json::from_value(r.clone()).ok())
            .unwrap_or_default();
        let chain = self.models.chain(writer.run.request.model.as_deref());
        let ctx = HookContext::for_run(&writer.run);
        // Hook additions to the prompts, decided once per run.
        let additions = if self.hooks.has(HookPoint::BeforePromptBuild) {
            self.hooks
                .before_prompt_build(
                    &ctx,
                    PromptBuildEvent {
                        prompt: writer.run.request.message.clone(),
                        system_prompt: self.system_prompt(&writer.run),
                    },
                )
                .await
        } else {
            PromptAdditions::default()
        };
        let mut last_tool_error: Option<(String, String)> = None;
        // A previous pickup may have produced the final answer and died before ending the run.
        if let Some(Message::Assistant {
            content,
            tool_calls,
            ..
        }) = history.last()
            && tool_calls.is_empty()
            && !content.trim().is_empty()
        {
            return Ok(LoopEnd::Final {
                text: content.clone(),
                last_tool_error,
                pending: None,
            });
        }
        loop {
            if let Some(reason) = stop.reason() {
                return Ok(LoopEnd::Stopped(reason));
            }
            let Some(model_name) = chain.get(state.model_index) else {
                return Ok(LoopEnd::Failed(RunError::new(
                    "fallbacks_exhausted",
                    format!("every model of the chain failed: {}", chain.join(", ")),
                )));
            };
            let has_fallback = state.model_index + 1 < chain.len();
            let model = match self.models.resolve(Some(model_name)) {
                Ok(m) => m,
                Err(message) if has_fallback => {
                    tracing::warn!(model = %model_name, %message, "model unavailable; falling back");
                    state.advance_model();
                    continue;
                }
                Err(message) => {
                    return Ok(LoopEnd::Failed(RunError::new("model_not_found", message)));
                }
            };
            let cap = max_iterations(model.profiles.len());
            if state.iterations >= cap {
                match state.on_retry_limit(has_fallback, cap) {
                    Action::Fallback { reason } => {
                        self.note_retry(writer, "fallback", reason.as_str(), Duration::ZERO);
                        state.advance_model();
                        continue;
                    }
                    Action::Fail { error, .. } => return Ok(LoopEnd::Failed(error)),
                    other => {
                        tracing::error!(?other, "unexpected retry-limit decision");
                        return Ok(LoopEnd::Failed(RunError::new(
                            "retry_limit",
                            "retry limit reached",
                        )));
                    }
                }
            }
            state.profile_index = self.models.pick_profile(&model, state.profile_index);
            let profile = model.profiles[state.profile_index.min(model.profiles.len() - 1)].clone();
            state.iterations += 1;
            writer.run.model = Some(model.full_name.clone());

            self.precheck(writer, history, scope, &model, &profile, &mut state, stop)
                .await?;
            let mut sent = limit_turns(history, self.config.history_max_turns);
            if !additions.prepend_context.is_empty() {
                // The run's own prompt gets the hooks' context; the transcript keeps the original.
                let run_prompt = sent
                    .iter_mut()
                    .rev()
                    .find(|m| matches!(m, Message::User { content } if *content == writer.run.request.message));
                if let Some(Message::User { content }) = run_prompt {
                    *content = additions.prompt(content);
                }
            }
            let mut messages = repair_pairing(&sent);
            if let Some(c) = state.continuation.take() {
                messages.push(Message::user(c.instruction()));
            }
            if let Some(instruction) = state.revision.take() {
                messages.push(Message::user(format!("{REVISION_PREFIX}\n\n{instruction}")));
            }
            let request = ModelRequest {
                model: model.model.clone(),
                system: additions.system_prompt(&self.system_prompt(&writer.run)),
                messages,
                tools: self.tools.specs(),
                max_output_tokens: None,
            };
            let prompt_ratio =
                estimate_tokens(&request) as f64 / model.context_window.max(1) as f64;
            let idle = if profile.provider.self_hosted() {
                self.config.model_idle_timeout_self_hosted
            } else {
                let cap = writer
                    .run
                    .request
                    .model_idle_timeout_ms
                    .map(Duration::from_millis);
                cap.map_or(self.config.model_idle_timeout, |c| {
                    c.min(self.config.model_idle_timeout)
                })
            };
            let started_at = writer.now();
            let started = Instant::now();
            let outcome = stream_attempt(
                profile.provider.as_ref(),
                request,
                idle,
                stop.token(),
                writer,
            )
            .await;
            let mut record = AttemptRecord {
                index: writer.run.attempts.len() as u32,
                model: model.full_name.clone(),
                profile: Some(profile.name.clone()),
                outcome: String::new(),
                usage: Default::default(),
                started_at,
                duration_ms: started.elapsed().as_millis() as u64,
                error: None,
            };
            let turn = match outcome {
                Ok(turn) => turn,
                Err(AttemptError::Store(e)) => return Err(e),
                Err(AttemptError::Stopped) => {
                    let reason = stop.reason().unwrap_or(StopReason::Abort);
                    record.outcome = "stopped".into();
                    writer.run.attempts.push(record);
                    return Ok(LoopEnd::Stopped(reason));
                }
                Err(AttemptError::Provider { .. }) if stop.reason().is_some() => {
                    let reason = stop.reason().unwrap_or(StopReason::Abort);
                    record.outcome = "stopped".into();
                    writer.run.attempts.push(record);
                    return Ok(LoopEnd::Stopped(reason));
                }
                Err(AttemptError::Provider {
                    error,
                    started,
                    progress,
                }) => {
                    record.outcome = error.reason.as_str().into();
                    record.error = Some(error.message.clone());
                    writer.run.attempts.push(record);
                    let stage = if started {
                        Stage::Assistant
                    } else {
                        Stage::Prompt
                    };
                    let situation = Situation {
                        next_profile: state.profile_index + 1 < model.profiles.len(),
                        fallback: has_fallback,
                        progress,
                        prompt_ratio,
                        can_compact: scope.through_seq.is_some(),
                    };
                    let action = state.on_failure(&error, stage, situation);
                    let attempt = Attempted {
                        model: &model,
                        profile: &profile,
                        idle,
                        reason: error.reason.as_str(),
                    };
                    let end = self
                        .apply(writer, history, scope, &attempt, &mut state, action, stop)
                        .await?;
                    self.checkpoint(writer, &state).await?;
                    match end {
                        Some(end) => return Ok(end),
                        None => continue,
                    }
                }
            };
            self.models.mark_good(&model.provider_name, &profile.name);
            // Stream normalisation: sanitize malformed calls, promote text tool calls, trim names.
            let normalized = normalize(turn, &self.offered_tools());
            for change in &normalized.changes {
                tracing::info!(run = %writer.run.run_id, %change, "normalized the model's tool calls");
            }
            let promoted = normalized
                .changes
                .iter()
                .any(|c| matches!(c, Change::PromotedTextCall { .. }));
            let invalid = normalized.invalid;
            let turn = normalized.turn;
            // Held-back text that was a tool call or the silent token is never shown.
            if promoted || is_silent(&turn.text) {
                writer.discard_held();
            } else {
                writer.release_held();
            }
            record.outcome = if turn.tool_calls.is_empty() {
                "ok"
            } else {
                "tool_calls"
            }
            .into();
            record.usage = turn.usage;
            writer.run.usage.add(turn.usage);
            writer.run.attempts.push(record);
            let visible = !turn.text.trim().is_empty();
            let reasoning = !turn.reasoning.trim().is_empty();
            if turn.tool_calls.is_empty() {
                match state.on_completion(visible, reasoning) {
                    Completion::Accept => {}
                    Completion::Retry(continuation) => {
                        // Reasoning is kept so the instruction makes sense; an empty turn is not.
                        let keep = reasoning.then(|| Message::Assistant {
                            content: String::new(),
                            reasoning: Some(turn.reasoning.clone()),
                            tool_calls: Vec::new(),
                            model: Some(model.full_name.clone()),
                        });
                        history.extend(keep.iter().cloned());
                        state.continuation = Some(continuation);
                        self.note_retry(
                            writer,
                            "directed_retry",
                            continuation_name(continuation),
                            Duration::ZERO,
                        );
                        writer.run.checkpoint = Some(json!({ "retry": state }));
                        writer
                            .commit(
                                keep.into_iter().collect(),
                                true,
                                Some(SessionStatus::Processing),
                                false,
                            )
                            .await?;
                        continue;
                    }
                    // A failed tool and nothing to say: the tool-error reply (SPEC §3).
                    Completion::GiveUp if last_tool_error.is_some() => {
                        writer.run.checkpoint = Some(json!({ "retry": state }));
                        return Ok(LoopEnd::Final {
                            text: String::new(),
                            last_tool_error,
                            pending: None,
                        });
                    }
                    Completion::GiveUp => return Ok(LoopEnd::Incomplete),
                }
            } else {
                state.breaker.step(false, true);
                // A productive tool round is progress, not a retry: it does not spend the
                // iteration budget; its own cap stops a runaway tool loop.
                state.iterations = state.iterations.saturating_sub(1);
                let rounds = writer
                    .run
                    .attempts
                    .iter()
                    .filter(|a| a.outcome == "tool_calls")
                    .count();
                if rounds as u32 > self.config.max_tool_rounds {
                    return Ok(LoopEnd::Failed(RunError::new(
                        "tool_round_limit",
                        format!(
                            "the turn made {} tool rounds without a final answer",
                            rounds - 1
                        ),
                    )));
                }
            }
            let assistant = Message::Assistant {
                content: turn.text.clone(),
                reasoning: reasoning.then(|| turn.reasoning.clone()),
                tool_calls: turn.tool_calls.clone(),
                model: Some(model.full_name.clone()),
            };
            history.push(assistant.clone());
            if turn.tool_calls.is_empty()
                && visible
                && self.hooks.has(HookPoint::BeforeAgentFinalize)
                && state.budgets.finalize_revisions < MAX_FINALIZE_REVISIONS
                && let FinalizeAction::Revise { instruction } = self
                    .hooks
                    .before_agent_finalize(
                        &ctx,
                        FinalizeEvent {
                            text: turn.text.clone(),
                            revisions: state.budgets.finalize_revisions,
                        },
                    )
                    .await
            {
                state.budgets.finalize_revisions += 1;
                state.revision = Some(instruction);
                self.note_retry(
                    writer,
                    "finalize_revision",
                    "before_agent_finalize",
                    Duration::ZERO,
                );
                writer.run.checkpoint = Some(json!({ "retry": state }));
                writer
                    .commit(
                        vec![assistant],
                        true,
                        Some(SessionStatus::Processing),
                        false,
                    )
                    .await?;
                continue;
            }
            if turn.tool_calls.is_empty() {
                writer.run.checkpoint = Some(json!({ "retry": state }));
                return Ok(LoopEnd::Final {
                    text: turn.text,
                    last_tool_error,
                    pending: Some(assistant),
                });
            }
            for call in &turn.tool_calls {
                writer.event(
                    EventStream::Tool,
                    json!({
                        "phase": "start",
                        "name": call.name,
                        "toolCallId": call.id,
                        "args": audit::args_preview(&call.arguments),
                    }),
                );
            }
            writer.run.checkpoint = Some(json!({ "retry": state }));
            writer
                .commit(
                    vec![assistant],
                    true,
                    Some(SessionStatus::Processing),
                    false,
                )
                .await?;
            // Calls whose arguments could not be repaired, and calls a hook blocks, are answered
            // with an error, not run. A hook may also rewrite a call's arguments.
            let mut refused: std::collections::BTreeMap<String, String> = invalid
                .iter()
                .map(|(id, problem)| (id.clone(), format!("error: {problem}")))
                .collect();
            let mut runnable: Vec<ToolCall> = Vec::new();
            for call in &turn.tool_calls {
                if refused.contains_key(&call.id) {
                    continue;
                }
                let mut call = call.clone();
                if self.hooks.has(HookPoint::BeforeToolCall) {
                    match self
                        .hooks
                        .before_tool_call(&ctx, ToolCallEvent::from_call(&call))
                        .await
                    {
                        ToolCallDecision::Block { reason, .. } => {
                            refused.insert(call.id.clone(), format!("blocked: {reason}"));
                            continue;
                        }
                        ToolCallDecision::Allow { params: Some(p) } => {
                            call.arguments = p.to_string()
                        }
                        ToolCallDecision::Allow { params: None } => {}
                    }
                }
                runnable.push(call);
            }
            let mut ran = run_batch(
                &self.tools,
                &runnable,
                self.config.tool_timeout,
                stop.token(),
                writer.run.run_id.as_str(),
            )
            .await
            .into_iter();
            let results: Vec<ToolRun> = turn
                .tool_calls
                .iter()
                .filter_map(|call| match refused.get(&call.id) {
                    Some(content) => Some(ToolRun {
                        call: call.clone(),
                        content: content.clone(),
                        is_error: true,
                        duration_ms: 0,
                    }),
                    None => ran.next(),
                })
                .collect();
            let mut messages = Vec::with_capacity(results.len());
            let mut tripped_guard = None;
            for r in results {
                writer.event(
                    EventStream::Tool,
                    json!({
                        "phase": "end",
                        "name": r.call.name,
                        "toolCallId": r.call.id,
                        "isError": r.is_error,
                        "durationMs": r.duration_ms,
                    }),
                );
                audit::tool_call(&writer.run, &r.call.name, r.is_error, r.duration_ms);
                if r.is_error {
                    last_tool_error = Some((r.call.name.clone(), r.content.clone()));
                }
                if state
                    .guard
                    .observe(&r.call.name, &r.call.arguments, &r.content)
                {
                    tripped_guard = Some(r.call.name.clone());
                }
                let mut content = r.content;
                if !self.hooks.is_empty() {
                    self.hooks
                        .after_tool_call(
                            &ctx,
                            ToolResultEvent {
                                tool_name: r.call.name.clone(),
                                tool_call_id: r.call.id.clone(),
                                arguments: parse_arguments(&r.call.arguments),
                                result: content.clone(),
                                is_error: r.is_error,
                                duration_ms: r.duration_ms,
                            },
                        )
                        .await;
                    content = self
                        .hooks
                        .tool_result_persist(
                            &ctx,
                            PersistEvent {
                                tool_name: r.call.name.clone(),
                                tool_call_id: r.call.id.clone(),
                                result: content,
                                is_error: r.is_error,
                            },
                        )
                        .await;
                }
                let cap = precheck::tool_result_cap(model.context_window);
                messages.push(Message::Tool {
                    tool_call_id: r.call.id,
                    name: r.call.name,
                    content: precheck::truncate(&content, cap).unwrap_or(content),
                    is_error: r.is_error,
                });
            }
            history.extend(messages.iter().cloned());
            writer.run.checkpoint = Some(json!({ "retry": state }));
            writer
                .commit(messages, true, Some(SessionStatus::Processing), false)
                .await?;
            if let Some(tool) = tripped_guard {
                return Ok(LoopEnd::Failed(RunError::new(
                    "tool_loop",
                    format!(
                        "CRITICAL: tool {tool} repeated {POST_COMPACTION_GUARD_WINDOW} times with \
                         identical arguments and identical results right after compaction; the run \
                         was stopped instead of looping"
                    ),
                )));
            }
        }
    }

    /// Carries out a failure decision. `Some(end)` ends the loop.
    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &self,
        writer: &mut RunWriter,
        history: &mut Vec<Message>,
        scope: &mut RunScope,
        attempt: &Attempted<'_>,
        state: &mut RetryState,
        action: Action,
        stop: &StopSignal,
    ) -> Result<Option<LoopEnd>, StoreError> {
        let reason = attempt.reason;
        match action {
            Action::Retry {
                delay,
                continuation,
            } => {
                let delay = delay.mul_f64(self.config.retry_delay_scale);
                self.note_retry(writer, "retry", reason, delay);
                state.continuation = continuation;
                writer.flush_events().await?;
                tokio::select! {
                    _ = stop.token().cancelled() => {}
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            Action::RotateProfile { cooldown } => {
                if cooldown {
                    self.models
                        .cool_down(&attempt.model.provider_name, &attempt.profile.name);
                }
                self.note_retry(writer, "rotate_profile", reason, Duration::ZERO);
                state.profile_index += 1;
            }
            Action::Fallback { reason } => {
                self.note_retry(writer, "fallback", reason.as_str(), Duration::ZERO);
                state.advance_model();
            }
            Action::Compact { trigger } => {
                self.note_retry(writer, "compact", reason, Duration::ZERO);
                let Some(through_seq) = scope.through_seq else {
                    return Ok(Some(overflow_failure(
                        "there is no earlier history to compact",
                    )));
                };
                let plan = compaction::Plan {
                    model: attempt.model,
                    profile: attempt.profile,
                    idle: attempt.idle,
                    trigger,
                    run_start: scope.run_start,
                    through_seq,
                };
                let system = self.system_prompt(&writer.run);
                match self.compact(writer, history, &system, plan, stop).await? {
                    Ok(run_start) => {
                        scope.run_start = run_start;
                        state.after_compaction = true;
                        state.continuation = Some(Continuation::AfterCompaction);
                        state.guard.arm();
                    }
                    Err(why) if trigger == CompactionTrigger::Overflow => {
                        return Ok(Some(overflow_failure(&why)));
                    }
                    Err(why) => tracing::warn!(%why, "timeout compaction did not help; retrying"),
                }
            }
            Action::Fail { error, .. } => return Ok(Some(LoopEnd::Failed(error))),
        }
        Ok(None)
    }

    /// The token-budget precheck before a model call: when the prompt would not fit, compact the
    /// earlier history (spending an overflow compaction) and/or cut oversized tool results, so
    /// the call is made with a prompt that fits. Whatever remains is left to the provider (its
    /// overflow error takes the failure path).
    #[allow(clippy::too_many_arguments)]
    async fn precheck(
        &self,
        writer: &mut RunWriter,
        history: &mut Vec<Message>,
        scope: &mut RunScope,
        model: &ResolvedModel,
        profile: &Profile,
        state: &mut RetryState,
        stop: &StopSignal,
    ) -> Result<(), StoreError> {
        let system = self.system_prompt(&writer.run);
        let tools = self.tools.specs();
        let estimate = |h: &[Message]| -> u64 {
            (estimate_parts(&system, h, &tools) as f64 * precheck::SAFETY_MARGIN) as u64
                + precheck::TOKENS_PER_MESSAGE * h.len() as u64
        };
        let window = model.context_window;
        let mut route = precheck::route(
            estimate(history),
            window,
            precheck::reducible_chars(history),
        );
        if matches!(route, Route::CompactOnly | Route::CompactThenTruncate)
            && let Some(through_seq) = scope.through_seq
            && state.budgets.overflow_compactions < MAX_OVERFLOW_COMPACTIONS
        {
            state.budgets.overflow_compactions += 1;
            let plan = compaction::Plan {
                model,
                profile,
                idle: self.config.model_idle_timeout,
                trigger: CompactionTrigger::Overflow,
                run_start: scope.run_start,
                through_seq,
            };
            if let Ok(run_start) = self.compact(writer, history, &system, plan, stop).await? {
                scope.run_start = run_start;
                state.after_compaction = true;
                state.guard.arm();
            }
            route = precheck::route(
                estimate(history),
                window,
                precheck::reducible_chars(history),
            );
        }
        if route != Route::Fits && route != Route::CompactOnly {
            let over = estimate(history).saturating_sub(precheck::prompt_budget(window));
            let cut = precheck::truncate_tool_results(history, over * 4 * 3 / 2 + 2048);
            writer.event(
                EventStream::Compaction,
                json!({ "phase": "truncate", "toolResults": cut }),
            );
        }
        Ok(())
    }

    /// Compaction with its observer hooks around it.
    async fn compact(
        &self,
        writer: &mut RunWriter,
        history: &mut Vec<Message>,
        system: &str,
        plan: compaction::Plan<'_>,
        stop: &StopSignal,
    ) -> Result<Result<usize, String>, StoreError> {
        let trigger = plan.trigger;
        let ctx = HookContext::for_run(&writer.run);
        if !self.hooks.is_empty() {
            self.hooks
                .before_compaction(
                    &ctx,
                    CompactionEvent {
                        trigger,
                        messages: history.len(),
                        estimated_tokens: estimate_parts(system, history, &[]),
                    },
                )
                .await;
        }
        let result = compaction::compact(writer, history, system, plan, stop.token()).await?;
        if !self.hooks.is_empty() {
            self.hooks
                .after_compaction(
                    &ctx,
                    CompactionResultEvent {
                        trigger,
                        compacted: result.is_ok(),
                        error: result.as_ref().err().cloned(),
                    },
                )
                .await;
        }
        Ok(result)
    }

    /// Records a retry decision as a lifecycle event (visible to clients).
    fn note_retry(&self, writer: &mut RunWriter, action: &str, reason: &str, delay: Duration) {
        writer.event(
            EventStream::Lifecycle,
            json!({
                "phase": "retry",
                "action": action,
                "reason": reason,
                "delayMs": delay.as_millis() as u64,
                "model": writer.run.model,
            }),
        );
    }

    /// Persists the retry state with the run (it survives hand-backs and crashes).
    async fn checkpoint(
        &self,
        writer: &mut RunWriter,
        state: &RetryState,
    ) -> Result<(), StoreError> {
        writer.run.checkpoint = Some(json!({ "retry": state }));
        writer.commit(Vec::new(), true, None, false).await
    }

    /// The names of the tools offered to the model.
    fn offered_tools(&self) -> std::collections::BTreeSet<String> {
        self.tools.specs().into_iter().map(|t| t.name).collect()
    }

    /// Base prompt, bootstrap context documents, then the request's extra system prompt.
    fn system_prompt(&self, run: &Run) -> String {
        let mut prompt = self.config.system_prompt.clone();
        for (name, text) in &self.config.bootstrap_context {
            prompt.push_str(&format!("\n\n# Context: {name}\n{text}"));
        }
        if let Some(extra) = run
            .request
            .extra_system_prompt
            .as_deref()
            .filter(|e| !e.trim().is_empty())
        {
            prompt.push_str("\n\n");
            prompt.push_str(extra);
        }
        prompt
    }

    /// Writes the terminal state (or the hand-back state) and releases the lock.
    async fn finish(&self, writer: &mut RunWriter, end: LoopEnd) -> Result<TurnExit, StoreError> {
        let now = writer.now();
        let mut final_messages = Vec::new();
        let (status, liveness, error, payloads) = match end {
            LoopEnd::Final {
                text,
                last_tool_error,
                pending,
            } => {
                final_messages.extend(pending);
                let tool_error = last_tool_error
                    .as_ref()
                    .map(|(n, m)| (n.as_str(), m.as_str()));
                (
                    RunStatus::Ok,
                    LivenessState::Working,
                    None,
                    shape_payloads(&text, tool_error),
                )
            }
            LoopEnd::Failed(e) => (
                RunStatus::Error,
                LivenessState::Blocked,
                Some(e),
                Vec::new(),
            ),
            LoopEnd::Incomplete => (
                RunStatus::Error,
                LivenessState::Abandoned,
                Some(RunError::new("incomplete_turn", INCOMPLETE_REPLY)),
                vec![agentlane_core::Payload {
                    text: INCOMPLETE_REPLY.to_owned(),
                    is_error: true,
                }],
            ),
            LoopEnd::Stopped(StopReason::Abort) => (
                RunStatus::Aborted,
                LivenessState::Abandoned,
                Some(RunError::new("aborted", "the run was aborted on request")),
                Vec::new(),
            ),
            LoopEnd::Stopped(StopReason::Timeout) => (
                RunStatus::Timeout,
                LivenessState::Abandoned,
                Some(RunError::new("run_timeout", "the run reached its timeout")),
                Vec::new(),
            ),
            LoopEnd::Stopped(StopReason::LockLost) => return Ok(TurnExit::Abandoned),
            LoopEnd::Stopped(StopReason::Shutdown) => {
                writer.run.liveness_state = LivenessState::Paused;
                writer.event(
                    EventStream::Lifecycle,
                    json!({ "phase": "paused", "reason": "handed back" }),
                );
                writer
                    .commit(Vec::new(), true, Some(SessionStatus::Processing), true)
                    .await?;
                return Ok(TurnExit::HandBack);
            }
        };
        writer.run.status = status;
        writer.run.liveness_state = liveness;
        writer.run.ended_at = Some(now);
        writer.run.error = error.clone();
        let ctx = HookContext::for_run(&writer.run);
        let mut shaped = Vec::with_capacity(payloads.len());
        for mut payload in payloads {
            if self.hooks.has(HookPoint::MessageSending) {
                match self
                    .hooks
                    .message_sending(
                        &ctx,
                        MessageEvent {
                            text: payload.text.clone(),
                        },
                    )
                    .await
                {
                    SendDecision::Cancel { .. } => continue,
                    SendDecision::Send { content } => payload.text = content,
                }
            }
            shaped.push(payload);
        }
        writer.run.payloads = shaped;
        let phase = if status == RunStatus::Ok {
            "end"
        } else {
            "error"
        };
        writer.event(
            EventStream::Lifecycle,
            json!({
                "phase": phase,
                "status": status.as_str(),
                "endedAt": now,
                "error": error,
                "livenessState": liveness,
            }),
        );
        writer
            .commit(final_messages, true, Some(SessionStatus::Idle), true)
            .await?;
        audit::run_end(&writer.run);
        if !self.hooks.is_empty() {
            for payload in &writer.run.payloads {
                self.hooks
                    .message_sent(
                        &ctx,
                        MessageEvent {
                            text: payload.text.clone(),
                        },
                    )
                    .await;
            }
            let run = &writer.run;
            self.hooks
                .agent_end(
                    &ctx,
                    AgentEndEvent {
                        status: run.status,
                        text: run.payloads.first().map(|p| p.text.clone()),
                        error: run.error.clone(),
                        usage: run.usage,
                        duration_ms: run
                            .ended_at
                            .unwrap_or(now)
                            .saturating_sub(run.started_at.unwrap_or(now)),
                    },
                )
                .await;
        }
        Ok(TurnExit::Finished(status))
    }

    /// A `before_agent_reply` hook claimed the turn: record the prompt and the hook's reply (none
    /// = silent) and end the run ok, without any model call.
    async fn claimed(
        &self,
        writer: &mut RunWriter,
        claim: ReplyClaimed,
    ) -> Result<TurnExit, StoreError> {
        let now = writer.now();
        writer.run.status = RunStatus::Running;
        writer.run.started_at.get_or_insert(now);
        writer.run.pickups += 1;
        writer.run.model = Some(format!("hook/{}", claim.hook));
        let reply = claim.reply.unwrap_or_default();
        writer.event(
            EventStream::Lifecycle,
            json!({ "phase": "start", "startedAt": now, "model": writer.run.model, "claimedBy": claim.hook }),
        );
        writer
            .commit(
                vec![Message::user(writer.run.request.message.clone())],
                true,
                Some(SessionStatus::Processing),
                false,
            )
            .await?;
        let pending = (!reply.is_empty()).then(|| Message::Assistant {
            content: reply.clone(),
            reasoning: None,
            tool_calls: Vec::new(),
            model: writer.run.model.clone(),
        });
        self.finish(
            writer,
            LoopEnd::Final {
                text: reply,
                last_tool_error: None,
                pending,
            },
        )
        .await
    }
}
