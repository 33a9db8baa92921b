//! What leaves the runner besides the transcript: tool event payloads, sanitized and capped, and
//! the metadata-only audit log (who, which run, tool names, result codes, durations — never
//! prompts, messages, tool arguments or results).

use agentlane_core::Run;
use serde_json::{Map, Value};

/// Longest tool-argument preview in a `tool` event, in characters.
pub const MAX_ARGS_PREVIEW: usize = 1024;

/// Keys whose values are never shown, whatever their case or position in the name.
const SECRET_WORDS: [&str; 9] = [
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "authorization",
    "cookie",
    "credential",
    "signature",
];

fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| k.contains(w))
}

fn redact(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = if is_secret_key(&k) {
                        Value::String("[redacted]".into())
                    } else {
                        redact(v)
                    };
                    (k, v)
                })
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(redact).collect()),
        other => other,
    }
}

/// Tool arguments as shown in events: secret-looking fields redacted (also in URLs' query
/// strings), and cut to [`MAX_ARGS_PREVIEW`] characters. Arguments that are not JSON are not
/// shown at all.
pub fn args_preview(arguments: &str) -> Value {
    let Ok(parsed) = serde_json::from_str::<Value>(arguments) else {
        return Value::String("[not JSON]".into());
    };
    let text = redact(parsed).to_string();
    let text = redact_query_secrets(&text);
    if text.chars().count() > MAX_ARGS_PREVIEW {
        let head: String = text.chars().take(MAX_ARGS_PREVIEW).collect();
        Value::String(format!("{head}…"))
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }
}

/// `?api_key=...`, `&token=...` and the like inside strings.
fn redact_query_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find(['?', '&']) {
        out.push_str(&rest[..=pos]);
        rest = &rest[pos + 1..];
        let end = rest
            .find(|c: char| c == '&' || c == '"' || c == '#' || c.is_whitespace())
            .unwrap_or(rest.len());
        let pair = &rest[..end];
        match pair.split_once('=') {
            Some((k, _)) if is_secret_key(k) => {
                out.push_str(k);
                out.push_str("=[redacted]");
            }
            _ => out.push_str(pair),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// One tool call, for the audit log.
pub fn tool_call(run: &Run, tool: &str, is_error: bool, duration_ms: u64) {
    tracing::info!(
        target: "agentlane::audit",
        event = "tool_call",
        tenant = %run.tenant,
        run = %run.run_id,
        tool,
        result = if is_error { "error" } else { "ok" },
        duration_ms,
    );
}

/// The end of a run, for the audit log.
pub fn run_end(run: &Run) {
    let duration_ms = match (run.started_at, run.ended_at) {
        (Some(s), Some(e)) => e.saturating_sub(s),
        _ => 0,
    };
    tracing::info!(
        target: "agentlane::audit",
        event = "run_end",
        tenant = %run.tenant,
        run = %run.run_id,
        session = %run.session_key.fingerprint(),
        status = run.status.as_str(),
        error_code = run.error.as_ref().map(|e| e.code.as_str()).unwrap_or(""),
        model = run.model.as_deref().unwrap_or(""),
        attempts = run.attempts.len(),
        input_tokens = run.usage.input_tokens,
        output_tokens = run.usage.output_tokens,
        duration_ms,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_redacted_and_previews_capped() {
        assert_eq!(
            args_preview(
                r#"{"url":"https://x.test/?q=1&api_key=abc&b=2","apiKey":"s3","n":{"Password":"p"}}"#
            ),
            json!({"url": "https://x.test/?q=1&api_key=[redacted]&b=2", "apiKey": "[redacted]", "n": {"Password": "[redacted]"}})
        );
        assert_eq!(args_preview("{oops"), json!("[not JSON]"));
        let long = args_preview(&json!({"text": "a".repeat(5000)}).to_string());
        assert!(
            long.as_str()
                .is_some_and(|s| s.chars().count() == MAX_ARGS_PREVIEW + 1)
        );
        assert_eq!(
            args_preview(r#"{"timezone":"Europe/Paris"}"#),
            json!({"timezone": "Europe/Paris"})
        );
    }
}
