//! The runner Lambda's handler on real SQS events against the emulator: the batch is received
//! from a FIFO queue, turned into the JSON Lambda delivers, and handled with the real
//! `SqsLaneQueue`. What comes back afterwards (without the deletion Lambda does for successful
//! records) shows how each record was settled.

use agentlane_agent::{RunnerConfig, Settlement};
use agentlane_aws::aws_sdk_sqs::types::MessageSystemAttributeName;
use agentlane_aws::setup::AwsConfig;
use agentlane_aws::{SqsLaneQueue, ensure_resources};
use agentlane_core::{Delivery, Lane, LaneMessage, LaneQueue, RunId, TenantId, TurnMessage};
use aws_lambda_events::event::sqs::SqsEvent;
use serde_json::json;
use std::time::{Duration, Instant};

async fn sdk() -> agentlane_aws::aws_config::SdkConfig {
    match std::env::var("AWS_ENDPOINT_URL") {
        Ok(v) if !v.is_empty() => agentlane_aws::setup::sdk_config().await,
        _ => agentlane_aws::setup::emulator_sdk_config("http://127.0.0.1:4566").await,
    }
}

fn message(lane: &str, run: &str) -> LaneMessage {
    LaneMessage {
        lane: Lane::new(lane),
        dedup_id: run.to_owned(),
        body: TurnMessage {
            tenant: TenantId::new("acme"),
            run_id: RunId::new(run),
            session_key: None,
            accepted: None,
        },
    }
}

/// Receives up to 10 messages and builds the SQS event Lambda would deliver for them.
async fn lambda_event(client: &agentlane_aws::aws_sdk_sqs::Client, url: &str) -> SqsEvent {
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(6);
    while records.len() < 4 && Instant::now() < deadline {
        let out = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive_message");
        for m in out.messages.unwrap_or_default() {
            let attributes: serde_json::Map<String, serde_json::Value> = m
                .attributes()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), json!(v)))
                .collect();
            records.push(json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": attributes,
                "messageAttributes": {},
                "md5OfBody": m.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:test.fifo",
                "awsRegion": "us-east-1",
            }));
        }
    }
    serde_json::from_value(json!({ "Records": records })).expect("an SQS event")
}

#[tokio::test]
async fn each_record_is_settled_when_done_and_a_failed_one_returns_in_seconds() {
    // GIVEN a FIFO queue with a 60 s visibility holding alpha = a1, a2; beta = b1; and on lane
    // gamma a body no runner can read
    let sdk = sdk().await;
    let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let config = AwsConfig {
        table: format!("agentlane-test-{id}"),
        queue_name: format!("agentlane-test-{id}.fifo"),
        dlq_name: format!("agentlane-test-{id}-dlq.fifo"),
        visibility_timeout_secs: 60,
        ..AwsConfig::default()
    };
    let resources = ensure_resources(&sdk, &config).await.expect("resources");
    let client = agentlane_aws::aws_sdk_sqs::Client::new(&sdk);
    let queue = SqsLaneQueue::new(client.clone(), resources.queue_url.clone());
    for m in [
        message("acme/alpha", "run_a1"),
        message("acme/alpha", "run_a2"),
        message("acme/beta", "run_b1"),
    ] {
        queue.enqueue(&m).await.expect("enqueue");
    }
    client
        .send_message()
        .queue_url(&resources.queue_url)
        .message_group_id("acme/gamma")
        .message_deduplication_id("bad")
        .message_body(r#"{"lane":"acme/gamma","dedupId":"bad","body":{"runId":42}}"#)
        .send()
        .await
        .expect("send a malformed body");

    // WHEN the handler runs the batch: a1 and b1 finish, a2 fails on a transient error
    let event = lambda_event(&client, &resources.queue_url).await;
    assert_eq!(event.records.len(), 4, "the whole batch was received");
    let started = Instant::now();
    let pause = RunnerConfig::default().failed_pickup_pause;
    let response = agentlane_runner::handle_batch(event, &queue, |d: Delivery| async move {
        match d.message.body.run_id.as_str() {
            "run_a2" => Settlement::after_failure(&RunnerConfig::default()),
            _ => Settlement::Ack,
        }
    })
    .await;

    // THEN only a2 is reported failed
    let failed: Vec<String> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(failed.len(), 1);

    // AND with nobody deleting the successes afterwards, only a2 comes back — within seconds,
    // not after the queue's 60 s visibility; a1, b1 and the unreadable record are gone
    let mut back = Vec::new();
    while started.elapsed() < Duration::from_secs(20) && back.is_empty() {
        back = queue
            .receive(10, Duration::from_secs(60), Duration::from_secs(1))
            .await
            .expect("receive");
    }
    let elapsed = started.elapsed();
    let runs: Vec<&str> = back
        .iter()
        .map(|d| d.message.body.run_id.as_str())
        .collect();
    assert_eq!(runs, ["run_a2"], "after {elapsed:?}");
    assert!(
        elapsed >= pause - Duration::from_millis(500) && elapsed < Duration::from_secs(15),
        "visible again after {elapsed:?}"
    );
    assert_eq!(back[0].receive_count, 2);
    queue.ack(&back[0].receipt).await.expect("ack");
    let rest = queue
        .receive(10, Duration::from_secs(60), Duration::from_secs(1))
        .await
        .expect("receive");
    assert!(rest.is_empty(), "{rest:?}");
}
