//! agentlane's embedded default backend: [`Store`](agentlane_core::Store) and
//! [`LaneQueue`](agentlane_core::LaneQueue) on one SQLite database file.
//!
//! - One file (`agentlane.sqlite3`) under the data directory, WAL journal, `synchronous=NORMAL`,
//!   a busy timeout; schema changes are numbered migrations tracked in `user_version`.
//! - One writer connection on its own thread: the writes waiting there share one `IMMEDIATE`
//!   transaction (group commit), each in its own savepoint so a failed one is rolled back
//!   alone, and each is answered only once that transaction has committed. Reads run on the
//!   caller's thread on reader connections (WAL), each behind a mutex. Statements are cached
//!   and planned once; WAL checkpoints run on a background thread.
//! - Fenced commits re-check the session's lock owner and fencing token inside the same
//!   transaction that writes, so a writer that lost its lease writes nothing.
//! - The lane queue keeps messages in a table: only a lane's oldest unacked message is
//!   deliverable, visibility timeouts are wall-clock deadlines, so an in-flight message
//!   becomes deliverable again after its timeout, also across restarts. Acked messages are kept
//!   for [`DEDUP_RETENTION_MS`] so that a re-enqueued dedup id is ignored. Ready lane heads are
//!   delivered fairly across tenants, with an optional cap on one tenant's messages in flight
//!   ([`SqliteBackend::set_tenant_in_flight_cap`]). A receive skips its look (a write) when
//!   nothing can have become deliverable since the last one found nothing, and an ack can take
//!   the next delivery in the same write (`ack_and_receive`).
//!
//! Commits follow core's rules ([`Commit::check`](agentlane_core::Commit::check)): a commit
//! over the limits is refused, oversized records are stored cut by the same size rule as on
//! DynamoDB, transcript entries go to the session's current id (the one the fence guards), and
//! events to [`Commit::events_run_id`](agentlane_core::Commit::events_run_id).
#![warn(unreachable_pub)]
#![warn(missing_docs)]

mod accepted;
mod agents;
mod api_keys;
mod backend;
mod catalog;
mod cron;
mod erase;
mod error;
mod fair;
mod ingress;
mod lane_table;
mod lock;
mod looks;
mod processing;
mod queue;
mod records;
mod retention;
mod schema;
mod slots;
mod spend;
mod steer;
mod store;
mod tenant_secrets;
mod writer;

pub use backend::{DB_FILE_NAME, SqliteBackend};
pub use lane_table::{DEDUP_RETENTION_MS, DeadLetter, MAX_FAILED_DELIVERIES, QueueStats};
pub use queue::RECHECK;
