//! A pickup of a run: the session lock, the run read under it, the history read back, the hooks
//! that may claim or block the turn before it starts, and the start (or resume) commit. Then the
//! loop, under the run's deadline, and the finish.

use super::stop::{self, StopReason, StopSignal, Watch};
use super::turn_loop::{LoopEnd, RunScope, Turn};
use super::{Runner, RunnerError, TurnExit};
use crate::agents::AgentProfile;
use crate::context::cache::{SessionMark, TranscriptLog};
use crate::context::history::assemble;
use crate::context::repair::missing_results;
use crate::hooks::{
    AgentReplyEvent, AgentRunEvent, HookContext, HookPoint, MessageEvent, ModelResolveEvent,
    PromptAdditions, ReplyTrigger, RunGate, SessionStartEvent,
};
use crate::lock::{self, AcquireError};
use crate::writer::{CommitKind, DeltaFlush, Positions, RunWriter};
use agentlane_core::backoff::jittered;
use agentlane_core::metrics;
use agentlane_core::{
    EventStream, Fence, Message, Run, RunError, RunId, RunStatus, StoreError, TranscriptEntry,
    TurnMessage,
};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the hooks said before the run starts.
enum Gate {
    /// Go on with the turn.
    Open,
    /// The run ends before it starts.
    End(LoopEnd),
    /// A hook answers instead of the model.
    Claimed(crate::hooks::ReplyClaimed),
}

