//! [`DynamoStore`]: the `Store` on ONE DynamoDB table (single-table design).
//!
//! # Table design
//!
//! Keys are strings: partition key `PK`, sort key `SK`. Every `PK` starts with `T#{tenant}#`, so
//! tenant isolation is structural, never a filter.
//!
//! | item | `PK` | `SK` | attributes |
//! |---|---|---|---|
//! | session | `T#{t}#S#{sessionKey}` | `SESSION` | `tenant`, `sessTenant` (`T#{t}`), `sessionKey`, `sessionId`, `status` (`idle`/`processing`), `activeRunId`?, `createdAt`, `updatedAt`, `lastProgressAt`?, `runsAccepted`, `runsFinished`, `generation`, lock: `lockOwner`? (absent = free), `lockUntil` (ms), `fence` (only grows); `procPk`/`procAt` while processing; `pendPk`/`pendAt`, `openRun{seq}`, `redrives`? while work is pending |
//! | run | `T#{t}#R#{runId}` | `RUN` | `run` (the whole run as JSON, a string), `status`, `sessionId`, `abortRequested` (BOOL), `runSession` (its session's `PK`), `sessionSeq` |
//! | event | `T#{t}#R#{runId}` | `V#{seq:08}` | `event` (JSON), `seq`, `expiresAt` (TTL, 30 days) |
//! | transcript entry | `T#{t}#SID#{sessionId}` | `E#{seq:012}` | `entry` (JSON), `seq`, `runId` |
//! | idempotency | `T#{t}#K#{key}` (`K#h#{sha256}` when > 512 bytes) | `IDEM` | `runId`, `expiresAtMs` (checked), `expiresAt` (TTL) |
//! | API key (lookup), API key (listing) | `KEY#{keyId}`, `T#{t}#KEYS` | `KEY`, `K#{keyId}` | see [`api_keys`](self::api_keys): `tenant`, `hash` (lookup only), `createdAt`, `revokedAt`? |
//! | cron job, job count | `T#{t}#CRON` | `J#{jobId}`, `COUNT` | see [`cron`](self::cron): `job` JSON, `version`; `dueBucket`/`dueAt` while due |
//! | tenant secret, secret count | `T#{t}#SECRETS` | `N#{name}`, `COUNT` | see [`tenant_secrets`](self::tenant_secrets): sealed parts as binary attributes, `createdAt`, `updatedAt`, `version` |
//!
//! - `abortRequested` lives only in its own attribute: the API sets it ([`TurnIntake::request_abort`]),
//!   runner commits replace `run` and `status` but never touch it, and reads merge it back.
//! - Numbers are DynamoDB numbers (ms since the epoch unless named `expiresAt`, which is epoch
//!   seconds for DynamoDB TTL). TTL deletion is eventual, so idempotency expiry is also checked
//!   in the condition (`expiresAtMs < :now`).
//! - Record sizes follow core's one rule ([`agentlane_core::record_size`]), the same as on the
//!   embedded store: entries / events over `MAX_RECORD_BYTES` (items are capped at 400 KB) are
//!   stored with their text cut and marked / their `data` replaced by a size note; a run record
//!   over it is refused.
//! - Event keys sort correctly up to 10^8 events per run, entry keys up to 10^12 per session.
//!
//! Global secondary indexes (all sparse, projection ALL):
//! - `processing`: `procPk` (S, always `PROCESSING`) / `procAt` (N, last progress ms). Set while a
//!   session is `processing`, removed when it goes idle: the stuck-session sweep queries
//!   `procAt < now - threshold`.
//! - `pending`: `pendPk` (S, always `PENDING`) / `pendAt` (N, since when accepted work has been
//!   pending). Set by `accept_turn` (`if_not_exists`, in its own write, with `openRun{seq}` =
//!   run id), moved or removed only by the sweep (conditional on the counters it read): the
//!   sweep finds idle sessions whose queued run lost its lane message without a scan.
//! - `sessions`: `sessTenant` (S, `T#{tenant}`) / `updatedAt` (N): every session item, so a
//!   tenant's sessions list newest activity first without a scan (issue 24).
//! - `sessionRuns`: `runSession` (S, the session item's `PK`) / `sessionSeq` (N): every run
//!   item, so a session's runs list in order and a session's deletion finds them.
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
//!   session) plus `attribute_not_exists(SK)` puts and the run update. Core's
//!   [`Commit::check`](agentlane_core::Commit::check) keeps it within 100 items; a larger commit is
//!   refused (`TooLarge`), never split: the writer splits with `Commit::split`, so every commit is
//!   atomic.
//! - `next_event_seq`: one `Query` of the run's partition, `SK` beginning with `V#`, newest first,
//!   `Limit = 1`, projecting `seq`.

