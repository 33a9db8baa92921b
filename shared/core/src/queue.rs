//! The `LaneQueue` seam: per-lane FIFO, at-least-once, with a visibility timeout.
//!
//! Semantics every adapter provides (SQS FIFO has them natively):
//! - messages of one lane are delivered in enqueue order;
//! - while a lane's message is in flight (received, not acked, visibility not expired), no later
//!   message of that lane is delivered; other lanes are unaffected (unless the adapter is set to
//!   share queue groups between lanes, as SQS tenant lanes do: lanes of one group then also
//!   wait for each other);
//! - an unacked message becomes visible again when its visibility timeout ends (redelivery), or at
//!   once when handed back with a zero visibility;
//! - enqueueing twice with the same `dedup_id` stores one message.

use crate::ids::{Lane, RunId, SessionKey, TenantId};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The body of a lane message: which run to execute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnMessage {
    pub tenant: TenantId,
    pub run_id: RunId,
    /// The run's session key, so a runner can take the session lock before reading the run
    /// (one read fewer per turn). Optional: older messages lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<SessionKey>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneMessage {
    pub lane: Lane,
    pub dedup_id: String,
    pub body: TurnMessage,
}

impl LaneMessage {
    /// The message that (re)starts `run` on its session's lane, with `dedup_id`.
    pub fn for_run(run: &crate::Run, dedup_id: String) -> Self {
        Self {
            lane: Lane::for_session(&run.tenant, &run.session_key),
            dedup_id,
            body: TurnMessage {
                tenant: run.tenant.clone(),
                run_id: run.run_id.clone(),
                session_key: Some(run.session_key.clone()),
            },
        }
    }
}

/// An opaque handle on one delivery of a message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Receipt(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub message: LaneMessage,
    pub receipt: Receipt,
    /// 1 on the first delivery.
    pub receive_count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The receipt no longer names an in-flight delivery (acked, or redelivered since).
    #[error("stale receipt")]
    StaleReceipt,
    #[error("throttled: {0}")]
    Throttled(String),
    #[error("queue unavailable: {0}")]
    Unavailable(String),
    #[error("malformed message: {0}")]
    Malformed(String),
}

pub type QueueResult<T> = Result<T, QueueError>;

#[async_trait]
pub trait LaneQueue: Send + Sync + 'static {
    async fn enqueue(&self, message: &LaneMessage) -> QueueResult<()>;

    /// Up to `max` deliveries, each now invisible for `visibility`. Waits up to `wait` for a
    /// first message when none is ready.
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> QueueResult<Vec<Delivery>>;

    /// Deletes the delivered message.
    async fn ack(&self, receipt: &Receipt) -> QueueResult<()>;

    /// Sets the remaining invisibility of an in-flight delivery (extend while working; zero hands
    /// the message back for immediate redelivery, at the head of its lane).
    async fn set_visibility(&self, receipt: &Receipt, visibility: Duration) -> QueueResult<()>;
}
