//! Per-session order kept by the store, not by the queue: a queue that delivers a session's
//! messages out of order and twice still gets every turn run once, in acceptance order; a run
//! accepted before a reset never touches the new session.

use crate::support::*;
use agentlane_agent::hooks::{
    Hook, HookContext, HookError, HookEvent, HookOutcome, HookPoint, HookRegistry,
    SessionEndReason, session_end_on_reset,
};
use agentlane_agent::{LaneWorker, RunnerConfig, TurnExit};
use agentlane_core::{
    Clock, Delivery, Lane, LaneMessage, LaneQueue, Message, QueueError, QueueResult, Receipt,
    RunStatus, SessionId, TurnMessage,
};
use async_trait::async_trait;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A lane queue that misbehaves the way queues do under failure: it hands out a lane's
/// messages newest first, round robin backwards (a later turn before an earlier one, even
/// while the earlier one is in flight), and delivers every message once more after it was
/// acked.
#[derive(Default)]
struct MisbehavingQueue {
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    messages: Vec<Queued>,
    next_receipt: u64,
    /// Where the backwards round robin goes on from.
    cursor: usize,
    hand_backs: u32,
    deliveries: Vec<String>,
}

struct Queued {
    message: LaneMessage,
    /// The receipt of the current delivery, if one was made.
    receipt: Option<Receipt>,
    /// While in flight, when it becomes visible again.
    visible_at: Option<Instant>,
    receive_count: u32,
    acks: u32,
}

impl MisbehavingQueue {
    fn hand_backs(&self) -> u32 {
        self.state.lock().unwrap().hand_backs
    }

    /// Whether every message was delivered twice and acked twice.
    fn drained(&self) -> bool {
        self.state
            .lock()
            .unwrap()
            .messages
            .iter()
            .all(|q| q.acks >= 2)
    }

    /// Run ids in the order they were delivered.
    fn deliveries(&self) -> Vec<String> {
        self.state.lock().unwrap().deliveries.clone()
    }
}

#[async_trait]
impl LaneQueue for MisbehavingQueue {
    async fn enqueue(&self, message: &LaneMessage) -> QueueResult<()> {
        let mut state = self.state.lock().unwrap();
        state.messages.push(Queued {
            message: message.clone(),
            receipt: None,
            visible_at: None,
            receive_count: 0,
            acks: 0,
        });
        state.cursor = state.messages.len() - 1;
        Ok(())
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        _wait: Duration,
    ) -> QueueResult<Vec<Delivery>> {
        let mut state = self.state.lock().unwrap();
        let mut out = Vec::new();
        let mut next_receipt = state.next_receipt;
        let len = state.messages.len();
        // Newest first, then backwards round robin; a message is delivered until acked, then
        // once more (a duplicate).
        for step in 0..len {
            if out.len() == max {
                break;
            }
            let index = (state.cursor + len - step) % len;
            let queued = &mut state.messages[index];
            let in_flight = queued.visible_at.is_some_and(|at| at > Instant::now());
            if in_flight || queued.acks >= 2 {
                continue;
            }
            state.cursor = (index + len - 1) % len;
            let queued = &mut state.messages[index];
            next_receipt += 1;
            let receipt = Receipt(format!("r{next_receipt}"));
            queued.receipt = Some(receipt.clone());
            queued.visible_at = Some(Instant::now() + visibility);
            queued.receive_count += 1;
            out.push(Delivery {
                message: queued.message.clone(),
                receipt,
                receive_count: queued.receive_count,
                lock: None,
            });
        }
        state.next_receipt = next_receipt;
        let delivered: Vec<String> = out
            .iter()
            .map(|d| d.message.body.run_id.to_string())
            .collect();
        state.deliveries.extend(delivered);
        Ok(out)
    }

    async fn ack(&self, receipt: &Receipt) -> QueueResult<()> {
        let mut state = self.state.lock().unwrap();
        let queued = state
            .messages
            .iter_mut()
            .find(|q| q.receipt.as_ref() == Some(receipt))
            .ok_or(QueueError::StaleReceipt)?;
        queued.receipt = None;
        queued.visible_at = None;
        queued.acks += 1;
        Ok(())
    }

    async fn set_visibility(&self, receipt: &Receipt, visibility: Duration) -> QueueResult<()> {
        let mut state = self.state.lock().unwrap();
        let queued = state
            .messages
            .iter_mut()
            .find(|q| q.receipt.as_ref() == Some(receipt))
            .ok_or(QueueError::StaleReceipt)?;
        queued.visible_at = Some(Instant::now() + visibility);
        if visibility < Duration::from_secs(1) {
            state.hand_backs += 1;
        }
        Ok(())
    }
}

