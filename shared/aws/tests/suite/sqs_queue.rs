//! SQS-specific behaviour of `SqsLaneQueue` on the emulator: lanes SQS would refuse as group ids,
//! long dedup ids, malformed bodies and error kinds.

use crate::common;

use agentlane_aws::aws_sdk_sqs::types::MessageSystemAttributeName;
use agentlane_aws::queue::{deduplication_id, message_group_id};
use agentlane_aws::{SqsLaneQueue, delivery_from_parts};
use agentlane_core::{
    Delivery, Lane, LaneMessage, LaneQueue, QueueError, Receipt, RunId, TenantId, TurnMessage,
};
use std::time::Duration;

const HIDE: Duration = Duration::from_secs(30);

fn message(lane: &Lane, dedup_id: &str) -> LaneMessage {
    LaneMessage {
        lane: lane.clone(),
        dedup_id: dedup_id.to_owned(),
        body: TurnMessage {
            session_key: None,
            tenant: TenantId::new("acme"),
            run_id: RunId::generate(),
            accepted: None,
        },
    }
}

/// Receives until `count` deliveries arrived or 6 s passed.
async fn receive_some(queue: &SqsLaneQueue, count: usize) -> Vec<Delivery> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(6);
    let mut got = Vec::new();
    while got.len() < count && tokio::time::Instant::now() < deadline {
        got.extend(
            queue
                .receive(10, HIDE, Duration::from_secs(1))
                .await
                .expect("receive"),
        );
    }
    got
}

#[tokio::test]
async fn a_long_lane_travels_under_a_hashed_group_id_and_comes_back_exactly() {
    // GIVEN a lane SQS would refuse as a group id: too long and not ASCII
    let sdk = common::sdk().await;
    let queue = common::fresh_queue().await;
    let client = agentlane_aws::aws_sdk_sqs::Client::new(&sdk);
    let lane = Lane::new(format!("acme/{}é", "k".repeat(300)));
    let sent = message(&lane, "run-long-lane");

    // WHEN it is enqueued
    queue.enqueue(&sent).await.expect("enqueue");

    // THEN SQS stored it under `h#<sha256>` and the body gives the exact lane back
    let raw = client
        .receive_message()
        .queue_url(queue.queue_url())
        .max_number_of_messages(1)
        .wait_time_seconds(2)
        .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .expect("receive_message");
    let raw = raw.messages.unwrap_or_default().pop().expect("one message");
    let attributes = raw.attributes().expect("attributes");
    let group = &attributes[&MessageSystemAttributeName::MessageGroupId];
    assert_eq!(group, &message_group_id(&lane));
    assert!(group.starts_with("h#") && group.len() == 66, "{group}");
    let delivery = delivery_from_parts(
        raw.body().unwrap(),
        raw.receipt_handle().unwrap(),
        attributes
            .get(&MessageSystemAttributeName::ApproximateReceiveCount)
            .map(String::as_str),
    )
    .expect("a lane message");
    assert_eq!(delivery.message, sent);
    assert_eq!(delivery.receive_count, 1);
    queue.ack(&delivery.receipt).await.expect("ack");
}

#[tokio::test]
async fn long_lanes_sharing_a_prefix_stay_separate_lanes() {
    let queue = common::fresh_queue().await;
    let prefix = "p".repeat(200);
    let (x, y) = (
        Lane::new(format!("acme/{prefix}-x")),
        Lane::new(format!("acme/{prefix}-y")),
    );
    let (x1, x2, y1) = (message(&x, "x1"), message(&x, "x2"), message(&y, "y1"));
    for m in [&x1, &x2, &y1] {
        queue.enqueue(m).await.expect("enqueue");
    }

    let mut got: Vec<LaneMessage> = receive_some(&queue, 2)
        .await
        .into_iter()
        .map(|d| d.message)
        .collect();
    got.sort_by(|a, b| a.dedup_id.cmp(&b.dedup_id));
    assert_eq!(
        got,
        vec![x1, y1],
        "each lane's head, and x2 waits behind x1"
    );
}

#[tokio::test]
async fn a_long_dedup_id_still_deduplicates() {
    let queue = common::fresh_queue().await;
    let lane = Lane::new("acme/dedup");
    let dedup = "d".repeat(400);
    assert_eq!(deduplication_id(&dedup).len(), 64);
    let first = message(&lane, &dedup);
    let mut second = message(&lane, &dedup);
    second.body = first.body.clone();
    queue.enqueue(&first).await.expect("enqueue");
    queue.enqueue(&second).await.expect("enqueue the duplicate");

    let got = receive_some(&queue, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message, first);
    queue.ack(&got[0].receipt).await.expect("ack");
    let rest = queue
        .receive(10, HIDE, Duration::from_secs(1))
        .await
        .expect("receive");
    assert!(rest.is_empty(), "the duplicate was dropped: {rest:?}");
}