mod accept;
mod agents;
mod api_keys;
mod backfill;
mod catalog;
mod commit;
mod cron;
mod erase;
mod error;
mod item;
mod keys;
mod lock;
mod processing;
mod read;
mod retention;
mod slots;
mod spend;
mod steer;
mod tenant_secrets;

use agentlane_core::{
    AbortReason, AcceptOutcome, AcceptedRecord, Clock, Commit, Event, Fence, FencedWriter,
    HistoryReader, LockAttempt, NewTurn, PageBudget, QueueMode, Run, RunId, Session, SessionId,
    SessionKey, SessionLock, SteerTake, StoreResult, SystemClock, TenantId, TranscriptEntry,
    TurnIntake, backoff,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
pub use backfill::IndexBackfill;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Name of the sparse GSI on processing sessions.
pub const PROCESSING_INDEX: &str = "processing";
/// Name of the sparse GSI on sessions with pending work (issue 11).
pub const PENDING_INDEX: &str = "pending";
/// Name of the GSI on a tenant's sessions by activity (issue 24): `sessTenant` / `updatedAt`.
pub const SESSIONS_INDEX: &str = "sessions";
/// Name of the GSI on a session's runs by their order (issue 24): `runSession` / `sessionSeq`.
pub const SESSION_RUNS_INDEX: &str = "sessionRuns";
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

/// A held fence, as the memos key it: `(session PK, fencing token)`.
type FenceKey = (String, u64);

/// The DynamoDB `Store`. Cheap to clone; clones share the client.
#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    /// Wall time for TTL attributes (domain times come with each call).
    clock: Arc<dyn Clock>,
    /// `(session PK, fencing token)` → the session id when the lock was taken. A session id only
    /// changes through a reset, which needs a free lock and clears the owner, so it is fixed for
    /// as long as a fence is current; commits then need no extra read to find the transcript.
    fence_sessions: Arc<Mutex<HashMap<(String, u64), SessionId>>>,
    /// Tenant → when this process last put its tenant-registry item (ms; see `retention`).
    registered: Arc<Mutex<HashMap<TenantId, u64>>>,
    /// `(session PK, fencing token)` → a run its holder took from its accepted record without
    /// reading it, and that record: the run's next commit under the fence checks it
    /// ([`FencedWriter::expect_accepted`]).
    fence_accepted: Arc<Mutex<HashMap<FenceKey, (RunId, AcceptedRecord)>>>,
}

