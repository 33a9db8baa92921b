//! The ticker: every tick it reads the jobs due now through the due index, and for each one, in
//! one conditional write on the version it read, records the ends of its fires in flight, asks
//! overdue fires to abort (recording `timeout` after the bounded cleanup), and claims its due
//! slot (fire or skip). Only after the write succeeds does it act: submit the fired run, request
//! aborts, start deliveries, delete a finished one-shot. A second ticker that read the same
//! version loses the write (`Conflict`), re-reads, and finds nothing left to do — so two tickers
//! never fire one slot twice.

use crate::budget::{FireBuckets, FireBudget};
use crate::delivery::WebhookSender;
use crate::fire;
use crate::plan::{self, Overdue, Room, RunProgress, SlotOutcome};
use crate::schedule::CompiledSchedule;
use agentlane_core::cron::{CronJob, CronStore, FIRE_SESSION_RETENTION_MS, JobRun, JobRunStatus};
use agentlane_core::{Clock, LaneQueue, RunId, SessionKey, Store, StoreError};
use serde::Serialize;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A fire listed `queued` whose run cannot be found, or is still queued and never picked up, this
/// long after the fire is submitted again (the ticker stopped between the claim and the submit,
/// or between the accept and the enqueue); at most once per this period per fire and process.
const RESUBMIT_AFTER_MS: u64 = 5_000;
/// Writes retried when another writer changed the job in between.
const CONFLICT_RETRIES: u32 = 4;
/// How often retired fire sessions are pruned (backends without TTL).
const PRUNE_EVERY_MS: u64 = 60_000;

/// Knobs of the ticker.
#[derive(Debug, Clone)]
pub struct TickerConfig {
    /// Pause between ticks (`AGENTLANE_CRON_TICK_MS`, default 1 s).
    pub tick: Duration,
    /// Jobs read per tick at most.
    pub batch: usize,
    /// Scheduled fires each tenant may start per minute (`[limits.tenant]
    /// cron_fires_per_minute`), counted by this ticker.
    pub fire_budget: FireBudget,
}

impl Default for TickerConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(1000),
            batch: 500,
            fire_budget: FireBudget::default(),
        }
    }
}

/// What ticks did (summed over a [`Ticker::run`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TickReport {
    /// Ticks run (one pass over the due jobs each).
    pub ticks: u32,
    /// Runs fired, in order.
    pub fired: Vec<RunId>,
    /// Slots skipped because the previous fire still ran.
    pub skipped: u32,
    /// Slots skipped because the tenant's fire budget was spent.
    pub over_budget: u32,
    /// Fires whose end was recorded.
    pub ended: u32,
    /// Fires recorded `timeout` by the scheduler's own timer.
    pub timed_out: u32,
    /// Claims lost to another ticker.
    pub conflicts: u32,
    /// Jobs that could not be processed (store or queue unavailable); retried next tick.
    pub failures: u32,
}

impl TickReport {
    fn absorb(&mut self, other: TickReport) {
        self.ticks += other.ticks;
        self.fired.extend(other.fired);
        self.skipped += other.skipped;
        self.over_budget += other.over_budget;
        self.ended += other.ended;
        self.timed_out += other.timed_out;
        self.conflicts += other.conflicts;
        self.failures += other.failures;
    }
}

/// Claims and fires due cron jobs. Cheap to clone.
#[derive(Clone)]
pub struct Ticker {
    store: Arc<dyn Store>,
    cron: Arc<dyn CronStore>,
    queue: Arc<dyn LaneQueue>,
    clock: Arc<dyn Clock>,
    config: TickerConfig,
    webhooks: WebhookSender,
    deliveries: Arc<Mutex<JoinSet<()>>>,
    last_prune: Arc<AtomicU64>,
    /// When this process last submitted again a fire whose run was still queued.
    resubmitted: Arc<Mutex<HashMap<RunId, u64>>>,
    /// The tenants' fire budgets.
    budgets: Arc<Mutex<FireBuckets>>,
}

/// What one job's pass decided, acted on once the job write succeeded.
#[derive(Default)]
struct Actions {
    submit: Vec<JobRun>,
    /// Fires accepted but never picked up: enqueued again as accepted.
    resend: Vec<JobRun>,
    abort: Vec<RunId>,
    deliver: Vec<JobRun>,
    /// Sessions of ended fires, and until when they are kept.
    retire: Vec<(SessionKey, u64)>,
    delete: bool,
    report: TickReport,
}

