//! Layer 2 of normalisation: a tool call the model wrote as text becomes a structured call,
//! strictly (offered tools, valid JSON-object arguments), all or nothing.

use super::names::resolve_tool_name;
use super::{Change, Sanitized};
use agentlane_core::ToolCall;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

const TAG_OPEN: &str = "<tool_call>";
const TAG_CLOSE: &str = "</tool_call>";
const NAME_KEYS: [&str; 3] = ["name", "tool", "tool_name"];
const ARGUMENT_KEYS: [&str; 4] = ["arguments", "parameters", "args", "input"];

/// Layer 2. When `calls` is empty and `text` is a tool call written out — the whole text a JSON
/// object like `{"name": …, "arguments": {…}}` (also `tool`/`parameters`, or OpenAI's
/// `{"type": "function", "function": {…}}`), optionally in one ```` ```json ```` fence, or one or
/// more `<tool_call>{…}</tool_call>` blocks — the calls are moved from `text` to `calls` with ids
/// `call_<n>`. Prose around `<tool_call>` blocks stays as text (the tags mark the call
/// unambiguously) unless the text has a code fence; a bare JSON object must be the whole text.
///
/// All or nothing: every call found must name an offered tool (up to the name trimming of
/// layer 3, which then resolves it) and carry strictly valid JSON-object arguments, otherwise
/// nothing is promoted and the returned notes say why.
pub fn promote_text_tool_calls(
    text: &mut String,
    calls: &mut Vec<Sanitized>,
    offered: &BTreeSet<String>,
) -> Vec<Change> {
    if !calls.is_empty() || offered.is_empty() {
        return Vec::new();
    }
    let Some(found) = find_text_calls(text) else {
        return Vec::new();
    };
    let mut promoted = Vec::new();
    let mut refused = Vec::new();
    for candidate in found.candidates {
        match candidate_call(candidate, found.tagged, offered) {
            Ok(Some(call)) => promoted.push(call),
            Ok(None) => return Vec::new(),
            Err(note) => refused.push(note),
        }
    }
    if !refused.is_empty() {
        return refused;
    }
    let mut changes = Vec::with_capacity(promoted.len());
    for (n, TextCall { name, arguments }) in promoted.into_iter().enumerate() {
        let id = format!("call_{n}");
        changes.push(Change::PromotedTextCall {
            id: id.clone(),
            name: name.clone(),
        });
        calls.push(Sanitized::valid(ToolCall {
            id,
            name,
            arguments: Value::Object(arguments).to_string(),
        }));
    }
    *text = found.rest;
    changes
}

struct TextCalls<'a> {
    candidates: Vec<&'a str>,
    /// The text left once the calls are removed.
    rest: String,
    /// Found inside `<tool_call>` tags (explicitly a call) rather than as bare JSON.
    tagged: bool,
}

fn find_text_calls(text: &str) -> Option<TextCalls<'_>> {
    let trimmed = text.trim();
    if trimmed.contains(TAG_OPEN) {
        if trimmed.contains("```") {
            return None; // tags inside or next to code are examples, not calls
        }
        return find_tagged(trimmed);
    }
    let json = match trimmed.strip_prefix("```") {
        Some(rest) => {
            let (lang, body) = rest.split_once('\n')?;
            let body = body.trim_end().strip_suffix("```")?;
            let lang = lang.trim();
            if body.contains("```") || !(lang.is_empty() || lang.eq_ignore_ascii_case("json")) {
                return None;
            }
            body.trim()
        }
        None => trimmed,
    };
    (json.starts_with('{') && json.ends_with('}')).then(|| TextCalls {
        candidates: vec![json],
        rest: String::new(),
        tagged: false,
    })
}

fn find_tagged(text: &str) -> Option<TextCalls<'_>> {
    let mut candidates = Vec::new();
    let mut rest = String::new();
    let mut remaining = text;
    while let Some(start) = remaining.find(TAG_OPEN) {
        rest.push_str(&remaining[..start]);
        let after = &remaining[start + TAG_OPEN.len()..];
        let end = after.find(TAG_CLOSE)?;
        candidates.push(after[..end].trim());
        remaining = &after[end + TAG_CLOSE.len()..];
    }
    rest.push_str(remaining);
    Some(TextCalls {
        candidates,
        rest: rest.trim().to_owned(),
        tagged: true,
    })
}

