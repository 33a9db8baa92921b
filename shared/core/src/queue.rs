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
    /// The tenant the run belongs to.
    pub tenant: TenantId,
    /// The run to execute.
    pub run_id: RunId,
    /// The run's session key, so a runner can take the session lock before reading the run
    /// (one read fewer per turn). Optional: older messages lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<SessionKey>,
    /// The run's record as its accept wrote it, when small (see [`AcceptedRecord`]): a runner
    /// whose store checks it at the run's first commit
    /// ([`FencedWriter::expect_accepted`](crate::FencedWriter::expect_accepted)) starts the
    /// run from it instead of reading the run (one request fewer per turn on DynamoDB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<AcceptedRecord>,
}

/// A run record's JSON exactly as the accept stored it, carried in the run's first lane
/// message. Never trusted alone: the store refuses the run's first commit unless the stored
/// record is still this one, with no abort requested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AcceptedRecord(pub String);

/// Largest [`AcceptedRecord`] a lane message carries (bytes of JSON); a larger run is read.
pub const MAX_ACCEPTED_RECORD_BYTES: usize = 16 * 1024;

impl AcceptedRecord {
    /// The record of `run`, just accepted, when it is within [`MAX_ACCEPTED_RECORD_BYTES`].
    pub fn of(run: &crate::Run) -> Option<Self> {
        serde_json::to_string(run)
            .ok()
            .filter(|json| json.len() <= MAX_ACCEPTED_RECORD_BYTES)
            .map(Self)
    }

    /// The run it records, when it decodes.
    pub fn run(&self) -> Option<crate::Run> {
        serde_json::from_str(&self.0).ok()
    }
}

/// A message on one lane's FIFO: it names the run a runner should execute next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneMessage {
    /// The lane (`{tenant}/{sessionKey}`) the message is ordered within.
    pub lane: Lane,
    /// Deduplication id: enqueueing twice with one id stores one message (the run id for an
    /// accept, `<runId>:resume:<n>` for a resume).
    pub dedup_id: String,
    /// Which run to execute.
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
                accepted: None,
            },
        }
    }
}

/// An opaque handle on one delivery of a message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Receipt(pub String);

/// One receipt of a message by a consumer: ack it when done, or change its visibility.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The message delivered.
    pub message: LaneMessage,
    /// The handle to ack or hand back this delivery with.
    pub receipt: Receipt,
    /// 1 on the first delivery.
    pub receive_count: u32,
    /// The session's lock, when the queue took it for this delivery in the write that
    /// delivered it (the embedded queue, when its store is the runner's: see
    /// `SqliteBackend::lock_on_receive`); the runner starts from it instead of acquiring the
    /// lock, and releases it like a lock it took. `None`: the runner acquires the lock.
    pub lock: Option<DeliveredLock>,
}

/// A session lock taken for a delivery: the fence, and the session as the acquire left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveredLock {
    /// The lock's fence.
    pub fence: crate::session::Fence,
    /// The session as the acquire wrote it.
    pub session: Box<crate::session::Session>,
}

/// Why a queue operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The receipt no longer names an in-flight delivery (acked, or redelivered since).
    #[error("stale receipt")]
    StaleReceipt,
    /// The queue refused the call for now (rate limit); retry after a pause.
    #[error("throttled: {0}")]
    Throttled(String),
    /// The queue could not be reached or answered with an error; retry later.
    #[error("queue unavailable: {0}")]
    Unavailable(String),
    /// A received message could not be read as a lane message (its text says why).
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// What a queue operation returns.
pub type QueueResult<T> = Result<T, QueueError>;

/// A per-lane FIFO, at-least-once queue with a visibility timeout (the semantics above); SQS
/// FIFO and the embedded queue implement it.
#[async_trait]
pub trait LaneQueue: Send + Sync + 'static {
    /// Adds `message` at the tail of its lane (a duplicate `dedup_id` is stored once).
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

    /// Acks `receipt` and, on a queue that can do both in one step, looks once (without
    /// waiting) for up to `max` next deliveries, each invisible for `visibility`: the ack and the
    /// look then cost one write instead of two. The default only acks and returns nothing; the
    /// caller receives as usual. An error means nothing was acked or delivered.
    async fn ack_and_receive(
        &self,
        receipt: &Receipt,
        max: usize,
        visibility: Duration,
    ) -> QueueResult<Vec<Delivery>> {
        let _ = (max, visibility);
        self.ack(receipt).await?;
        Ok(Vec::new())
    }

    /// Sets the remaining invisibility of an in-flight delivery (extend while working; zero hands
    /// the message back for immediate redelivery, at the head of its lane).
    async fn set_visibility(&self, receipt: &Receipt, visibility: Duration) -> QueueResult<()>;
}
