//! When a schedule fires: cron expressions in a time zone, fixed intervals, one-shot times.
//! Pure: no clock, no I/O — every function takes the times it needs.
//!
//! Cron expressions have 5 fields (`min hour dom month dow`, a `0` seconds field is put in
//! front) or 6 (seconds first). Day-of-week numbers are the usual cron ones (0 or 7 = Sunday,
//! 1 = Monday …; names work too), and when both day-of-month and day-of-week are restricted a
//! day matching either fires (classic cron's OR). The `cron` crate does the calendar walk.

use agentlane_core::Schedule;
use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use std::str::FromStr;

/// The longest interval of a new `everySeconds` job: ten years (365-day years). A fire time
/// then stays a few centuries from now, well inside the API's 64-bit millisecond times.
pub const MAX_EVERY_SECONDS: u64 = 10 * 365 * 86_400;

/// Why a schedule is refused. The messages name the problem for a 400 answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The `cron` expression does not parse.
    #[error("invalid cron expression {expr:?}: {why}")]
    InvalidCron {
        /// The expression as given.
        expr: String,
        /// What the cron parser objected to.
        why: String,
    },
    /// The `tz` is not an IANA time zone name.
    #[error("unknown time zone {0:?} (expected an IANA name such as Europe/Paris)")]
    UnknownTimeZone(String),
    /// The `at` time is not RFC 3339.
    #[error("`at` must be an RFC 3339 time such as 2030-01-01T09:00:00Z, got {0:?}")]
    InvalidAt(String),
    /// A new job's `at` time is already past.
    #[error("`at` ({0}) is in the past")]
    AtInPast(String),
    /// `everySeconds` is 0.
    #[error("`everySeconds` must be at least 1")]
    EveryTooSmall,
    /// A new job's `everySeconds` is longer than [`MAX_EVERY_SECONDS`].
    #[error("`everySeconds` must be at most {MAX_EVERY_SECONDS} (ten years), got {0}")]
    EveryTooLarge(u64),
}

/// A schedule checked and ready to compute fire times.
#[derive(Debug, Clone)]
pub enum CompiledSchedule {
    /// One or two `cron` schedules (two for day-of-month OR day-of-week); the earliest wins.
    Cron {
        /// The parsed expressions, in seconds-first form; the earliest next fire of them wins.
        schedules: Vec<cron::Schedule>,
        /// The zone the expression is read in (UTC when the job names none).
        tz: Tz,
    },
    /// Fires every `every_ms` from the job's anchor (`everySeconds`).
    Every {
        /// The interval in ms (at least 1000).
        every_ms: u64,
    },
    /// Fires once, at `at_ms`.
    At {
        /// The fire time, ms since the epoch.
        at_ms: u64,
    },
}

impl CompiledSchedule {
    /// Checks `schedule` (syntax, zone, interval). `at` times in the past are accepted here:
    /// [`validate_new`] refuses them for new jobs.
    pub fn compile(schedule: &Schedule) -> Result<Self, ScheduleError> {
        match schedule {
            Schedule::Cron { cron, tz } => {
                let tz = match tz.as_deref() {
                    None => Tz::UTC,
                    Some(name) => Tz::from_str(name)
                        .map_err(|_| ScheduleError::UnknownTimeZone(name.to_owned()))?,
                };
                Ok(CompiledSchedule::Cron {
                    schedules: compile_cron(cron)?,
                    tz,
                })
            }
            Schedule::Every { every_seconds } => {
                if *every_seconds < 1 {
                    return Err(ScheduleError::EveryTooSmall);
                }
                Ok(CompiledSchedule::Every {
                    every_ms: every_seconds.saturating_mul(1000),
                })
            }
            Schedule::At { at } => Ok(CompiledSchedule::At {
                at_ms: parse_at(at)?,
            }),
        }
    }