/// A tool call found in text, ready to promote.
struct TextCall {
    name: String,
    arguments: Map<String, Value>,
}

/// `Ok(Some)`: a promotable call. `Ok(None)`: not a tool call at all (bare JSON that is just
/// data), so the text is left alone silently. `Err`: a tool call that must not be promoted.
fn candidate_call(
    json: &str,
    tagged: bool,
    offered: &BTreeSet<String>,
) -> Result<Option<TextCall>, Change> {
    let refuse = |name: Option<&str>, reason: String| Change::NotPromoted {
        name: name.map(str::to_owned),
        reason,
    };
    let value = match serde_json::from_str::<Value>(json) {
        Ok(value) => value,
        Err(_) if !tagged => return Ok(None),
        Err(e) => return Err(refuse(None, format!("invalid JSON: {e}"))),
    };
    let Some((name, arguments)) = call_shape(&value) else {
        return match tagged {
            true => Err(refuse(None, "not a tool call object".to_owned())),
            false => Ok(None),
        };
    };
    if resolve_tool_name(name, offered).is_none() {
        return Err(refuse(Some(name), "the tool is not offered".to_owned()));
    }
    let arguments = match arguments {
        Value::Object(map) => map.clone(),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(map)) => map,
            _ => return Err(refuse(Some(name), "arguments are not a JSON object".into())),
        },
        _ => return Err(refuse(Some(name), "arguments are not a JSON object".into())),
    };
    Ok(Some(TextCall {
        name: name.to_owned(),
        arguments,
    }))
}

