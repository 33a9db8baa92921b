//! The `LaneQueue` cases.
//!
//! Each case needs a queue of its own: `receive` is not filtered by lane, so two cases sharing
//! one queue would take each other's messages. Visibilities are whole seconds (SQS) and every
//! "it reappears" check allows a few seconds of lag (an emulator may notice expiry late).

mod delivery;
mod visibility;

pub use delivery::{
    case_dedup_while_queued, case_fifo_within_lane, case_lane_blocked_while_in_flight,
    case_many_lanes_in_parallel, case_receive_wait_returns_early,
};
pub use visibility::{
    case_ack_and_receive_delivers_the_next_message_once, case_redelivery_after_visibility_timeout,
    case_stale_receipt_ack_is_harmless, case_visibility_extension_keeps_hidden,
    case_zero_visibility_hands_back_same_message,
};

use agentlane_core::{Delivery, LaneMessage, LaneQueue};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Every queue case, by name. Each needs its own queue.
pub fn all() -> Vec<(&'static str, crate::Case<dyn LaneQueue>)> {
    crate::__queue_cases!(table queue dyn LaneQueue)
}

/// A visibility no case outlives: a message received with it stays in flight for the case.
const LONG_VISIBILITY: Duration = Duration::from_secs(30);
/// How long one `receive` call of the helpers long-polls.
const POLL_WAIT: Duration = Duration::from_secs(1);
/// How long a message that is due (queued, handed back, expired) may take to be delivered.
const DUE_WITHIN: Duration = Duration::from_secs(6);

/// Receives (in flight for `visibility`) until at least `count` deliveries arrived or `within`
/// passed; returns all of them in arrival order.
async fn collect(
    queue: &Arc<dyn LaneQueue>,
    count: usize,
    visibility: Duration,
    within: Duration,
) -> Vec<Delivery> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < count && Instant::now() < deadline {
        let batch = queue
            .receive(10, visibility, POLL_WAIT)
            .await
            .expect("receive");
        got.extend(batch);
    }
    got
}

/// Receives for `during` and returns whatever arrived (cases expect nothing).
async fn drain(queue: &Arc<dyn LaneQueue>, during: Duration) -> Vec<Delivery> {
    let deadline = Instant::now() + during;
    let mut got = Vec::new();
    while Instant::now() < deadline {
        let batch = queue
            .receive(10, LONG_VISIBILITY, POLL_WAIT)
            .await
            .expect("receive");
        got.extend(batch);
    }
    got
}

/// Exactly one delivery, of `expected`, arriving within [`DUE_WITHIN`].
async fn next_is(queue: &Arc<dyn LaneQueue>, expected: &LaneMessage) -> Delivery {
    let mut got = collect(queue, 1, LONG_VISIBILITY, DUE_WITHIN).await;
    assert_eq!(
        messages(&got),
        vec![expected.clone()],
        "expected exactly {} next",
        expected.body.run_id
    );
    got.remove(0)
}

async fn enqueue_all(queue: &Arc<dyn LaneQueue>, messages: &[LaneMessage]) {
    for message in messages {
        queue.enqueue(message).await.expect("enqueue");
    }
}

fn messages(deliveries: &[Delivery]) -> Vec<LaneMessage> {
    deliveries.iter().map(|d| d.message.clone()).collect()
}
