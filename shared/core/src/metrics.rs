//! Operational metrics: one small facade (counters and gauges with dimensions) that the runner,
//! the lane worker, the supervisor and the scheduler write to, and two read-outs of it:
//!
//! - [`Registry::render_prometheus`]: the Prometheus text format (`GET /metrics` on `serve`);
//! - [`Registry::take_emf`]: CloudWatch Embedded Metric Format records (JSON lines the Lambda
//!   functions print to stdout, where CloudWatch Logs turns them into metrics).
//!
//! Metrics live in one process-wide [`global`] registry. Counters only grow; EMF records carry
//! what each counter gained since the previous [`Registry::take_emf`], so an invocation reports
//! its own turns. Recording never fails and never blocks on I/O (this crate does none).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};

/// Turns that ended, by `status` (`ok`, `error`, `aborted`, `timeout`).
pub const TURNS: &str = "turns";
/// Model attempts, by `outcome` (`ok`, `tool_calls`, `missing_assistant`, `stopped`, or the
/// failure reason: `rate_limit`, `timeout`, ...).
pub const ATTEMPTS: &str = "attempts";
/// Idle-timeout cost breaker trips (a run stopped retrying a model that keeps stalling).
pub const BREAKER_TRIPS: &str = "breaker_trips";
/// Pickups of a run that an earlier pickup left running without handing it back (its holder
/// crashed or lost its lease): the lock was taken over.
pub const LOCK_TAKEOVERS: &str = "lock_takeovers";
/// Runs ended `poisoned` (their deliveries kept failing).
pub const POISONED_RUNS: &str = "poisoned_runs";
/// Dead letters (lane messages found in the dead-letter store) the supervisor's sweep handled,
/// each counted once, before it forgets (deletes) it.
pub const DEAD_LETTERED: &str = "dead_lettered";
/// Age of a turn message when a lane worker received it, in milliseconds (last value).
pub const QUEUE_AGE_MS: &str = "queue_age_ms";
/// Stuck sessions the last sweep found (gauge).
pub const STUCK_SESSIONS: &str = "stuck_sessions";
/// Cron slots claimed, by `outcome` (`fired`, `skipped`).
pub const CRON_FIRES: &str = "cron_fires";
/// USD the model calls cost, by `tenant` and `model` (priced models only; Prometheus
/// `agentlane_cost_usd_total`).
pub const COST_USD_TOTAL: &str = "cost_usd";
/// Tokens (input and output) of the model calls, by `tenant` and `model` (Prometheus
/// `agentlane_tokens_total`).
pub const TOKENS_TOTAL: &str = "tokens";

/// Whether a metric adds up ([`Kind::Counter`]) or reports its last value ([`Kind::Gauge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only grows; Prometheus `_total`, EMF deltas.
    Counter,
    /// The last value set.
    Gauge,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    name: &'static str,
    dims: Vec<(&'static str, String)>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    kind: Kind,
    value: f64,
    /// The value the last EMF read-out reported (counters report the difference).
    reported: f64,
    /// Changed since the last EMF read-out.
    dirty: bool,
}

/// A set of metrics. Most code uses the process-wide [`global`] one through [`incr`] and
/// [`gauge`]; tests can make their own.
#[derive(Debug, Default)]
pub struct Registry {
    entries: Mutex<BTreeMap<Key, Entry>>,
}

/// The process-wide registry.
pub fn global() -> &'static Registry {
    static GLOBAL: OnceLock<Registry> = OnceLock::new();
    GLOBAL.get_or_init(Registry::default)
}

/// Adds one to the counter `name` with `dims` in the [`global`] registry.
pub fn incr(name: &'static str, dims: &[(&'static str, &str)]) {
    global().add(name, dims, 1.0);
}

/// Sets the gauge `name` with `dims` in the [`global`] registry.
pub fn gauge(name: &'static str, dims: &[(&'static str, &str)], value: f64) {
    global().set(name, dims, value);
}

/// The unit CloudWatch shows for a metric.
fn unit(name: &str) -> &'static str {
    if name.ends_with("_ms") {
        "Milliseconds"
    } else {
        "Count"
    }
}

