//! Ordering, lane blocking, deduplication and long polling.

use super::{DUE_WITHIN, LONG_VISIBILITY, collect, drain, enqueue_all, messages, next_is};
use crate::fixtures;
use agentlane_core::{Lane, LaneMessage, LaneQueue};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A lane's messages are delivered one at a time in enqueue order; each ack lets the next one
/// through, and an acked message never comes back.
pub async fn case_fifo_within_lane(queue: Arc<dyn LaneQueue>) {
    let lane = fixtures::lane();
    let sent: Vec<_> = (0..5).map(|_| fixtures::message(&lane)).collect();
    enqueue_all(&queue, &sent).await;

    for expected in &sent {
        let delivery = next_is(&queue, expected).await;
        queue.ack(&delivery.receipt).await.expect("ack");
    }
    let rest = drain(&queue, Duration::from_secs(2)).await;
    assert_eq!(messages(&rest), vec![], "acked messages are gone");
}

/// While a lane's head is in flight its later messages wait (even within one batch), other lanes
/// are delivered; the ack releases the next message of the lane.
pub async fn case_lane_blocked_while_in_flight(queue: Arc<dyn LaneQueue>) {
    let (a, b) = (fixtures::lane(), fixtures::lane());
    let (a1, a2, b1) = (
        fixtures::message(&a),
        fixtures::message(&a),
        fixtures::message(&b),
    );
    enqueue_all(&queue, &[a1.clone(), a2.clone(), b1.clone()]).await;

    // WHEN a consumer asks for up to 10 messages (possibly over several calls)
    let first = collect(&queue, 2, LONG_VISIBILITY, DUE_WITHIN).await;

    // THEN it gets each lane's head, and nothing of lane A's tail while A1 is in flight
    let mut got = messages(&first);
    got.sort_by(|x, y| x.body.run_id.cmp(&y.body.run_id));
    let mut heads = vec![a1.clone(), b1.clone()];
    heads.sort_by(|x, y| x.body.run_id.cmp(&y.body.run_id));
    assert_eq!(got, heads, "one message per lane: the heads");
    assert!(first.iter().all(|d| d.receive_count == 1));
    let blocked = drain(&queue, Duration::from_secs(2)).await;
    assert_eq!(messages(&blocked), vec![], "A2 waits while A1 is in flight");

    // WHEN A1 is acked THEN A2 comes
    let receipt_of = |m: &LaneMessage| {
        first
            .iter()
            .find(|d| &d.message == m)
            .map(|d| d.receipt.clone())
            .expect("delivered")
    };
    queue.ack(&receipt_of(&a1)).await.expect("ack A1");
    let next = next_is(&queue, &a2).await;
    queue.ack(&next.receipt).await.expect("ack A2");
    queue.ack(&receipt_of(&b1)).await.expect("ack B1");
}

/// Enqueueing the same dedup id twice while the first copy is queued stores one message.
pub async fn case_dedup_while_queued(queue: Arc<dyn LaneQueue>) {
    let lane = fixtures::lane();
    let message = fixtures::message(&lane);
    queue.enqueue(&message).await.expect("enqueue");
    queue
        .enqueue(&message)
        .await
        .expect("enqueue the duplicate");
    let after = fixtures::message(&lane);
    queue.enqueue(&after).await.expect("enqueue");

    let first = next_is(&queue, &message).await;
    queue.ack(&first.receipt).await.expect("ack");
    let second = next_is(&queue, &after).await;
    queue.ack(&second.receipt).await.expect("ack");
    let rest = drain(&queue, Duration::from_secs(2)).await;
    assert_eq!(messages(&rest), vec![], "the duplicate was never stored");
}

/// A long poll on an empty queue returns as soon as a message arrives, well before its wait ends.
pub async fn case_receive_wait_returns_early(queue: Arc<dyn LaneQueue>) {
    let message = fixtures::message(&fixtures::lane());
    let started = Instant::now();
    let poller = {
        let queue = queue.clone();
        tokio::spawn(async move {
            queue
                .receive(10, LONG_VISIBILITY, Duration::from_secs(15))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    queue.enqueue(&message).await.expect("enqueue");

    let got = poller.await.expect("poller task").expect("receive");
    let waited = started.elapsed();
    assert_eq!(messages(&got), vec![message]);
    assert!(
        waited < Duration::from_secs(6),
        "the poll ended {waited:?} after it began; the message came after 0.5 s"
    );
    queue.ack(&got[0].receipt).await.expect("ack");
}

/// Many lanes enqueued concurrently: every lane's head is delivered while the heads are in
/// flight, no tail overtakes its head, and after the acks every tail is delivered.
pub async fn case_many_lanes_in_parallel(queue: Arc<dyn LaneQueue>) {
    const LANES: usize = 12;
    let lanes: Vec<Lane> = (0..LANES).map(|_| fixtures::lane()).collect();
    let plan: Vec<[LaneMessage; 2]> = lanes
        .iter()
        .map(|lane| [fixtures::message(lane), fixtures::message(lane)])
        .collect();
    let producers = plan.iter().map(|pair| {
        let (queue, pair) = (queue.clone(), pair.clone());
        tokio::spawn(async move { enqueue_all(&queue, &pair).await })
    });
    for joined in futures::future::join_all(producers).await {
        joined.expect("producer task");
    }

    for round in 0..2 {
        let got = collect(&queue, LANES, LONG_VISIBILITY, Duration::from_secs(15)).await;
        let mut by_lane: HashMap<Lane, Vec<LaneMessage>> = HashMap::new();
        for delivery in &got {
            by_lane
                .entry(delivery.message.lane.clone())
                .or_default()
                .push(delivery.message.clone());
        }
        for (lane, pair) in lanes.iter().zip(&plan) {
            assert_eq!(
                by_lane.get(lane),
                Some(&vec![pair[round].clone()]),
                "round {round}: lane {lane} delivers exactly its message #{round}"
            );
        }
        assert_eq!(
            got.len(),
            LANES,
            "round {round}: nothing else was delivered"
        );
        let acks = got.iter().map(|delivery| {
            let (queue, receipt) = (queue.clone(), delivery.receipt.clone());
            tokio::spawn(async move { queue.ack(&receipt).await })
        });
        for joined in futures::future::join_all(acks).await {
            joined.expect("ack task").expect("ack");
        }
    }
}
