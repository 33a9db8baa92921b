//! The storage seam: sessions, runs, transcript entries, events, idempotency records and the
//! session write lock, as four narrow traits by role and [`Store`], their sum.
//!
//! | trait | who uses it | methods |
//! |---|---|---|
//! | [`TurnIntake`] | the API edge | `accept_turn`, `request_abort`, `reset_session` |
//! | [`SessionLock`] | a runner | `acquire_lock`, `renew_lock`, `release_lock` |
//! | [`FencedWriter`] | a runner holding the lock | `commit`, `take_steers` |
//! | [`HistoryReader`] | both | `get_run`, `get_session`, `read_transcript_page`, `read_events_page` (bounded by bytes), `read_transcript`, `read_events`, `abort_requested`, `next_event_seq` |
//!
//! Two kinds of writes exist:
//! - unfenced writes from the API edge ([`TurnIntake`]), each atomic and conditional on its own;
//! - fenced writes from a lock holder ([`FencedWriter::commit`]): applied all together, and only
//!   if the session's lock is still held by the same owner with the same fencing token.
//!
//! Sizes follow one rule on every backend: a commit fits [`MAX_COMMIT_WRITES`](crate::MAX_COMMIT_WRITES)
//! / [`MAX_COMMIT_BYTES`](crate::MAX_COMMIT_BYTES) or is refused, and each stored record is
//! brought within [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES) by the
//! [size rule](crate::record_size) (see [`FencedWriter::commit`]).
//!
//! Beside them, [`SessionCatalog`] (the operator's lists and a session's deletion) and
//! [`ProcessingIndex`] (the supervisor's index), [`TenantEraser`] (an operator's erasure) and
//! [`SessionRetention`] (the retention sweep) are roles of their own.
//!
//! Every adapter implements the four traits; anything that implements all four is a [`Store`].
//! Code that needs one role takes that trait (`&dyn HistoryReader`), and an `Arc<dyn Store>`
//! coerces to any of them.

mod catalog;
mod erase;
mod error;
mod intake;
mod layer;
mod lock;
mod page;
mod processing;
mod reader;
mod retention;
mod steer;
mod writer;

pub use catalog::{
    RunPage, SessionCatalog, SessionCursor, SessionFilter, SessionPage, SessionRemoval,
};
pub use erase::{TenantEraser, TenantErasure};
pub use error::{StoreError, StoreResult};
pub use intake::{AcceptOutcome, AcceptedAgent, AnswerOutcome, NewTurn, TurnIntake};
pub use layer::{Layered, StoreCall, StoreLayer};
pub use lock::SessionLock;
pub use page::{PageBudget, PageTally};
pub use processing::ProcessingIndex;
pub use reader::{HistoryReader, RunProgress};
pub use retention::{
    DAY, Expiry, MAX_PASS_INTERVAL, RetentionPolicy, SessionRetention, TenantPage, Verdict, cutoff,
    verdict,
};
pub use steer::{MAX_STEERS_PER_TAKE, SteerTake};
pub use writer::{CheckedCommit, Commit, FencedWriter};

/// Persistent state of agentlane: all four roles. Every key starts with the tenant: isolation
/// is structural. Implemented for every type that implements the four role traits; an
/// `Arc<dyn Store>` answers all their methods.
pub trait Store: TurnIntake + SessionLock + FencedWriter + HistoryReader {}

impl<T> Store for T where T: TurnIntake + SessionLock + FencedWriter + HistoryReader + ?Sized {}
