//! Tenant budgets in the loop (issue 21): before each model call its worst case is reserved
//! against every limited period of the tenant (one atomic store write); after it, the hold is
//! settled to what the call spent (one more). A reservation that does not fit ends the run
//! `budget_exceeded` before the call. A crash between the two leaves a hold that is cleared
//! from the attempt ledger of its run once its pickup is provably gone: by the next pickup of
//! the run (it holds the lock the dead one had), or by a refused reservation when the run has
//! ended. A hold is never cleared for being old: a long call's hold stays until it settles, and
//! a call that settles after its hold was cleared still adds what it spent beyond the clear.

use super::attempt::Attempted;
use super::turn_loop::{Selected, Turn};
use crate::context::tokens::estimate_tokens;
use agentlane_core::spend::{Hold, OverBudget, PeriodCap, Reserved, SpendTags, Spent};
use agentlane_core::{RunError, StoreError, TenantId, Usage};
use agentlane_providers::ModelRequest;

/// A reservation held for one model call.
pub(super) struct Held {
    hold: Hold,
    periods: Vec<String>,
    model: String,
    /// The day it is counted in, and when that day ends.
    day: (String, u64),
}

/// What a call of `run` to `model` is counted under on `day`.
fn tags(run: &agentlane_core::Run, model: &str, day: &(String, u64)) -> SpendTags {
    SpendTags {
        day: day.0.clone(),
        day_ends_at: day.1,
        agent: run.request.agent().to_owned(),
        model: model.to_owned(),
        session: run.session_key.to_string(),
    }
}

/// The day of `caps` (the first: [`TenantBudget::caps`] puts it first).
///
/// [`TenantBudget::caps`]: agentlane_core::spend::TenantBudget::caps
fn day_of(caps: &[PeriodCap]) -> (String, u64) {
    caps.first()
        .map(|c| (c.period.clone(), c.ends_at))
        .unwrap_or_default()
}

