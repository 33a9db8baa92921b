//! Following one run's events as they are committed: read the store whenever the run changes
//! (a commit in this process wakes the follower at once; otherwise a short-backoff poll, see
//! [`RunWatch`]), yield each event once, in `seq` order, then the run once it is terminal and
//! every one of its events was yielded. The SSE event stream (`GET /v1/runs/{id}/events`) and
//! the OpenAI-compatible streams are both built on it.

use crate::Shared;
use crate::wait::RunWatch;
use agentlane_core::{Event, Run, RunId, StoreError, TenantId};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::time::Instant;

/// Events read per store call (and at most one answer's bytes, `max_page_bytes`).
const PAGE: usize = 500;

/// What following a run yields next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Followed {
    /// The next event of the run.
    Event(Event),
    /// The run ended and every event was yielded: the terminal run (last).
    Ended(Box<Run>),
    /// The run paused (`requires_action`) and every event up to the pause was yielded (last;
    /// only for a follower told to stop at pauses, see [`RunFollower::stop_at_pause`]).
    Paused(Box<Run>),
    /// The follower's deadline came first (last); `last_seq` is the last event yielded.
    Deadline { last_seq: Option<u64> },
    /// The store could not be read (last); a code and a message fit for a client.
    Failed {
        code: &'static str,
        message: &'static str,
    },
}

/// A cursor over one run's events.
pub(crate) struct RunFollower {
    state: Arc<Shared>,
    tenant: TenantId,
    run_id: RunId,
    after: Option<u64>,
    /// Past this the follower ends with [`Followed::Deadline`].
    deadline: Option<Instant>,
    pending: VecDeque<Event>,
    /// Stop at a pause whose id is above this one.
    stop_past_pause: Option<u32>,
    finished: bool,
    /// The last read found nothing new: wait for a change before the next one.
    idle: bool,
    watch: RunWatch,
}

/// What one look at the store found.
enum Poll {
    Events(Vec<Event>),
    Ended(Box<Run>),
    Paused(Box<Run>),
    Nothing,
    Failed(&'static str, &'static str),
}

impl RunFollower {
    /// Follows `run_id` from the event after `after`, until the run ends or `deadline`.
    /// `watch` must have subscribed before the caller's first read of the run.
    pub(crate) fn new(
        state: Arc<Shared>,
        tenant: TenantId,
        run_id: RunId,
        after: Option<u64>,
        deadline: Option<Instant>,
        watch: RunWatch,
    ) -> Self {
        Self {
            state,
            tenant,
            run_id,
            after,
            deadline,
            pending: VecDeque::new(),
            stop_past_pause: None,
            finished: false,
            idle: false,
            watch,
        }
    }

    /// Ends the follow at the run's first pause whose id is above `past` (0: any pause), as
    /// [`Followed::Paused`]: a client that answers pauses itself stops there.
    pub(crate) fn stop_at_pause(mut self, past: u32) -> Self {
        self.stop_past_pause = Some(past);
        self
    }

    /// The run followed.
    pub(crate) fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The next event, or the end (once); `None` after the end.
    pub(crate) async fn next(&mut self) -> Option<Followed> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.after = Some(event.seq);
                return Some(Followed::Event(event));
            }
            if self.finished {
                return None;
            }
            if self
                .deadline
                .is_some_and(|deadline| Instant::now() >= deadline)
            {
                self.finished = true;
                return Some(Followed::Deadline {
                    last_seq: self.after,
                });
            }
            if self.idle {
                self.watch.next_change(self.deadline).await;
            }
            match self.poll().await {
                Poll::Events(events) => {
                    self.pending.extend(events);
                    self.idle = false;
                    self.watch.saw_change();
                }
                Poll::Nothing => self.idle = true,
                Poll::Ended(run) => {
                    self.finished = true;
                    return Some(Followed::Ended(run));
                }
                Poll::Paused(run) => {
                    self.finished = true;
                    return Some(Followed::Paused(run));
                }
                Poll::Failed(code, message) => {
                    self.finished = true;
                    return Some(Followed::Failed { code, message });
                }
            }
        }
    }

    /// Reads the run BEFORE its events: a run seen terminal has all its events written, so an
    /// empty read after it means the stream is complete.
    async fn poll(&self) -> Poll {
        let store = self.state.history();
        let run = match store.get_run(&self.tenant, &self.run_id).await {
            Ok(Some(run)) => run,
            Ok(None) => return Poll::Failed("not_found", "the run no longer exists"),
            Err(error) => return failed(error),
        };
        match store
            .read_events_page(
                &self.tenant,
                &self.run_id,
                self.after,
                crate::page::budget(PAGE, self.state.config.limits.max_page_bytes),
            )
            .await
        {
            Ok(events) if !events.is_empty() => Poll::Events(events),
            Ok(_) if run.status.is_terminal() => Poll::Ended(Box::new(run)),
            Ok(_) if self.paused_past(&run) => Poll::Paused(Box::new(run)),
            Ok(_) => Poll::Nothing,
            Err(error) => failed(error),
        }
    }
}

impl RunFollower {
    fn paused_past(&self, run: &Run) -> bool {
        match (self.stop_past_pause, &run.required_action) {
            (Some(past), Some(action)) => {
                run.status == agentlane_core::RunStatus::RequiresAction && action.id > past
            }
            _ => false,
        }
    }
}

fn failed(error: StoreError) -> Poll {
    match error {
        StoreError::Throttled(_) => Poll::Nothing,
        other => {
            tracing::error!(error = %other, "event stream read failed");
            Poll::Failed("internal", "internal error; see the server logs")
        }
    }
}
