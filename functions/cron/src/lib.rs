//! The cron Lambda's handler. EventBridge calls it every minute with a scheduled event.
//!
//! Cron jobs and the stuck-session sweep are not built yet: the tick validates its event and
//! reports that it fired nothing, so the schedule can be deployed safely now.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use serde::Serialize;

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TickReport {
    /// The schedule time of the event (its `time` field).
    pub scheduled_for: String,
    pub jobs_fired: u32,
    pub stuck_sessions_recovered: u32,
}

/// Why a tick refused its input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TickError {
    #[error("not a scheduled event (detail-type {0:?})")]
    NotScheduled(String),
    #[error("the scheduled event has no time")]
    MissingTime,
}

/// One tick of the schedule.
pub async fn tick(event: EventBridgeEvent<serde_json::Value>) -> Result<TickReport, TickError> {
    let detail_type = event.detail_type;
    if detail_type != "Scheduled Event" {
        return Err(TickError::NotScheduled(detail_type));
    }
    let scheduled_for = event
        .time
        .map(|t| t.to_rfc3339())
        .ok_or(TickError::MissingTime)?;
    tracing::info!(%scheduled_for, "cron tick: no jobs or sweeps are configured yet");
    Ok(TickReport {
        scheduled_for,
        jobs_fired: 0,
        stuck_sessions_recovered: 0,
    })
}

impl From<TickError> for lambda_runtime::Diagnostic {
    fn from(error: TickError) -> Self {
        let error_type = match error {
            TickError::NotScheduled(_) => "NotScheduled",
            TickError::MissingTime => "MissingTime",
        };
        lambda_runtime::Diagnostic {
            error_type: error_type.to_owned(),
            error_message: error.to_string(),
        }
    }
}