#[tokio::test]
async fn a_malformed_body_is_skipped_and_other_lanes_still_flow() {
    let sdk = common::sdk().await;
    let queue = common::fresh_queue().await;
    let client = agentlane_aws::aws_sdk_sqs::Client::new(&sdk);
    client
        .send_message()
        .queue_url(queue.queue_url())
        .message_group_id("acme/garbage")
        .message_deduplication_id("garbage-1")
        .message_body("this is not a lane message")
        .send()
        .await
        .expect("send garbage");
    let good = message(&Lane::new("acme/good"), "good-1");
    queue.enqueue(&good).await.expect("enqueue");

    let got = receive_some(&queue, 1).await;
    assert_eq!(
        got.into_iter().map(|d| d.message).collect::<Vec<_>>(),
        vec![good]
    );
}

#[tokio::test]
async fn invalid_receipts_are_stale_and_a_missing_queue_is_unavailable() {
    let queue = common::fresh_queue().await;
    let bogus = Receipt("not-a-receipt-handle".into());
    assert_eq!(queue.ack(&bogus).await, Err(QueueError::StaleReceipt));
    assert_eq!(
        queue.set_visibility(&bogus, Duration::ZERO).await,
        Err(QueueError::StaleReceipt)
    );

    let sdk = common::sdk().await;
    let missing_url = format!(
        "{}-missing.fifo",
        queue.queue_url().trim_end_matches(".fifo")
    );
    let missing = SqsLaneQueue::new(agentlane_aws::aws_sdk_sqs::Client::new(&sdk), missing_url);
    let result = missing.enqueue(&message(&Lane::new("acme/x"), "x")).await;
    assert!(
        matches!(result, Err(QueueError::Unavailable(_))),
        "{result:?}"
    );
}

fn tenant_message(tenant: &str, session: &str, n: usize) -> LaneMessage {
    LaneMessage {
        lane: Lane::new(format!("{tenant}/{session}")),
        dedup_id: format!("{tenant}-{session}-{n}"),
        body: TurnMessage {
            session_key: None,
            tenant: TenantId::new(tenant),
            run_id: RunId::generate(),
            accepted: None,
        },
    }
}

#[tokio::test]
async fn with_tenant_lanes_a_flooding_tenant_holds_at_most_its_lanes_and_another_tenant_gets_through()
 {
    // GIVEN tenant lanes of 2, and tenant A's 40 turns over 20 sessions queued before tenant B's
    // one turn
    let queue = common::fresh_queue().await.with_tenant_lanes(2);
    for n in 0..40 {
        let sent = tenant_message("tenant-a", &format!("s{}", n % 20), n);
        queue.enqueue(&sent).await.expect("enqueue A");
    }
    queue
        .enqueue(&tenant_message("tenant-b", "one", 0))
        .await
        .expect("enqueue B");

    // WHEN consumers take everything they can, holding what they took (turns in progress)
    let held = receive_some(&queue, 41).await;

    // THEN A has exactly two turns in flight, and B's turn was delivered despite A's backlog
    let of = |tenant: &str| {
        held.iter()
            .filter(|d| d.message.body.tenant.as_str() == tenant)
            .count()
    };
    assert_eq!(of("tenant-a"), 2, "{held:#?}");
    assert_eq!(of("tenant-b"), 1, "{held:#?}");

    // AND when one of A's turns ends, the next A turn comes, never more than two at once
    let a_done = held
        .iter()
        .find(|d| d.message.body.tenant.as_str() == "tenant-a")
        .expect("an A delivery");
    queue.ack(&a_done.receipt).await.expect("ack");
    let next = receive_some(&queue, 2).await;
    assert_eq!(next.len(), 1, "{next:#?}");
    assert_eq!(next[0].message.body.tenant.as_str(), "tenant-a");
}

#[tokio::test]
async fn with_tenant_lanes_a_sessions_turns_still_come_in_order_one_at_a_time() {
    // GIVEN one lane per tenant and one session's three turns, interleaved with another
    // session's
    let queue = common::fresh_queue().await.with_tenant_lanes(1);
    for n in 0..3 {
        for session in ["x", "y"] {
            queue
                .enqueue(&tenant_message("tenant-a", session, n))
                .await
                .expect("enqueue");
        }
    }

    // WHEN each delivery is acked before the next receive
    let mut order = Vec::new();
    for _ in 0..6 {
        let got = receive_some(&queue, 1).await;
        assert_eq!(got.len(), 1, "one in flight at a time: {got:#?}");
        order.push(got[0].message.dedup_id.clone());
        // Nothing more of the tenant while that one is in flight.
        assert!(receive_some_quick(&queue).await.is_empty());
        queue.ack(&got[0].receipt).await.expect("ack");
    }

    // THEN they came in enqueue order
    let expected: Vec<String> = (0..3)
        .flat_map(|n| ["x", "y"].map(|s| format!("tenant-a-{s}-{n}")))
        .collect();
    assert_eq!(order, expected);
}

/// One receive with no wait.
async fn receive_some_quick(queue: &SqsLaneQueue) -> Vec<Delivery> {
    queue
        .receive(10, HIDE, Duration::ZERO)
        .await
        .expect("receive")
}
