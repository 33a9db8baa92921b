//! A batch in, the failed records out (`ReportBatchItemFailures`).
//!
//! FIFO rule: records of one message group are processed in order; at a group's first record
//! that does not finish, that record and every later record of the same group are reported
//! failed (and not processed), so SQS redelivers them in order. Other groups go on, each group
//! concurrently with the others.

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

/// Processes a batch with `process` and answers which records failed. A record that cannot be
/// read (no body, bad JSON) is reported failed; after enough receives SQS moves it to the DLQ.
/// Hand-backs are made visible again at once, and so are the skipped records behind them.
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
                        tracing::error!(error = %e, message_id = ?record.message_id, "unreadable lane message");
                        DeliveryOutcome::Leave
                    }
                };
                match outcome {
                    DeliveryOutcome::Done => {}
                    DeliveryOutcome::HandBack => {
                        hand_back(queue, receipt).await;
                        failed = true;
                        failures.push(failure(record));
                    }
                    DeliveryOutcome::Retry(delay) => {
                        retry_later(queue, receipt, delay).await;
                        failed = true;
                        failures.push(failure(record));
                    }
                    DeliveryOutcome::Leave => {
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

/// The message comes back after `delay` (its run waits for an earlier run of its session).
async fn retry_later(queue: &dyn LaneQueue, receipt: &str, delay: Duration) {
    let receipt = agentlane_core::Receipt(receipt.to_owned());
    if let Err(e) = queue.set_visibility(&receipt, delay).await {
        tracing::warn!(error = %e, "could not delay a message");
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
