//! agentlane's domain: the records a turn leaves behind (sessions, runs, transcript entries,
//! events) and the seams every backend implements: [`Store`] (the sum of [`TurnIntake`],
//! [`SessionLock`], [`FencedWriter`] and [`HistoryReader`]), [`LaneQueue`] and [`Clock`].
//!
//! This crate does no I/O. The embedded (SQLite) and AWS (DynamoDB + SQS FIFO) adapters live in
//! their own crates and pass the same conformance suite (`agentlane-conformance`).
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod action;
pub mod agent;
pub mod api_key;
pub mod backoff;
pub mod clock;
pub mod commit_parts;
pub mod cron;
pub mod fingerprint;
pub mod ids;
pub mod metrics;
pub mod queue;
pub mod record_size;
pub mod run;
pub mod session;
pub mod slots;
pub mod spend;
pub mod store;
pub mod tenant_secret;
pub mod thinking;
pub mod transcript;
pub mod validate;

pub use action::{
    ActionAnswer, ApprovalAnswer, ApprovalPolicy, ClientTool, PendingCall, PendingKind,
    RecordedAnswer, RequiredAction, ToolOutputAnswer,
};
pub use agent::{
    Agent, AgentSpec, AgentStore, AgentTools, HttpToolDef, MAIN_AGENT, McpServerDef, SecretRef,
};
pub use api_key::{ApiKeyRecord, KeyStore, NewApiKey};
pub use clock::{Clock, SystemClock};
pub use commit_parts::{MAX_COMMIT_BYTES, MAX_COMMIT_WRITES};
pub use cron::{CronJob, CronStore, JobId, JobRun, JobRunStatus, Schedule};
pub use fingerprint::fingerprint;
pub use ids::{FencingToken, Lane, RunId, SessionId, SessionKey, TenantId};
pub use queue::{
    AcceptedRecord, DeliveredLock, Delivery, LaneMessage, LaneQueue, MAX_ACCEPTED_RECORD_BYTES,
    QueueError, QueueResult, Receipt, TurnMessage,
};
pub use record_size::MAX_RECORD_BYTES;
pub use run::{
    AbortReason, AttemptRecord, Event, EventStream, LivenessState, Payload, QueueMode,
    QueueOutcome, Run, RunError, RunStatus, TurnRequest, Usage,
};
pub use session::{
    Fence, InterruptMark, InterruptWatch, LockAttempt, PendingSettle, RESET_HOLD_MS, Session,
    SessionStatus, SessionUpdate,
};
// The role traits are re-exported with `Store`: a caller holding `Arc<dyn Store>` calls their
// methods directly; a concrete adapter type needs the role's trait in scope.
pub use slots::{RateScope, SlotKind, SlotStore, granted_of};
pub use spend::SpendLedger;
pub use store::{
    AcceptOutcome, AcceptedAgent, AnswerOutcome, CheckedCommit, Commit, Expiry, FencedWriter,
    HistoryReader, Layered, MAX_STEERS_PER_TAKE, NewTurn, PageBudget, PageTally, ProcessingIndex,
    RetentionPolicy, RunPage, RunProgress, SessionCatalog, SessionCursor, SessionFilter,
    SessionLock, SessionPage, SessionRemoval, SessionRetention, SteerTake, Store, StoreCall,
    StoreError, StoreLayer, StoreResult, TenantEraser, TenantErasure, TenantPage, TurnIntake,
};
pub use tenant_secret::{EnvGrants, PutSecret, SealedValue, SecretMeta, SecretRecord, SecretStore};
pub use thinking::{ThinkingLevel, ThinkingSupport, thinking_support};
pub use transcript::{Message, ToolCall, TranscriptEntry};