fn lane_message(f: &Fixture, msg: &TurnMessage) -> LaneMessage {
    LaneMessage {
        lane: Lane::for_session(&f.tenant, &f.key),
        dedup_id: msg.run_id.to_string(),
        body: msg.clone(),
    }
}

#[tokio::test]
async fn a_queue_delivering_out_of_order_and_twice_still_runs_each_turn_once_in_order() {
    // GIVEN three turns accepted in order, on a queue that hands out the newest first and
    // every message twice
    let f = fixture(
        vec![
            Script::Text("answer one"),
            Script::Text("answer two"),
            Script::Text("answer three"),
        ],
        quick(),
    );
    let queue = std::sync::Arc::new(MisbehavingQueue::default());
    let mut runs = Vec::new();
    for text in ["one", "two", "three"] {
        let msg = f.accept(text).await;
        queue.enqueue(&lane_message(&f, &msg)).await.unwrap();
        runs.push(msg.run_id);
    }
    let worker = LaneWorker::new(queue.clone(), f.runner.clone());

    // WHEN a worker drains it
    let shutdown = CancellationToken::new();
    for _ in 0..2000 {
        let deliveries = queue
            .receive(1, Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap();
        let Some(delivery) = deliveries.into_iter().next() else {
            if queue.drained() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        };
        let outcome = worker.process(&delivery, &shutdown).await;
        worker.settle(&delivery, &outcome).await;
    }

    // THEN the queue did misbehave: the last turn came first, and some were handed back
    assert_eq!(queue.deliveries().first(), Some(&runs[2].to_string()));
    assert!(queue.hand_backs() > 0);
    // AND every turn ran once, in acceptance order, each answer after its own prompt
    assert_eq!(f.model.requests().len(), 3);
    let texts: Vec<(String, String)> = f
        .transcript()
        .await
        .into_iter()
        .map(|e| match e.message {
            Message::User { content, .. } => ("user".to_owned(), content),
            Message::Assistant { content, .. } => ("assistant".to_owned(), content),
            other => panic!("unexpected entry {other:?}"),
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("user", "one"),
        ("assistant", "answer one"),
        ("user", "two"),
        ("assistant", "answer two"),
        ("user", "three"),
        ("assistant", "answer three"),
    ]
    .into_iter()
    .map(|(r, t)| (r.to_owned(), t.to_owned()))
    .collect();
    assert_eq!(texts, expected);
    for run_id in &runs {
        let run = f.run(run_id).await;
        assert_eq!(run.status, RunStatus::Ok);
        assert_eq!(run.pickups, 1, "a turn sent back for order is not a pickup");
    }
}

#[tokio::test]
async fn a_turn_delivered_before_an_unfinished_earlier_one_writes_nothing() {
    let f = fixture(
        vec![Script::Text("first answer"), Script::Text("second answer")],
        quick(),
    );
    let first = f.accept("first").await;
    let second = f.accept("second").await;

    // WHEN the second turn's message comes first (the lane is free)
    assert_eq!(f.execute(&second).await, TurnExit::HandBack);

    // THEN nothing ran or was written, and the lock is free again
    assert!(f.model.requests().is_empty());
    assert!(f.transcript().await.is_empty());
    let run = f.run(&second.run_id).await;
    assert_eq!((run.status, run.pickups), (RunStatus::Queued, 0));
    let session = f.session().await;
    assert_eq!(session.lock_owner, None);

    // AND once the first ran, the second goes
    assert_eq!(f.execute(&first).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(f.execute(&second).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        f.roles().await,
        vec!["user", "assistant", "user", "assistant"]
    );
}

#[tokio::test]
async fn runs_accepted_before_a_reset_end_aborted_and_never_touch_the_new_session() {
    let f = fixture(vec![Script::Text("fresh answer")], quick());
    let old_first = f.accept("old one").await;
    let old_second = f.accept("old two").await;
    let before = f.session().await;
    let new_id = SessionId::generate();
    f.store
        .reset_session(&f.tenant, &f.key, new_id.clone(), before.updated_at + 1)
        .await
        .unwrap();
    let fresh = f.accept("new one").await;

    // The new turn waits for the old ones to end
    assert_eq!(f.execute(&fresh).await, TurnExit::HandBack);
    for old in [&old_first, &old_second] {
        assert_eq!(f.execute(old).await, TurnExit::Finished(RunStatus::Aborted));
        let run = f.run(&old.run_id).await;
        assert_eq!(run.error.unwrap().code, "session_reset");
        assert_eq!(run.session_id, before.session_id);
    }
    assert!(
        f.model.requests().is_empty(),
        "an aborted old run called the model"
    );
    assert!(
        f.transcript().await.is_empty(),
        "an old run wrote into the new session"
    );
    let old_transcript = f
        .store
        .read_transcript(&f.tenant, &before.session_id, None, 100)
        .await
        .unwrap();
    assert!(old_transcript.is_empty());

    // THEN the new turn runs on the new session from seq 0, seeing none of the old prompts
    assert_eq!(f.execute(&fresh).await, TurnExit::Finished(RunStatus::Ok));
    let entries = f.transcript().await;
    assert_eq!(
        entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![0, 1]
    );
    let request = &f.model.requests()[0];
    let prompt = format!("{:?}", request.messages);
    assert!(!prompt.contains("old one") && !prompt.contains("old two"));
    let session = f.session().await;
    assert_eq!((session.session_id, session.runs_finished), (new_id, 3));
}

/// A `session_end` hook that records the session id and reason of each call.
struct EndSeen {
    seen: Mutex<Vec<(SessionId, SessionEndReason)>>,
}

#[async_trait]
impl Hook for EndSeen {
    fn name(&self) -> &str {
        "end-seen"
    }
    fn priority(&self) -> i32 {
        0
    }
    fn points(&self) -> &[HookPoint] {
        &[HookPoint::SessionEnd]
    }
    fn timeout(&self) -> Option<Duration> {
        None
    }
    async fn call(&self, ctx: &HookContext, event: &HookEvent) -> Result<HookOutcome, HookError> {
        if let HookEvent::SessionEnd(end) = event {
            self.seen
                .lock()
                .unwrap()
                .push((ctx.session_id.clone(), end.reason));
        }
        Ok(HookOutcome::Continue)
    }
}

#[tokio::test]
async fn a_reset_raises_session_end_for_the_session_that_ended() {
    let f = fixture(vec![], quick());
    let hook = std::sync::Arc::new(EndSeen {
        seen: Mutex::new(Vec::new()),
    });
    let mut hooks = HookRegistry::new();
    hooks.register(hook.clone());
    let store = session_end_on_reset(f.store.clone(), hooks);
    f.accept("hi").await;
    let before = store.get_session(&f.tenant, &f.key).await.unwrap().unwrap();

    let after = store
        .reset_session(
            &f.tenant,
            &f.key,
            SessionId::generate(),
            before.updated_at + 1,
        )
        .await
        .unwrap();

    assert_ne!(after.session_id, before.session_id);
    assert_eq!(
        *hook.seen.lock().unwrap(),
        vec![(before.session_id, SessionEndReason::Reset)]
    );
    // A refused reset (unknown key) raises nothing.
    let unknown = agentlane_core::SessionKey::new("never-used");
    assert!(
        store
            .reset_session(&f.tenant, &unknown, SessionId::generate(), 1)
            .await
            .is_err()
    );
    assert_eq!(hook.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_turn_behind_the_run_holding_the_lane_comes_back_later_without_waiting_for_the_lock() {
    let f = fixture(vec![Script::Text("first answer")], quick());
    let _first = f.accept("first").await;
    let second = f.accept("second").await;
    // the first run's runner holds the lane
    let now = agentlane_core::SystemClock.now_ms();
    let taken = f
        .store
        .acquire_lock(&f.tenant, &f.key, "first-runner", 30_000, now)
        .await
        .unwrap();
    assert!(matches!(taken, agentlane_core::LockAttempt::Acquired(..)));

    // WHEN the second turn's message comes meanwhile
    let started = Instant::now();
    let exit = f.execute(&second).await;

    // THEN it goes back at once (the acquire timeout is 5 s), having run nothing
    assert_eq!(exit, TurnExit::OutOfOrder);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(f.model.requests().is_empty());
    let run = f.run(&second.run_id).await;
    assert_eq!((run.status, run.pickups), (RunStatus::Queued, 0));
}

#[tokio::test]
async fn a_turn_waits_for_a_reset_that_waits_and_runs_when_the_reset_gives_up() {
    let f = fixture(vec![Script::Text("queued answer")], quick());
    let queued = f.accept("queued").await;
    // another writer holds the lane while a reset asks for it; its hold ends in 700 ms
    let now = agentlane_core::SystemClock.now_ms();
    let holder = f
        .store
        .acquire_lock(&f.tenant, &f.key, "other-writer", 30_000, now)
        .await
        .unwrap();
    let agentlane_core::LockAttempt::Acquired(fence, _) = holder else {
        panic!("lock not taken: {holder:?}");
    };
    let refused_at = now + 700 - agentlane_core::RESET_HOLD_MS;
    let busy = f
        .store
        .reset_session(&f.tenant, &f.key, SessionId::generate(), refused_at)
        .await;
    assert_eq!(busy, Err(agentlane_core::StoreError::Busy));
    f.store.release_lock(&fence).await.unwrap();

    // WHEN the queued turn comes while the reset may still come back
    // THEN it is sent back untouched: not run, not aborted
    assert_eq!(f.execute(&queued).await, TurnExit::OutOfOrder);
    assert!(f.model.requests().is_empty());
    let run = f.run(&queued.run_id).await;
    assert_eq!((run.status, run.pickups), (RunStatus::Queued, 0));

    // AND once the reset gave up, the turn runs on the session as if no reset was asked for
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(f.execute(&queued).await, TurnExit::Finished(RunStatus::Ok));
    let run = f.run(&queued.run_id).await;
    assert_eq!(run.payloads[0].text, "queued answer");
    assert_eq!(f.roles().await, vec!["user", "assistant"]);
}

/// A strict FIFO lane, as SQS FIFO keeps a message group: the oldest message is delivered first,
/// nothing else while it is in flight, and a message handed back is the oldest again.
#[derive(Default)]
struct FifoLane {
    state: Mutex<(std::collections::VecDeque<LaneMessage>, bool, u64)>,
}

#[async_trait]
impl LaneQueue for FifoLane {
    async fn enqueue(&self, message: &LaneMessage) -> QueueResult<()> {
        self.state.lock().unwrap().0.push_back(message.clone());
        Ok(())
    }
    async fn receive(&self, _: usize, _: Duration, _: Duration) -> QueueResult<Vec<Delivery>> {
        let mut state = self.state.lock().unwrap();
        if state.1 {
            return Ok(Vec::new());
        }
        let Some(message) = state.0.front().cloned() else {
            return Ok(Vec::new());
        };
        state.1 = true;
        state.2 += 1;
        Ok(vec![Delivery {
            message,
            receipt: Receipt(state.2.to_string()),
            receive_count: 1,
            lock: None,
        }])
    }
    async fn ack(&self, _: &Receipt) -> QueueResult<()> {
        let mut state = self.state.lock().unwrap();
        state.0.pop_front();
        state.1 = false;
        Ok(())
    }
    async fn set_visibility(&self, _: &Receipt, visibility: Duration) -> QueueResult<()> {
        if visibility < Duration::from_secs(10) {
            // handed back (or to come back soon): it heads the lane again
            self.state.lock().unwrap().1 = false;
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_turn_whose_lane_message_was_never_sent_is_sent_again_by_the_next_turn_of_its_session() {
    // GIVEN a run accepted whose lane message was never sent (the process died between the
    // accept and the enqueue), and a later turn of its session accepted and enqueued
    let f = fixture(
        vec![Script::Text("answer one"), Script::Text("answer two")],
        RunnerConfig {
            unsent_after: Duration::ZERO,
            ..quick()
        },
    );
    let queue = std::sync::Arc::new(FifoLane::default());
    let first = f.accept("one").await;
    let second = f.accept("two").await;
    queue.enqueue(&lane_message(&f, &second)).await.unwrap();
    let worker = LaneWorker::new(queue.clone(), f.runner.clone());

    // WHEN a worker drains the lane
    let shutdown = CancellationToken::new();
    for _ in 0..200 {
        let deliveries = queue
            .receive(1, Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap();
        let Some(delivery) = deliveries.into_iter().next() else {
            break;
        };
        let outcome = worker.process(&delivery, &shutdown).await;
        worker.settle(&delivery, &outcome).await;
    }

    // THEN both turns ran once, in acceptance order
    assert_eq!(f.model.requests().len(), 2);
    for run_id in [&first.run_id, &second.run_id] {
        assert_eq!(f.run(run_id).await.status, RunStatus::Ok);
    }
    assert_eq!(
        f.roles().await,
        ["user", "assistant", "user", "assistant"],
        "{:?}",
        f.transcript().await
    );
    let users: Vec<String> = f
        .transcript()
        .await
        .into_iter()
        .filter_map(|e| match e.message {
            Message::User { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["one", "two"]);
}
