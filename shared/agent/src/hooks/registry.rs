//! [`HookRegistry`]: the hooks of each point, sorted by priority, and one typed method per point
//! that runs them and merges their answers.

use super::event::*;
use super::outcome::*;
use super::point::{Dispatch, HookPoint};
use super::{Hook, HookError};
use futures::FutureExt;
use futures::future::join_all;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

/// Default time limits of one hook call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookTimeouts {
    /// Policy, modifying and claiming points (15 s).
    pub sequential: Duration,
    /// Observer points (30 s).
    pub observer: Duration,
}

impl Default for HookTimeouts {
    fn default() -> Self {
        Self {
            sequential: Duration::from_secs(15),
            observer: Duration::from_secs(30),
        }
    }
}

#[derive(Clone, Default)]
struct Inner {
    by_point: [Vec<Arc<dyn Hook>>; HookPoint::ALL.len()],
    timeouts: HookTimeouts,
}

/// The registered hooks. Cloning is cheap (one `Arc`); registering after a clone leaves the
/// clones as they were.
#[derive(Clone, Default)]
pub struct HookRegistry {
    inner: Arc<Inner>,
}

impl fmt::Debug for HookRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for p in HookPoint::ALL {
            let names: Vec<&str> = self.hooks(p).map(|h| h.name()).collect();
            if !names.is_empty() {
                map.entry(&p.as_str(), &names);
            }
        }
        map.finish()
    }
}

impl HookRegistry {
    /// No hooks, default timeouts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `hook` at each of its points, after the hooks of equal or higher priority.
    pub fn register(&mut self, hook: Arc<dyn Hook>) {
        let inner = Arc::make_mut(&mut self.inner);
        let mut points = hook.points().to_vec();
        points.sort();
        points.dedup();
        for p in points {
            let list = &mut inner.by_point[p.index()];
            let at = list.partition_point(|h| h.priority() >= hook.priority());
            list.insert(at, hook.clone());
        }
    }

    /// [`HookRegistry::register`], builder style.
    pub fn with(mut self, hook: Arc<dyn Hook>) -> Self {
        self.register(hook);
        self
    }

    /// Replaces the default time limits.
    pub fn with_timeouts(mut self, timeouts: HookTimeouts) -> Self {
        Arc::make_mut(&mut self.inner).timeouts = timeouts;
        self
    }

    /// No hook at any point: the runner can skip building events.
    pub fn is_empty(&self) -> bool {
        self.inner.by_point.iter().all(Vec::is_empty)
    }

    /// Whether any hook listens at `point`.
    pub fn has(&self, point: HookPoint) -> bool {
        !self.inner.by_point[point.index()].is_empty()
    }

    /// The hooks of `point`, in the order they run.
    pub fn hooks(&self, point: HookPoint) -> impl Iterator<Item = &dyn Hook> {
        self.inner.by_point[point.index()]
            .iter()
            .map(|h| h.as_ref())
    }

