//! Classes of OpenClaw's session diagnostics (SPEC §10), for one processing session.

use agentlane_core::{Run, Session, SessionStatus};
use serde::Serialize;
use std::time::Duration;

/// The warn and abort thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// No progress for this long: `session.stalled` (or `session.stuck` without a live owner).
    pub warn: Duration,
    /// No progress for this long: the run is aborted and the lane released.
    pub abort: Duration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self::new(Duration::from_millis(120_000), None)
    }
}

impl Thresholds {
    /// `warn`, and `abort` when given (an explicit value may be lower, for tests); else
    /// `max(5 min, 3 × warn)`.
    pub fn new(warn: Duration, abort: Option<Duration>) -> Self {
        let abort = abort.unwrap_or_else(|| (warn * 3).max(Duration::from_secs(300)));
        Self { warn, abort }
    }

    /// From `AGENTLANE_STUCK_WARN_MS` and `AGENTLANE_STUCK_ABORT_MS` as `lookup` reads them;
    /// an unparsable value is an error naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let ms = |name: &str| -> Result<Option<Duration>, String> {
            match lookup(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(|n| Some(Duration::from_millis(n)))
                    .map_err(|_| format!("{name} must be a whole number of ms, got {v:?}")),
            }
        };
        let warn = ms("AGENTLANE_STUCK_WARN_MS")?.unwrap_or(Duration::from_millis(120_000));
        Ok(Self::new(warn, ms("AGENTLANE_STUCK_ABORT_MS")?))
    }
}

/// A diagnostic class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum DiagnosticClass {
    /// Active and progressing, for longer than the warn threshold.
    #[serde(rename = "session.long_running")]
    LongRunning,
    /// Active (a live owner), no progress past the warn threshold.
    #[serde(rename = "session.stalled")]
    Stalled,
    /// No live owner: stale bookkeeping, or queued work without an active run.
    #[serde(rename = "session.stuck")]
    Stuck,
}

impl DiagnosticClass {
    /// The class as logged and shown (`session.stalled`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            DiagnosticClass::LongRunning => "session.long_running",
            DiagnosticClass::Stalled => "session.stalled",
            DiagnosticClass::Stuck => "session.stuck",
        }
    }
}

/// What holds for a session now: shown as `diagnostic` on `GET /v1/sessions/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostic {
    /// Which SPEC §10 class holds.
    pub class: DiagnosticClass,
    /// What was seen, for people (`the active run made no progress for 130000 ms`).
    pub reason: String,
    /// How long the condition has held: since the last progress (stalled, stuck) or since the
    /// run started (long running).
    pub age_ms: u64,
}

/// The diagnostic of `session` at `now`, given its active run (`None` when it has none or it
/// could not be read). `None`: nothing to report.
pub fn classify(
    session: &Session,
    run: Option<&Run>,
    now: u64,
    thresholds: &Thresholds,
) -> Option<Diagnostic> {
    if session.status != SessionStatus::Processing {
        return None;
    }
    if run.is_some_and(|r| r.status == agentlane_core::RunStatus::RequiresAction) {
        // Paused for an answer: waiting is what it should do (its expiry is the sweep's).
        return None;
    }
    let warn = thresholds.warn.as_millis() as u64;
    let progress_at = session.last_progress_at.unwrap_or(session.updated_at);
    let idle = now.saturating_sub(progress_at);
    if session.lock_is_live(now) {
        if idle > warn {
            return Some(Diagnostic {
                class: DiagnosticClass::Stalled,
                reason: format!("the active run made no progress for {idle} ms"),
                age_ms: idle,
            });
        }
        let running = run
            .and_then(|r| r.started_at)
            .map(|s| now.saturating_sub(s))
            .unwrap_or(0);
        return (running > warn).then(|| Diagnostic {
            class: DiagnosticClass::LongRunning,
            reason: format!("the active run has been running for {running} ms"),
            age_ms: running,
        });
    }
    if idle <= warn {
        return None;
    }
    let reason = match run {
        Some(r) if r.status.is_terminal() => {
            format!(
                "processing for a run that already ended ({})",
                r.status.as_str()
            )
        }
        Some(_) => format!("no live owner and no progress for {idle} ms"),
        None => format!("processing without a readable active run for {idle} ms"),
    };
    Some(Diagnostic {
        class: DiagnosticClass::Stuck,
        reason,
        age_ms: idle,
    })
}