impl Runner {
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
        let acquire = |timeout| {
            lock::acquire(
                self.store.as_ref(),
                self.clock.as_ref(),
                &message.tenant,
                &key,
                &owner,
                self.config.lock_lease,
                timeout,
            )
        };
        // One try first: a busy lane is usually busy with an earlier run of the session (only
        // a queue that delivers a lane's next message early shows us one), and a message that
        // must wait for it should not hold a worker for the whole acquire timeout.
        if shutdown.is_cancelled() {
            return Ok(TurnExit::HandBack);
        }
        let acquired = match acquire(Duration::ZERO).await {
            Err(AcquireError::Busy { .. }) if self.behind_an_earlier_run(message).await? => {
                tracing::info!(run = %message.run_id, "an earlier run of the session holds the lane; the turn comes back later");
                return Ok(TurnExit::OutOfOrder);
            }
            Err(AcquireError::Busy { .. }) => tokio::select! {
                _ = shutdown.cancelled() => return Ok(TurnExit::HandBack),
                a = acquire(self.config.lock_acquire_timeout) => a,
            },
            other => other,
        };
        let (fence, session) = match acquired {
            Ok(acquired) => acquired,
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
            Ok(Some(run))
                if run.out_of_turn
                    && run.session_key == key
                    && run.session_seq == session.runs_finished =>
            {
                // An interrupt that ran ahead of earlier runs: its turn has come, count it.
                return match self.count_out_of_turn(&run, &fence).await {
                    Ok(()) => Ok(TurnExit::AlreadyDone),
                    Err(StoreError::FenceLost) => Ok(TurnExit::Abandoned),
                    Err(e) => Err(e.into()),
                };
            }
            other => {
                self.store.release_lock(&fence).await.ok();
                return match other {
                    Err(e) => Err(e.into()),
                    Ok(_) => Ok(TurnExit::AlreadyDone),
                };
            }
        };
        if run.status == RunStatus::Queued && run.pickups == 0 {
            // Queue age: from accept to the first pickup under the lock.
            let age = self.clock.now_ms().saturating_sub(run.accepted_at);
            metrics::gauge(metrics::QUEUE_AGE_MS, &[], age as f64);
        } else if run.status == RunStatus::Running && run.failed_pickups() > 0 {
            // An earlier pickup left it running without handing it back: its lock was taken over.
            metrics::incr(metrics::LOCK_TAKEOVERS, &[]);
        }
        // An interrupt accepted behind this run goes first, in this delivery; this run's
        // message comes back after it.
        let (mut run, in_place_of) = match session.interrupt_ahead_of(run.session_seq) {
            Some(mark) if mark.run_id != run.run_id && session.is_turn_of(run.session_seq) => {
                match self.store.get_run(&run.tenant, &mark.run_id).await? {
                    Some(interrupt)
                        if !interrupt.status.is_terminal() && interrupt.session_key == key =>
                    {
                        tracing::info!(run = %interrupt.run_id, held = %run.run_id, "an interrupt goes ahead of the runs queued before it");
                        (interrupt, Some(run.run_id))
                    }
                    _ => (run, None),
                }
            }
            _ => (run, None),
        };
        run.out_of_turn = !session.is_turn_of(run.session_seq);
        if !session.may_start(&run.run_id, run.session_seq) {
            // The queue delivered this message ahead of an earlier, unfinished run of the
            // session (a redelivery, a misbehaving queue): run nothing, hand it back.
            self.store.release_lock(&fence).await.ok();
            // Unless the earlier run is paused: then this turn is parked (its message done
            // with) and the paused run sends it again when it ends; nothing polls meanwhile.
            // One read of the run whose turn it is serves both checks below.
            let head = self.head_run(&session, &run.run_id).await?;
            if let Some(exit) = head
                .as_ref()
                .and_then(|h| super::pause::behind_a_pause(h, &run.run_id))
            {
                return Ok(exit);
            }
            tracing::info!(
                run = %run.run_id,
                seq = run.session_seq,
                finished = session.runs_finished,
                "an earlier run of the session is not finished; handing the turn back"
            );
            // No one holds the lane: the earlier run's message is due (its runner died, or it
            // is still in the queue). Hand this one back at once so the queue can deliver the
            // earlier one (an in-flight message holds its whole FIFO group back), after a
            // short pause so a queue that misbehaves does not spin on it.
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(jittered(self.config.out_of_order_pause / 4)) => {}
            }
            // Unless the earlier run was never picked up long after its accept: then its
            // message was probably never sent, and nothing would ever deliver it.
            if let Some(unsent) = head.and_then(|h| self.unsent_head(h)) {
                return Ok(TurnExit::BehindUnsent(unsent));
            }
            return Ok(TurnExit::HandBack);
        }
        if run.into_run_id.is_some() && run.status == RunStatus::Queued {
            // Steered into an earlier run, which has ended (every earlier run has): this run
            // ends as that one did.
            return match self.end_carried(run, fence).await {
                Ok(exit) => Ok(exit),
                Err(StoreError::FenceLost) => Ok(TurnExit::Abandoned),
                Err(e) => Err(e.into()),
            };
        }
        if session.holds_for_reset(&run, self.clock.now_ms()) {
            // A reset accepted after this run waits for the lock: let it have it. If it goes
            // through, this run comes back as a reset run; if it gives up, it runs as usual.
            self.store.release_lock(&fence).await.ok();
            tracing::info!(run = %run.run_id, "a reset of the session is waiting; the turn comes back later");
            return Ok(TurnExit::OutOfOrder);
        }
        let reset = session.was_reset_under(&run);

        let stop = StopSignal::default();
        let helpers = CancellationToken::new();
        let _stop_helpers_on_drop = helpers.clone().drop_guard();
        let lost = CancellationToken::new();
        lock::spawn_heartbeat(
            self.store.clone(),
            self.clock.clone(),
            fence.clone(),
            self.config.lock_lease,
            lost.clone(),
            helpers.clone(),
        );
        let watch = Watch {
            store: self.store.clone(),
            tenant: run.tenant.clone(),
            run_id: run.run_id.clone(),
            abort_poll: self.config.abort_poll,
            lost,
            shutdown: shutdown.clone(),
            helpers: helpers.clone(),
        };
        stop::spawn_watcher(watch, stop.clone());

        // The run after a run that paused may have been parked: it is sent again at the end.
        let next = run.required_action.as_ref().and_then(|_| {
            session
                .open_runs
                .get(&(run.session_seq + 1))
                .map(|next| TurnMessage {
                    tenant: run.tenant.clone(),
                    run_id: next.clone(),
                    session_key: Some(run.session_key.clone()),
                })
        });
        let pickup = if reset {
            self.end_reset(run, fence, stop).await
        } else {
            self.pickup(run, fence, stop, &session).await
        };
        match pickup {
            // The interrupt ran in this delivery: the held run's message comes back.
            Ok(_) if in_place_of.is_some() => Ok(TurnExit::HandBack),
            Ok(TurnExit::Finished(status)) if next.is_some() => match next {
                Some(next) => Ok(TurnExit::FinishedThen(status, next)),
                None => Ok(TurnExit::Finished(status)),
            },
            Ok(exit) => Ok(exit),
            Err(StoreError::FenceLost) => Ok(TurnExit::Abandoned),
            Err(e) => Err(e.into()),
        }
    }

    /// Counts `run`, an interrupt that ended ahead of earlier runs, in its session's
    /// `runs_finished` now that its turn has come, and releases the lock.
    async fn count_out_of_turn(&self, run: &Run, fence: &Fence) -> Result<(), StoreError> {
        let commit = agentlane_core::Commit {
            run_id: None,
            transcript: Vec::new(),
            events: Vec::new(),
            run: None,
            session: Some(agentlane_core::SessionUpdate {
                status: agentlane_core::SessionStatus::Idle,
                active_run_id: None,
                last_progress_at: self.clock.now_ms(),
                finished_delta: 1,
            }),
            release_lock: true,
        };
        tracing::info!(run = %run.run_id, seq = run.session_seq, "an interrupt that ran ahead is counted in its turn");
        self.store.commit(fence, commit).await
    }

    /// A run accepted before its session was reset: it ends `aborted` (`session_reset`), and
    /// neither reads nor writes the transcript of the new session.
    async fn end_reset(
        &self,
        run: Run,
        fence: Fence,
        stop: StopSignal,
    ) -> Result<TurnExit, StoreError> {
        tracing::info!(run = %run.run_id, "the session was reset after this run was accepted; aborting it");
        let agent = AgentProfile::deployment(&self.tools);
        let turn = self.open(run, fence, &[], stop, agent).await?;
        turn.finish(LoopEnd::Stopped(StopReason::SessionReset))
            .await
    }

    /// The run whose turn it is in `session`, unless it is `behind` (one run read, only on the
    /// out-of-order path).
    async fn head_run(
        &self,
        session: &agentlane_core::Session,
        behind: &RunId,
    ) -> Result<Option<Run>, StoreError> {
        match session.open_runs.get(&session.runs_finished) {
            Some(head) if head != behind => self.store.get_run(&session.tenant, head).await,
            _ => Ok(None),
        }
    }

    /// The lane message of `head` (the run whose turn it is) when it is still queued and was
    /// never picked up `unsent_after` after its accept.
    fn unsent_head(&self, head: Run) -> Option<TurnMessage> {
        let after = u64::try_from(self.config.unsent_after.as_millis()).unwrap_or(u64::MAX);
        head.unsent_at(self.clock.now_ms(), after)
            .then(|| TurnMessage {
                tenant: head.tenant.clone(),
                run_id: head.run_id.clone(),
                session_key: Some(head.session_key.clone()),
            })
    }

    /// A run another run carried (`steered`): it ends with the carrier's status, payloads and
    /// error, counted as finished in its session's order, without a model call.
    async fn end_carried(&self, run: Run, fence: Fence) -> Result<TurnExit, StoreError> {
        let Some(carrier_id) = run.into_run_id.clone() else {
            return Ok(TurnExit::AlreadyDone);
        };
        let carrier = self.store.get_run(&run.tenant, &carrier_id).await?;
        let Some(carrier) = carrier.filter(|c| c.status.is_terminal()) else {
            // Cannot happen while the order rule holds (the carrier is numbered earlier).
            self.store.release_lock(&fence).await.ok();
            return Ok(TurnExit::OutOfOrder);
        };
        let agent = AgentProfile::deployment(&self.tools);
        let turn = self
            .open(run, fence, &[], StopSignal::default(), agent)
            .await?;
        turn.finish_carried(&carrier).await
    }

    /// Whether the run of `message` is numbered after a run of its session that is not
    /// finished (two reads, only when the lane's lock was found busy).
    async fn behind_an_earlier_run(&self, message: &TurnMessage) -> Result<bool, StoreError> {
        let Some(run) = self.store.get_run(&message.tenant, &message.run_id).await? else {
            return Ok(false);
        };
        let session = self
            .store
            .get_session(&message.tenant, &run.session_key)
            .await?;
        Ok(session.is_some_and(|s| !s.is_turn_of(run.session_seq)))
    }

    /// Everything done under the lock: the session's transcript from the runner's cache when
    /// it is current (else read), the turn, and the transcript put back with what it wrote.
    async fn pickup(
        &self,
        run: Run,
        fence: Fence,
        stop: StopSignal,
        session: &agentlane_core::Session,
    ) -> Result<TurnExit, StoreError> {
        if run.status == RunStatus::RequiresAction && !super::pause::may_resume(&run) {
            // Delivered again while it waits (no answer yet, no abort): nothing to do.
            self.store.release_lock(&fence).await.ok();
            return Ok(TurnExit::Paused);
        }
        let agent = self.turn_profile(&run).await?;
        let mark = SessionMark {
            session_id: session.session_id.clone(),
            generation: session.generation,
            fence: fence.token.0,
        };
        let cacheable = self.transcripts.enabled() && run.session_id == session.session_id;
        let cached = cacheable
            .then(|| self.transcripts.take(&run.tenant, &run.session_key, &mark))
            .flatten();
        let (tenant, key) = (run.tenant.clone(), run.session_key.clone());
        let mut entries = match cached {
            Some(entries) => entries,
            None => self.read_whole_transcript(&run).await?,
        };
        let log = TranscriptLog::new();
        let exit = self
            .pickup_with(
                run,
                fence,
                stop,
                &entries,
                agent,
                cacheable.then(|| log.clone()),
            )
            .await?;
        if let Some(landed) = cacheable.then(|| log.take()).flatten() {
            entries.extend(landed);
            self.transcripts.put(&tenant, &key, mark, entries);
        }
        Ok(exit)
    }

    /// The turn, on the transcript's `entries`; the writer records what it commits in `log`.
    async fn pickup_with(
        &self,
        run: Run,
        fence: Fence,
        stop: StopSignal,
        entries: &[TranscriptEntry],
        agent: Result<AgentProfile, RunError>,
        log: Option<TranscriptLog>,
    ) -> Result<TurnExit, StoreError> {
        let (agent, unusable) = match agent {
            Ok(agent) => (agent, None),
            Err(error) => (AgentProfile::deployment(&self.tools), Some(error)),
        };
        let mut turn = self.open(run, fence, entries, stop, agent).await?;
        if let Some(log) = log {
            turn.writer.keep_log(log);
        }
        if let Some(error) = unusable {
            return turn.finish(LoopEnd::Failed(error)).await;
        }
        let warnings = turn.agent.warnings.clone();
        turn.writer.note_warnings(&warnings);
        let has_user = turn.has_user_message(entries);
        if turn.writer.run().abort_requested && !has_user {
            // Aborted before it started: the prompt is not retained.
            return turn.finish(LoopEnd::Stopped(StopReason::Abort)).await;
        }
        if let Some(end) = turn.poisoned().await? {
            return turn.finish(end).await;
        }
        if !has_user {
            match turn.gate().await {
                Gate::Open => {}
                Gate::End(end) => return turn.finish(end).await,
                Gate::Claimed(claim) => return turn.claimed(claim).await,
            }
        }
        if entries.is_empty() && !self.hooks.is_empty() {
            // The first run of this session id.
            self.hooks
                .session_start(&turn.hook_ctx, SessionStartEvent { resumed_from: None })
                .await;
        }
        turn.start(has_user).await?;
        // A pickup after one that died settles that one's spend holds from the ledger.
        turn.settle_own_holds().await;
        if turn.collects() {
            turn.collect(has_user).await?;
        }
        if let Some(end) = turn.after_resume().await? {
            return turn.finish(end).await;
        }
        let end = turn.run_before_deadline().await?;
        turn.finish(end).await
    }

    /// The writer and the history of the pickup, numbered from where the transcript and the
    /// run's events stand.
    async fn open(
        &self,
        run: Run,
        fence: Fence,
        entries: &[TranscriptEntry],
        stop: StopSignal,
        agent: AgentProfile,
    ) -> Result<Turn<'_>, StoreError> {
        // A run that never started has no events yet: skip the read.
        let next_event_seq = if run.status == RunStatus::Queued && run.pickups == 0 {
            0
        } else {
            self.store.next_event_seq(&run.tenant, &run.run_id).await?
        };
        let positions = Positions {
            next_seq: entries.last().map_or(0, |e| e.seq + 1),
            next_event_seq,
        };
        let flush = DeltaFlush {
            bytes: self.config.delta_flush_bytes,
            every: self.config.delta_flush,
        };
        let run_id = run.run_id.clone();
        let hook_ctx = HookContext::for_run(&run);
        let writer = RunWriter::new(
            self.store.clone(),
            self.clock.clone(),
            fence,
            run,
            positions,
            flush,
        );
        let assembled = assemble(entries);
        let history: Vec<Message> = assembled.iter().map(|e| e.message.clone()).collect();
        let is_ours = |e: &TranscriptEntry| {
            e.run_id == run_id && !matches!(e.message, Message::Compaction { .. })
        };
        let first_ours = assembled.iter().position(|e| is_ours(e));
        let scope = RunScope {
            run_start: first_ours.unwrap_or(history.len()),
            // The entries before the run's first shown entry: its user message (written first),
            // or, after a summary inside the run, the first round the summary left.
            through_seq: first_ours
                .map_or(positions.next_seq, |i| assembled[i].seq)
                .checked_sub(1),
        };
        let retry = writer.retry_state();
        Ok(Turn {
            runner: self,
            writer,
            history,
            scope,
            retry,
            stop,
            hook_ctx,
            additions: PromptAdditions::default(),
            last_tool_error: None,
            agent: std::sync::Arc::new(agent),
            approved: Vec::new(),
        })
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
}