impl Actions {
    /// A fire reached its end: deliver it, and let its session expire.
    fn ended(&mut self, entry: &JobRun) {
        if let Some(key) = &entry.session_key {
            let end = entry.ended_at.unwrap_or(entry.fired_at);
            self.retire
                .push((key.clone(), end.saturating_add(FIRE_SESSION_RETENTION_MS)));
        }
        self.deliver.push(entry.clone());
    }
}

impl Ticker {
    /// A ticker over the backends.
    pub fn new(
        store: Arc<dyn Store>,
        cron: Arc<dyn CronStore>,
        queue: Arc<dyn LaneQueue>,
        clock: Arc<dyn Clock>,
        config: TickerConfig,
        webhooks: WebhookSender,
    ) -> Self {
        let budgets = Arc::new(Mutex::new(FireBuckets::new(config.fire_budget.clone())));
        Self {
            store,
            cron,
            queue,
            clock,
            config,
            webhooks,
            budgets,
            deliveries: Arc::new(Mutex::new(JoinSet::new())),
            last_prune: Arc::new(AtomicU64::new(0)),
            resubmitted: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Ticks every `config.tick` until `stop` is cancelled or the clock reaches `until`.
    pub async fn run(&self, stop: CancellationToken, until: Option<u64>) -> TickReport {
        let mut report = TickReport::default();
        loop {
            report.absorb(self.tick().await);
            let now = self.clock.now_ms();
            let mut pause = self.config.tick;
            if let Some(end) = until {
                if now >= end {
                    return report;
                }
                pause = pause.min(Duration::from_millis(end - now));
            }
            tokio::select! {
                _ = stop.cancelled() => return report,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One pass over the jobs due now.
    pub async fn tick(&self) -> TickReport {
        let now = self.clock.now_ms();
        let mut report = TickReport {
            ticks: 1,
            ..TickReport::default()
        };
        self.reap_deliveries();
        self.prune(now).await;
        let jobs = match self.cron.due_jobs(now, self.config.batch).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(error = %e, "cron tick: cannot read due jobs");
                report.failures += 1;
                return report;
            }
        };
        for job in jobs {
            let job_id = job.job_id.clone();
            match self.process(job).await {
                Ok(r) => report.absorb(r),
                Err(e) => {
                    tracing::warn!(job_id = %job_id, error = %e, "cron: job not processed this tick");
                    report.failures += 1;
                }
            }
        }
        report
    }

    /// Waits up to `limit` for deliveries still in flight (a Lambda invocation calls this
    /// before it returns); the rest are abandoned.
    pub async fn drain_deliveries(&self, limit: Duration) {
        let mut set = match self.deliveries.lock() {
            Ok(mut guard) => std::mem::take(&mut *guard),
            Err(_) => return,
        };
        let _ =
            tokio::time::timeout(limit, async { while set.join_next().await.is_some() {} }).await;
    }

    /// Deletes expired fire sessions, once a minute at most.
    async fn prune(&self, now: u64) {
        let last = self.last_prune.load(Ordering::Relaxed);
        if now.saturating_sub(last) < PRUNE_EVERY_MS {
            return;
        }
        self.last_prune.store(now, Ordering::Relaxed);
        match self.cron.prune_fires(now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(sessions = n, "cron: expired fire sessions pruned"),
            Err(e) => tracing::warn!(error = %e, "cron: pruning fire sessions failed"),
        }
    }

    /// Whether a still-queued fire may be submitted again now (not in the last
    /// [`RESUBMIT_AFTER_MS`] by this process); records the resubmission when it may.
    fn may_resubmit(&self, run_id: &RunId, now: u64) -> bool {
        let Ok(mut last) = self.resubmitted.lock() else {
            return true;
        };
        last.retain(|_, at| now.saturating_sub(*at) < RESUBMIT_AFTER_MS);
        if last.contains_key(run_id) {
            return false;
        }
        last.insert(run_id.clone(), now);
        true
    }

    fn reap_deliveries(&self) {
        if let Ok(mut set) = self.deliveries.lock() {
            while set.try_join_next().is_some() {}
        }
    }

    /// Reconciles and claims one job, retrying on a lost write.
    async fn process(&self, mut job: CronJob) -> Result<TickReport, StoreError> {
        let mut conflicts = 0;
        for _ in 0..=CONFLICT_RETRIES {
            let now = self.clock.now_ms();
            let (next, mut actions) = self.plan(&job, now).await?;
            let mut report = std::mem::take(&mut actions.report);
            report.conflicts += conflicts;
            let Some(mut next) = next else {
                // Nothing to write; resubmitting a lost fire is idempotent, so it needs no claim.
                self.act(&job, actions, now).await;
                return Ok(report);
            };
            next.version = job.version + 1;
            match self.cron.replace_job(&next, job.version).await {
                Ok(()) => {
                    use agentlane_core::metrics;
                    // Counted once the claim is written: a lost write claimed nothing.
                    for _ in &report.fired {
                        metrics::incr(metrics::CRON_FIRES, &[("outcome", "fired")]);
                    }
                    for _ in 0..report.skipped {
                        metrics::incr(metrics::CRON_FIRES, &[("outcome", "skipped")]);
                    }
                    for _ in 0..report.over_budget {
                        metrics::incr(metrics::CRON_FIRES, &[("outcome", "over_budget")]);
                    }
                    if !report.fired.is_empty()
                        && let Ok(mut budgets) = self.budgets.lock()
                    {
                        for _ in &report.fired {
                            budgets.spend(&job.tenant, now);
                        }
                    }
                    self.act(&next, actions, now).await;
                    return Ok(report);
                }
                Err(StoreError::Conflict(_)) => {
                    conflicts += 1;
                    match self.cron.get_job(&job.tenant, &job.job_id).await? {
                        Some(fresh) => job = fresh,
                        None => return Ok(TickReport::default()),
                    }
                }
                Err(StoreError::NotFound(_)) => return Ok(TickReport::default()),
                Err(e) => return Err(e),
            }
        }
        Ok(TickReport {
            conflicts,
            ..TickReport::default()
        })
    }

    /// The job's new state (`None` when nothing changed) and what to do once it is written.
    async fn plan(
        &self,
        job: &CronJob,
        now: u64,
    ) -> Result<(Option<CronJob>, Actions), StoreError> {
        let mut next = job.clone();
        let mut actions = Actions::default();
        let in_flight: Vec<JobRun> = job.in_flight().cloned().collect();
        for entry in in_flight {
            let Some(run_id) = entry.run_id.clone() else {
                continue;
            };
            match self.store.get_run(&job.tenant, &run_id).await? {
                Some(run) => {
                    let progress = RunProgress::of_run(&run);
                    let effects = plan::record_progress(&mut next, &run_id, &progress, now);
                    if effects.ended {
                        actions.report.ended += 1;
                        actions.delete |= effects.delete_job;
                        if let Some(e) = next.last_runs.iter().find(|r| r.run_id == entry.run_id) {
                            actions.ended(e);
                        }
                        continue;
                    }
                    // Accepted but never picked up: its lane message may never have been sent
                    // (a crash between the accept and the enqueue). Enqueueing again is a no-op
                    // for a message already sent (same dedup id), and a duplicate delivery runs
                    // nothing twice.
                    if run.unsent_at(now, RESUBMIT_AFTER_MS) && self.may_resubmit(&run_id, now) {
                        actions.resend.push(entry.clone());
                    }
                }
                None if now.saturating_sub(entry.fired_at) >= RESUBMIT_AFTER_MS => {
                    actions.submit.push(entry.clone());
                }
                None => {}
            }
            let current = next
                .last_runs
                .iter()
                .find(|r| r.run_id == entry.run_id)
                .cloned()
                .unwrap_or_else(|| entry.clone());
            match plan::overdue(&next, &current, now) {
                Overdue::No => {}
                Overdue::RequestAbort => {
                    if let Some(e) = next
                        .last_runs
                        .iter_mut()
                        .find(|r| r.run_id.as_ref() == Some(&run_id))
                    {
                        e.abort_requested_at = Some(now);
                    }
                    actions.abort.push(run_id);
                }
                Overdue::RecordTimeout => {
                    let progress = RunProgress {
                        status: JobRunStatus::Timeout,
                        started_at: current.started_at,
                        ended_at: Some(now),
                        error: Some(("timeout".into(), "cron: job execution timed out".into())),
                    };
                    let effects = plan::record_progress(&mut next, &run_id, &progress, now);
                    if effects.ended {
                        actions.report.ended += 1;
                        actions.report.timed_out += 1;
                        actions.abort.push(run_id);
                        if let Some(e) = next.last_runs.iter().find(|r| r.run_id == entry.run_id) {
                            actions.ended(e);
                        }
                    }
                }
            }
        }
        let schedule = CompiledSchedule::compile(&next.schedule);
        match schedule {
            Ok(schedule) => {
                let room = match self.budgets.lock() {
                    Ok(budgets) => budgets
                        .spent(&job.tenant, now)
                        .map_or(Room::Free, Room::Spent),
                    Err(_) => Room::Free,
                };
                if let Some((claimed, outcome)) =
                    plan::claim_slot_within(&next, &schedule, now, RunId::generate(), room)
                {
                    next = claimed;
                    match outcome {
                        SlotOutcome::Fired(entry) => {
                            if let Some(run_id) = &entry.run_id {
                                actions.report.fired.push(run_id.clone());
                            }
                            actions.submit.push(entry);
                        }
                        SlotOutcome::Skipped => actions.report.skipped += 1,
                        SlotOutcome::OverBudget => actions.report.over_budget += 1,
                    }
                }
            }
            Err(e) if next.enabled => {
                // A schedule that no longer compiles (a zone database change): stop, say why.
                next.enabled = false;
                next.next_run_at = None;
                next.disabled_reason = Some(format!("schedule error: {e}"));
            }
            Err(_) => {}
        }
        let changed = next != *job;
        Ok((changed.then_some(next), actions))
    }

    /// Side effects of a written job state.
    async fn act(&self, job: &CronJob, actions: Actions, now: u64) {
        for entry in &actions.submit {
            if let Err(e) =
                fire::submit(self.store.as_ref(), self.queue.as_ref(), job, entry, now).await
            {
                // Listed `queued`; resubmitted by a later tick.
                tracing::warn!(job_id = %job.job_id, error = %e, "cron: fire not submitted yet");
            }
        }
        for entry in &actions.resend {
            if let Err(e) = fire::send(self.queue.as_ref(), &job.tenant, entry).await {
                tracing::warn!(job_id = %job.job_id, error = %e, "cron: fire not sent again yet");
            }
        }
        for run_id in &actions.abort {
            if let Err(e) = self.store.request_abort(&job.tenant, run_id).await {
                tracing::warn!(job_id = %job.job_id, %run_id, error = %e, "cron: abort request failed");
            }
        }
        for (key, keep_until) in &actions.retire {
            if let Err(e) = self.cron.retire_fire(&job.tenant, key, *keep_until).await {
                tracing::warn!(job_id = %job.job_id, error = %e, "cron: fire session not retired");
            }
        }
        if let Some(delivery) = &job.delivery {
            for entry in actions.deliver {
                self.spawn_delivery(job, &delivery.webhook, entry);
            }
        }
        if actions.delete
            && let Err(e) = self.cron.delete_job(&job.tenant, &job.job_id).await
        {
            tracing::warn!(job_id = %job.job_id, error = %e, "cron: one-shot not deleted");
        }
    }

    fn spawn_delivery(
        &self,
        job: &CronJob,
        target: &agentlane_core::cron::WebhookTarget,
        entry: JobRun,
    ) {
        let (store, sender, target) = (self.store.clone(), self.webhooks.clone(), target.clone());
        let (tenant, job_id, name) = (job.tenant.clone(), job.job_id.clone(), job.name.clone());
        let task = async move {
            let run = match &entry.run_id {
                Some(id) => store.get_run(&tenant, id).await.ok().flatten(),
                None => None,
            };
            let body = json!({
                "jobId": job_id,
                "name": name,
                "runId": entry.run_id,
                "sessionKey": entry.session_key,
                "status": entry.status.as_str(),
                "firedAt": entry.fired_at,
                "endedAt": entry.ended_at,
                "error": entry.error,
                "payloads": run.map(|r| r.payloads).unwrap_or_default(),
            });
            if let Err(why) = sender.deliver(&target, &body).await {
                tracing::warn!(job_id = %job_id, %why, "cron: webhook delivery failed");
            }
        };
        if let Ok(mut set) = self.deliveries.lock() {
            set.spawn(task);
        }
    }
}
