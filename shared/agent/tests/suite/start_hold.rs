//! The start of a fresh turn is held back to go with the turn's next write
//! (`RunnerConfig::start_hold`): a quick turn writes its start and its end in one fenced
//! commit; a slow model call gets its start written once the hold has passed; a pickup that
//! dies while its start is held leaves the run as it found it, and the next one runs it once.

use crate::support::*;
use agentlane_agent::{RunnerConfig, TurnExit};
use agentlane_core::{
    Commit, EventStream, Fence, Layered, Message, QueueMode, RunStatus, Store, StoreLayer,
    StoreResult, TurnMessage,
};
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one fenced commit carried: its transcript entries, and the run's status when it
/// carried the run record.
type Seen = Arc<Mutex<Vec<(usize, Option<RunStatus>)>>>;

/// The embedded store, recording every fenced commit.
struct Commits {
    inner: Arc<dyn Store>,
    seen: Seen,
}

#[async_trait]
impl StoreLayer for Commits {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        let status = commit.run.as_ref().map(|r| r.status);
        self.seen
            .lock()
            .unwrap()
            .push((commit.transcript.len(), status));
        self.inner.commit(fence, commit).await
    }
}

/// A fixture whose store records its commits.
fn recorded(script: Vec<Script>, config: RunnerConfig) -> (Arc<Fixture>, Seen) {
    let seen = Seen::default();
    let wrap = {
        let seen = seen.clone();
        move |inner| -> Arc<dyn Store> { Arc::new(Layered(Commits { inner, seen })) }
    };
    let f = fixture_on(script, config, |r, m| r.with_provider(m.clone()), wrap);
    (Arc::new(f), seen)
}

/// A turn with `text` accepted and its pickup running, in its first model call: its message
/// and the task running it.
async fn in_a_slow_model_call(
    f: &Arc<Fixture>,
    text: &str,
) -> (TurnMessage, tokio::task::JoinHandle<TurnExit>) {
    let msg = f.accept(text).await;
    let running = {
        let (f, msg) = (f.clone(), msg.clone());
        tokio::spawn(async move { f.execute(&msg).await })
    };
    while f.model.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (msg, running)
}

/// The test settings with `hold`, the default delta coalescing, and time for a silent model.
fn holding(hold: Duration) -> RunnerConfig {
    RunnerConfig {
        start_hold: hold,
        delta_flush: RunnerConfig::default().delta_flush,
        model_idle_timeout: Duration::from_secs(10),
        ..config()
    }
}

#[tokio::test]
async fn a_quick_turn_writes_its_start_and_its_end_in_one_commit() {
    // GIVEN the default hold
    assert_eq!(
        RunnerConfig::default().start_hold,
        Duration::from_millis(200)
    );
    let (f, seen) = recorded(
        vec![Script::Text("hi")],
        holding(Duration::from_millis(200)),
    );

    // WHEN a turn is answered at once
    let msg = f.accept("hello").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));

    // THEN one fenced commit carries the prompt, the answer and the ended run
    assert_eq!(*seen.lock().unwrap(), [(2, Some(RunStatus::Ok))]);
    // AND the run reads as one pickup that started and ended, in that order
    let run = f.run(&msg.run_id).await;
    assert_eq!(run.pickups, 1);
    assert!(
        run.started_at
            .is_some_and(|s| s <= run.ended_at.unwrap_or(0))
    );
    let phases: Vec<String> = f
        .store
        .read_events(&f.tenant, &msg.run_id, None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.stream == EventStream::Lifecycle)
        .filter_map(|e| e.data["phase"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(phases, ["start", "end"]);
    let roles = f.roles().await;
    assert_eq!(roles, ["user", "assistant"]);

    // AND with no hold, the start is a commit of its own
    let (f, seen) = recorded(vec![Script::Text("hi")], holding(Duration::ZERO));
    let msg = f.accept("hello").await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        *seen.lock().unwrap(),
        [(1, Some(RunStatus::Running)), (1, Some(RunStatus::Ok))]
    );
}

#[tokio::test]
async fn a_slow_model_call_shows_the_run_running_once_the_hold_has_passed() {
    // GIVEN a hold of 100 ms and a model that answers after a second of silence
    let (f, seen) = recorded(
        vec![Script::Late(Duration::from_secs(1), "late answer")],
        holding(Duration::from_millis(100)),
    );
    let msg = f.accept("hello").await;
    let started = Instant::now();
    let running = {
        let (f, msg) = (f.clone(), msg.clone());
        tokio::spawn(async move { f.execute(&msg).await })
    };

    // WHEN the hold passes while the model is silent
    let mut run = f.run(&msg.run_id).await;
    while run.status != RunStatus::Running && started.elapsed() < Duration::from_millis(900) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        run = f.run(&msg.run_id).await;
    }

    // THEN the run reads running, picked up once, with its prompt in the transcript, before
    // the answer came
    assert_eq!(run.status, RunStatus::Running, "{:?}", started.elapsed());
    assert_eq!(run.pickups, 1);
    assert_eq!(f.roles().await, ["user"]);
    // AND the turn ends as usual, the start written on its own first (then the streamed
    // text's events, then the end)
    assert_eq!(running.await.unwrap(), TurnExit::Finished(RunStatus::Ok));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.first(),
        Some(&(1, Some(RunStatus::Running))),
        "{seen:?}"
    );
    assert_eq!(seen.last(), Some(&(1, Some(RunStatus::Ok))), "{seen:?}");
}

