//! [`SqsLaneQueue`]: the `LaneQueue` on one SQS FIFO queue. A lane is a message group (or, with
//! tenant lanes, one of its tenant's groups: [`tenant_lane_group_id`]), so SQS itself keeps a
//! lane's messages in order and holds its next message while one is in flight.

mod dead_letters;
mod wire;

pub use dead_letters::{DEAD_LETTER_VISIBILITY, SqsDeadLetter, SqsDeadLetters};

pub use wire::{
    MAX_SQS_ID_LEN, deduplication_id, delivery_from_parts, is_valid_sqs_id, message_body,
    message_group_id, tenant_lane_group_id,
};

use agentlane_core::{Delivery, LaneMessage, LaneQueue, QueueError, QueueResult, Receipt};
use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use std::time::Duration;

/// SQS's longest visibility timeout (12 h).
pub const MAX_VISIBILITY_SECS: u64 = 43_200;
/// SQS's longest long-poll wait.
pub const MAX_WAIT_SECS: u64 = 20;
/// SQS's largest receive batch.
pub const MAX_RECEIVE_BATCH: usize = 10;

/// The SQS FIFO `LaneQueue`. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SqsLaneQueue {
    client: Client,
    queue_url: String,
    /// Message groups per tenant; 0: one per session (see [`tenant_lane_group_id`]).
    tenant_lanes: u32,
}

impl SqsLaneQueue {
    /// A queue on the FIFO queue at `queue_url` (see [`crate::setup::ensure_resources`]).
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            tenant_lanes: 0,
        }
    }

    /// Each tenant's sessions share `tenant_lanes` message groups (0, the default: one group
    /// per session), so one tenant never has more than `tenant_lanes` turns in flight and its
    /// backlog cannot hold every consumer (see [`tenant_lane_group_id`]). Every process that
    /// enqueues to the queue must use the same value; while it changes, a session's turns may
    /// sit in two groups, and the store keeps them in order (a turn delivered early comes back).
    pub fn with_tenant_lanes(mut self, tenant_lanes: u32) -> Self {
        self.tenant_lanes = tenant_lanes;
        self
    }

    /// The message group a lane's messages go to.
    pub fn group_id(&self, lane: &agentlane_core::Lane) -> String {
        tenant_lane_group_id(lane, self.tenant_lanes)
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// At most one message: `None` when the queue had none, `Some(None)` when it was malformed.
    async fn receive_one(
        &self,
        visibility_secs: i32,
        wait_secs: i32,
    ) -> QueueResult<Option<Option<Delivery>>> {
        let out = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(1)
            .visibility_timeout(visibility_secs)
            .wait_time_seconds(wait_secs)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| classify(e, false))?;
        let Some(message) = out.messages.unwrap_or_default().into_iter().next() else {
            return Ok(None);
        };
        let count = message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .map(String::as_str);
        let parsed = delivery_from_parts(
            message.body().unwrap_or_default(),
            message.receipt_handle().unwrap_or_default(),
            count,
        );
        match parsed {
            Ok(delivery) => Ok(Some(Some(delivery))),
            Err(err) => {
                // Left in flight: it comes back after its visibility and, after the queue's
                // maxReceiveCount, moves to the dead-letter queue.
                tracing::warn!(
                    message_id = message.message_id().unwrap_or_default(),
                    error = %err,
                    "skipping a malformed lane message"
                );
                Ok(Some(None))
            }
        }
    }
}

/// Whole seconds, rounded up (a visibility is a minimum), capped at SQS's maximum.
fn visibility_secs(visibility: Duration) -> i32 {
    let secs = visibility.as_secs() + u64::from(visibility.subsec_nanos() > 0);
    // Capped at 43 200, so the conversion cannot fail.
    i32::try_from(secs.min(MAX_VISIBILITY_SECS)).unwrap_or(i32::MAX)
}

/// Whole seconds, rounded to the nearest, capped at SQS's 20 s long poll.
fn wait_secs(wait: Duration) -> i32 {
    let secs = (wait + Duration::from_millis(500)).as_secs();
    i32::try_from(secs.min(MAX_WAIT_SECS)).unwrap_or(0)
}

const STALE_RECEIPT_CODES: [&str; 4] = [
    "ReceiptHandleIsInvalid",
    "MessageNotInflight",
    "InvalidParameterValue",
    "InvalidIdFormat",
];

const THROTTLING_CODES: [&str; 5] = [
    "RequestThrottled",
    "ThrottlingException",
    "OverLimit",
    "KmsThrottled",
    "Throttling",
];

/// The kind of an SQS failure. `receipt_call` marks calls whose only request-specific input is a
/// receipt handle, where "invalid" means the delivery is no longer current.
fn classify<E, R>(err: SdkError<E, R>, receipt_call: bool) -> QueueError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err
        .as_service_error()
        .and_then(|e| e.code())
        .map(str::to_owned);
    error_for_code(
        code.as_deref(),
        receipt_call,
        DisplayErrorContext(&err).to_string(),
    )
}

