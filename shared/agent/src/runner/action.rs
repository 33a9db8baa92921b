//! After a failed attempt: ask [`crate::retry`] what to do and carry out its
//! [`Action`] — wait and retry, rotate the auth profile, fall back to the next model, compact,
//! or end the run — then checkpoint the retry state with the run.

use super::attempt::FailedAttempt;
use super::compaction::Relieved;
use super::turn_loop::{LoopEnd, Selected, Step, Turn};
use crate::retry::{Action, CompactionTrigger, Situation};
use crate::writer::CommitKind;
use agentlane_core::StoreError;
use std::time::Duration;

impl Turn<'_> {
    /// Decides and carries out what follows a failed attempt; the new retry state is committed
    /// with the run record either way.
    pub(super) async fn after_failure(
        &mut self,
        selected: &Selected,
        failed: FailedAttempt,
    ) -> Result<Step, StoreError> {
        let situation = Situation {
            next_profile: self.retry.has_profile_after(selected.model.profiles.len()),
            fallback: selected.has_fallback,
            progress: failed.progress,
            prompt_ratio: failed.prompt_ratio,
            can_compact: self.can_relieve(),
        };
        let action = self
            .retry
            .on_failure(&failed.error, failed.stage, situation);
        let step = self
            .carry_out(selected, failed.idle, failed.error.reason.as_str(), action)
            .await?;
        self.writer.checkpoint(&self.retry);
        self.writer.commit(CommitKind::RunRecord).await?;
        Ok(step)
    }

    /// Carries out a failure decision. `reason` is the failover reason of the failed attempt.
    async fn carry_out(
        &mut self,
        selected: &Selected,
        idle: Duration,
        reason: &str,
        action: Action,
    ) -> Result<Step, StoreError> {
        match action {
            Action::Retry {
                delay,
                continuation,
            } => {
                let wait = delay.wait(self.runner.config.retry_delay_scale);
                self.note_retry("retry", reason, wait);
                self.retry.continue_with(continuation);
                self.writer.flush_events().await?;
                tokio::select! {
                    _ = self.stop.token().cancelled() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            Action::RotateProfile { cooldown } => {
                if cooldown {
                    self.runner
                        .models
                        .cool_down(&selected.model.provider_name, &selected.profile.name);
                }
                self.note_retry("rotate_profile", reason, Duration::ZERO);
                self.retry.rotate_profile();
            }
            Action::Fallback { reason } => {
                self.note_retry("fallback", reason.as_str(), Duration::ZERO);
                self.retry.advance_model();
            }
            Action::Compact { trigger } => {
                self.note_retry("compact", reason, Duration::ZERO);
                return self.compact_after_failure(selected, idle, trigger).await;
            }
            Action::Fail { error, .. } => return Ok(Step::End(LoopEnd::Failed(error))),
        }
        Ok(Step::Continue)
    }

    /// Relieves the prompt the failed attempt could not fit (or timed out on): the precheck's
    /// estimate fitted, so the aim is a quarter below what was sent — the run's earlier rounds
    /// cut, or a summary (the decision spent its compaction). A summary of the history before
    /// the run is followed by the after-compaction instruction; one inside a tool loop is not
    /// (the loop goes on from its latest round). The retry state says whether a failed
    /// compaction ends the run.
    async fn compact_after_failure(
        &mut self,
        selected: &Selected,
        idle: Duration,
        trigger: CompactionTrigger,
    ) -> Result<Step, StoreError> {
        // The provider's window is smaller than the estimate of what was sent: aim below it.
        let sent = self.prompt_estimate(&self.history);
        let window = selected.model.context_window;
        let budget = crate::context::precheck::prompt_budget(window).min(sent / 4 * 3);
        let over = sent.saturating_sub(budget).max(1);
        match self
            .relieve(selected, (over, budget), (trigger, idle), true)
            .await?
        {
            Ok(Relieved::Summarised { in_run }) => self.retry.on_compacted(!in_run),
            Ok(Relieved::Cut) => {}
            // Stopped during the compaction: the run ends for that reason.
            Err(_) if self.stop.reason().is_some() => {}
            Err(why) => {
                if let Some(error) = self.retry.on_compaction_failed(trigger, &why) {
                    return Ok(Step::End(LoopEnd::Failed(error)));
                }
                tracing::warn!(%why, "timeout compaction did not help; retrying");
            }
        }
        Ok(Step::Continue)
    }
}