#[tokio::test]
async fn a_pickup_that_dies_while_its_start_is_held_leaves_the_run_as_it_found_it() {
    // GIVEN a long hold, and a model call that takes seconds
    let (f, seen) = recorded(
        vec![
            Script::Late(Duration::from_secs(5), "never seen"),
            Script::Text("answered"),
        ],
        holding(Duration::from_secs(10)),
    );
    let (msg, dying) = in_a_slow_model_call(&f, "hello").await;

    // WHEN its runner dies during the model call (its lock left to expire)
    dying.abort();
    assert!(dying.await.unwrap_err().is_cancelled());

    // THEN nothing of the pickup was written: the run is queued, never picked up
    assert!(seen.lock().unwrap().is_empty());
    let run = f.run(&msg.run_id).await;
    assert_eq!((run.status, run.pickups), (RunStatus::Queued, 0));
    assert!(f.transcript().await.is_empty());

    // AND the next delivery, once the lock expired, runs it once: its prompt and answer once
    tokio::time::sleep(config().lock_lease + Duration::from_millis(200)).await;
    assert_eq!(f.execute(&msg).await, TurnExit::Finished(RunStatus::Ok));
    let run = f.run(&msg.run_id).await;
    assert_eq!(run.pickups, 1);
    assert_eq!(run.payloads[0].text, "answered");
    let messages: Vec<Message> = f
        .transcript()
        .await
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0], Message::user("hello"));
}

#[tokio::test]
async fn an_interrupt_accepted_while_the_start_is_held_stops_the_turn_once_the_start_is_written() {
    let script = || {
        vec![
            Script::Late(Duration::from_secs(5), "never seen"),
            Script::Text("interrupt answered"),
        ]
    };
    // On the embedded store, which looks at the interrupt mark in the write of the start
    let f = fixture(script(), holding(Duration::from_millis(300)));
    interrupted_while_held(Arc::new(f)).await;
    // AND on a store that does not (a layer): the runner reads the session after that write
    let (f, _) = recorded(script(), holding(Duration::from_millis(300)));
    interrupted_while_held(f).await;
}

/// The interrupt scenario on `f` (its model silent for seconds, then answering the interrupt).
async fn interrupted_while_held(f: Arc<Fixture>) {
    // GIVEN a turn whose model is silent for seconds, its start held (nothing written yet)
    let (busy, running) = in_a_slow_model_call(&f, "long job").await;
    assert_eq!(f.run(&busy.run_id).await.status, RunStatus::Queued);

    // WHEN an interrupt is accepted then: the session names no active run for the API to ask
    let interrupt = f.accept_as("stop, do this", QueueMode::Interrupt).await;
    assert_eq!(f.session().await.active_run_id, None);

    // THEN once the hold has passed, the turn ends aborted (interrupted), long before the
    // model's answer, its prompt kept
    let waited = Instant::now();
    assert_eq!(
        running.await.unwrap(),
        TurnExit::Finished(RunStatus::Aborted)
    );
    assert!(
        waited.elapsed() < Duration::from_secs(3),
        "{:?}",
        waited.elapsed()
    );
    let aborted = f.run(&busy.run_id).await;
    assert_eq!(aborted.error.unwrap().code, "interrupted");
    // AND the interrupt runs next
    assert_eq!(
        f.execute(&interrupt).await,
        TurnExit::Finished(RunStatus::Ok)
    );
    assert_eq!(
        crate::interrupt::user_texts(&f).await,
        ["long job", "stop, do this"]
    );
}

#[tokio::test]
async fn an_interrupt_accepted_before_the_pickup_lets_the_queued_turn_run_first() {
    // GIVEN a queued turn and an interrupt accepted behind it before any pickup
    let (f, _) = recorded(
        vec![
            Script::Text("first answered"),
            Script::Text("interrupt answered"),
        ],
        holding(Duration::from_millis(300)),
    );
    let first = f.accept("first").await;
    let interrupt = f.accept_as("stop, do this", QueueMode::Interrupt).await;

    // WHEN the first is picked up, its start held
    // THEN it runs to its end (the interrupt found it queued, as without a hold), then the
    // interrupt
    assert_eq!(f.execute(&first).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        f.execute(&interrupt).await,
        TurnExit::Finished(RunStatus::Ok)
    );
    assert_eq!(
        f.run(&first.run_id).await.payloads[0].text,
        "first answered"
    );
}