    /// The first fire time strictly after `after` (ms since epoch); `None` when nothing is left
    /// (a one-shot whose time passed). Intervals count from `anchor`: `anchor + k·every`, k ≥ 1.
    pub fn next_after(&self, anchor: u64, after: u64) -> Option<u64> {
        match self {
            CompiledSchedule::Cron { schedules, tz } => {
                let start = tz.timestamp_millis_opt(after as i64).single()?;
                schedules
                    .iter()
                    .filter_map(|s| s.after(&start).next())
                    .map(|t| t.timestamp_millis())
                    .filter(|t| *t >= 0)
                    .map(|t| t as u64)
                    .min()
            }
            CompiledSchedule::Every { every_ms } => {
                let every = (*every_ms).max(1);
                let k = if after < anchor {
                    1
                } else {
                    (after - anchor) / every + 1
                };
                Some(anchor.saturating_add(every.saturating_mul(k)))
            }
            CompiledSchedule::At { at_ms } => (*at_ms > after).then_some(*at_ms),
        }
    }
}

/// Checks a schedule for a job created (or rescheduled) at `now`: as [`CompiledSchedule::compile`],
/// and an `at` in the past, or an interval longer than [`MAX_EVERY_SECONDS`], is refused.
pub fn validate_new(schedule: &Schedule, now: u64) -> Result<CompiledSchedule, ScheduleError> {
    let compiled = CompiledSchedule::compile(schedule)?;
    if let (CompiledSchedule::At { at_ms }, Schedule::At { at }) = (&compiled, schedule)
        && *at_ms <= now
    {
        return Err(ScheduleError::AtInPast(at.clone()));
    }
    if let Schedule::Every { every_seconds } = schedule
        && *every_seconds > MAX_EVERY_SECONDS
    {
        return Err(ScheduleError::EveryTooLarge(*every_seconds));
    }
    Ok(compiled)
}

fn parse_at(at: &str) -> Result<u64, ScheduleError> {
    let t = DateTime::parse_from_rfc3339(at)
        .map_err(|_| ScheduleError::InvalidAt(at.to_owned()))?
        .with_timezone(&Utc)
        .timestamp_millis();
    u64::try_from(t).map_err(|_| ScheduleError::InvalidAt(at.to_owned()))
}

/// The `cron` crate's schedules for a 5- or 6-field expression.
fn compile_cron(expr: &str) -> Result<Vec<cron::Schedule>, ScheduleError> {
    let invalid = |why: String| ScheduleError::InvalidCron {
        expr: expr.to_owned(),
        why,
    };
    let mut fields: Vec<String> = expr.split_whitespace().map(str::to_owned).collect();
    match fields.len() {
        5 => fields.insert(0, "0".to_owned()),
        6 => {}
        n => {
            return Err(invalid(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds \
                 first), got {n}"
            )));
        }
    }
    let any = |f: &str| f == "*" || f == "?";
    fields[3] = if any(&fields[3]) {
        "*".to_owned()
    } else {
        fields[3].clone()
    };
    fields[5] = normalize_day_of_week(&fields[5]).map_err(invalid)?;
    let variants: Vec<Vec<String>> = if !any(&fields[3]) && fields[5] != "*" {
        // Both restricted: a day matching either fires.
        let mut by_dom = fields.clone();
        by_dom[5] = "*".to_owned();
        let mut by_dow = fields.clone();
        by_dow[3] = "*".to_owned();
        vec![by_dom, by_dow]
    } else {
        vec![fields]
    };
    variants
        .into_iter()
        .map(|f| cron::Schedule::from_str(&f.join(" ")).map_err(|e| invalid(e.to_string())))
        .collect()
}

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Rewrites a classic day-of-week field (0–7, names, lists, ranges, steps) as the list of day
/// names the `cron` crate reads unambiguously (`*` when every day).
fn normalize_day_of_week(field: &str) -> Result<String, String> {
    if field == "*" || field == "?" {
        return Ok("*".to_owned());
    }
    let mut days = [false; 7];
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .ok()
                    .filter(|s| *s >= 1)
                    .ok_or_else(|| format!("invalid day-of-week step {s:?}"))?;
                (r, step)
            }
            None => (part, 1),
        };
        let (from, to) = if range == "*" || range == "?" {
            (0, 6)
        } else if let Some((a, b)) = range.split_once('-') {
            (day_number(a)?, day_number(b)?)
        } else {
            let d = day_number(range)?;
            (d, if part.contains('/') { 6 } else { d })
        };
        if from > to {
            return Err(format!("day-of-week range {range:?} runs backwards"));
        }
        let mut d = from;
        while d <= to {
            days[(d % 7) as usize] = true;
            d += step;
        }
    }
    if days.iter().all(|d| *d) {
        return Ok("*".to_owned());
    }
    Ok(days
        .iter()
        .zip(DAY_NAMES)
        .filter(|(on, _)| **on)
        .map(|(_, name)| name)
        .collect::<Vec<_>>()
        .join(","))
}