impl Turn<'_> {
    /// Reserves the next call's worst case against the tenant's budget: `Ok(None)` when no
    /// budget applies, `Err` with the run's error when it does not fit. A store failure is
    /// the outer `Err`: the pickup fails and the run is picked up again, its budget unchecked
    /// calls never made.
    pub(super) async fn reserve_spend(
        &self,
        selected: &Selected,
        request: &ModelRequest,
    ) -> Result<Result<Option<Held>, RunError>, StoreError> {
        self.reserve_call(selected, request, "").await
    }

    /// [`Self::reserve_spend`] for a call outside the attempt ledger (a compaction's summary):
    /// its hold's id does not name an attempt.
    pub(super) async fn reserve_side_call(
        &self,
        selected: &Selected,
        request: &ModelRequest,
    ) -> Result<Result<Option<Held>, RunError>, StoreError> {
        self.reserve_call(selected, request, "-compaction").await
    }

    async fn reserve_call(
        &self,
        selected: &Selected,
        request: &ModelRequest,
        suffix: &str,
    ) -> Result<Result<Option<Held>, RunError>, StoreError> {
        let Some((_, budgets)) = &self.runner.spend else {
            return Ok(Ok(None));
        };
        let run = self.writer.run();
        let now = self.writer.now();
        let caps = budgets.for_tenant(&run.tenant).caps(now);
        if caps.is_empty() {
            return Ok(Ok(None));
        }
        let model = selected.model.full_name.clone();
        let price = self.price_of(&model);
        if price.is_none() && caps.iter().any(|c| c.max_micros.is_some()) {
            let over = OverBudget::Unpriced { model };
            return Ok(Err(RunError::new(OverBudget::CODE, over.message())));
        }
        let prompt_tokens = estimate_tokens(request);
        let max_output = self.output_reserve(selected, request);
        let hold = Hold {
            id: format!(
                "{}.{}{suffix}",
                run.run_id,
                self.writer.next_attempt_index()
            ),
            micros: price.map_or(0, |p| {
                p.cost_micros(&Usage {
                    input_tokens: prompt_tokens,
                    output_tokens: max_output,
                    ..Default::default()
                })
            }),
            tokens: prompt_tokens + max_output,
            at: now,
        };
        let Some(refused) = self.try_reserve(&run.tenant, &caps, &hold).await? else {
            return Ok(Ok(Some(Held {
                hold,
                periods: caps.iter().map(|c| c.period.clone()).collect(),
                model,
                day: day_of(&caps),
            })));
        };
        tracing::info!(run = %run.run_id, period = %refused, "the tenant's budget stops the run");
        Ok(Err(RunError::new(
            OverBudget::CODE,
            format!(
                "the tenant's budget for {} is spent: the next model call may cost up to \
                 ${:.6} ({} tokens)",
                describe(&refused),
                agentlane_core::spend::usd(hold.micros),
                hold.tokens
            ),
        )))
    }

    /// One reservation, and once more after settling the stale holds of a refused period.
    /// `Some(period)`: refused.
    async fn try_reserve(
        &self,
        tenant: &TenantId,
        caps: &[PeriodCap],
        hold: &Hold,
    ) -> Result<Option<String>, StoreError> {
        let Some((ledger, _)) = &self.runner.spend else {
            return Ok(None);
        };
        let period = match ledger.reserve(tenant, caps, hold).await? {
            Reserved::Granted => return Ok(None),
            Reserved::Refused { period, .. } => period,
        };
        if self.settle_stale(tenant, &period, caps).await? == 0 {
            return Ok(Some(period));
        }
        Ok(match ledger.reserve(tenant, caps, hold).await? {
            Reserved::Granted => None,
            Reserved::Refused { period, .. } => Some(period),
        })
    }

    /// Clears the holds of `period` whose run has ended (or is gone) to what their attempt
    /// ledger says was spent (nothing when the attempt was never recorded): their pickup died
    /// before settling, and no pickup of theirs is left to do it. A hold of a run still going is
    /// left alone, however old: its call may be long, and its next pickup clears it otherwise.
    /// Holds younger than a lock lease are not looked at (their call is surely live). Returns
    /// how many it cleared.
    async fn settle_stale(
        &self,
        tenant: &TenantId,
        period: &str,
        caps: &[PeriodCap],
    ) -> Result<usize, StoreError> {
        let Some((ledger, _)) = &self.runner.spend else {
            return Ok(0);
        };
        let fresh_after = self
            .writer
            .now()
            .saturating_sub(self.runner.config.lock_lease.as_millis() as u64);
        let periods: Vec<String> = caps.iter().map(|c| c.period.clone()).collect();
        let mut settled = 0;
        for hold in ledger.period_spend(tenant, period).await?.holds {
            if hold.at > fresh_after {
                continue;
            }
            let run = match hold.run_id() {
                Some(run_id) => {
                    let run_id = agentlane_core::RunId::new(run_id);
                    self.runner.store.get_run(tenant, &run_id).await?
                }
                None => None,
            };
            if !pickup_gone(run.as_ref().map(|r| r.status)) {
                continue;
            }
            let (spent, tags) = self.ledger_spend(run.as_ref(), &hold, &day_of(caps));
            tracing::info!(hold = %hold.id, "clearing an ended run's spend hold from its attempt ledger");
            ledger.clear(tenant, &periods, &hold, spent, &tags).await?;
            settled += 1;
        }
        Ok(settled)
    }

    /// At a pickup after an earlier one of the run (which died, or handed the run back): every
    /// hold of this run still open in the tenant's current periods is a dead pickup's (a live
    /// one settles before it ends), so it is settled from the run's attempt ledger. Nothing
    /// is read on a run's first pickup, or without a tenant budget.
    pub(super) async fn settle_own_holds(&self) {
        let Some((ledger, budgets)) = &self.runner.spend else {
            return;
        };
        let run = self.writer.run();
        if run.pickups <= 1 {
            return;
        }
        let caps = budgets.for_tenant(&run.tenant).caps(self.writer.now());
        if caps.is_empty() {
            return;
        }
        let periods: Vec<String> = caps.iter().map(|c| c.period.clone()).collect();
        let spends = match ledger.periods_spend(&run.tenant, &periods).await {
            Ok(spends) => spends,
            Err(error) => {
                tracing::warn!(%error, "the run's spend holds could not be read");
                return;
            }
        };
        let own = format!("{}.", run.run_id);
        let mut holds: Vec<Hold> = spends
            .into_iter()
            .flat_map(|s| s.holds)
            .filter(|h| h.id.starts_with(&own))
            .collect();
        holds.sort_by(|a, b| a.id.cmp(&b.id));
        holds.dedup_by(|a, b| a.id == b.id);
        let day = day_of(&caps);
        for hold in holds {
            let (spent, tags) = self.ledger_spend(Some(run), &hold, &day);
            tracing::info!(hold = %hold.id, "clearing a replaced pickup's spend hold");
            if let Err(error) = ledger
                .clear(&run.tenant, &periods, &hold, spent, &tags)
                .await
            {
                tracing::warn!(%error, hold = %hold.id, "a dead pickup's hold could not be settled");
            }
        }
    }

    /// Settles `held` to what the attempt spent. A failure is logged: the hold stays, and the
    /// run's next pickup (or, once the run ended, a refused reservation) clears it.
    pub(super) async fn settle_spend(&self, held: Option<Held>, attempted: &Attempted) {
        let usage = match attempted {
            Attempted::Answered { turn, .. } => turn.usage,
            Attempted::Failed(_) | Attempted::Stopped(_) => Usage::default(),
        };
        self.settle_usage(held, usage).await;
    }

    /// Settles `held` to `usage` (a failure is logged, as for [`Self::settle_spend`]).
    pub(super) async fn settle_usage(&self, held: Option<Held>, usage: Usage) {
        let (Some(held), Some((ledger, _))) = (held, &self.runner.spend) else {
            return;
        };
        let spent = self.spent_by(&held.model, &usage);
        let run = self.writer.run();
        let tags = tags(run, &held.model, &held.day);
        if let Err(error) = ledger
            .settle(&run.tenant, &held.periods, &held.hold, spent, &tags)
            .await
        {
            tracing::warn!(%error, hold = %held.hold.id, "a spend hold could not be settled yet");
        }
    }

    /// What `hold`'s call spent by the attempt ledger of `run` (nothing when the attempt was
    /// never recorded, or the run is gone), and what it is counted under on `day`.
    fn ledger_spend(
        &self,
        run: Option<&agentlane_core::Run>,
        hold: &Hold,
        day: &(String, u64),
    ) -> (Spent, SpendTags) {
        let Some(run) = run else {
            return (Spent::default(), orphan(day));
        };
        let attempt = hold
            .attempt()
            .and_then(|(_, index)| run.attempts.iter().find(|a| a.index == index));
        let spent = attempt.map_or(Spent::default(), |a| self.spent_by(&a.model, &a.usage));
        (
            spent,
            tags(run, attempt.map_or("", |a| a.model.as_str()), day),
        )
    }

    fn spent_by(&self, model: &str, usage: &Usage) -> Spent {
        Spent {
            micros: self.price_of(model).map_or(0, |p| p.cost_micros(usage)),
            tokens: usage.input_tokens + usage.output_tokens,
        }
    }
}

