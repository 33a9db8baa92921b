//! Cron jobs (SPEC §9): scheduled, isolated agent turns.
//!
//! - [`schedule`]: when a schedule fires — cron expressions (5 or 6 fields) in an IANA time
//!   zone, fixed intervals, one-shot times. Pure.
//! - [`plan`]: decisions on a job's state — claim a due slot (fire or skip; missed slots
//!   collapse into one catch-up fire), record a run's end (backoff, auto-disable, one-shot
//!   retries), deadlines. Pure, table-tested.
//! - [`fire`]: a claimed fire becomes a run in a fresh session `cron:<jobId>:<runId>`, through
//!   the normal intake and lane queue.
//! - [`ticker`] (feature `ticker`, on by default): the loop `serve` and the cron Lambda run — due jobs through the due index, one
//!   conditional write per job, then the side effects.
//! - [`delivery`] (feature `ticker`): webhook delivery of a finished fire's payloads.
//! - [`budget`]: the per-tenant fire budget (fires per minute), a token bucket. Pure.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod budget;
#[cfg(feature = "ticker")]
pub mod delivery;
pub mod fire;
pub mod plan;
pub mod schedule;
#[cfg(feature = "ticker")]
pub mod ticker;

pub use budget::FireBudget;
#[cfg(feature = "ticker")]
pub use delivery::WebhookSender;
pub use fire::{SubmitError, fire_now, fire_request};
pub use schedule::{CompiledSchedule, MAX_EVERY_SECONDS, ScheduleError, validate_new};
#[cfg(feature = "ticker")]
pub use ticker::{TickReport, Ticker, TickerConfig};