impl Turn<'_> {
    /// Whether the run's prompt is already in the transcript (an earlier pickup started it).
    fn has_user_message(&self, entries: &[TranscriptEntry]) -> bool {
        let run_id = &self.writer.run().run_id;
        entries
            .iter()
            .any(|e| &e.run_id == run_id && matches!(e.message, Message::User { .. }))
    }

    /// The hooks that run before a new run starts: one may answer instead of the model, one
    /// may block the run, one may choose its model.
    async fn gate(&mut self) -> Gate {
        let hooks = &self.runner.hooks;
        let request = &self.writer.run().request;
        if !hooks.is_empty() {
            let prompt = request.message.clone();
            let reply = AgentReplyEvent {
                trigger: ReplyTrigger::User,
                prompt: prompt.clone(),
            };
            if let Some(claim) = hooks.before_agent_reply(&self.hook_ctx, reply).await {
                return Gate::Claimed(claim);
            }
            let event = AgentRunEvent {
                prompt,
                model: request.model.clone(),
            };
            if let RunGate::Block { reason, message } =
                hooks.before_agent_run(&self.hook_ctx, event).await
            {
                // Blocked before it started: the prompt is not retained.
                let text = message.unwrap_or(reason);
                return Gate::End(LoopEnd::Failed(RunError::new("hook_block", text)));
            }
        }
        if hooks.has(HookPoint::BeforeModelResolve) {
            let event = ModelResolveEvent {
                prompt: request.message.clone(),
                requested_model: request.model.clone(),
            };
            if let Some(model) = hooks.before_model_resolve(&self.hook_ctx, event).await {
                self.writer.choose_requested_model(model);
            }
        }
        Gate::Open
    }

    /// Starts (or resumes) the run: `running`, the prompt (after the request's seeded history
    /// when the session has no transcript yet; on a resume, an "aborted" result for every
    /// dangling tool call instead) and the lifecycle start, in one commit.
    async fn start(&mut self, resumed: bool) -> Result<(), StoreError> {
        let model = self.model_chain().swap_remove(0);
        self.writer.begin_pickup(model);
        let start = if resumed {
            // A previous pickup died mid-run, or the run paused: give every dangling tool call
            // a result (a paused call its answer's; an approved one runs after this commit).
            self.resume_results(missing_results(&self.history))
        } else {
            let request = &self.writer.run().request;
            let mut start = if self.history.is_empty() {
                request.history.clone()
            } else {
                Vec::new()
            };
            start.push(Message::user(request.message.clone()));
            start
        };
        self.history.extend(start.iter().cloned());
        let run = self.writer.run();
        let event = json!({
            "phase": "start",
            "startedAt": run.started_at,
            "model": run.model,
            "resumed": resumed,
            "pickup": run.pickups,
        });
        self.writer.event(EventStream::Lifecycle, event);
        self.writer.commit(CommitKind::Progress(start)).await?;
        if !resumed && !self.runner.hooks.is_empty() {
            let text = self.writer.run().request.message.clone();
            self.runner
                .hooks
                .message_received(&self.hook_ctx, MessageEvent { text })
                .await;
        }
        Ok(())
    }

    /// The loop, stopped with [`StopReason::Timeout`] at the run's deadline.
    async fn run_before_deadline(&mut self) -> Result<LoopEnd, StoreError> {
        let deadline = self.runner.deadline(self.writer.run());
        let now = self.writer.now();
        match deadline {
            Some(d) if d <= now => Ok(LoopEnd::Stopped(StopReason::Timeout)),
            _ => {
                let timer = deadline.map(|d| {
                    let wait = Duration::from_millis(d.saturating_sub(now));
                    stop::spawn_deadline(wait, self.stop.clone())
                });
                let end = self.run_loop().await;
                if let Some(t) = timer {
                    t.abort();
                }
                end
            }
        }
    }
}