/// Whether no pickup of a run (of `status`; `None`: the run is gone) can still settle its
/// holds: the run has ended. A queued, running or paused run has a pickup to come (or going)
/// that settles or clears them.
fn pickup_gone(status: Option<agentlane_core::RunStatus>) -> bool {
    status.is_none_or(agentlane_core::RunStatus::is_terminal)
}

/// The tags of a hold whose run is gone.
fn orphan(day: &(String, u64)) -> SpendTags {
    SpendTags {
        day: day.0.clone(),
        day_ends_at: day.1,
        agent: String::new(),
        model: String::new(),
        session: String::new(),
    }
}

/// `the day 2026-12-04 (UTC)` / `the month 2026-12 (UTC)`.
fn describe(period: &str) -> String {
    let unit = match agentlane_core::spend::period_kind(period) {
        "monthly" => "month",
        _ => "day",
    };
    format!(
        "the {unit} {} (UTC)",
        agentlane_core::spend::period_date(period)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::RunStatus;

    #[test]
    fn only_an_ended_or_gone_runs_holds_are_cleared_by_others() {
        let cases = [
            (None, true),
            (Some(RunStatus::Ok), true),
            (Some(RunStatus::Error), true),
            (Some(RunStatus::Aborted), true),
            (Some(RunStatus::Timeout), true),
            (Some(RunStatus::Queued), false),
            (Some(RunStatus::Running), false),
            (Some(RunStatus::RequiresAction), false),
        ];
        for (status, gone) in cases {
            assert_eq!(pickup_gone(status), gone, "{status:?}");
        }
    }
}