/// The reason of a `session.stuck` idle session whose queued run has no active run.
pub const QUEUED_WITHOUT_RUN: &str = "queued work without an active run";

/// The diagnostic of an idle `session` at `now` with pending work (runs accepted, not
/// finished) waiting past the warn threshold and no live lock holder: `session.stuck`
/// ([`QUEUED_WITHOUT_RUN`]) — its oldest run's lane message was probably lost. `None`
/// otherwise.
pub fn classify_pending(
    session: &Session,
    now: u64,
    thresholds: &Thresholds,
) -> Option<Diagnostic> {
    if session.status == SessionStatus::Processing
        || session.lock_is_live(now)
        || session.runs_finished >= session.runs_accepted
    {
        return None;
    }
    let since = session
        .pending_at?
        .max(session.last_progress_at.unwrap_or(0));
    let age = now.saturating_sub(since);
    (age > thresholds.warn.as_millis() as u64).then(|| Diagnostic {
        class: DiagnosticClass::Stuck,
        reason: QUEUED_WITHOUT_RUN.into(),
        age_ms: age,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use agentlane_core::{SessionId, SessionKey, TenantId};

    const NOW: u64 = 10_000_000;

    fn session(progress_ago: u64, lock_live: bool) -> Session {
        let mut s = Session::new(
            TenantId::new("t"),
            SessionKey::new("k"),
            SessionId::new("sid"),
            0,
        );
        s.status = SessionStatus::Processing;
        s.last_progress_at = Some(NOW - progress_ago);
        if lock_live {
            s.lock_owner = Some("runner".into());
            s.lock_until = NOW + 1000;
        }
        s
    }

    #[test]
    fn thresholds_default_to_the_spec() {
        let t = Thresholds::default();
        assert_eq!(
            (t.warn.as_millis(), t.abort.as_millis()),
            (120_000, 360_000),
            "max(5 min, 3 x warn)"
        );
        let t = Thresholds::new(Duration::from_secs(60), None);
        assert_eq!(
            t.abort,
            Duration::from_secs(300),
            "never below 5 min by default"
        );
        let t = Thresholds::from_lookup(|n| {
            (n == "AGENTLANE_STUCK_ABORT_MS").then(|| "900".to_owned())
        })
        .unwrap();
        assert_eq!(
            t.abort,
            Duration::from_millis(900),
            "an explicit abort may be lower"
        );
        assert!(Thresholds::from_lookup(|_| Some("soon".into())).is_err());
    }

    #[test]
    fn a_live_owner_without_progress_is_stalled_and_without_a_live_owner_stuck() {
        let t = Thresholds::default();
        let d = classify(&session(130_000, true), None, NOW, &t).unwrap();
        assert_eq!((d.class, d.age_ms), (DiagnosticClass::Stalled, 130_000));
        let d = classify(&session(130_000, false), None, NOW, &t).unwrap();
        assert_eq!(d.class, DiagnosticClass::Stuck);
        assert_eq!(classify(&session(10_000, false), None, NOW, &t), None);
        assert_eq!(classify(&session(10_000, true), None, NOW, &t), None);
        let mut idle = session(500_000, false);
        idle.status = SessionStatus::Idle;
        assert_eq!(classify(&idle, None, NOW, &t), None);
    }

    #[test]
    fn the_class_serializes_as_openclaw_names_it() {
        let d = Diagnostic {
            class: DiagnosticClass::Stalled,
            reason: "r".into(),
            age_ms: 5,
        };
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            serde_json::json!({"class": "session.stalled", "reason": "r", "ageMs": 5})
        );
    }
}
