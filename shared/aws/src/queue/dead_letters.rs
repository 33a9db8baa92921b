//! [`SqsDeadLetters`]: the lane queue's SQS dead-letter queue, read by the supervisor's sweep.
//! A message lands there when its receive count ran out while its function crashed; its run is
//! still unfinished and blocks its session until the sweep ends it `dead_lettered`.

use super::{MAX_RECEIVE_BATCH, classify};
use crate::queue::wire::delivery_from_parts;
use agentlane_core::{QueueResult, TurnMessage};
use aws_sdk_sqs::Client;
use std::time::Duration;

/// How long a dead letter stays hidden from other sweeps while one reconciles it; if that
/// sweep dies before deleting it, the message comes back to the next one.
pub const DEAD_LETTER_VISIBILITY: Duration = Duration::from_secs(60);

/// One message of the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsDeadLetter {
    /// The receipt handle to delete it with.
    pub receipt_handle: String,
    /// The turn it carried; `None` when its body is not a lane message.
    pub turn: Option<TurnMessage>,
}

/// Reads and deletes dead letters of one SQS queue (the lane queue's DLQ). Cheap to clone.
#[derive(Clone, Debug)]
pub struct SqsDeadLetters {
    client: Client,
    queue_url: String,
}

impl SqsDeadLetters {
    /// The dead letters of the queue at `queue_url` (`AGENTLANE_DLQ_URL`).
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Up to `limit` dead letters (short polls of up to ten, until the queue has none
    /// visible), each hidden for [`DEAD_LETTER_VISIBILITY`] until deleted.
    pub async fn receive_letters(&self, limit: usize) -> QueueResult<Vec<SqsDeadLetter>> {
        let mut letters = Vec::new();
        while letters.len() < limit {
            let batch = (limit - letters.len()).min(MAX_RECEIVE_BATCH);
            let out = self
                .client
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(i32::try_from(batch).unwrap_or(1))
                .visibility_timeout(DEAD_LETTER_VISIBILITY.as_secs() as i32)
                .wait_time_seconds(0)
                .send()
                .await;
            let messages = match out {
                Ok(out) => out.messages.unwrap_or_default(),
                Err(err) if letters.is_empty() => return Err(classify(err, false)),
                // What was received stays hidden: reconcile it rather than wait for it.
                Err(err) => {
                    tracing::warn!(error = %classify(err, false), "dead-letter receive stopped early");
                    break;
                }
            };
            if messages.is_empty() {
                break;
            }
            for message in messages {
                let Some(receipt) = message.receipt_handle() else {
                    continue;
                };
                let turn = delivery_from_parts(message.body().unwrap_or_default(), receipt, None)
                    .ok()
                    .map(|d| d.message.body);
                letters.push(SqsDeadLetter {
                    receipt_handle: receipt.to_owned(),
                    turn,
                });
            }
        }
        Ok(letters)
    }

    /// Deletes a dead letter once its run is recorded. A receipt that is no longer current (the
    /// message came back to another sweep) is `StaleReceipt`.
    pub async fn delete_letter(&self, receipt_handle: &str) -> QueueResult<()> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| classify(e, true))?;
        Ok(())
    }
}
