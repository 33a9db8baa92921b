//! A batch in, the failed records out (`ReportBatchItemFailures`).
//!
//! FIFO rule: records of one message group are processed in order; at a group's first record
//! that does not finish, that record and every later record of the same group are reported
//! failed (and not processed), so SQS redelivers them in order. Other groups go on, each group
//! concurrently with the others.
//!
//! Each record is settled as soon as it is done with, not when the whole batch returns:
//! - a finished record is deleted at once (its lane's next turn can be received while the
//!   batch's other groups still run);
//! - a record left for retry (a transient store error) is made visible again after
//!   [`RETRY_AFTER`], not after the queue's visibility timeout;
//! - a record the runner cannot read (a malformed body) is deleted with an error log and the
//!   `UnreadableLaneMessage` metric: it could never run, and kept it would block its lane until
//!   it reached the dead-letter queue. Lane messages tolerate unknown fields (a newer ingress).

use agentlane_agent::DeliveryOutcome;
use agentlane_core::{Delivery, LaneQueue};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures::future::join_all;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

/// Groups records by `MessageGroupId`, keeping their order within each group.
fn by_group(records: Vec<SqsMessage>) -> BTreeMap<String, Vec<SqsMessage>> {
    let mut groups: BTreeMap<String, Vec<SqsMessage>> = BTreeMap::new();
    for record in records {
        let group = record
            .attributes
            .get("MessageGroupId")
            .cloned()
            .unwrap_or_default();
        groups.entry(group).or_default().push(record);
    }
    groups
}

fn failure(record: &SqsMessage) -> BatchItemFailure {
    let mut f = BatchItemFailure::default();
    f.item_identifier = record.message_id.clone().unwrap_or_default();
    f
}

/// How soon a record left for retry (the turn failed on a transient error) is delivered again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Processes a batch with `process` and answers which records failed (see the module docs for
/// how each record is settled). Hand-backs are made visible again at once, and so are the
/// skipped records behind them.
pub async fn handle_batch<P, F>(
    event: SqsEvent,
    queue: &dyn LaneQueue,
    process: P,
) -> SqsBatchResponse
where
    P: Fn(Delivery) -> F,
    F: Future<Output = DeliveryOutcome>,
{
    let groups = by_group(event.records);
    let per_group = groups.into_values().map(|records| {
        let process = &process;
        async move {
            let mut failures = Vec::new();
            let mut failed = false;
            for record in &records {
                let receipt = record.receipt_handle.as_deref().unwrap_or_default();
                if failed {
                    failures.push(failure(record));
                    hand_back(queue, receipt).await;
                    continue;
                }
                let delivery = agentlane_aws::delivery_from_parts(
                    record.body.as_deref().unwrap_or_default(),
                    receipt,
                    record.attributes.get("ApproximateReceiveCount").map(String::as_str),
                );
                let outcome = match delivery {
                    Ok(delivery) => process(delivery).await,
                    Err(e) => {
                        // The EMF-style fields let a metric filter count these.
                        tracing::error!(
                            error = %e,
                            message_id = ?record.message_id,
                            metric = "UnreadableLaneMessage",
                            count = 1,
                            "unreadable lane message: deleting it so that it does not block its lane"
                        );
                        DeliveryOutcome::Done
                    }
                };
                match outcome {
                    DeliveryOutcome::Done => settle(queue, receipt, None).await,
                    DeliveryOutcome::HandBack => {
                        hand_back(queue, receipt).await;
                        failed = true;
                        failures.push(failure(record));
                    }
                    DeliveryOutcome::Retry(delay) => {
                        settle(queue, receipt, Some(delay)).await;
                        failed = true;
                        failures.push(failure(record));
                    }
                    DeliveryOutcome::Leave => {
                        settle(queue, receipt, Some(RETRY_AFTER)).await;
                        failed = true;
                        failures.push(failure(record));
                    }
                }
            }
            failures
        }
    });
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = join_all(per_group).await.into_iter().flatten().collect();
    response
}

/// Deletes a finished record now (`None`), or shortens its visibility to `retry_after`.
async fn settle(queue: &dyn LaneQueue, receipt: &str, retry_after: Option<Duration>) {
    if receipt.is_empty() {
        return;
    }
    let receipt = agentlane_core::Receipt(receipt.to_owned());
    let result = match retry_after {
        None => queue.ack(&receipt).await,
        Some(after) => queue.set_visibility(&receipt, after).await,
    };
    match result {
        Ok(()) | Err(agentlane_core::QueueError::StaleReceipt) => {}
        Err(e) => {
            tracing::warn!(error = %e, "could not settle a record early (the batch response still does)")
        }
    }
}

async fn hand_back(queue: &dyn LaneQueue, receipt: &str) {
    let receipt = agentlane_core::Receipt(receipt.to_owned());
    if let Err(e) = queue.set_visibility(&receipt, Duration::ZERO).await {
        tracing::warn!(error = %e, "could not hand a message back");
    }
}

#[cfg(test)]
mod tests;
