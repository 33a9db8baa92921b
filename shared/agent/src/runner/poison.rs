//! Poison turns (SPEC §10): a run whose earlier deliveries kept failing — a crash, a store
//! error, a commit that cannot land — is not run again. Once it has failed
//! [`RunnerConfig::max_failed_pickups`](crate::config::RunnerConfig::max_failed_pickups)
//! times, the next pickup ends it `error` with code `poisoned` (without calling the model), so
//! its message is deleted, the lane released and the session's next turn runs.

use super::turn_loop::{LoopEnd, Turn};
use crate::context::repair::missing_results;
use crate::writer::CommitKind;
use agentlane_core::{Run, RunError, StoreError};
use agentlane_providers::SharedMessage;

/// The error code of a run ended because its deliveries kept failing.
pub const POISONED: &str = "poisoned";

/// The error a poisoned run ends with: how many deliveries failed, and the last error the run
/// recorded (its last failed model attempt) when it has one.
pub fn poisoned_error(run: &Run) -> RunError {
    let failed = run.failed_pickups();
    let last = run
        .attempts
        .iter()
        .rev()
        .find_map(|a| a.error.clone())
        .unwrap_or_else(|| "the runner stopped without finishing the turn".to_owned());
    RunError::new(
        POISONED,
        format!(
            "the turn failed on {failed} deliveries and will not be retried; last error: {last}"
        ),
    )
}

/// Whether `run` has failed `cap` deliveries already (0 disables the cap).
pub fn is_poisoned(run: &Run, cap: u32) -> bool {
    cap > 0 && run.failed_pickups() >= cap
}

impl Turn<'_> {
    /// When the run is poisoned, the end it gets: every dangling tool call is first given a
    /// result (its own commit), so the transcript stays paired. `None`: run the turn.
    pub(super) async fn poisoned(&mut self) -> Result<Option<LoopEnd>, StoreError> {
        let run = self.writer.run();
        if !is_poisoned(run, self.runner.config.max_failed_pickups) {
            return Ok(None);
        }
        let error = poisoned_error(run);
        tracing::error!(run = %run.run_id, failed = run.failed_pickups(), "poisoned turn: ending it");
        agentlane_core::metrics::incr(agentlane_core::metrics::POISONED_RUNS, &[]);
        let dangling = missing_results(&self.history);
        if !dangling.is_empty() {
            self.history
                .extend(dangling.iter().cloned().map(SharedMessage::from));
            self.writer.commit(CommitKind::Entries(dangling)).await?;
        }
        Ok(Some(LoopEnd::Failed(error)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::{
        AttemptRecord, RunId, SessionId, SessionKey, TenantId, TurnRequest, Usage,
    };

    fn run(pickups: u32, hand_backs: u32) -> Run {
        let mut run = agentlane_core::Run {
            run_id: RunId::new("run_1"),
            tenant: TenantId::new("t"),
            session_key: SessionKey::new("s"),
            session_id: SessionId::new("sid"),
            status: agentlane_core::RunStatus::Running,
            liveness_state: Default::default(),
            request: TurnRequest {
                message: "hi".into(),
                queue_mode: Default::default(),
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
            },
            idempotency_key: None,
            accepted_at: 0,
            started_at: Some(1),
            ended_at: None,
            model: None,
            attempts: Vec::new(),
            usage: Usage::default(),
            cost_usd: None,
            payloads: Vec::new(),
            error: None,
            abort_requested: false,
            abort_reason: None,
            pickups,
            hand_backs,
            checkpoint: None,
            session_seq: 0,
            request_fingerprint: None,
            queue_outcome: Default::default(),
            into_run_id: None,
            out_of_turn: false,
            warnings: Vec::new(),
            required_action: None,
            paused_ms: 0,
            action_answer: None,
        };
        run.attempts.push(AttemptRecord {
            index: 0,
            model: "m/x".into(),
            profile: None,
            outcome: "timeout".into(),
            usage: Usage::default(),
            cost_usd: None,
            started_at: 1,
            duration_ms: 1,
            error: Some("stream idle".into()),
        });
        run
    }

    #[test]
    fn clean_hand_backs_do_not_count_as_failures() {
        assert!(!is_poisoned(&run(9, 5), 5));
        assert!(is_poisoned(&run(10, 5), 5));
        assert!(!is_poisoned(&run(50, 0), 0), "0 disables the cap");
    }

    #[test]
    fn the_poisoned_error_names_the_count_and_the_last_error() {
        let e = poisoned_error(&run(5, 0));
        assert_eq!(e.code, "poisoned");
        assert!(e.message.contains("5 deliveries"), "{}", e.message);
        assert!(e.message.contains("stream idle"), "{}", e.message);
    }
}
