//! The human form of the client commands' answers: local RFC 3339 times, replies as prose,
//! events and transcripts one line each. Pure functions of the API's JSON, so `--json` and
//! the human form always show the same answer.

use chrono::{Local, TimeZone};
use serde_json::Value;

/// Milliseconds since the epoch as a local RFC 3339 time (seconds precision); `-` when absent.
pub(crate) fn time(ms: Option<u64>) -> String {
    ms.and_then(|ms| i64::try_from(ms).ok())
        .and_then(|ms| Local.timestamp_millis_opt(ms).single())
        .map_or_else(
            || "-".to_owned(),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
        )
}

/// The reply texts of a run or a wait answer (`payloads[].text`), one paragraph each.
pub(crate) fn reply(answer: &Value) -> String {
    answer["payloads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// One line for a run that did not end `ok`: its status, and the error's code and message.
pub(crate) fn failure(answer: &Value) -> String {
    let status = answer["status"].as_str().unwrap_or("unknown");
    match (
        answer["error"]["code"].as_str(),
        answer["error"]["message"].as_str(),
    ) {
        (Some(code), Some(message)) => format!("run {status}: {code}: {message}"),
        _ => format!("run {status}"),
    }
}

/// What `agent` prints on acceptance without `--wait`.
pub(crate) fn accepted(answer: &Value) -> String {
    format!(
        "{} accepted on session {} at {} ({})",
        answer["runId"].as_str().unwrap_or("?"),
        answer["sessionKey"].as_str().unwrap_or("?"),
        time(answer["acceptedAt"].as_u64()),
        answer["status"].as_str().unwrap_or("queued"),
    )
}

/// One event of a page (`GET /v1/runs/{id}/events`), as a line.
pub(crate) fn event_line(event: &Value) -> String {
    format!(
        "{} {:>4} {:<10} {}",
        time(event["ts"].as_u64()),
        event["seq"].as_u64().unwrap_or(0),
        event["stream"].as_str().unwrap_or("?"),
        event_summary(event["stream"].as_str().unwrap_or(""), &event["data"]),
    )
}

/// What an event says, in a few words: an assistant delta's text, a tool call's phase and
/// name, a lifecycle phase (with the error of a failed end), or its JSON.
pub(crate) fn event_summary(stream: &str, data: &Value) -> String {
    let phase = data["phase"].as_str();
    match (stream, phase) {
        ("assistant", _) if data["delta"].is_string() => {
            format!("{:?}", data["delta"].as_str().unwrap_or(""))
        }
        ("tool", Some(phase)) => {
            let name = data["name"].as_str().unwrap_or("?");
            match phase {
                "end" if data["isError"] == Value::Bool(true) => {
                    format!("{name} failed ({} ms)", data["durationMs"])
                }
                "end" => format!("{name} done ({} ms)", data["durationMs"]),
                other => format!("{name} {other}"),
            }
        }
        ("lifecycle", Some(phase)) => match data["error"]["code"].as_str() {
            Some(code) => format!("{phase}: {code}"),
            None => phase.to_owned(),
        },
        _ => data.to_string(),
    }
}

/// What `events --follow` prints for one SSE frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Followed {
    /// Assistant text, printed as it comes (no newline: the reply reads as prose).
    Inline(String),
    /// A tool call, a lifecycle change or the `end` frame: a line of its own.
    Line(String),
}

/// The human form of one SSE frame of a run's events; `None` for frames not worth a line.
pub(crate) fn follow_frame(event: &str, data: &str) -> Option<Followed> {
    let value: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    let inner = &value["data"];
    match event {
        "assistant" => inner["delta"]
            .as_str()
            .map(|d| Followed::Inline(d.to_owned())),
        "tool" | "lifecycle" | "compaction" => Some(Followed::Line(format!(
            "[{event}] {}",
            event_summary(event, inner)
        ))),
        "end" => Some(Followed::Line(format!(
            "[end] {}",
            value["status"].as_str().unwrap_or("?")
        ))),
        "error" => Some(Followed::Line(format!("[error] {}", value["error"]))),
        _ => None,
    }
}

/// Prints followed frames, starting a line item on a fresh line.
#[derive(Debug, Default)]
pub(crate) struct FollowPrinter {
    mid_line: bool,
}

impl FollowPrinter {
    /// The text to print for `frame`, given what was printed before.
    pub(crate) fn render(&mut self, frame: Followed) -> String {
        match frame {
            Followed::Inline(text) => {
                if !text.is_empty() {
                    self.mid_line = !text.ends_with('\n');
                }
                text
            }
            Followed::Line(line) => {
                let lead = if self.mid_line { "\n" } else { "" };
                self.mid_line = false;
                format!("{lead}{line}\n")
            }
        }
    }
}

/// A transcript page, one line per entry: seq, time, role and text (tool calls and results
/// named with their tool).
pub(crate) fn transcript(page: &Value) -> String {
    let mut out = String::new();
    for entry in page["entries"].as_array().into_iter().flatten() {
        let message = &entry["message"];
        let text = match message["role"].as_str().unwrap_or("?") {
            "assistant" => {
                let mut text = message["content"].as_str().unwrap_or("").to_owned();
                for call in message["toolCalls"].as_array().into_iter().flatten() {
                    text.push_str(&format!(
                        " -> {}({})",
                        call["name"].as_str().unwrap_or("?"),
                        call["arguments"].as_str().unwrap_or("")
                    ));
                }
                format!("assistant: {}", text.trim_start())
            }
            "tool" => format!(
                "tool {}{}: {}",
                message["name"].as_str().unwrap_or("?"),
                if message["isError"] == Value::Bool(true) {
                    " (error)"
                } else {
                    ""
                },
                message["content"].as_str().unwrap_or("")
            ),
            "compaction" => format!(
                "compaction through #{}: {}",
                message["throughSeq"],
                message["summary"].as_str().unwrap_or("")
            ),
            role => format!("{role}: {}", message["content"].as_str().unwrap_or("")),
        };
        out.push_str(&format!(
            "#{:<4} {} {text}\n",
            entry["seq"].as_u64().unwrap_or(0),
            time(entry["ts"].as_u64())
        ));
    }
    out
}

/// A run record (`GET /v1/runs/{id}`) as a few lines: id and status, where and with what it
/// ran, its times, attempts and usage, its error or pending calls, then the reply as prose.
pub(crate) fn run(run: &Value) -> String {
    let mut out = format!(
        "{} {}\n",
        run["runId"].as_str().unwrap_or("?"),
        run["status"].as_str().unwrap_or("?")
    );
    out.push_str(&format!(
        "  session {}  agent {}  model {}\n",
        run["sessionKey"].as_str().unwrap_or("?"),
        run["request"]["agentId"].as_str().unwrap_or("main"),
        run["model"].as_str().unwrap_or("-"),
    ));
    out.push_str(&format!(
        "  accepted {}  started {}  ended {}\n",
        time(run["acceptedAt"].as_u64()),
        time(run["startedAt"].as_u64()),
        time(run["endedAt"].as_u64()),
    ));
    let attempts = run["attempts"].as_array().map_or(0, Vec::len);
    let cost = run["costUsd"]
        .as_f64()
        .map_or_else(String::new, |c| format!("  ${c:.4}"));
    out.push_str(&format!(
        "  {attempts} attempt(s)  {} tokens in, {} out{cost}\n",
        run["usage"]["inputTokens"].as_u64().unwrap_or(0),
        run["usage"]["outputTokens"].as_u64().unwrap_or(0),
    ));
    if run["error"].is_object() {
        out.push_str(&format!("  {}\n", failure(run)));
    }
    for call in run["requiredAction"]["toolCalls"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "  waiting: {} {} ({}): answer with `agentlane runs {}`\n",
            call["id"].as_str().unwrap_or("?"),
            call["name"].as_str().unwrap_or("?"),
            call["kind"].as_str().unwrap_or("?"),
            if call["kind"] == "approval" {
                "approve"
            } else {
                "answer"
            },
        ));
    }
    let reply = reply(run);
    if !reply.is_empty() {
        out.push('\n');
        out.push_str(&reply);
        out.push('\n');
    }
    out
}