impl DynamoStore {
    /// A store on `table` (created by [`crate::setup::ensure_resources`]).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            clock: Arc::new(SystemClock),
            fence_sessions: Arc::new(Mutex::new(HashMap::new())),
            registered: Arc::new(Mutex::new(HashMap::new())),
            fence_accepted: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The same store reading wall time (for TTL attributes) from `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
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
        if let Ok(mut map) = self.fence_accepted.lock() {
            map.remove(&key);
        }
    }

    /// The accepted record the next commit of `run_id` under `fence` must still find, taken
    /// (a commit checks it once).
    fn take_accepted(&self, fence: &Fence, run_id: &RunId) -> Option<AcceptedRecord> {
        let key = (
            keys::session_pk(&fence.tenant, &fence.session_key),
            fence.token.0,
        );
        let mut map = self.fence_accepted.lock().ok()?;
        match map.get(&key) {
            Some((expected, _)) if expected == run_id => map.remove(&key).map(|(_, r)| r),
            _ => None,
        }
    }
}

impl std::fmt::Debug for DynamoStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoStore")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// Back-off before retrying after a transaction conflict: about 10, 20, 40, … ms, each spread by
/// [`backoff::jittered`] so writers that collided do not collide again.
async fn conflict_backoff(attempt: u32) {
    let delay = Duration::from_millis(10u64 << attempt.min(6));
    tokio::time::sleep(backoff::jittered(delay)).await;
}

/// What one `TransactWriteItems` came to.
pub(super) enum Transact {
    Done,
    /// Lost to a concurrent transaction: worth another try after [`conflict_backoff`].
    Conflict,
    /// Cancelled because the conditions of these items (by index in the request) failed.
    ConditionFailed(Vec<usize>),
}

impl DynamoStore {
    /// Sends `items` as one transaction, once. Failures other than conditions and conflicts
    /// are store errors named after `op`.
    pub(super) async fn transact_once(
        &self,
        items: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
        op: &str,
    ) -> StoreResult<Transact> {
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let reasons = match result {
            Ok(_) => return Ok(Transact::Done),
            Err(err) => match error::DdbError::from(err) {
                error::DdbError::Cancelled(reasons) => reasons,
                error::DdbError::TransactionConflict => return Ok(Transact::Conflict),
                other => return Err(other.into_store_error(op)),
            },
        };
        let failed: Vec<usize> = (0..reasons.len())
            .filter(|&i| error::reason_code(&reasons, i) == Some(error::REASON_CONDITION))
            .collect();
        if !failed.is_empty() {
            return Ok(Transact::ConditionFailed(failed));
        }
        match error::generic_cancellation(&reasons) {
            error::DdbError::TransactionConflict => Ok(Transact::Conflict),
            other => Err(other.into_store_error(op)),
        }
    }

    /// Sends `items` as one transaction, again after a backoff while it loses to concurrent
    /// ones. `Err(indices)` inside: the conditions of those items failed, nothing was written.
    pub(super) async fn transact(
        &self,
        items: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
        op: &str,
    ) -> StoreResult<Result<(), Vec<usize>>> {
        for attempt in 0..CONFLICT_RETRIES {
            match self.transact_once(items.clone(), op).await? {
                Transact::Done => return Ok(Ok(())),
                Transact::ConditionFailed(failed) => return Ok(Err(failed)),
                Transact::Conflict => conflict_backoff(attempt).await,
            }
        }
        Err(agentlane_core::StoreError::Throttled(format!(
            "{op}: the items stayed in conflicting transactions"
        )))
    }
}

impl DynamoStore {
    /// Epoch seconds for TTL attributes: wall time, never earlier than the domain time `now_ms`
    /// (tests may run on a fake clock; TTL deletion is storage retention, not domain time).
    fn ttl_epoch_seconds(&self, now_ms: u64, keep: Duration) -> u64 {
        self.clock.now_ms().max(now_ms) / 1000 + keep.as_secs()
    }
}

#[async_trait]
impl TurnIntake for DynamoStore {
    async fn accept_turn(&self, turn: NewTurn) -> StoreResult<AcceptOutcome> {
        self.accept(turn).await
    }

    async fn request_abort_for(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        reason: AbortReason,
    ) -> StoreResult<Option<Run>> {
        self.set_abort_requested(tenant, run_id, reason).await
    }

    async fn answer_action(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        answer: agentlane_core::RecordedAnswer,
    ) -> StoreResult<agentlane_core::AnswerOutcome> {
        self.record_answer(tenant, run_id, &answer).await
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

    async fn set_queue_mode(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        mode: Option<QueueMode>,
        now: u64,
    ) -> StoreResult<Session> {
        self.set_session_queue_mode(tenant, key, mode, now).await
    }
}

#[async_trait]
impl HistoryReader for DynamoStore {
    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<Option<Run>> {
        self.load_run(tenant, run_id).await
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

    async fn read_transcript_page(
        &self,
        tenant: &TenantId,
        session_id: &SessionId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.query_transcript(tenant, session_id, after, budget)
            .await
    }

    async fn read_events_page(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<Vec<Event>> {
        self.query_events(tenant, run_id, after, budget).await
    }

    async fn next_event_seq(&self, tenant: &TenantId, run_id: &RunId) -> StoreResult<u64> {
        self.newest_event_seq(tenant, run_id)
            .await
            .map(|newest| newest.map_or(0, |seq| seq + 1))
    }
}

#[async_trait]
impl SessionLock for DynamoStore {
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
}

#[async_trait]
impl FencedWriter for DynamoStore {
    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        self.apply_commit(fence, commit).await
    }

    async fn take_steers(&self, fence: &Fence, take: SteerTake) -> StoreResult<Vec<Run>> {
        self.take_pending_steers(fence, take).await
    }

    async fn steers_waiting(&self, fence: &Fence, take: &SteerTake) -> StoreResult<bool> {
        self.steers_waiting_for(fence, take).await
    }

    fn checks_accepted_records(&self) -> bool {
        true
    }

    fn expect_accepted(&self, fence: &Fence, run_id: &RunId, record: &AcceptedRecord) -> bool {
        let key = (
            keys::session_pk(&fence.tenant, &fence.session_key),
            fence.token.0,
        );
        let Ok(mut map) = self.fence_accepted.lock() else {
            return false;
        };
        if map.len() >= MAX_REMEMBERED_FENCES {
            map.clear();
        }
        map.insert(key, (run_id.clone(), record.clone()));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(u64);

    impl Clock for Fixed {
        fn now_ms(&self) -> u64 {
            self.0
        }
    }

    fn store(clock_ms: u64) -> DynamoStore {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version_latest()
            .build();
        DynamoStore::new(Client::from_conf(config), "t").with_clock(Arc::new(Fixed(clock_ms)))
    }

    #[test]
    fn ttls_follow_the_stores_clock_and_never_precede_the_domain_time() {
        let keep = Duration::from_secs(60);
        assert_eq!(store(5_000_000).ttl_epoch_seconds(1_000, keep), 5_000 + 60);
        assert_eq!(store(1_000).ttl_epoch_seconds(9_000_000, keep), 9_000 + 60);
    }
}