impl Registry {
    fn update(
        &self,
        name: &'static str,
        dims: &[(&'static str, &str)],
        f: impl FnOnce(&mut Entry),
    ) {
        let mut dims: Vec<(&'static str, String)> =
            dims.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        dims.sort();
        // A poisoned lock only means another thread panicked mid-update: keep counting.
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries.entry(Key { name, dims }).or_insert(Entry {
            kind: Kind::Counter,
            value: 0.0,
            reported: 0.0,
            dirty: false,
        });
        f(entry);
        entry.dirty = true;
    }

    /// Adds `by` to the counter `name` with `dims`.
    pub fn add(&self, name: &'static str, dims: &[(&'static str, &str)], by: f64) {
        self.update(name, dims, |e| {
            e.kind = Kind::Counter;
            e.value += by;
        });
    }

    /// Sets the gauge `name` with `dims` to `value`.
    pub fn set(&self, name: &'static str, dims: &[(&'static str, &str)], value: f64) {
        self.update(name, dims, |e| {
            e.kind = Kind::Gauge;
            e.value = value;
        });
    }

    /// The current value of `name` with exactly `dims` (any order), if it was ever recorded.
    pub fn value(&self, name: &str, dims: &[(&str, &str)]) -> Option<f64> {
        let mut want: Vec<(&str, &str)> = dims.to_vec();
        want.sort();
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .find(|(k, _)| {
                k.name == name
                    && k.dims.len() == want.len()
                    && k.dims
                        .iter()
                        .zip(&want)
                        .all(|((a, b), (c, d))| a == c && b == d)
            })
            .map(|(_, e)| e.value)
    }

    /// Every metric in the Prometheus text exposition format (version 0.0.4): names prefixed
    /// `agentlane_`, counters suffixed `_total`, dimensions as labels.
    pub fn render_prometheus(&self) -> String {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        let mut last: Option<&str> = None;
        for (key, entry) in entries.iter() {
            let name = match entry.kind {
                Kind::Counter => format!("agentlane_{}_total", key.name),
                Kind::Gauge => format!("agentlane_{}", key.name),
            };
            if last != Some(key.name) {
                let kind = match entry.kind {
                    Kind::Counter => "counter",
                    Kind::Gauge => "gauge",
                };
                let _ = writeln!(out, "# TYPE {name} {kind}");
                last = Some(key.name);
            }
            out.push_str(&name);
            if !key.dims.is_empty() {
                out.push('{');
                for (i, (k, v)) in key.dims.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let v = v
                        .replace('\\', "\\\\")
                        .replace('"', "\\\"")
                        .replace('\n', "\\n");
                    let _ = write!(out, "{k}=\"{v}\"");
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", entry.value);
        }
        out
    }

    /// One CloudWatch EMF record (a JSON line) per metric changed since the previous call:
    /// counters carry what they gained since then, gauges their value. `namespace` is the
    /// CloudWatch namespace, `timestamp_ms` the records' time (ms since the epoch).
    pub fn take_emf(&self, namespace: &str, timestamp_ms: u64) -> Vec<String> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = Vec::new();
        for (key, entry) in entries.iter_mut() {
            if !entry.dirty {
                continue;
            }
            let value = match entry.kind {
                Kind::Counter => entry.value - entry.reported,
                Kind::Gauge => entry.value,
            };
            entry.reported = entry.value;
            entry.dirty = false;
            let dims: Vec<&str> = key.dims.iter().map(|(k, _)| *k).collect();
            let mut record = serde_json::Map::new();
            record.insert(
                "_aws".into(),
                serde_json::json!({
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": namespace,
                        "Dimensions": [dims],
                        "Metrics": [{"Name": key.name, "Unit": unit(key.name)}],
                    }],
                }),
            );
            for (k, v) in &key.dims {
                record.insert((*k).into(), v.clone().into());
            }
            record.insert(key.name.into(), value.into());
            lines.push(serde_json::Value::Object(record).to_string());
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_counters_with_labels_and_gauges() {
        let r = Registry::default();
        r.add(TURNS, &[("status", "ok")], 1.0);
        r.add(TURNS, &[("status", "ok")], 1.0);
        r.add(TURNS, &[("status", "error")], 1.0);
        r.set(STUCK_SESSIONS, &[], 3.0);
        let text = r.render_prometheus();
        assert!(
            text.contains("# TYPE agentlane_turns_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("agentlane_turns_total{status=\"ok\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("agentlane_turns_total{status=\"error\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE agentlane_stuck_sessions gauge\nagentlane_stuck_sessions 3\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("# TYPE agentlane_turns_total").count(),
            1,
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let r = Registry::default();
        r.add(ATTEMPTS, &[("outcome", "a\"b\\c")], 1.0);
        assert!(
            r.render_prometheus()
                .contains(r#"agentlane_attempts_total{outcome="a\"b\\c"} 1"#)
        );
    }

    #[test]
    fn emf_records_follow_the_spec_and_counters_report_deltas() {
        let r = Registry::default();
        r.add(TURNS, &[("status", "ok")], 1.0);
        r.add(TURNS, &[("status", "ok")], 1.0);
        r.set(QUEUE_AGE_MS, &[], 42.0);
        let lines = r.take_emf("agentlane/dev", 1_764_000_000_000);
        assert_eq!(lines.len(), 2, "{lines:?}");
        let age: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        let turns: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(turns["turns"], 2.0);
        assert_eq!(turns["status"], "ok");
        let meta = &turns["_aws"];
        assert_eq!(meta["Timestamp"], 1_764_000_000_000u64);
        let directive = &meta["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "agentlane/dev");
        assert_eq!(directive["Dimensions"], serde_json::json!([["status"]]));
        assert_eq!(
            directive["Metrics"],
            serde_json::json!([{"Name": "turns", "Unit": "Count"}])
        );
        assert_eq!(age["queue_age_ms"], 42.0);
        assert_eq!(
            age["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
            "Milliseconds"
        );
        assert_eq!(
            age["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([[]])
        );

        // Nothing new: nothing to report. One more turn: a record of 1, not 3.
        assert!(r.take_emf("agentlane/dev", 1).is_empty());
        r.add(TURNS, &[("status", "ok")], 1.0);
        let lines = r.take_emf("agentlane/dev", 2);
        let turns: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(turns["turns"], 1.0);
        assert_eq!(r.value(TURNS, &[("status", "ok")]), Some(3.0));
    }
}