/// The queue error for service error `code` (`None`: no answer from the service).
fn error_for_code(code: Option<&str>, receipt_call: bool, text: String) -> QueueError {
    // Codes may carry SQS's legacy prefix (`AWS.SimpleQueueService.NonExistentQueue`).
    let code = code.map(|c| c.rsplit('.').next().unwrap_or(c));
    match code {
        Some(c) if receipt_call && STALE_RECEIPT_CODES.contains(&c) => QueueError::StaleReceipt,
        Some(c) if THROTTLING_CODES.contains(&c) => QueueError::Throttled(text),
        _ => QueueError::Unavailable(text),
    }
}

#[async_trait]
impl LaneQueue for SqsLaneQueue {
    async fn enqueue(&self, message: &LaneMessage) -> QueueResult<()> {
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_group_id(self.group_id(&message.lane))
            .message_deduplication_id(deduplication_id(&message.dedup_id))
            .message_body(message_body(message))
            .send()
            .await
            .map_err(|e| classify(e, false))?;
        Ok(())
    }

    /// One message per SQS call: SQS FIFO may return several messages of one group in a batch,
    /// but a lane must have at most one delivery in flight. After the first message of a group
    /// is in flight, SQS holds the rest of that group, so successive single receives yield at
    /// most one message per lane, and receive counts stay exact.
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> QueueResult<Vec<Delivery>> {
        let mut deliveries = Vec::new();
        let mut wait = wait_secs(wait);
        for _ in 0..max.min(MAX_RECEIVE_BATCH) {
            let received = self.receive_one(visibility_secs(visibility), wait).await;
            wait = 0;
            match received {
                Ok(Some(Some(delivery))) => deliveries.push(delivery),
                // Malformed: skipped, but other messages may follow.
                Ok(Some(None)) => {}
                Ok(None) => break,
                Err(err) if deliveries.is_empty() => return Err(err),
                // What was received is in flight: hand it over rather than lose it to a
                // visibility timeout.
                Err(err) => {
                    tracing::warn!(error = %err, "receive stopped early");
                    break;
                }
            }
        }
        Ok(deliveries)
    }

    async fn ack(&self, receipt: &Receipt) -> QueueResult<()> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(&receipt.0)
            .send()
            .await
            .map_err(|e| classify(e, true))?;
        Ok(())
    }

    async fn set_visibility(&self, receipt: &Receipt, visibility: Duration) -> QueueResult<()> {
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(&receipt.0)
            .visibility_timeout(visibility_secs(visibility))
            .send()
            .await
            .map_err(|e| classify(e, true))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_their_kind() {
        let stale = [
            "ReceiptHandleIsInvalid",
            "AWS.SimpleQueueService.MessageNotInflight",
            "InvalidParameterValue",
        ];
        for code in stale {
            assert_eq!(
                error_for_code(Some(code), true, "x".into()),
                QueueError::StaleReceipt,
                "{code}"
            );
            // Outside receipt calls the same codes are plain failures.
            assert_eq!(
                error_for_code(Some(code), false, "x".into()),
                QueueError::Unavailable("x".into()),
                "{code}"
            );
        }
        for code in ["RequestThrottled", "ThrottlingException", "OverLimit"] {
            assert_eq!(
                error_for_code(Some(code), true, "x".into()),
                QueueError::Throttled("x".into()),
                "{code}"
            );
        }
        assert_eq!(
            error_for_code(
                Some("AWS.SimpleQueueService.NonExistentQueue"),
                false,
                "x".into()
            ),
            QueueError::Unavailable("x".into())
        );
        assert_eq!(
            error_for_code(None, true, "x".into()),
            QueueError::Unavailable("x".into())
        );
    }

    #[test]
    fn visibilities_round_up_to_whole_seconds() {
        assert_eq!(visibility_secs(Duration::ZERO), 0);
        assert_eq!(visibility_secs(Duration::from_millis(1)), 1);
        assert_eq!(visibility_secs(Duration::from_secs(30)), 30);
        assert_eq!(visibility_secs(Duration::from_millis(30_001)), 31);
        assert_eq!(visibility_secs(Duration::from_secs(100_000)), 43_200);
    }

    #[test]
    fn waits_round_to_the_nearest_second_up_to_twenty() {
        assert_eq!(wait_secs(Duration::ZERO), 0);
        assert_eq!(wait_secs(Duration::from_millis(499)), 0);
        assert_eq!(wait_secs(Duration::from_millis(500)), 1);
        assert_eq!(wait_secs(Duration::from_millis(1_400)), 1);
        assert_eq!(wait_secs(Duration::from_secs(60)), 20);
    }
}
