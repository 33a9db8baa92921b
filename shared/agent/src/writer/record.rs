//! The run record as the writer owns it: read with [`RunWriter::run`], changed only through
//! the methods below (each says what happened), written by the next commit that carries it.

use super::RunWriter;
use crate::retry::{AttemptOutcome, RetryState};
use agentlane_core::{AttemptRecord, LivenessState, Payload, Run, RunError, RunStatus};
use serde_json::json;

/// How a run ends, as recorded on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    /// The terminal status recorded on the run.
    pub status: RunStatus,
    /// The liveness recorded on the run.
    pub liveness: LivenessState,
    /// Why the run failed; `None` unless it failed.
    pub error: Option<RunError>,
    /// The reply payloads recorded on the run (texts; error texts flagged).
    pub payloads: Vec<Payload>,
}

impl RunWriter {
    /// The run record (as it will be written by the next commit that carries it).
    pub fn run(&self) -> &Run {
        &self.run
    }

    /// This pickup starts (or resumes) the run: `running`, working, one more pickup; the start
    /// time and the model are set once (`model` only when the run has none yet).
    pub fn begin_pickup(&mut self, model: String) {
        let now = self.now();
        let run = &mut self.run;
        if run.status == RunStatus::RequiresAction
            && let Some(action) = &run.required_action
        {
            // Resuming: the wait does not count against the run's own timeout.
            run.paused_ms = run
                .paused_ms
                .saturating_add(now.saturating_sub(action.paused_at));
        }
        run.status = RunStatus::Running;
        run.liveness_state = LivenessState::Working;
        run.started_at.get_or_insert(now);
        run.pickups += 1;
        if run.model.is_none() {
            run.model = Some(model);
        }
    }

    /// A hook claimed the turn: the run starts, its "model" is the hook.
    pub fn begin_claimed(&mut self, hook: &str) {
        let now = self.now();
        let run = &mut self.run;
        run.status = RunStatus::Running;
        run.started_at.get_or_insert(now);
        run.pickups += 1;
        run.model = Some(format!("hook/{hook}"));
    }

    /// A hook chose the run's model: recorded in the request, so a later pickup keeps it.
    pub fn choose_requested_model(&mut self, model: String) {
        self.run.request.model = Some(model);
    }

    /// What the run goes on without (its agent's tools that could not be had), for its record.
    pub fn note_warnings(&mut self, warnings: &[String]) {
        for warning in warnings {
            if !self.run.warnings.contains(warning) {
                self.run.warnings.push(warning.clone());
            }
        }
    }

    /// The model the next attempt uses (`provider/model`).
    pub fn use_model(&mut self, full_name: &str) {
        self.run.model = Some(full_name.to_owned());
    }

    /// Appends an attempt to the run's ledger, adding its usage to the run's.
    pub fn record_attempt(&mut self, record: AttemptRecord) {
        agentlane_core::metrics::incr(
            agentlane_core::metrics::ATTEMPTS,
            &[("outcome", record.outcome.as_str())],
        );
        self.record_usage(&record.model, record.usage, record.cost_usd);
        self.run.attempts.push(record);
    }

    /// Adds a model call's usage and cost to the run's totals and the metrics: an attempt's,
    /// or a call outside the ledger (a compaction's summary).
    pub fn record_usage(&mut self, model: &str, usage: agentlane_core::Usage, cost: Option<f64>) {
        self.run.usage.add(usage);
        let dims = [("tenant", self.run.tenant.as_str()), ("model", model)];
        let tokens = usage.input_tokens + usage.output_tokens;
        agentlane_core::metrics::global().add(
            agentlane_core::metrics::TOKENS_TOTAL,
            &dims,
            tokens as f64,
        );
        if let Some(cost) = cost {
            agentlane_core::metrics::global().add(
                agentlane_core::metrics::COST_USD_TOTAL,
                &dims,
                cost,
            );
            // Summed in micro-dollars (each cost is a whole number of them), so that a long
            // run's total does not drift.
            let as_micros = |usd: f64| (usd * 1_000_000.0).round().max(0.0) as u64;
            let micros = as_micros(self.run.cost_usd.unwrap_or(0.0)) + as_micros(cost);
            self.run.cost_usd = Some(agentlane_core::spend::usd(micros));
        }
    }

    /// The index the next attempt record gets.
    pub fn next_attempt_index(&self) -> u32 {
        self.run.attempts.len() as u32
    }

    /// Tool rounds of the run so far (attempts that asked for tools).
    pub fn tool_rounds(&self) -> u32 {
        self.run
            .attempts
            .iter()
            .filter(|a| AttemptOutcome::parse(&a.outcome) == Some(AttemptOutcome::ToolCalls))
            .count() as u32
    }

    /// Records the retry state in the run record (written by the next commit that carries the
    /// run), so a later pickup resumes with the same budgets.
    pub fn checkpoint(&mut self, state: &RetryState) {
        self.run.checkpoint = Some(json!({ "retry": state }));
    }

    /// The retry state of the last checkpoint (fresh when there is none, or it does not read).
    pub fn retry_state(&self) -> RetryState {
        self.run
            .checkpoint
            .as_ref()
            .and_then(|c| c.get("retry"))
            .and_then(|r| serde_json::from_value(r.clone()).ok())
            .unwrap_or_default()
    }

    /// The run is handed back unfinished: paused until a later pickup.
    pub fn pause(&mut self) {
        self.run.liveness_state = LivenessState::Paused;
        self.run.hand_backs += 1;
    }

    /// The run pauses until `action` is answered (its pickup ends cleanly, like a hand-back).
    pub fn require_action(&mut self, action: agentlane_core::RequiredAction) {
        self.run.status = RunStatus::RequiresAction;
        self.run.liveness_state = LivenessState::Paused;
        self.run.hand_backs += 1;
        self.run.required_action = Some(action);
    }

    /// The pickup resuming a paused run starts its approved calls after this is committed: a
    /// later pickup never starts them again.
    pub fn mark_resumed(&mut self) {
        if let Some(action) = self.run.required_action.as_mut() {
            action.resumed = true;
        }
    }

    /// The run ends now.
    pub fn end(&mut self, ending: Ending) {
        let now = self.now();
        let run = &mut self.run;
        run.status = ending.status;
        run.liveness_state = ending.liveness;
        run.ended_at = Some(now);
        run.error = ending.error;
        run.payloads = ending.payloads;
    }
}