/// Rows as aligned columns under `header` (two spaces apart, each as wide as its widest cell),
/// one line each: the tables of `sessions list`, `runs list`, `agents list` and `cron list`.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut text = line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        text.push_str(&line(row.clone()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_are_local_rfc3339_and_absent_ones_a_dash() {
        let t = time(Some(1_764_480_000_000));
        assert!(
            chrono::DateTime::parse_from_rfc3339(&t).is_ok_and(|d| d.timestamp() == 1_764_480_000),
            "{t}"
        );
        assert_eq!(time(None), "-");
    }

    #[test]
    fn events_read_as_a_line_each() {
        let cases = [
            ("assistant", json!({"delta": "Hi"}), "\"Hi\""),
            (
                "tool",
                json!({"phase": "start", "name": "current_time"}),
                "current_time start",
            ),
            (
                "tool",
                json!({"phase": "end", "name": "t", "isError": false, "durationMs": 3}),
                "t done (3 ms)",
            ),
            (
                "tool",
                json!({"phase": "end", "name": "t", "isError": true, "durationMs": 3}),
                "t failed (3 ms)",
            ),
            ("lifecycle", json!({"phase": "end"}), "end"),
            (
                "lifecycle",
                json!({"phase": "error", "error": {"code": "timeout"}}),
                "error: timeout",
            ),
            ("compaction", json!({"x": 1}), "{\"x\":1}"),
        ];
        for (stream, data, want) in cases {
            assert_eq!(event_summary(stream, &data), want, "{stream} {data}");
        }
    }

    #[test]
    fn following_prints_the_reply_as_prose_and_the_rest_on_lines() {
        let frame = |data: Value| data.to_string();
        let mut printer = FollowPrinter::default();
        let got: String = [
            ("lifecycle", frame(json!({"data": {"phase": "start"}}))),
            ("assistant", frame(json!({"data": {"delta": "Hel"}}))),
            ("assistant", frame(json!({"data": {"delta": "lo"}}))),
            (
                "tool",
                frame(json!({"data": {"phase": "start", "name": "t"}})),
            ),
            ("lifecycle", frame(json!({"data": {"phase": "end"}}))),
            ("end", frame(json!({"runId": "r", "status": "ok"}))),
        ]
        .iter()
        .filter_map(|(e, d)| follow_frame(e, d))
        .map(|f| printer.render(f))
        .collect();
        assert_eq!(
            got,
            "[lifecycle] start\nHello\n[tool] t start\n[lifecycle] end\n[end] ok\n"
        );
    }

    #[test]
    fn a_transcript_names_roles_tools_and_results() {
        let page = json!({"entries": [
            {"seq": 1, "ts": 0, "message": {"role": "user", "content": "time?"}},
            {"seq": 2, "ts": 0, "message": {"role": "assistant", "content": "",
                "toolCalls": [{"id": "c", "name": "current_time", "arguments": "{}"}]}},
            {"seq": 3, "ts": 0, "message": {"role": "tool", "toolCallId": "c",
                "name": "current_time", "content": "12:00", "isError": false}},
            {"seq": 4, "ts": 0, "message": {"role": "assistant", "content": "Noon."}},
        ]});
        let lines: Vec<String> = transcript(&page)
            .lines()
            .map(|l| l.split_whitespace().skip(2).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            lines,
            [
                "user: time?",
                "assistant: -> current_time({})",
                "tool current_time: 12:00",
                "assistant: Noon."
            ]
        );
    }

    #[test]
    fn replies_and_failures() {
        let ok = json!({"status": "ok", "payloads": [{"text": "a"}, {"text": "b"}]});
        assert_eq!(reply(&ok), "a\n\nb");
        let failed = json!({"status": "error", "error": {"code": "timeout", "message": "late"}});
        assert_eq!(failure(&failed), "run error: timeout: late");
    }

    #[test]
    fn a_run_reads_as_its_status_times_usage_and_reply() {
        let shown = run(&json!({
            "runId": "run_1", "status": "ok", "sessionKey": "demo", "model": "demo/echo",
            "request": {"agentId": "support"}, "acceptedAt": 1_764_480_000_000_u64,
            "attempts": [{}], "usage": {"inputTokens": 12, "outputTokens": 3},
            "payloads": [{"text": "hi there"}]}));
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[0], "run_1 ok");
        assert_eq!(lines[1], "  session demo  agent support  model demo/echo");
        assert!(lines[2].contains("ended -"), "{shown}");
        assert_eq!(lines[3], "  1 attempt(s)  12 tokens in, 3 out");
        assert_eq!(lines.last(), Some(&"hi there"));

        let paused = run(&json!({"runId": "run_2", "status": "requires_action",
            "requiredAction": {"toolCalls": [{"id": "c1", "name": "refund", "kind": "approval"}]}}));
        assert!(
            paused.contains("waiting: c1 refund (approval): answer with `agentlane runs approve`"),
            "{paused}"
        );
        let failed = run(&json!({"runId": "run_3", "status": "error",
            "error": {"code": "timeout", "message": "no answer in 60 s"}}));
        assert!(
            failed.contains("run error: timeout: no answer in 60 s"),
            "{failed}"
        );
    }
}
