//! Queue mode `interrupt` (SPEC §4): the active run ends `aborted` (`interrupted`) with every
//! tool call answered, then the interrupting message runs next, ahead of the followups queued
//! behind the interrupted run, which still run afterwards, in order.

use crate::support::*;
use agentlane_agent::{LaneWorker, RunnerConfig, Settlement, TurnExit};
use agentlane_core::{
    AbortReason, ActionAnswer, ClientTool, Clock, Delivery, Lane, LaneMessage, QueueMode,
    QueueOutcome, Receipt, RecordedAnswer, RunStatus, SystemClock, ToolOutputAnswer, TurnMessage,
    TurnRequest,
};
use agentlane_store_sqlite::SqliteBackend;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn an_interrupt_aborts_the_running_turn_and_runs_before_the_queued_followups() {
    // GIVEN a turn busy in a slow tool, and two followups queued behind it
    // WHEN an interrupt arrives (the API asks the active run to abort)
    let Interrupted {
        f,
        busy,
        running,
        followups,
        interrupt,
    } = interrupted_while_busy(
        vec![
            Script::Text("interrupt answered"),
            Script::Text("followup one answered"),
            Script::Text("followup two answered"),
            Script::Text("later answered"),
        ],
        &["followup one", "followup two"],
    )
    .await;
    let [one, two] = [followups[0].clone(), followups[1].clone()];

    // THEN the busy turn ends aborted (interrupted), its tool call answered
    assert_eq!(
        running.await.unwrap(),
        TurnExit::Finished(RunStatus::Aborted)
    );
    let aborted = f.run(&busy.run_id).await;
    assert_eq!(aborted.error.unwrap().code, "interrupted");
    assert_eq!(aborted.queue_outcome, QueueOutcome::Interrupted);
    let results = f.tool_results().await;
    assert_eq!(results.len(), 1, "the slow call has its result");

    // AND the next delivery (the first followup's) runs the interrupt, and hands its own back
    assert_eq!(f.execute(&one).await, TurnExit::HandBack);
    let ran = f.run(&interrupt.run_id).await;
    assert_eq!(ran.status, RunStatus::Ok);
    assert_eq!(ran.payloads[0].text, "interrupt answered");
    assert_eq!(f.run(&one.run_id).await.status, RunStatus::Queued);
    // AND the followups still run afterwards, in order
    assert_eq!(
        f.execute(&two).await,
        TurnExit::HandBack,
        "not its turn yet"
    );
    assert_eq!(f.execute(&one).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(f.execute(&two).await, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        f.run(&one.run_id).await.payloads[0].text,
        "followup one answered"
    );
    assert_eq!(
        f.run(&two.run_id).await.payloads[0].text,
        "followup two answered"
    );
    // AND the interrupt's own message, in its turn, only counts it
    assert_eq!(f.execute(&interrupt).await, TurnExit::AlreadyDone);
    assert_eq!(counts(&f).await, (4, 4));
    let later = f.accept("later").await;
    assert_eq!(f.execute(&later).await, TurnExit::Finished(RunStatus::Ok));
    // AND the transcript is in the order the turns ran
    assert_eq!(
        user_texts(&f).await,
        [
            "long job",
            "stop, do this",
            "followup one",
            "followup two",
            "later"
        ]
    );
}

#[tokio::test]
async fn an_interrupt_on_an_idle_session_is_an_ordinary_turn() {
    let f = fixture(vec![Script::Text("hello")], quick());
    let interrupt = f.accept_as("hi", QueueMode::Interrupt).await;
    assert_eq!(
        f.execute(&interrupt).await,
        TurnExit::Finished(RunStatus::Ok)
    );
    let session = f.session().await;
    assert_eq!(session.runs_finished, 1);
    assert_eq!(session.interrupt, None);
}

/// A delivery of `msg` as a lane worker receives it.
fn delivery(msg: &TurnMessage, n: u32) -> Delivery {
    Delivery {
        message: LaneMessage {
            lane: Lane::new("acme/s1"),
            dedup_id: format!("{}-{n}", msg.run_id),
            body: msg.clone(),
        },
        receipt: Receipt(format!("r{n}")),
        receive_count: n,
        lock: None,
    }
}

#[tokio::test]
async fn a_paused_interrupt_does_not_spin_the_run_it_went_ahead_of() {
    // GIVEN a turn busy in a slow tool, a followup queued behind it, and an interrupt whose
    // model calls a client tool (it pauses for the client's answer)
    let pause = Duration::from_secs(2);
    let f = Arc::new(fixture(
        vec![
            Script::Tools(vec![("c1", "slow", "{}")]),
            Script::Tools(vec![("c2", "ask_user", "{}")]),
            Script::Text("interrupt answered"),
            Script::Text("followup answered"),
        ],
        RunnerConfig {
            out_of_order_pause: pause,
            ..quick()
        },
    ));
    let busy = f.accept("long job").await;
    let running = {
        let (f, busy) = (f.clone(), busy.clone());
        tokio::spawn(async move { f.execute(&busy).await })
    };
    for _ in 0..200 {
        if f.tool_results().await.is_empty() && f.roles().await.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let followup = f.accept("followup").await;
    let interrupt = f
        .accept_request(TurnRequest {
            message: "ask me first".into(),
            queue_mode: Some(QueueMode::Interrupt),
            tools: vec![ClientTool {
                name: "ask_user".into(),
                description: None,
                parameters: None,
            }],
            ..TurnRequest::default()
        })
        .await;
    f.store
        .request_abort_for(&f.tenant, &busy.run_id, AbortReason::Interrupted)
        .await
        .unwrap();
    assert_eq!(
        running.await.unwrap(),
        TurnExit::Finished(RunStatus::Aborted)
    );
    let qdir = tempfile::tempdir().unwrap();
    let worker = LaneWorker::new(
        Arc::new(SqliteBackend::open(qdir.path()).unwrap()),
        f.runner.clone(),
    );
    let shutdown = CancellationToken::new();

    // WHEN the followup's message is delivered: the interrupt goes first, and pauses
    let first = worker.process(&delivery(&followup, 1), &shutdown).await;
    assert_eq!(
        f.run(&interrupt.run_id).await.status,
        RunStatus::RequiresAction
    );
    assert_eq!(
        first,
        Settlement::VisibleAfter(Duration::ZERO),
        "the interrupt ran in its place"
    );
    let calls = f.model.requests().len();

    // THEN every later delivery while the interrupt waits comes back only after a pause (not
    // at once, which would spin the lane until the answer), and runs nothing
    for n in 2..5 {
        let settled = worker.process(&delivery(&followup, n), &shutdown).await;
        let Settlement::VisibleAfter(after) = settled else {
            panic!("the followup is not done with: {settled:?}");
        };
        assert!(
            after >= pause.mul_f64(0.8),
            "delivery {n}: back after {after:?}"
        );
    }
    assert_eq!(
        f.model.requests().len(),
        calls,
        "no model call while it waits"
    );
    assert_eq!(f.run(&followup.run_id).await.status, RunStatus::Queued);

    // AND once the interrupt is answered, the followup's next delivery resumes it in its place,
    // and the one after runs the followup
    f.store
        .answer_action(
            &f.tenant,
            &interrupt.run_id,
            RecordedAnswer {
                action_id: 1,
                answer: ActionAnswer {
                    tool_outputs: vec![ToolOutputAnswer {
                        tool_call_id: "c2".into(),
                        output: "yes".into(),
                        is_error: false,
                    }],
                    approvals: Vec::new(),
                },
                answered_at: SystemClock.now_ms(),
                expired: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        worker.process(&delivery(&followup, 5), &shutdown).await,
        Settlement::VisibleAfter(Duration::ZERO)
    );
    let answered = f.run(&interrupt.run_id).await;
    assert_eq!(answered.status, RunStatus::Ok);
    assert_eq!(answered.payloads[0].text, "interrupt answered");
    assert_eq!(
        worker.process(&delivery(&followup, 6), &shutdown).await,
        Settlement::Ack
    );
    let ran = f.run(&followup.run_id).await;
    assert_eq!(ran.payloads[0].text, "followup answered");
}

/// Waits until the transcript shows a turn busy in its tool: `entries` entries, `results` of
/// them tool results.
async fn busy_in_tool(f: &Fixture, entries: usize, results: usize) {
    for _ in 0..300 {
        if f.roles().await.len() >= entries && f.tool_results().await.len() == results {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the turn never got busy in its tool: {:?}", f.roles().await);
}

/// The user messages of the transcript, in order.
pub(crate) async fn user_texts(f: &Fixture) -> Vec<String> {
    f.transcript()
        .await
        .into_iter()
        .filter_map(|e| match e.message {
            agentlane_core::Message::User { content } => Some(content),
            _ => None,
        })
        .collect()
}

/// Every tool call of the transcript answered once, before the next message (the pairing
/// repair changes nothing).
async fn assert_paired(f: &Fixture) {
    let messages: Vec<agentlane_core::Message> = f
        .transcript()
        .await
        .into_iter()
        .map(|e| e.message)
        .collect();
    let repaired: Vec<agentlane_core::Message> =
        agentlane_agent::context::repair::repair_pairing(&messages);
    assert_eq!(repaired, messages, "every tool call answered in place");
}

/// A turn busy in a slow tool (the first answer of the script, before `script`), the
/// `followups` queued behind it, and an interrupt (`stop, do this`) accepted, the API having
/// asked the busy run to abort.
struct Interrupted {
    f: Arc<Fixture>,
    busy: TurnMessage,
    running: tokio::task::JoinHandle<TurnExit>,
    followups: Vec<TurnMessage>,
    interrupt: TurnMessage,
}

async fn interrupted_while_busy(script: Vec<Script>, followups: &[&str]) -> Interrupted {
    let mut all = vec![Script::Tools(vec![("c1", "slow", "{}")])];
    all.extend(script);
    let f = Arc::new(fixture(all, quick()));
    let busy = f.accept("long job").await;
    let running = {
        let (f, busy) = (f.clone(), busy.clone());
        tokio::spawn(async move { f.execute(&busy).await })
    };
    busy_in_tool(&f, 2, 0).await;
    let mut queued = Vec::new();
    for text in followups {
        queued.push(f.accept(text).await);
    }
    let interrupt = f.accept_as("stop, do this", QueueMode::Interrupt).await;
    f.store
        .request_abort_for(&f.tenant, &busy.run_id, AbortReason::Interrupted)
        .await
        .unwrap();
    Interrupted {
        f,
        busy,
        running,
        followups: queued,
        interrupt,
    }
}

/// [`interrupted_while_busy`] with one followup, the busy turn ended, and the interrupt
/// (whose model calls a slow tool first) gone ahead of the followup in the followup's
/// delivery, busy in its tool: returns the fixture, the followup, the interrupt and the task
/// running it. The model then answers a second interrupt, then the followup.
async fn interrupt_busy_ahead_of_a_followup() -> (
    Arc<Fixture>,
    TurnMessage,
    TurnMessage,
    tokio::task::JoinHandle<TurnExit>,
) {
    let script = vec![
        Script::Tools(vec![("c2", "slow", "{}")]),
        Script::Text("second interrupt answered"),
        Script::Text("followup answered"),
    ];
    let Interrupted {
        f,
        running,
        mut followups,
        interrupt,
        ..
    } = interrupted_while_busy(script, &["followup"]).await;
    assert_eq!(
        running.await.unwrap(),
        TurnExit::Finished(RunStatus::Aborted)
    );
    let followup = followups.remove(0);
    let ahead = {
        let (f, followup) = (f.clone(), followup.clone());
        tokio::spawn(async move { f.execute(&followup).await })
    };
    // long job, c1, its result; stop, do this, c2
    busy_in_tool(&f, 5, 1).await;
    (f, followup, interrupt, ahead)
}

/// A second interrupt (`no, this instead`) accepted, the API having asked the first, the
/// session's active run, to abort.
async fn second_interrupt(f: &Fixture, first: &TurnMessage) -> TurnMessage {
    let second = f.accept_as("no, this instead", QueueMode::Interrupt).await;
    f.store
        .request_abort_for(&f.tenant, &first.run_id, AbortReason::Interrupted)
        .await
        .unwrap();
    second
}

/// The session's (runs accepted, runs finished).
async fn counts(f: &Fixture) -> (u64, u64) {
    let session = f.session().await;
    (session.runs_accepted, session.runs_finished)
}

#[tokio::test]
async fn a_second_interrupt_aborts_the_first_and_still_goes_before_the_followups() {
    // GIVEN an interrupt busy in a slow tool, ahead of a followup
    let (f, followup, first, ahead) = interrupt_busy_ahead_of_a_followup().await;

    // WHEN a second interrupt arrives (the API asks the active run, the first, to abort)
    let second = second_interrupt(&f, &first).await;

    // THEN the first interrupt ends aborted, in the followup's delivery
    assert_eq!(ahead.await.unwrap(), TurnExit::HandBack);
    let aborted = f.run(&first.run_id).await;
    assert_eq!(aborted.status, RunStatus::Aborted);
    assert_eq!(aborted.error.unwrap().code, "interrupted");
    // AND the followup's next delivery runs the second interrupt, still ahead of it
    assert_eq!(f.execute(&followup).await, TurnExit::HandBack);
    let ran = f.run(&second.run_id).await;
    assert_eq!(ran.status, RunStatus::Ok);
    assert_eq!(ran.payloads[0].text, "second interrupt answered");
    assert_eq!(f.run(&followup.run_id).await.status, RunStatus::Queued);
    // AND then the followup runs, and the interrupts' own messages only count them
    assert_eq!(
        f.execute(&followup).await,
        TurnExit::Finished(RunStatus::Ok)
    );
    assert_eq!(f.execute(&first).await, TurnExit::AlreadyDone);
    assert_eq!(f.execute(&second).await, TurnExit::AlreadyDone);
    assert_eq!(counts(&f).await, (4, 4));
    assert_eq!(
        user_texts(&f).await,
        ["long job", "stop, do this", "no, this instead", "followup"]
    );
    assert_paired(&f).await;
}

#[tokio::test]
async fn an_interrupt_that_died_ahead_of_its_turn_ends_before_anything_else_runs() {
    // GIVEN an interrupt busy in a slow tool, ahead of a followup, whose runner dies (its
    // lock is left to expire, its tool call unanswered)
    let (f, followup, first, ahead) = interrupt_busy_ahead_of_a_followup().await;
    ahead.abort();
    assert!(ahead.await.unwrap_err().is_cancelled());

    // WHEN a second interrupt arrives (the API asks the active run, the first, to abort), and
    // the lock expires
    let second = second_interrupt(&f, &first).await;
    tokio::time::sleep(config().lock_lease + Duration::from_millis(200)).await;

    // THEN deliveries of the followup end the first interrupt (its call answered), run the
    // second, then the followup: the transcript stays paired and in the order they ran
    assert_eq!(
        f.execute(&followup).await,
        TurnExit::HandBack,
        "the first interrupt resumed in the followup's place"
    );
    let first = f.run(&first.run_id).await;
    assert_eq!(first.status, RunStatus::Aborted);
    assert_eq!(first.error.unwrap().code, "interrupted");
    let answered = f.tool_results().await;
    assert_eq!(answered.len(), 2, "{answered:?}");
    assert_eq!(answered[1].id, "c2");
    assert!(answered[1].is_error);
    assert_eq!(
        answered[1].content,
        agentlane_agent::context::repair::ABORTED_RESULT,
        "its call answered as aborted"
    );
    assert_eq!(
        f.execute(&followup).await,
        TurnExit::HandBack,
        "the second interrupt ran in the followup's place"
    );
    assert_eq!(f.run(&second.run_id).await.status, RunStatus::Ok);
    assert_eq!(
        f.execute(&followup).await,
        TurnExit::Finished(RunStatus::Ok)
    );
    assert_paired(&f).await;
    assert_eq!(
        user_texts(&f).await,
        ["long job", "stop, do this", "no, this instead", "followup"]
    );
}
