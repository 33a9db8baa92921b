//! Plugin hooks (SPEC §11): Rust trait objects and HTTP webhooks, called at fixed points of a
//! run, with OpenClaw's merge semantics.
//!
//! - [`point`]: the [`HookPoint`]s and how each is dispatched ([`Dispatch`]).
//! - [`event`]: what a hook is told ([`HookContext`] + one [`HookEvent`] payload per point).
//! - [`outcome`]: what a hook answers ([`HookOutcome`]) and the merged results.
//! - [`registry`]: [`HookRegistry`] runs the hooks of a point and merges their answers.
//! - [`webhook`]: [`WebhookHook`], a hook that POSTs the event to an operator's URL.
//!
//! # Semantics
//!
//! Hooks of a point run in priority order (higher first; equal priorities in registration
//! order). Modifying, policy and claiming points run their hooks one after another, each bounded
//! by its timeout (15 s unless the hook or the registry says otherwise); observer points run
//! them concurrently (30 s). Policy points (`before_tool_call`, `before_agent_run`) fail closed:
//! an error, a timeout, a panic or an answer of the wrong shape blocks, with a reason naming the
//! point and the hook. Every other point fails open: the failure is logged and the hook skipped.
//! A panic is caught only where the binary unwinds (`serve`, the CLI): the Lambda functions are
//! built with `panic = "abort"` (the workspace's `[workspace.metadata.lambda.build]`), where a
//! panicking hook ends the instance and the turn's message is redelivered (README, "Config file").
//!
//! # Where the runner calls each point (`crate::runner`)
//!
//! Build the context once per run with [`HookContext::for_run`]; skip everything when
//! [`HookRegistry::is_empty`].
//!
//! | point | where | what the runner does with the result |
//! |---|---|---|
//! | `session_start` | when a new session id is minted (first run of a key, after a reset) | observe |
//! | `message_received` | `pickup::start`, right after the user message is committed (not on resume) | observe |
//! | `before_agent_reply` | `pickup::gate`, before `before_agent_run`, only when not resumed | `Some(claim)`: end the run `ok` with `claim.reply` as the payload (none = silent), no model call |
//! | `before_agent_run` | `pickup::gate`, before the user message is committed (not on resume) | `Block`: end the run `blocked` (error kind `hook_block`, message = `message` or `reason`) without retaining the prompt |
//! | `before_model_resolve` | `pickup::gate`, before the run's model is first chosen | `Some(model)` replaces the requested model when building the chain |
//! | `before_prompt_build` | `turn_loop::run_loop`, once per run before the first `ModelRequest` (cache the result across attempts) | `additions.system_prompt(base)` is the system prompt; `additions.prompt(text)` the user prompt sent to the model (the transcript keeps the original) |
//! | `before_compaction` / `after_compaction` | `runner::compaction::compact` (precheck and after a failure), around the summarizing call | observe |
//! | `before_tool_call` | `tool_round::run_calls`, for each call in order, before `run_batch` | `Block`: do not run the call; its result is `reason` with `is_error: true`. `Allow { params: Some(v) }`: the call runs with `v.to_string()` as arguments |
//! | `after_tool_call` | `tool_round::record_result`, for each `ToolRun` from `run_batch` | observe |
//! | `tool_result_persist` | `tool_round::record_result`, for each result, before its `Message::Tool` is built | the returned text is what is persisted and sent to the model |
//! | `before_agent_finalize` | `completion::after_answer`, at a final answer with visible text, when [`HookRegistry::has`] it | `Revise`: keep the answer in history and continue with the instruction as a user turn, at most [`MAX_FINALIZE_REVISIONS`] times per run |
//! | `message_sending` | `finish::finish`, on each payload before it is stored on the run | `Cancel`: drop the payload; `Send { content }`: store `content` |
//! | `message_sent` | `finish::finish`, after the terminal commit, per payload | observe |
//! | `agent_end` | `finish::finish`, after the terminal commit | observe (await it: a Lambda may freeze spawned tasks) |
//! | `session_end` | session reset / delete / idle expiry (API and cron, not the runner) | observe |

pub mod event;
pub mod outcome;
pub mod point;
pub mod registry;
mod reset;
pub mod webhook;
mod wire;

pub use event::{
    AgentEndEvent, AgentReplyEvent, AgentRunEvent, CompactionEvent, CompactionResultEvent,
    FinalizeEvent, HookContext, HookEvent, MessageEvent, ModelResolveEvent, PersistEvent,
    PromptBuildEvent, ReplyTrigger, SessionEndEvent, SessionEndReason, SessionStartEvent,
    ToolCallEvent, ToolResultEvent, parse_arguments,
};
pub use outcome::{
    DEFAULT_RUN_BLOCK_REASON, DEFAULT_TOOL_BLOCK_REASON, FinalizeAction, HookOutcome,
    MAX_FINALIZE_REVISIONS, ModelOverride, PersistRewrite, PromptAdditions, ReplyClaim,
    ReplyClaimed, RunGate, SendDecision, SendingVerdict, ToolCallDecision, ToolCallVerdict,
};
pub use point::{Dispatch, HookPoint, UnknownHookPoint};
pub use registry::{HookRegistry, HookTimeouts};
pub use reset::session_end_on_reset;
pub use webhook::{WebhookConfig, WebhookError, WebhookHook};

use async_trait::async_trait;
use std::time::Duration;

/// A plugin hook. It subscribes to [`Hook::points`] and answers each event with a
/// [`HookOutcome`] of that point's kind (or [`HookOutcome::Continue`]).
#[async_trait]
pub trait Hook: Send + Sync {
    /// A name for logs and block reasons.
    fn name(&self) -> &str;

    /// Higher runs first.
    fn priority(&self) -> i32 {
        0
    }

    /// The points this hook is called at.
    fn points(&self) -> &[HookPoint];

    /// This hook's own time limit; `None` = the registry's default for the point.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// Answers one event. `event.point()` is one of [`Hook::points`].
    async fn call(&self, ctx: &HookContext, event: &HookEvent) -> Result<HookOutcome, HookError>;
}

/// Why a hook gave no usable answer. Messages never carry URLs, headers or secrets: they end
/// up in block reasons the model and the user see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// The hook did not answer within its timeout (the duration shown).
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The webhook answered with this non-2xx HTTP status.
    #[error("answered HTTP {0}")]
    Status(u16),
    /// The HTTP request failed (connect, TLS, read); the reason carries no URL or secret.
    #[error("request failed: {0}")]
    Transport(String),
    /// The answer body exceeded this many bytes.
    #[error("answer larger than {0} bytes")]
    TooLarge(usize),
    /// The answer was not valid JSON for the point; says why.
    #[error("unreadable answer: {0}")]
    InvalidResponse(String),
    /// The answer was of another point's kind.
    #[error("answered {got} to {point}")]
    WrongOutcome {
        /// The point the hook was called at.
        point: HookPoint,
        /// What kind of answer came back (e.g. "a tool call verdict").
        got: &'static str,
    },
    /// The Rust hook panicked; the panic was caught.
    #[error("panicked")]
    Panicked,
    /// A Rust hook's own failure.
    #[error("{0}")]
    Failed(String),
}
