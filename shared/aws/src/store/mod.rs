//! [`DynamoStore`]: the `Store` on ONE DynamoDB table (single-table design).
//!
//! # Table design
//!
//! Keys are strings: partition key `PK`, sort key `SK`. Every `PK` starts with `T#{tenant}#`, so
//! tenant isolation is structural, never a filter.
//!
//! | item | `PK` | `SK` | attributes |
//! |---|---|---|---|
//! | session | `T#{t}#S#{sessionKey}` | `SESSION` | `tenant`, `sessionKey`, `sessionId`, `status` (`idle`/`processing`), `activeRunId`?, `createdAt`, `updatedAt`, `lastProgressAt`?, `runsAccepted`, `runsFinished`, `generation`, lock: `lockOwner`? (absent = free), `lockUntil` (ms), `fence` (only grows); `procPk`/`procAt` while processing |
//! | run | `T#{t}#R#{runId}` | `RUN` | `run` (the whole run as JSON, a string), `status`, `sessionId`, `abortRequested` (BOOL) |
//! | event | `T#{t}#R#{runId}` | `V#{seq:08}` | `event` (JSON), `seq`, `expiresAt` (TTL, 30 days) |
//! | transcript entry | `T#{t}#SID#{sessionId}` | `E#{seq:012}` | `entry` (JSON), `seq`, `runId` |
//! | idempotency | `T#{t}#K#{key}` (`K#h#{sha256}` when > 512 bytes) | `IDEM` | `runId`, `expiresAtMs` (checked), `expiresAt` (TTL) |
//! | cron job, job count | `T#{t}#CRON` | `J#{jobId}`, `COUNT` | see [`cron`](self::cron): `job` JSON, `version`; `dueBucket`/`dueAt` while due |
//!
//! - `abortRequested` lives only in its own attribute: the API sets it ([`Store::request_abort`]),
//!   runner commits replace `run` and `status` but never touch it, and reads merge it back.
//! - Numbers are DynamoDB numbers (ms since the epoch unless named `expiresAt`, which is epoch
//!   seconds for DynamoDB TTL). TTL deletion is eventual, so idempotency expiry is also checked
//!   in the condition (`expiresAtMs < :now`).
//! - Transcript entries / events whose JSON would exceed ~350 KB (items are capped at 400 KB) are
//!   stored with their message content truncated and marked / their `data` replaced by a size note.
//! - Event keys sort correctly up to 10^8 events per run, entry keys up to 10^12 per session.
//!
//! Global secondary indexes (both sparse, projection ALL):
//! - `processing`: `procPk` (S, always `PROCESSING`) / `procAt` (N, last progress ms). Set while a
//!   session is `processing`, removed when it goes idle: the stuck-session sweep queries
//!   `procAt < now - threshold`.
//! - `cronDue`: `dueBucket` (S, always `DUE`) / `dueAt` (N): cron jobs by the time a scheduler
//!   must look at them next (their next slot, or their fire in flight).
//!
//! TTL attribute: `expiresAt` (events 30 days after writing, idempotency records after their TTL).
//!
//! # Writes
//!
//! - `accept_turn`: one `TransactWriteItems` (idempotency put conditional on absence-or-expired;
//!   session put-if-absent or counter update conditional on the session id read just before; run
//!   put-if-absent). A cancelled idempotency condition is the replay path: the stored run is
//!   answered.
//! - Locks: conditional `UpdateItem`s on the session item (`fence = fence + 1` on acquire).
//! - `commit`: one `TransactWriteItems` with the session condition `lockOwner = :me AND fence =
//!   :f` (a `ConditionCheck`, or folded into the session `Update` when the commit changes the
//!   session) plus `attribute_not_exists(SK)` puts and the run update. Above 100 items it is split
//!   into transactions of at most 100, each carrying the session condition; atomicity then holds
//!   per transaction only.

mod accept;
mod commit;
mod cron;
mod error;
mod item;
mod keys;
mod lock;
mod read;