    /// One call: bounded by the hook's timeout, a panic caught, the answer checked against the
    /// point.
    async fn invoke(
        &self,
        hook: &dyn Hook,
        ctx: &HookContext,
        event: &HookEvent,
    ) -> Result<HookOutcome, HookError> {
        let point = event.point();
        let limit = hook.timeout().unwrap_or(match point.dispatch() {
            Dispatch::Observer => self.inner.timeouts.observer,
            Dispatch::Policy | Dispatch::Modifying | Dispatch::Claiming => {
                self.inner.timeouts.sequential
            }
        });
        let call = AssertUnwindSafe(hook.call(ctx, event)).catch_unwind();
        let result = match tokio::time::timeout(limit, call).await {
            Err(_) => Err(HookError::Timeout(limit)),
            Ok(Err(_panic)) => Err(HookError::Panicked),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Ok(Ok(outcome))) if outcome.fits(point) => Ok(outcome),
            Ok(Ok(Ok(outcome))) => Err(HookError::WrongOutcome {
                point,
                got: outcome.kind(),
            }),
        };
        if let Err(e) = &result {
            let closed = point.is_policy();
            tracing::warn!(hook = hook.name(), %point, error = %e, fail_closed = closed, "hook failed");
        }
        result
    }

    /// Runs the hooks of an observer point concurrently; their answers in priority order.
    async fn observe(&self, ctx: &HookContext, event: HookEvent) -> Vec<HookOutcome> {
        let hooks = &self.inner.by_point[event.point().index()];
        join_all(hooks.iter().map(|h| self.invoke(h.as_ref(), ctx, &event)))
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect()
    }

    /// `before_model_resolve`: the highest-priority model override, if any.
    pub async fn before_model_resolve(
        &self,
        ctx: &HookContext,
        event: ModelResolveEvent,
    ) -> Option<String> {
        self.observe(ctx, HookEvent::BeforeModelResolve(event))
            .await
            .into_iter()
            .find_map(|o| match o {
                HookOutcome::ModelOverride(ModelOverride { model: Some(m) })
                    if !m.trim().is_empty() =>
                {
                    Some(m)
                }
                _ => None,
            })
    }

    /// `before_prompt_build`: every hook's additions, merged in priority order.
    pub async fn before_prompt_build(
        &self,
        ctx: &HookContext,
        event: PromptBuildEvent,
    ) -> PromptAdditions {
        let event = HookEvent::BeforePromptBuild(event);
        let mut merged = PromptAdditions::default();
        for hook in self.hooks(HookPoint::BeforePromptBuild) {
            if let Ok(HookOutcome::Prompt(a)) = self.invoke(hook, ctx, &event).await {
                merged.merge(a);
            }
        }
        merged
    }

    /// `before_agent_reply`: the first hook that answers `handled: true` claims the turn.
    pub async fn before_agent_reply(
        &self,
        ctx: &HookContext,
        event: AgentReplyEvent,
    ) -> Option<ReplyClaimed> {
        let event = HookEvent::BeforeAgentReply(event);
        for hook in self.hooks(HookPoint::BeforeAgentReply) {
            if let Ok(HookOutcome::Reply(ReplyClaim {
                handled: true,
                reply,
            })) = self.invoke(hook, ctx, &event).await
            {
                return Some(ReplyClaimed {
                    hook: hook.name().to_owned(),
                    reply,
                });
            }
        }
        None
    }

    /// `before_agent_run` (policy): the first block wins; a failing hook blocks.
    pub async fn before_agent_run(&self, ctx: &HookContext, event: AgentRunEvent) -> RunGate {
        let event = HookEvent::BeforeAgentRun(event);
        for hook in self.hooks(HookPoint::BeforeAgentRun) {
            match self.invoke(hook, ctx, &event).await {
                Ok(HookOutcome::RunGate(RunGate::Block { reason, message })) => {
                    return RunGate::Block {
                        reason: non_empty(Some(reason))
                            .unwrap_or_else(|| DEFAULT_RUN_BLOCK_REASON.to_owned()),
                        message,
                    };
                }
                Ok(_) => {}
                Err(e) => {
                    return RunGate::Block {
                        reason: failure_reason(HookPoint::BeforeAgentRun, hook, &e),
                        message: None,
                    };
                }
            }
        }
        RunGate::Pass
    }

    /// `before_agent_finalize`: the first non-empty revise wins; failures keep the answer.
    pub async fn before_agent_finalize(
        &self,
        ctx: &HookContext,
        event: FinalizeEvent,
    ) -> FinalizeAction {
        let event = HookEvent::BeforeAgentFinalize(event);
        for hook in self.hooks(HookPoint::BeforeAgentFinalize) {
            if let Ok(HookOutcome::Finalize(FinalizeAction::Revise { instruction })) =
                self.invoke(hook, ctx, &event).await
                && !instruction.trim().is_empty()
            {
                return FinalizeAction::Revise { instruction };
            }
        }
        FinalizeAction::Finalize
    }

    /// `before_tool_call` (policy): `block: true` is terminal; `block: false` changes nothing;
    /// `params` and `blockReason`: the last defined wins; a failing hook blocks.
    pub async fn before_tool_call(
        &self,
        ctx: &HookContext,
        event: ToolCallEvent,
    ) -> ToolCallDecision {
        let event = HookEvent::BeforeToolCall(event);
        let mut params = None;
        let mut reason = None;
        for hook in self.hooks(HookPoint::BeforeToolCall) {
            match self.invoke(hook, ctx, &event).await {
                Ok(HookOutcome::ToolCall(v)) => {
                    reason = non_empty(v.block_reason).or(reason);
                    params = v.params.or(params);
                    if v.block == Some(true) {
                        return ToolCallDecision::Block {
                            reason: reason.unwrap_or_else(|| DEFAULT_TOOL_BLOCK_REASON.to_owned()),
                            hook: hook.name().to_owned(),
                        };
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    return ToolCallDecision::Block {
                        reason: failure_reason(HookPoint::BeforeToolCall, hook, &e),
                        hook: hook.name().to_owned(),
                    };
                }
            }
        }
        ToolCallDecision::Allow { params }
    }

    /// `tool_result_persist`: each hook may rewrite the text the next one sees; returns the
    /// text to persist.
    pub async fn tool_result_persist(&self, ctx: &HookContext, mut event: PersistEvent) -> String {
        for hook in self.hooks(HookPoint::ToolResultPersist) {
            let current = HookEvent::ToolResultPersist(event.clone());
            if let Ok(HookOutcome::Persist(PersistRewrite { content: Some(c) })) =
                self.invoke(hook, ctx, &current).await
            {
                event.result = c;
            }
        }
        event.result
    }

    /// `message_sending`: `cancel: true` is terminal; rewritten content flows to lower
    /// priorities.
    pub async fn message_sending(
        &self,
        ctx: &HookContext,
        mut event: MessageEvent,
    ) -> SendDecision {
        for hook in self.hooks(HookPoint::MessageSending) {
            let current = HookEvent::MessageSending(event.clone());
            if let Ok(HookOutcome::Sending(v)) = self.invoke(hook, ctx, &current).await {
                if v.cancel {
                    return SendDecision::Cancel {
                        hook: hook.name().to_owned(),
                    };
                }
                if let Some(c) = v.content {
                    event.text = c;
                }
            }
        }
        SendDecision::Send {
            content: event.text,
        }
    }

    /// `after_tool_call` (observe).
    pub async fn after_tool_call(&self, ctx: &HookContext, event: ToolResultEvent) {
        self.observe(ctx, HookEvent::AfterToolCall(event)).await;
    }

    /// `agent_end` (observe).
    pub async fn agent_end(&self, ctx: &HookContext, event: AgentEndEvent) {
        self.observe(ctx, HookEvent::AgentEnd(event)).await;
    }

    /// `before_compaction` (observe).
    pub async fn before_compaction(&self, ctx: &HookContext, event: CompactionEvent) {
        self.observe(ctx, HookEvent::BeforeCompaction(event)).await;
    }

    /// `after_compaction` (observe).
    pub async fn after_compaction(&self, ctx: &HookContext, event: CompactionResultEvent) {
        self.observe(ctx, HookEvent::AfterCompaction(event)).await;
    }

    /// `message_received` (observe).
    pub async fn message_received(&self, ctx: &HookContext, event: MessageEvent) {
        self.observe(ctx, HookEvent::MessageReceived(event)).await;
    }

    /// `message_sent` (observe).
    pub async fn message_sent(&self, ctx: &HookContext, event: MessageEvent) {
        self.observe(ctx, HookEvent::MessageSent(event)).await;
    }

    /// `session_start` (observe).
    pub async fn session_start(&self, ctx: &HookContext, event: SessionStartEvent) {
        self.observe(ctx, HookEvent::SessionStart(event)).await;
    }

    /// `session_end` (observe).
    pub async fn session_end(&self, ctx: &HookContext, event: SessionEndEvent) {
        self.observe(ctx, HookEvent::SessionEnd(event)).await;
    }
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty())
}

/// The block reason of a failed policy hook: the point, the hook and the failure class.
fn failure_reason(point: HookPoint, hook: &dyn Hook, e: &HookError) -> String {
    format!("{point} hook {:?} failed: {e}", hook.name())
}
