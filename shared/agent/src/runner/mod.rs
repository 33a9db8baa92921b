//! The runner: takes the session lock, brings a run to a terminal status (or hands it back),
//! and releases the lock. Safe to run again for the same run at any point: the transcript tells
//! how far an earlier pickup got, so a redelivered message never repeats or loses an entry.
//!
//! Follow one lane message top-down:
//!
//! - [`Runner::execute`] (`pickup`): acquire the lock, read the run under it, admit it, carry
//!   the admission out in one `match` that owns the lock's release; a run that goes gets its
//!   helpers (lease heartbeat, abort poll), then the pickup: read the history, the hooks that
//!   may claim or block the turn, the start (or resume) commit.
//! - `admission`: the lane-order rule, one pure function from what was read under the lock
//!   to what the delivery does (run, run the interrupt first, count, park, hand back, ...).
//! - `turn_loop`: the loop of attempts, one driver calling the named steps below; every
//!   stop/continue decision is asked of [`crate::retry`].
//! - `request`: the model request of an attempt (system prompt, history, instructions).
//! - `attempt` + `stream`: one model call, streamed with the idle watchdog (the same streamer
//!   serves compaction's summarizing call).
//! - `action`: carrying out a retry [`crate::retry::Action`] after a failed attempt.
//! - `completion`: an answer without tool calls (directed retries, finalize revisions).
//! - `tool_round`: one round of tool calls (hooks, concurrent execution, results).
//! - `compaction`: the token precheck before a call, and compaction with its hooks.
//! - `finish`: the terminal (or hand-back) commit, and a turn claimed by a hook.
//! - `stop`: why a run is stopped from outside its loop (abort, timeout, lock lost, shutdown).
//! - [`tool_exec`]: one batch of tool calls, run concurrently, results in call order.

mod action;
mod admission;
mod attempt;
pub mod collect;
mod compaction;
mod completion;
mod finish;
mod pause;
mod pickup;
pub mod poison;
mod request;
mod spend;
pub mod stop;
mod stream;
pub mod tool_exec;
mod tool_round;
mod turn_loop;
mod turn_open;

pub use stop::{StopReason, StopSignal};
pub use tool_round::SKIPPED_FOR_STEER;

use crate::agents::{AgentProfile, AgentResolver};
use crate::config::RunnerConfig;
use crate::hooks::HookRegistry;
use crate::models::ModelRouter;
use agentlane_core::agent::DEPLOYMENT_VERSION;
use agentlane_core::{Clock, Run, RunError, RunStatus, Store, StoreError, TurnMessage};
use agentlane_tools::ToolRegistry;
use std::sync::Arc;
use std::time::Duration;

/// How a pickup of a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnExit {
    /// This pickup wrote the terminal status.
    Finished(RunStatus),
    /// Nothing to do: the run was already terminal, or does not exist.
    AlreadyDone,
    /// The run waits for its pending tool calls to be answered (it paused in this pickup, or
    /// was delivered again while it waits): its message is done with; the answer sends a new
    /// one. A later run of the session delivered meanwhile is parked the same way: the paused
    /// run sends it again when it ends ([`TurnExit::FinishedThen`]).
    Paused,
    /// This pickup wrote the terminal status of a run that had paused; the next run of its
    /// session (which may have been parked while it waited) must be sent again.
    FinishedThen(RunStatus, TurnMessage),
    /// The run is not finished and should be picked up again soon (shutdown, or the session's
    /// lock stayed busy). The lane stays blocked meanwhile.
    HandBack,
    /// The lock was lost to another writer: this pickup wrote nothing more. Leave the message
    /// alone; it comes back after its visibility timeout and finds the run's real state.
    Abandoned,
    /// An earlier run of the session holds the lane (the queue delivered this message ahead
    /// of it: a redelivery, a queue that misbehaves). Nothing ran or was written; the message
    /// should come back after a delay. (When the lane is free but an earlier run is not
    /// finished, the pickup answers `HandBack`: the earlier message is due now.)
    OutOfOrder,
    /// The lane is free, but the run whose turn it is was accepted long ago and never picked
    /// up: its lane message was probably never sent (the accepting process died between the
    /// accept and the enqueue). Nothing ran or was written. The caller sends this (earlier)
    /// message again and puts the delivered one back *behind* it: on a FIFO lane, a message
    /// handed back comes first again, and the earlier one would never be delivered.
    BehindUnsent(TurnMessage),
}

/// Failures of a pickup that are not the run's own fault (store unavailable, ...).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The store was unavailable or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Put before a `before_agent_finalize` revision instruction.
pub const REVISION_PREFIX: &str = "Apply this revision request to your previous final answer. Do \
not repeat completed work or rerun tools unless the revision requires it.";

/// The reply when the model keeps answering nothing visible.
pub const INCOMPLETE_REPLY: &str = "⚠️ Agent couldn't generate a response. Please try again.";

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
    /// Agents defined through the API; `None`: only the deployment's own `main` runs.
    agents: Option<Arc<AgentResolver>>,
    /// The tenants' period counters and budgets; `None`: no tenant budget applies.
    spend: Option<(
        Arc<dyn agentlane_core::SpendLedger>,
        agentlane_core::spend::TenantBudgets,
    )>,
    /// The decoded transcripts of the sessions this runner served (one per process or
    /// Lambda instance, shared by the clones).
    transcripts: Arc<crate::context::cache::TranscriptCache>,
}

