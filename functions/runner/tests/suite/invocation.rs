//! One invocation of the runner function on the emulator: the real lane worker, runner and
//! (paced) demo model over DynamoDB + SQS; the deadline decides what is handed back.

use crate::emulator::Emulator;
use agentlane_agent::LaneWorker;
use agentlane_host::Settings;
use agentlane_host::metrics::EmfWriter;
use agentlane_runner::RunnerFunction;
use aws_lambda_events::event::sqs::SqsBatchResponse;
use http::Method;
use std::time::Duration;

/// The demo model's pause between chunks: its answer to a short message takes a few seconds.
const CHUNK_DELAY_MS: &str = "300";
/// Large next to the turn: a handler that ignored it would let the turn finish.
const MARGIN: Duration = Duration::from_secs(10);

fn function(emulator: &Emulator) -> RunnerFunction {
    let settings = Settings::from_sources(None, |name| {
        (name == "AGENTLANE_DEMO_DELAY_MS").then(|| CHUNK_DELAY_MS.to_owned())
    })
    .unwrap();
    let backends = &emulator.backends;
    let runner = agentlane_host::runner_with(backends, &settings).unwrap();
    RunnerFunction::new(
        LaneWorker::new(backends.queue.clone(), runner),
        backends.queue.clone(),
        backends.clock.clone(),
        MARGIN,
    )
}

fn failed_ids(response: &SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

#[tokio::test]
async fn a_turn_still_running_at_the_deadline_is_handed_back_and_the_next_invocation_finishes_it() {
    // GIVEN a turn accepted on the emulator, delivered to the function as an SQS event
    let emulator = Emulator::start().await;
    let function = function(&emulator);
    let run_id = emulator.submit("deadline", "hello").await;
    let event = emulator.receive_event(Duration::from_secs(5)).await;
    assert_eq!(event.records.len(), 1);
    let message_id = event.records[0].message_id.clone().unwrap();

    // WHEN the invocation's deadline leaves the turn 1.5 s before the hand-back margin
    let now = emulator.backends.clock.now_ms();
    let response = function.handle(event, now + 11_500).await;

    // THEN the turn stops mid-way and its record is reported failed ...
    assert_eq!(failed_ids(&response), [message_id.as_str()]);
    let run = emulator.run(&run_id).await;
    assert_eq!(run["status"], "running", "the turn had started: {run}");
    // ... and is visible again at once (not after its 30 s visibility), its state kept
    let again = emulator.receive_event(Duration::from_secs(2)).await;
    assert_eq!(
        again.records.len(),
        1,
        "the handed-back record is visible again"
    );
    assert_eq!(again.records[0].message_id.as_deref(), Some(&*message_id));
    assert_eq!(
        again.records[0]
            .attributes
            .get("ApproximateReceiveCount")
            .map(String::as_str),
        Some("2")
    );

    // WHEN the next invocation has time enough
    let now = emulator.backends.clock.now_ms();
    let response = function.handle(again, now + 120_000).await;

    // THEN the record is done and the run finished with one answer in the transcript
    assert!(failed_ids(&response).is_empty(), "{response:?}");
    let run = emulator.run(&run_id).await;
    assert_eq!(run["status"], "ok", "{run}");
    let (_, transcript) = emulator
        .api(Method::GET, "/v1/sessions/deadline/transcript", None)
        .await;
    let roles: Vec<&str> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["message"]["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant"], "{transcript}");
}

#[tokio::test]
async fn an_invocation_already_past_its_deadline_hands_every_record_back_untouched() {
    // GIVEN two turns on two sessions, delivered in one event
    let emulator = Emulator::start().await;
    let function = function(&emulator);
    let first = emulator.submit("late-a", "hello").await;
    let second = emulator.submit("late-b", "hello").await;
    let mut event = emulator.receive_event(Duration::from_secs(5)).await;
    if event.records.len() < 2 {
        let more = emulator.receive_event(Duration::from_secs(5)).await;
        event.records.extend(more.records);
    }
    assert_eq!(event.records.len(), 2);

    // WHEN the deadline has already passed (the clock is ahead of it)
    let now = emulator.backends.clock.now_ms();
    let response = function.handle(event, now.saturating_sub(5_000)).await;

    // THEN both records fail and come back at once, and neither run started
    assert_eq!(failed_ids(&response).len(), 2, "{response:?}");
    for run_id in [first, second] {
        assert_eq!(emulator.run(&run_id).await["status"], "queued");
    }
    let mut again = emulator.receive_event(Duration::from_secs(2)).await.records;
    if again.len() < 2 {
        again.extend(emulator.receive_event(Duration::from_secs(2)).await.records);
    }
    assert_eq!(again.len(), 2, "both records are visible again");
}

#[tokio::test]
async fn an_invocation_writes_its_turn_metrics_as_cloudwatch_emf_lines() {
    // GIVEN a turn accepted on the emulator and a function whose EMF lines are captured
    let emulator = Emulator::start().await;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let captured = lines.clone();
    let function = function(&emulator)
        .with_emf(EmfWriter::with_sink("agentlane/test", move |line: &str| {
            captured.lock().unwrap().push(line.to_owned())
        }));
    let run_id = emulator.submit("metered", "hello").await;
    let event = emulator.receive_event(Duration::from_secs(5)).await;

    // WHEN one invocation runs it to the end
    let now = emulator.backends.clock.now_ms();
    let response = function.handle(event, now + 120_000).await;
    assert!(failed_ids(&response).is_empty(), "{response:?}");
    assert_eq!(emulator.run(&run_id).await["status"], "ok");

    // THEN the invocation printed one EMF record per metric, in the configured namespace:
    // the ok turn, its answered attempt, and the turn's queue age in milliseconds
    let first = lines.lock().unwrap().clone();
    let records: Vec<serde_json::Value> = first
        .iter()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();
    let find = |metric: &str| {
        records
            .iter()
            .find(|r| r.get(metric).is_some())
            .unwrap_or_else(|| panic!("no {metric} record in {first:#?}"))
    };
    let turns = find("turns");
    assert_eq!(turns["turns"], 1.0);
    assert_eq!(turns["status"], "ok");
    let directive = &turns["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "agentlane/test");
    assert_eq!(directive["Dimensions"], serde_json::json!([["status"]]));
    assert_eq!(
        directive["Metrics"],
        serde_json::json!([{"Name": "turns", "Unit": "Count"}])
    );
    assert!(turns["_aws"]["Timestamp"].as_u64().unwrap() >= now);
    let attempts = find("attempts");
    assert_eq!(
        (attempts["attempts"].as_f64(), attempts["outcome"].as_str()),
        (Some(1.0), Some("ok"))
    );
    let age = find("queue_age_ms");
    assert_eq!(
        age["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
        "Milliseconds"
    );
    assert!(age["queue_age_ms"].as_f64().unwrap() >= 0.0);

    // AND a second invocation with nothing new reports nothing again (counters are deltas)
    let empty = aws_lambda_events::event::sqs::SqsEvent::default();
    function
        .handle(empty, emulator.backends.clock.now_ms() + 60_000)
        .await;
    assert_eq!(
        lines.lock().unwrap().len(),
        first.len(),
        "{:#?}",
        lines.lock().unwrap()
    );
}