/// The name and arguments of a JSON value shaped like one tool call, with no other keys.
fn call_shape(value: &Value) -> Option<(&str, &Value)> {
    let object = value.as_object()?;
    if let Some(inner) = object.get("function") {
        let wrapper_only = object
            .keys()
            .all(|k| matches!(k.as_str(), "function" | "type" | "id"));
        return if wrapper_only {
            call_shape(inner)
        } else {
            None
        };
    }
    let known = |k: &String| {
        NAME_KEYS.contains(&k.as_str())
            || ARGUMENT_KEYS.contains(&k.as_str())
            || matches!(k.as_str(), "type" | "id")
    };
    if !object.keys().all(known) {
        return None;
    }
    let single = |keys: &[&str]| {
        let mut present = keys.iter().filter_map(|k| object.get(*k));
        let first = present.next();
        present.next().is_none().then_some(first).flatten()
    };
    let name = single(&NAME_KEYS)?.as_str()?;
    Some((name, single(&ARGUMENT_KEYS)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::fixtures::{call, offered};
    use super::*;

    /// `(text in, text out, promoted calls as (name, arguments), notes)`.
    type PromoteRow<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], usize);

    #[test]
    fn promote_turns_standalone_text_calls_into_calls() {
        let rows: &[PromoteRow] = &[
            (
                r#"{"name": "current_time", "arguments": {"tz": "UTC"}}"#,
                "",
                &[("current_time", r#"{"tz":"UTC"}"#)],
                0,
            ),
            (
                "\n```json\n{\"name\": \"current_time\", \"arguments\": {}}\n```\n",
                "",
                &[("current_time", "{}")],
                0,
            ),
            (
                r#"  {"tool": "web_search", "parameters": {"q": "rust"}}  "#,
                "",
                &[("web_search", r#"{"q":"rust"}"#)],
                0,
            ),
            (
                "<tool_call>\n{\"name\": \"current_time\", \"arguments\": {}}\n</tool_call>",
                "",
                &[("current_time", "{}")],
                0,
            ),
            (
                "Let me check.\n<tool_call>\n{\"name\": \"current_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>{\"name\": \"web_search\", \"arguments\": {\"q\": \"x\"}}</tool_call>",
                "Let me check.",
                &[("current_time", "{}"), ("web_search", r#"{"q":"x"}"#)],
                0,
            ),
            (
                r#"{"type": "function", "function": {"name": "current_time", "arguments": "{\"tz\": \"UTC\"}"}}"#,
                "",
                &[("current_time", r#"{"tz":"UTC"}"#)],
                0,
            ),
            (
                r#"{"name": "functions.current_time", "arguments": {}}"#,
                "",
                &[("functions.current_time", "{}")],
                0,
            ),
        ];
        check_promote_rows(rows);
    }

    #[test]
    fn promote_leaves_prose_unknown_tools_and_invalid_calls_as_text() {
        let rows: &[PromoteRow] = &[
            // JSON inside prose is an explanation, not a call.
            (
                r#"You could call {"name": "current_time", "arguments": {}} yourself."#,
                "",
                &[],
                0,
            ),
            // JSON data that is not call-shaped.
            (r#"{"temperature": 21, "unit": "C"}"#, "", &[], 0),
            (
                r#"{"name": "current_time", "arguments": {}, "result": "12:00"}"#,
                "",
                &[],
                0,
            ),
            (r#"{"name": "current_time"}"#, "", &[], 0),
            // A tool that was not offered.
            (
                r#"{"name": "delete_everything", "arguments": {}}"#,
                "",
                &[],
                1,
            ),
            // Invalid arguments: never promoted, not even repaired.
            (
                r#"{"name": "current_time", "arguments": {"tz": "UTC",}}"#,
                "",
                &[],
                0,
            ),
            (
                r#"<tool_call>{"name": "current_time", "arguments": {"tz": "UTC"</tool_call>"#,
                "",
                &[],
                1,
            ),
            (
                r#"{"name": "current_time", "arguments": "now"}"#,
                "",
                &[],
                1,
            ),
            (r#"{"name": "current_time", "arguments": [1]}"#, "", &[], 1),
            // All or nothing: one bad block keeps every block as text.
            (
                "<tool_call>{\"name\": \"current_time\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>",
                "",
                &[],
                1,
            ),
            (
                r#"<tool_call>{"name": "current_time", "arguments": {}}"#,
                "",
                &[],
                0,
            ),
            // Examples in code are not calls.
            (
                "Use this:\n```\n<tool_call>{\"name\": \"current_time\", \"arguments\": {}}</tool_call>\n```",
                "",
                &[],
                0,
            ),
            (
                "```python\n{\"name\": \"current_time\", \"arguments\": {}}\n```",
                "",
                &[],
                0,
            ),
        ];
        check_promote_rows(rows);
    }

    /// An empty expected text with no promoted calls means "text unchanged".
    fn check_promote_rows(rows: &[PromoteRow]) {
        for (input, output, promoted, notes) in rows {
            let mut text = (*input).to_owned();
            let mut calls = Vec::new();
            let changes = promote_text_tool_calls(&mut text, &mut calls, &offered());
            let expected_text = if promoted.is_empty() { input } else { output };
            assert_eq!(&text, expected_text, "{input}");
            let got: Vec<Sanitized> = calls;
            let want: Vec<Sanitized> = promoted
                .iter()
                .enumerate()
                .map(|(n, (name, args))| Sanitized::valid(call(&format!("call_{n}"), name, args)))
                .collect();
            assert_eq!(got, want, "{input}");
            let refusals = changes
                .iter()
                .filter(|c| matches!(c, Change::NotPromoted { .. }))
                .count();
            assert_eq!(refusals, *notes, "{input}: {changes:?}");
            assert_eq!(changes.len(), refusals + promoted.len(), "{input}");
        }
    }

    #[test]
    fn promote_never_fires_when_structured_calls_exist_or_no_tool_is_offered() {
        let json = r#"{"name": "current_time", "arguments": {}}"#;
        let existing = vec![Sanitized::valid(call("a", "web_search", "{}"))];
        let mut text = json.to_owned();
        let mut calls = existing.clone();
        assert!(promote_text_tool_calls(&mut text, &mut calls, &offered()).is_empty());
        assert_eq!((text.as_str(), calls), (json, existing));

        let mut text = json.to_owned();
        let mut calls = Vec::new();
        assert!(promote_text_tool_calls(&mut text, &mut calls, &BTreeSet::new()).is_empty());
        assert_eq!((text.as_str(), calls.len()), (json, 0));
    }

    #[test]
    fn promote_says_why_it_refused() {
        let mut text = r#"{"name": "rm_rf", "arguments": {}}"#.to_owned();
        let changes = promote_text_tool_calls(&mut text, &mut Vec::new(), &offered());
        assert_eq!(
            changes,
            vec![Change::NotPromoted {
                name: Some("rm_rf".into()),
                reason: "the tool is not offered".into()
            }]
        );
    }
}