impl Runner {
    /// A runner over `store`, with the models, tools and settings it runs turns with.
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
            transcripts: Arc::new(
                crate::context::cache::TranscriptCache::new(config.transcript_cache_bytes)
                    .with_min_entries(config.transcript_cache_min_entries),
            ),
            config: Arc::new(config),
            hooks: HookRegistry::new(),
            instance: format!("runner-{}", uuid::Uuid::new_v4().simple()),
            agents: None,
            spend: None,
        }
    }

    /// Tenant budgets, held in `ledger`: before each model call its worst case is reserved
    /// against every limited period of the tenant, and settled to what it spent after it.
    pub fn with_tenant_budgets(
        mut self,
        ledger: Arc<dyn agentlane_core::SpendLedger>,
        budgets: agentlane_core::spend::TenantBudgets,
    ) -> Self {
        if !budgets.is_unlimited() {
            self.spend = Some((ledger, budgets));
        }
        self
    }

    /// The runner's transcript cache.
    pub fn transcript_cache(&self) -> &crate::context::cache::TranscriptCache {
        &self.transcripts
    }

    /// Gives back a session lock this runner was handed and will not use (a delivery's lock,
    /// [`Delivery::lock`](agentlane_core::Delivery::lock), whose message goes back unrun); a
    /// failure is logged, and the lock's lease then ends it.
    pub async fn release_lock(&self, fence: &agentlane_core::Fence) {
        if let Err(e) = self.store.release_lock(fence).await {
            tracing::warn!(error = %e, "could not release a delivered session lock");
        }
    }

    /// The runner's settings.
    pub fn config(&self) -> &RunnerConfig {
        &self.config
    }

    /// The plugin hooks called at the points of SPEC §11.
    pub fn with_hooks(mut self, hooks: HookRegistry) -> Self {
        self.hooks = hooks;
        self
    }

    /// Runs the agents tenants define (their versions read through `resolver`), besides the
    /// deployment's own `main`.
    pub fn with_agents(mut self, resolver: Arc<AgentResolver>) -> Self {
        self.agents = Some(resolver);
        self
    }

    /// What `run` runs with: its agent at the version it was accepted with. `Ok(Err(_))`: that
    /// version cannot be read (the run cannot run).
    async fn agent_profile(
        &self,
        run: &Run,
        stop: &stop::StopSignal,
    ) -> Result<Result<AgentProfile, RunError>, StoreError> {
        let version = run.request.agent_version.unwrap_or(DEPLOYMENT_VERSION);
        if version == DEPLOYMENT_VERSION {
            return Ok(Ok(AgentProfile::deployment(&self.tools)));
        }
        let missing = || {
            RunError::new(
                "agent_missing",
                format!(
                    "agent {:?} version {version} is not available to this runner",
                    run.request.agent()
                ),
            )
        };
        let Some(resolver) = &self.agents else {
            return Ok(Err(missing()));
        };
        Ok(resolver
            .profile_within(run, &self.tools, &self.setup_bound(run, stop))
            .await?
            .ok_or_else(missing))
    }

    /// What bounds the setup of `run`'s tools: its stop signal, and its deadline (from now when
    /// it has not started yet).
    fn setup_bound(&self, run: &Run, stop: &stop::StopSignal) -> crate::agents::SetupBound {
        let now = self.clock.now_ms();
        let deadline = self.deadline_from(run, run.started_at.or(Some(now)));
        crate::agents::SetupBound {
            cancel: stop.token().clone(),
            deadline: deadline.map(|d| {
                tokio::time::Instant::now() + Duration::from_millis(d.saturating_sub(now))
            }),
        }
    }

    /// The run's agent with the turn's own client tools added.
    async fn turn_profile(
        &self,
        run: &Run,
        stop: &stop::StopSignal,
    ) -> Result<Result<AgentProfile, RunError>, StoreError> {
        Ok(self
            .agent_profile(run, stop)
            .await?
            .map(|agent| agent.with_client_tools(&run.request.tools)))
    }

    /// Adds (or replaces, by name) a model provider.
    pub fn with_provider(mut self, provider: Arc<dyn agentlane_providers::ModelProvider>) -> Self {
        self.models = self.models.with_provider(provider);
        self
    }

    /// When the run must end (ms since epoch): its timeout from its first start (time spent
    /// paused for an answer not counted), or the absolute deadline its request carries (a
    /// cron fire's, which pauses do not move), whichever comes first.
    fn deadline(&self, run: &Run) -> Option<u64> {
        self.deadline_from(run, run.started_at)
    }

    /// [`Self::deadline`] of `run` had it first started at `started_at`.
    fn deadline_from(&self, run: &Run, started_at: Option<u64>) -> Option<u64> {
        let timeout = match run.request.timeout_seconds {
            Some(0) => return run.request.deadline_at,
            Some(s) => Duration::from_secs(s),
            None => self.config.default_run_timeout,
        };
        let own = started_at.map(|s| {
            s.saturating_add(timeout.as_millis() as u64)
                .saturating_add(run.paused_ms)
        });
        match (own, run.request.deadline_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Base prompt (the agent's instructions, else the deployment's), bootstrap context
    /// documents, then the request's extra system prompt.
    fn system_prompt(&self, run: &Run, agent: &AgentProfile) -> String {
        let mut prompt = agent
            .instructions
            .clone()
            .unwrap_or_else(|| self.config.system_prompt.clone());
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

    /// The names of the tools offered to the model.
    fn offered_tools(agent: &AgentProfile) -> std::collections::BTreeSet<String> {
        agent.tools.specs().iter().map(|t| t.name.clone()).collect()
    }
}
