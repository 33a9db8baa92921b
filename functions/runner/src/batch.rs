//! A batch in, the failed records out (`ReportBatchItemFailures`).
//!
//! FIFO rule: records of one message group are processed in order; at a group's first record
//! that does not finish, that record and every later record of the same group are reported
//! failed (and not processed), so SQS redelivers them in order. Other groups go on, each group
//! concurrently with the others.
//!
//! Each record is settled as soon as it is done with, not when the whole batch returns, as the
//! lane worker's [`Settlement`] says (the same vocabulary the local worker applies):
//! - `Ack`: the record is deleted at once (its lane's next turn can be received while the
//!   batch's other groups still run);
//! - `VisibleAfter(d)`: the record is made visible again after `d` (zero for a hand-back, the
//!   runner's `failed_pickup_pause` for a failed pickup — not the queue's visibility timeout,
//!   which for a Lambda event source is several times the function's timeout) and reported
//!   failed, with every later record of its group (made visible again at once, unprocessed);
//! - a record the runner cannot read (a malformed body) is deleted with an error log and the
//!   `UnreadableLaneMessage` metric: it could never run, and kept it would block its lane until
//!   it reached the dead-letter queue. Lane messages tolerate unknown fields (a newer ingress).

use agentlane_agent::Settlement;
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

/// Processes a batch with `process` and answers which records failed (see the module docs for
/// how each record is settled). The skipped records behind a failed one are made visible again
/// at once.
pub async fn handle_batch<P, F>(
    event: SqsEvent,
    queue: &dyn LaneQueue,
    process: P,
) -> SqsBatchResponse
where
    P: Fn(Delivery) -> F,
    F: Future<Output = Settlement>,
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
                    settle(queue, receipt, Settlement::VisibleAfter(Duration::ZERO)).await;
                    continue;
                }
                let delivery = agentlane_aws::delivery_from_parts(
                    record.body.as_deref().unwrap_or_default(),
                    receipt,
                    record.attributes.get("ApproximateReceiveCount").map(String::as_str),
                );
                let settlement = match delivery {
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
                        Settlement::Ack
                    }
                };
                settle(queue, receipt, settlement).await;
                if settlement != Settlement::Ack {
                    failed = true;
                    failures.push(failure(record));
                }
            }
            failures
        }
    });
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = join_all(per_group).await.into_iter().flatten().collect();
    response
}

/// Applies `settlement` to a record now: deletes it, or sets its visibility to the delay.
async fn settle(queue: &dyn LaneQueue, receipt: &str, settlement: Settlement) {
    if receipt.is_empty() {
        return;
    }
    let receipt = agentlane_core::Receipt(receipt.to_owned());
    let result = match settlement {
        Settlement::Ack => queue.ack(&receipt).await,
        Settlement::VisibleAfter(after) => queue.set_visibility(&receipt, after).await,
    };
    match result {
        Ok(()) | Err(agentlane_core::QueueError::StaleReceipt) => {}
        Err(e) => {
            tracing::warn!(error = %e, "could not settle a record early (the batch response still does)")
        }
    }
}

#[cfg(test)]
mod tests;