/// 0–7 (0 and 7 = Sunday) or a day name.
fn day_number(text: &str) -> Result<u32, String> {
    if let Ok(n) = text.parse::<u32>() {
        return if n <= 7 {
            Ok(n)
        } else {
            Err(format!("day of week {n} is out of range 0-7"))
        };
    }
    let lower = text.to_ascii_lowercase();
    DAY_NAMES
        .iter()
        .position(|name| {
            // The first three bytes, when they are whole characters (a name is ASCII).
            lower
                .get(..3)
                .is_some_and(|prefix| name.to_ascii_lowercase().starts_with(prefix))
        })
        .map(|i| i as u32)
        .ok_or_else(|| format!("{text:?} is not a day of the week"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn ms(rfc3339: &str) -> u64 {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis() as u64
    }

    fn cron(expr: &str, tz: Option<&str>) -> CompiledSchedule {
        CompiledSchedule::compile(&Schedule::Cron {
            cron: expr.into(),
            tz: tz.map(str::to_owned),
        })
        .unwrap()
    }

    #[test]
    fn next_fire_times() {
        // (expression, zone, after, expected next)
        let cases = [
            // 5 fields: minute precision, seconds = 0.
            (
                "*/5 * * * *",
                None,
                "2026-03-02T10:02:30Z",
                "2026-03-02T10:05:00Z",
            ),
            // strictly after: a time exactly on a slot gives the next one
            (
                "*/5 * * * *",
                None,
                "2026-03-02T10:05:00Z",
                "2026-03-02T10:10:00Z",
            ),
            // 6 fields: seconds first
            (
                "*/2 * * * * *",
                None,
                "2026-03-02T10:00:00.500Z",
                "2026-03-02T10:00:02Z",
            ),
            (
                "30 0 9 * * *",
                None,
                "2026-03-02T10:00:00Z",
                "2026-03-03T09:00:30Z",
            ),
            // a time zone: 09:00 in Paris is 08:00 UTC in winter, 07:00 UTC in summer
            (
                "0 9 * * *",
                Some("Europe/Paris"),
                "2026-01-10T12:00:00Z",
                "2026-01-11T08:00:00Z",
            ),
            (
                "0 9 * * *",
                Some("Europe/Paris"),
                "2026-07-10T12:00:00Z",
                "2026-07-11T07:00:00Z",
            ),
            // classic day-of-week numbers: 1-5 = Monday..Friday; 2026-03-07 is a Saturday
            (
                "0 9 * * 1-5",
                None,
                "2026-03-06T10:00:00Z",
                "2026-03-09T09:00:00Z",
            ),
            // 0 and 7 are both Sunday
            (
                "0 9 * * 0",
                None,
                "2026-03-02T10:00:00Z",
                "2026-03-08T09:00:00Z",
            ),
            (
                "0 9 * * 7",
                None,
                "2026-03-02T10:00:00Z",
                "2026-03-08T09:00:00Z",
            ),
            (
                "0 9 * * sun",
                None,
                "2026-03-02T10:00:00Z",
                "2026-03-08T09:00:00Z",
            ),
            // day-of-month OR day-of-week: the 15th or any Monday (2026-03-09 is a Monday)
            (
                "0 0 15 * 1",
                None,
                "2026-03-03T00:00:00Z",
                "2026-03-09T00:00:00Z",
            ),
            (
                "0 0 15 * 1",
                None,
                "2026-03-09T00:00:01Z",
                "2026-03-15T00:00:00Z",
            ),
        ];
        for (expr, tz, after, expected) in cases {
            assert_eq!(
                cron(expr, tz).next_after(0, ms(after)),
                Some(ms(expected)),
                "{expr} in {tz:?} after {after}"
            );
        }
    }

    #[test]
    fn intervals_count_from_the_anchor() {
        let every = CompiledSchedule::compile(&Schedule::Every { every_seconds: 2 }).unwrap();
        // (anchor, after, expected)
        let cases = [
            (10_000, 10_000, 12_000),
            (10_000, 11_999, 12_000),
            (10_000, 12_000, 14_000),
            (10_000, 5_000, 12_000),
            // long after: the first slot after `after`, whatever was missed
            (10_000, 1_000_001, 1_002_000),
        ];
        for (anchor, after, expected) in cases {
            assert_eq!(
                every.next_after(anchor, after),
                Some(expected),
                "{anchor} {after}"
            );
        }
    }

    #[test]
    fn a_one_shot_fires_once() {
        let at = CompiledSchedule::compile(&Schedule::At {
            at: "2030-01-01T00:00:00+01:00".into(),
        })
        .unwrap();
        let t = ms("2029-12-31T23:00:00Z");
        assert_eq!(at.next_after(0, t - 1), Some(t));
        assert_eq!(at.next_after(0, t), None);
    }

    #[test]
    fn bad_schedules_are_refused_with_the_problem_named() {
        let now = ms("2026-03-02T10:00:00Z");
        let cases: [(Schedule, &str); 11] = [
            (
                Schedule::Cron {
                    cron: "* * *".into(),
                    tz: None,
                },
                "expected 5 fields",
            ),
            (
                Schedule::Cron {
                    cron: "61 * * * *".into(),
                    tz: None,
                },
                "invalid cron expression",
            ),
            (
                Schedule::Cron {
                    cron: "0 9 * * 8".into(),
                    tz: None,
                },
                "out of range",
            ),
            (
                Schedule::Cron {
                    cron: "0 9 * * funday".into(),
                    tz: None,
                },
                "not a day of the week",
            ),
            (
                Schedule::Cron {
                    cron: "0 9 * * *".into(),
                    tz: Some("Mars/Olympus".into()),
                },
                "unknown time zone \"Mars/Olympus\"",
            ),
            (
                Schedule::Cron {
                    cron: "0 0 0 0 \u{10000}".into(),
                    tz: None,
                },
                "not a day of the week",
            ),
            (Schedule::Every { every_seconds: 0 }, "at least 1"),
            (
                Schedule::Every {
                    every_seconds: MAX_EVERY_SECONDS + 1,
                },
                "at most 315360000",
            ),
            (
                Schedule::Every {
                    every_seconds: 1 << 63,
                },
                "at most",
            ),
            (
                Schedule::At {
                    at: "tomorrow".into(),
                },
                "RFC 3339",
            ),
            (
                Schedule::At {
                    at: "2026-03-02T09:59:59Z".into(),
                },
                "in the past",
            ),
        ];
        for (schedule, needle) in cases {
            let err = validate_new(&schedule, now).unwrap_err().to_string();
            assert!(err.contains(needle), "{schedule:?}: {err}");
        }
    }

    #[test]
    fn day_of_week_fields_become_day_names() {
        let cases = [
            ("*", "*"),
            ("1-5", "MON,TUE,WED,THU,FRI"),
            ("0,6", "SUN,SAT"),
            ("5-7", "SUN,FRI,SAT"),
            ("*/2", "SUN,TUE,THU,SAT"),
            ("mon-wed", "MON,TUE,WED"),
            ("0-7", "*"),
        ];
        for (field, expected) in cases {
            assert_eq!(normalize_day_of_week(field).unwrap(), expected, "{field}");
        }
    }
}