use agentlane_core::{
    AcceptOutcome, Commit, Event, Fence, LockAttempt, NewTurn, Run, RunId, Session, SessionId,
    SessionKey, Store, StoreResult, TenantId, TranscriptEntry,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Name of the sparse GSI on processing sessions.
pub const PROCESSING_INDEX: &str = "processing";
/// Name of the GSI on cron jobs' due time.
pub const CRON_DUE_INDEX: &str = "cronDue";
/// The TTL attribute (epoch seconds).
pub const TTL_ATTRIBUTE: &str = "expiresAt";
/// How long events are kept before DynamoDB's TTL may delete them.
pub const EVENT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// How many times a write hitting a concurrent transaction on the same item is retried.
const CONFLICT_RETRIES: u32 = 5;
/// Session ids remembered per held fence; beyond this the memo is cleared (reads refill it).
const MAX_REMEMBERED_FENCES: usize = 10_000;

/// The DynamoDB `Store`. Cheap to clone; clones share the client.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    table: String,
    /// `(session PK, fencing token)` → the session id when the lock was taken. A session id only
    /// changes through a reset, which needs a free lock and clears the owner, so it is fixed for
    /// as long as a fence is current; commits then need no extra read to find the transcript.
    fence_sessions: Arc<Mutex<HashMap<(String, u64), SessionId>>>,
}

impl DynamoStore {
    /// A store on `table` (created by [`crate::setup::ensure_resources`]).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            fence_sessions: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The table this store writes to.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn remember_fence(&self, fence: &Fence, session_id: SessionId) {
        let key = (
            keys::session_pk(&fence.tenant, &fence.session_key),
            fence.token.0,
        );
        if let Ok(mut map) = self.fence_sessions.lock() {
            if map.len() >= MAX_REMEMBERED_FENCES {
                map.clear();
            }
            map.insert(key, session_id);
        }
    }

    fn remembered_session(&self, fence: &Fence) -> Option<SessionId> {
        let key = (
            keys::session_pk(&fence.tenant, &fence.session_key),
            fence.token.0,
        );
        self.fence_sessions
            .lock()
            .ok()
            .and_then(|map| map.get(&key).cloned())
    }

    fn forget_fence(&self, fence: &Fence) {
        let key = (
            keys::session_pk(&fence.tenant, &fence.session_key),
            fence.token.0,
        );
        if let Ok(mut map) = self.fence_sessions.lock() {
            map.remove(&key);
        }
    }
}

/// Back-off before retrying after a transaction conflict: 10, 20, 40, … ms.
async fn conflict_backoff(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(10u64 << attempt.min(6))).await;
}

/// Wall-clock epoch seconds for TTL attributes, never earlier than the domain time `now_ms`
/// (tests may run on a fake clock; TTL deletion is storage retention, not domain time).
fn ttl_epoch_seconds(now_ms: u64, keep: Duration) -> u64 {
    let wall = agentlane_core::Clock::now_ms(&agentlane_core::SystemClock);
    wall.max(now_ms) / 1000 + keep.as_secs()
}

#[async_trait]
impl Store for DynamoStore {
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome> {
        self.accept(turn).await
    }

    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.load_run(tenant, run_id).await
    }

    async fn request_abort(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.set_abort_requested(tenant, run_id).await
    }

    async fn abort_requested(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<bool> {
        self.load_abort_requested(tenant, run_id).await
    }

    async fn get_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
    ) -> StoreResult<Option<Session>> {
        self.load_session(tenant, key).await
    }

    async fn reset_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        new_session_id: SessionId,
        now: u64,
    ) -> StoreResult<Session> {
        self.reset(tenant, key, new_session_id, now).await
    }

    async fn read_transcript(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.query_transcript(tenant, session_id, after, limit)
            .await
    }

    async fn read_events(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        self.query_events(tenant, run_id, after, limit).await
    }

    async fn acquire_lock(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        owner: &str,
        lease_ms: u64,
        now: u64,
    ) -> StoreResult<LockAttempt> {
        self.acquire(tenant, key, owner, lease_ms, now).await
    }

    async fn renew_lock(&self, fence: &Fence, lease_ms: u64, now: u64) -> StoreResult<()> {
        self.renew(fence, lease_ms, now).await
    }

    async fn release_lock(&self, fence: &Fence) -> StoreResult<()> {
        self.release(fence).await
    }

    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        self.apply_commit(fence, commit).await
    }
}
