//! `current_time`: the current date and time, in UTC or an IANA time zone.

use crate::{Tool, ToolContext, ToolError, ToolOutput};
use agentlane_core::{Clock, SystemClock};
use agentlane_providers::ToolSpec;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Deserialize;
use std::sync::Arc;

/// The tool's name.
pub const NAME: &str = "current_time";

/// Reads the clock it was given (the wall clock by default).
#[derive(Clone)]
pub struct CurrentTime {
    clock: Arc<dyn Clock>,
}

impl Default for CurrentTime {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for CurrentTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentTime").finish_non_exhaustive()
    }
}

#[derive(Debug, Default, Deserialize)]
struct Args {
    #[serde(default)]
    timezone: Option<String>,
}

impl CurrentTime {
    /// Reads the wall clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// Reads `clock` instead of the wall clock (tests, replays).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self { clock }
    }

    /// The answer for `timezone` (`None`: UTC), e.g. `2026-11-30T04:12:00+01:00 (Europe/Paris)`.
    pub fn now_in(&self, timezone: Option<&str>) -> Result<String, ToolError> {
        let ms = i64::try_from(self.clock.now_ms())
            .map_err(|_| ToolError::Failed("the clock is out of range".into()))?;
        let now = DateTime::<Utc>::from_timestamp_millis(ms)
            .ok_or_else(|| ToolError::Failed("the clock is out of range".into()))?;
        let tz = match timezone.map(str::trim).filter(|t| !t.is_empty()) {
            None => Tz::UTC,
            Some(name) => name
                .parse::<Tz>()
                .ok()
                .or_else(|| {
                    chrono_tz::TZ_VARIANTS
                        .iter()
                        .copied()
                        .find(|tz| tz.name().eq_ignore_ascii_case(name))
                })
                .ok_or_else(|| {
                    ToolError::InvalidArguments(format!(
                        "unknown time zone {name:?}; use an IANA name such as \"Europe/Paris\" or \"UTC\""
                    ))
                })?,
        };
        let local = now.with_timezone(&tz);
        Ok(format!(
            "{} ({})",
            local.format("%Y-%m-%dT%H:%M:%S%:z"),
            tz.name()
        ))
    }
}

#[async_trait]
impl Tool for CurrentTime {
    /// A clock read: anything longer than a few seconds is a stuck call.
    fn timeout(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(5))
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description:
                "Returns the current date and time (ISO 8601 with UTC offset) in UTC or in \
                          the given IANA time zone."
                    .to_owned(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "timezone": {
                        "type": "string",
                        "description": "IANA time zone name such as \"Europe/Paris\"; default UTC",
                    },
                },
                "additionalProperties": false,
            }),
        }
    }

    async fn call(&self, arguments: &str, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = if arguments.trim().is_empty() || arguments.trim() == "null" {
            Args::default()
        } else {
            serde_json::from_str(arguments).map_err(|e| {
                ToolError::InvalidArguments(format!("expected {{\"timezone\"?: string}}: {e}"))
            })?
        };
        Ok(ToolOutput {
            content: self.now_in(args.timezone.as_deref())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    struct Fixed(u64);

    impl Clock for Fixed {
        fn now_ms(&self) -> u64 {
            self.0
        }
    }

    fn ctx() -> ToolContext {
        ToolContext {
            cancel: CancellationToken::new(),
            run_id: "run-1".into(),
            tool_call_id: "call-1".into(),
        }
    }

    /// 2026-11-30T03:12:00Z
    fn tool() -> CurrentTime {
        CurrentTime::with_clock(Arc::new(Fixed(1_796_008_320_000)))
    }

    #[tokio::test]
    async fn answers_in_utc_or_the_requested_zone() {
        let cases = [
            ("{}", "2026-11-30T03:12:00+00:00 (UTC)"),
            ("", "2026-11-30T03:12:00+00:00 (UTC)"),
            (
                r#"{"timezone": "Europe/Paris"}"#,
                "2026-11-30T04:12:00+01:00 (Europe/Paris)",
            ),
            (
                r#"{"timezone": "america/new_york"}"#,
                "2026-11-29T22:12:00-05:00 (America/New_York)",
            ),
            (
                r#"{"timezone": "Asia/Kolkata"}"#,
                "2026-11-30T08:42:00+05:30 (Asia/Kolkata)",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(
                tool().call(args, ctx()).await.unwrap().content,
                want,
                "{args}"
            );
        }
    }

    #[tokio::test]
    async fn bad_zone_or_arguments_are_invalid_arguments() {
        for args in [
            r#"{"timezone": "Mars/Olympus"}"#,
            r#"{"timezone": 3}"#,
            "not json",
        ] {
            let err = tool().call(args, ctx()).await.unwrap_err();
            assert!(
                matches!(err, ToolError::InvalidArguments(_)),
                "{args}: {err:?}"
            );
        }
    }
}
