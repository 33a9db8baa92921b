//! The batch handling on a real SQS FIFO event (JSON as Lambda delivers it), with a queue that
//! records what the handler asks of it; `tests/suite/invocation.rs` runs it on the emulator.

use agentlane_agent::Settlement;
use agentlane_core::{Delivery, LaneQueue, QueueResult, Receipt};
use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Records what the handler asks of the queue (unit-test fake: `ack` and `set_visibility`; the
/// same handler runs against the emulator in `emulator.rs`).
#[derive(Default)]
struct RecordingQueue {
    visibility: Mutex<Vec<(String, Duration)>>,
    acked: Mutex<Vec<String>>,
}

#[async_trait]
impl LaneQueue for RecordingQueue {
    async fn enqueue(&self, _: &agentlane_core::LaneMessage) -> QueueResult<()> {
        unreachable!("the handler never enqueues")
    }
    async fn receive(&self, _: usize, _: Duration, _: Duration) -> QueueResult<Vec<Delivery>> {
        unreachable!("Lambda receives for the handler")
    }
    async fn ack(&self, receipt: &Receipt) -> QueueResult<()> {
        self.acked.lock().unwrap().push(receipt.0.clone());
        Ok(())
    }
    async fn set_visibility(&self, receipt: &Receipt, visibility: Duration) -> QueueResult<()> {
        self.visibility
            .lock()
            .unwrap()
            .push((receipt.0.clone(), visibility));
        Ok(())
    }
}

fn event() -> SqsEvent {
    serde_json::from_str(include_str!("../../tests/fixtures/sqs-fifo-batch.json")).unwrap()
}

/// Runs the handler with outcomes per run id (default Done); returns the failed message ids,
/// the run ids processed in order, and the receipts handed back.
async fn run(
    event: SqsEvent,
    outcomes: &[(&str, Settlement)],
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let outcomes: HashMap<String, Settlement> = outcomes
        .iter()
        .map(|(r, o)| ((*r).to_owned(), *o))
        .collect();
    let processed = Mutex::new(Vec::new());
    let queue = RecordingQueue::default();
    let response: SqsBatchResponse = super::handle_batch(event, &queue, |d: Delivery| {
        let run = d.message.body.run_id.to_string();
        processed.lock().unwrap().push(run.clone());
        let outcome = outcomes.get(&run).copied().unwrap_or(Settlement::Ack);
        async move { outcome }
    })
    .await;
    let mut failed: Vec<String> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    failed.sort();
    let handed_back = queue
        .visibility
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, v)| *v == Duration::ZERO)
        .map(|(r, _)| r.clone())
        .collect();
    (failed, processed.into_inner().unwrap(), handed_back)
}

#[tokio::test]
async fn a_batch_that_finishes_reports_no_failures() {
    let (failed, processed, handed_back) = run(event(), &[]).await;
    assert!(failed.is_empty());
    let mut processed = processed;
    processed.sort();
    assert_eq!(
        processed,
        ["run_a1", "run_a2", "run_a3", "run_b1", "run_b2"]
    );
    assert!(handed_back.is_empty());
}

#[tokio::test]
async fn a_hand_back_fails_that_record_and_the_rest_of_its_group_only() {
    let (failed, processed, handed_back) = run(
        event(),
        &[("run_a2", Settlement::VisibleAfter(Duration::ZERO))],
    )
    .await;
    // GIVEN group alpha = a1, a2, a3 and beta = b1, b2; WHEN a2 hands back
    // THEN a2 and a3 fail (a3 is never run), beta is untouched
    assert_eq!(failed, ["a2", "a3"]);
    assert!(!processed.contains(&"run_a3".to_owned()));
    assert!(processed.contains(&"run_b2".to_owned()));
    let alpha: Vec<&String> = processed
        .iter()
        .filter(|r| r.starts_with("run_a"))
        .collect();
    assert_eq!(alpha, ["run_a1", "run_a2"], "a group runs in order");
    assert_eq!(handed_back, ["rh-a2", "rh-a3"]);
}

#[tokio::test]
async fn a_failed_pickup_comes_back_after_its_pause_and_fails_its_group_tail() {
    let pause = agentlane_agent::RunnerConfig::default().failed_pickup_pause;
    let (failed, _, handed_back) =
        run(event(), &[("run_b1", Settlement::VisibleAfter(pause))]).await;
    assert_eq!(failed, ["b1", "b2"]);
    assert_eq!(
        handed_back,
        ["rh-b2"],
        "only the skipped record is released at once"
    );
}

#[tokio::test]
async fn each_record_gets_the_visibility_its_settlement_names() {
    // GIVEN alpha = a1, a2, a3 and beta = b1, b2; WHEN a1 comes back after 1 s and b2 after 5 s
    let processed = Mutex::new(Vec::new());
    let queue = RecordingQueue::default();
    let response = super::handle_batch(event(), &queue, |d: Delivery| {
        let run = d.message.body.run_id.to_string();
        processed.lock().unwrap().push(run.clone());
        async move {
            match run.as_str() {
                "run_a1" => Settlement::VisibleAfter(Duration::from_secs(1)),
                "run_b2" => Settlement::VisibleAfter(Duration::from_secs(5)),
                _ => Settlement::Ack,
            }
        }
    })
    .await;
    // THEN a1 is set to 1 s, a2 and a3 (skipped) to at once, b2 to 5 s; b1 is deleted
    let mut visibility = queue.visibility.into_inner().unwrap();
    visibility.sort();
    assert_eq!(
        visibility,
        [
            ("rh-a1".to_owned(), Duration::from_secs(1)),
            ("rh-a2".to_owned(), Duration::ZERO),
            ("rh-a3".to_owned(), Duration::ZERO),
            ("rh-b2".to_owned(), Duration::from_secs(5)),
        ]
    );
    assert_eq!(queue.acked.into_inner().unwrap(), ["rh-b1"]);
    assert_eq!(response.batch_item_failures.len(), 4);
}

#[tokio::test]
async fn an_unreadable_record_leaves_its_lane_at_once() {
    let mut event = event();
    event.records[0].body = Some("not json".into());
    let (failed, processed, _) = run(event, &[]).await;
    assert!(failed.is_empty(), "{failed:?}");
    let mut processed = processed;
    processed.sort();
    assert_eq!(processed, ["run_a2", "run_a3", "run_b1", "run_b2"]);
}

#[tokio::test]
async fn a_body_with_fields_from_a_newer_ingress_is_processed() {
    let mut event = event();
    event.records[0].body = Some(
        r#"{"lane":"acme/alpha","dedupId":"run_a1","priority":3,
            "body":{"tenant":"acme","runId":"run_a1","queueMode":"steer","extra":{"x":1}}}"#
            .into(),
    );
    let (failed, processed, _) = run(event, &[]).await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(processed.iter().filter(|r| *r == "run_a1").count(), 1);
}
