//! Normalisation of an assembled assistant turn before its tool calls run: pure functions over
//! the turn and the names of the tools offered to the model.
//!
//! Three layers, always in this order (SPEC §6, OpenClaw's stream wrapper chain):
//!
//! 1. [`sanitize_tool_calls`] — structured calls: a nameless call is dropped; arguments that are
//!    not valid JSON get a light repair, and when that fails the call is kept but marked with a
//!    problem so the runner answers it with an `isError` result instead of executing it; missing
//!    or duplicate ids are replaced by stable unique `call_<n>` ids.
//! 2. [`promote_text_tool_calls`] — when no structured call is left, a tool call the model wrote
//!    as text (a standalone JSON object, a ```` ```json ```` fence holding one, or
//!    `<tool_call>…</tool_call>` blocks) becomes a structured call, but only for an offered tool
//!    and only with strictly valid JSON-object arguments.
//! 3. [`trim_tool_names`] — names with surrounding whitespace or quotes, a `functions.` prefix, a
//!    trailing `()` or the wrong case are resolved to the offered name when that is unambiguous.
//!
//! Why sanitize comes before promote: the sanitizer is forgiving on purpose — a structured call
//! is a call whatever its arguments look like, so it is repaired or answered with an error, never
//! lost. Promotion must be strict instead, because its input is text that may just be the model's
//! answer. Run in the other order, a text call with broken arguments would be promoted first and
//! then accepted by the sanitizer (repaired, or kept with an error result): an invalid call would
//! be promoted and the model's text lost. Sanitizing first also means promotion sees the calls
//! that really remain, so it only ever fires on a turn without structured calls.
//! Trimming comes last so that promoted calls get their names resolved too.

use agentlane_core::ToolCall;
use agentlane_providers::{AssistantTurn, FinishReason};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// A structured tool call after sanitizing. `problem` is set when the call must not run: the
/// runner records it as an error result carrying that text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sanitized {
    pub call: ToolCall,
    pub problem: Option<String>,
}

impl Sanitized {
    /// A call with nothing wrong with it.
    pub fn valid(call: ToolCall) -> Self {
        Self {
            call,
            problem: None,
        }
    }
}

/// One thing normalisation changed (or deliberately left alone), for logs and events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Change {
    /// A call with an empty or whitespace-only name was dropped.
    DroppedNameless { id: String },
    /// A call without an id, or with an id already used in the turn, got a new one.
    AssignedId {
        name: String,
        previous: String,
        id: String,
    },
    /// Arguments that were not valid JSON were repaired.
    RepairedArguments { id: String, name: String },
    /// Arguments stayed invalid; the call gets an error result instead of running.
    InvalidArguments {
        id: String,
        name: String,
        problem: String,
    },
    /// A tool call written as text became a structured call.
    PromotedTextCall { id: String, name: String },
    /// Text shaped like a tool call was left as text.
    NotPromoted {
        name: Option<String>,
        reason: String,
    },
    /// A tool name was resolved to the offered tool.
    TrimmedName {
        id: String,
        from: String,
        to: String,
    },
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::DroppedNameless { id } => write!(f, "dropped tool call {id:?} without a name"),
            Change::AssignedId { name, previous, id } => {
                write!(f, "tool call {name} id {previous:?} replaced by {id}")
            }
            Change::RepairedArguments { id, name } => {
                write!(f, "repaired the JSON arguments of {name} ({id})")
            }
            Change::InvalidArguments { id, name, problem } => {
                write!(f, "tool call {name} ({id}) not run: {problem}")
            }
            Change::PromotedTextCall { id, name } => {
                write!(f, "promoted a text tool call to {name} ({id})")
            }
            Change::NotPromoted { name, reason } => match name {
                Some(name) => write!(f, "text tool call {name} not promoted: {reason}"),
                None => write!(f, "text tool call not promoted: {reason}"),
            },
            Change::TrimmedName { id, from, to } => {
                write!(f, "tool name {from:?} resolved to {to} ({id})")
            }
        }
    }
}

/// The turn after all three layers.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    /// The turn to record and act on: `tool_calls` holds every call that needs a result, in
    /// order, with unique ids; `text` no longer holds promoted tool calls; `finish` is
    /// `ToolCalls` when a call was promoted.
    pub turn: AssistantTurn,
    /// Calls that must not run, by call id, with the error text to record as their result.
    pub invalid: BTreeMap<String, String>,
    /// What changed, in layer order.
    pub changes: Vec<Change>,
}

impl Normalized {
    /// The error text to answer call `call_id` with instead of running it, if any.
    pub fn problem(&self, call_id: &str) -> Option<&str> {
        self.invalid.get(call_id).map(String::as_str)
    }
}

/// Runs the three layers in order. Text tool calls are promoted only when the model finished
/// normally (`Stop` or `ToolCalls`): a cut-off or filtered answer is never turned into a call.
pub fn normalize(turn: AssistantTurn, offered: &BTreeSet<String>) -> Normalized {
    let AssistantTurn {
        mut text,
        reasoning,
        tool_calls,
        usage,
        mut finish,
    } = turn;
    let (mut calls, mut changes) = sanitize_tool_calls(tool_calls);
    if matches!(finish, Some(FinishReason::Stop | FinishReason::ToolCalls)) {
        let promoted = promote_text_tool_calls(&mut text, &mut calls, offered);
        if promoted
            .iter()
            .any(|c| matches!(c, Change::PromotedTextCall { .. }))
        {
            finish = Some(FinishReason::ToolCalls);
        }
        changes.extend(promoted);
    }
    changes.extend(trim_tool_names(&mut calls, offered));
    let mut invalid = BTreeMap::new();
    let mut tool_calls = Vec::with_capacity(calls.len());
    for Sanitized { call, problem } in calls {
        if let Some(problem) = problem {
            invalid.insert(call.id.clone(), problem);
        }
        tool_calls.push(call);
    }
    Normalized {
        turn: AssistantTurn {
            text,
            reasoning,
            tool_calls,
            usage,
            finish,
        },
        invalid,
        changes,
    }
}

// ---------------------------------------------------------------------------------------------
// Layer 1: sanitize

/// Layer 1. Drops nameless calls, gives every remaining call a unique id (a missing or repeated
/// id becomes `call_<position>`, or `call_<position>_<k>` if that is taken), repairs arguments
/// lightly, and marks the calls whose arguments stay invalid. Empty or `null` arguments mean
/// "no arguments" (`{}`); arguments must be a JSON object.
pub fn sanitize_tool_calls(calls: Vec<ToolCall>) -> (Vec<Sanitized>, Vec<Change>) {
    let mut changes = Vec::new();
    let mut kept = Vec::with_capacity(calls.len());
    for call in calls {
        if call.name.trim().is_empty() {
            changes.push(Change::DroppedNameless { id: call.id });
        } else {
            kept.push(call);
        }
    }
    assign_ids(&mut kept, &mut changes);
    let sanitized = kept
        .into_iter()
        .map(|mut call| match check_arguments(&call.arguments) {
            Arguments::Valid => Sanitized::valid(call),
            Arguments::Repaired(fixed) => {
                changes.push(Change::RepairedArguments {
                    id: call.id.clone(),
                    name: call.name.clone(),
                });
                call.arguments = fixed;
                Sanitized::valid(call)
            }
            Arguments::Invalid(problem) => {
                changes.push(Change::InvalidArguments {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    problem: problem.clone(),
                });
                Sanitized {
                    call,
                    problem: Some(problem),
                }
            }
        })
        .collect();
    (sanitized, changes)
}

fn assign_ids(calls: &mut [ToolCall], changes: &mut Vec<Change>) {
    let mut taken: HashSet<String> = calls
        .iter()
        .filter(|c| !c.id.trim().is_empty())
        .map(|c| c.id.clone())
        .collect();
    let mut seen = HashSet::new();
    for (position, call) in calls.iter_mut().enumerate() {
        if !call.id.trim().is_empty() && seen.insert(call.id.clone()) {
            continue;
        }
        let mut id = format!("call_{position}");
        let mut k = 0;
        while taken.contains(&id) {
            k += 1;
            id = format!("call_{position}_{k}");
        }
        taken.insert(id.clone());
        seen.insert(id.clone());
        changes.push(Change::AssignedId {
            name: call.name.clone(),
            previous: std::mem::replace(&mut call.id, id.clone()),
            id,
        });
    }
}

enum Arguments {
    Valid,
    Repaired(String),
    Invalid(String),
}

fn check_arguments(raw: &str) -> Arguments {
    let first_error = match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(_)) => return Arguments::Valid,
        Ok(Value::Null) => return Arguments::Repaired("{}".to_owned()),
        Ok(other) => return Arguments::Invalid(not_an_object(&other)),
        Err(e) => e,
    };
    let unfenced = strip_fence(raw.trim()).trim();
    if unfenced.is_empty() {
        return Arguments::Repaired("{}".to_owned());
    }
    let without_commas = remove_trailing_commas(unfenced);
    let closed = close_truncated(&without_commas);
    let attempts = [Some(unfenced.to_owned()), Some(without_commas), closed];
    for candidate in attempts.into_iter().flatten() {
        match serde_json::from_str::<Value>(&candidate) {
            Ok(Value::Object(map)) => return Arguments::Repaired(Value::Object(map).to_string()),
            Ok(other) => return Arguments::Invalid(not_an_object(&other)),
            Err(_) => {}
        }
    }
    Arguments::Invalid(format!("invalid JSON arguments: {first_error}"))
}

fn not_an_object(value: &Value) -> String {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    format!("invalid JSON arguments: expected a JSON object, got {kind}")
}

/// Removes a surrounding Markdown code fence (the closing fence may be missing).
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let body = rest.split_once('\n').map_or(rest, |(_, body)| body);
    body.trim_end().strip_suffix("```").unwrap_or(body)
}

/// Calls `visit(index, char)` for every char outside JSON strings.
fn for_each_outside_strings(text: &str, mut visit: impl FnMut(usize, char)) -> bool {
    let (mut in_string, mut escaped) = (false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else {
            visit(i, c);
        }
    }
    in_string
}

fn remove_trailing_commas(text: &str) -> String {
    let mut drop = Vec::new();
    for_each_outside_strings(text, |i, c| {
        if c == ',' {
            let next = text[i + 1..].trim_start().chars().next();
            if matches!(next, Some('}' | ']')) {
                drop.push(i);
            }
        }
    });
    text.char_indices()
        .filter(|(i, _)| !drop.contains(i))
        .map(|(_, c)| c)
        .collect()
}

/// Appends the closers a truncated object or array is missing. `None` unless the text is clearly
/// truncated: brackets balanced so far, not cut inside a string or after a key.
fn close_truncated(text: &str) -> Option<String> {
    let mut open = Vec::new();
    let mut mismatched = false;
    let in_string = for_each_outside_strings(text, |_, c| match c {
        '{' => open.push('}'),
        '[' => open.push(']'),
        '}' | ']' => mismatched |= open.pop() != Some(c),
        _ => {}
    });
    if in_string || mismatched || open.is_empty() {
        return None;
    }
    let body = text.trim_end();
    let body = body.strip_suffix(',').unwrap_or(body);
    if body.ends_with(':') {
        return None;
    }
    Some(body.chars().chain(open.into_iter().rev()).collect())
}

// ---------------------------------------------------------------------------------------------
// Layer 2: promote

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

// ---------------------------------------------------------------------------------------------
// Layer 3: trim names

/// Layer 3. Resolves each call's name to an offered tool when it is not one already: surrounding
/// whitespace, quotes or backticks, a `functions.` prefix and a trailing `()` are removed, then a
/// unique case-insensitive match is accepted. A name that resolves to nothing stays as it is (the
/// runner answers it with an "unknown tool" result).
pub fn trim_tool_names(calls: &mut [Sanitized], offered: &BTreeSet<String>) -> Vec<Change> {
    let mut changes = Vec::new();
    for Sanitized { call, .. } in calls {
        if let Some(resolved) = resolve_tool_name(&call.name, offered)
            && resolved != call.name
        {
            changes.push(Change::TrimmedName {
                id: call.id.clone(),
                from: std::mem::replace(&mut call.name, resolved.to_owned()),
                to: resolved.to_owned(),
            });
        }
    }
    changes
}

fn resolve_tool_name<'a>(raw: &str, offered: &'a BTreeSet<String>) -> Option<&'a str> {
    if let Some(exact) = offered.get(raw) {
        return Some(exact);
    }
    let mut name = raw;
    loop {
        let before = name;
        name = name.trim();
        for quote in ['"', '\'', '`'] {
            if name.len() >= 2 && name.starts_with(quote) && name.ends_with(quote) {
                name = &name[1..name.len() - 1];
            }
        }
        name = name.strip_prefix("functions.").unwrap_or(name);
        name = name.strip_suffix("()").unwrap_or(name);
        if name == before {
            break;
        }
    }
    if let Some(found) = offered.get(name) {
        return Some(found);
    }
    let mut folded = offered.iter().filter(|o| o.eq_ignore_ascii_case(name));
    match (folded.next(), folded.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        }
    }

    fn offered() -> BTreeSet<String> {
        ["current_time", "web_search", "Lookup", "lookup"]
            .map(str::to_owned)
            .into()
    }

    fn turn(text: &str, calls: Vec<ToolCall>, finish: FinishReason) -> AssistantTurn {
        AssistantTurn {
            text: text.to_owned(),
            tool_calls: calls,
            finish: Some(finish),
            ..AssistantTurn::default()
        }
    }

    // ---- layer 1 -----------------------------------------------------------------------------

    #[test]
    fn sanitize_repairs_or_flags_arguments() {
        // (arguments in, arguments out, problem)
        let rows: &[(&str, &str, Option<&str>)] = &[
            (r#"{"tz":"UTC"}"#, r#"{"tz":"UTC"}"#, None),
            ("", "{}", None),
            ("  \n ", "{}", None),
            ("null", "{}", None),
            (r#"{"a": 1, "b": [1, 2,],}"#, r#"{"a":1,"b":[1,2]}"#, None),
            (
                r#"{"city": "Paris", "days": [1, 2"#,
                r#"{"city":"Paris","days":[1,2]}"#,
                None,
            ),
            (r#"{"city": "Paris","#, r#"{"city":"Paris"}"#, None),
            ("```json\n{\"q\": \"rust\"}\n```", r#"{"q":"rust"}"#, None),
            ("```{\"q\": \"a, b\"}```", r#"{"q":"a, b"}"#, None),
            (
                r#"{"q": "keep ,} inside"}"#,
                r#"{"q": "keep ,} inside"}"#,
                None,
            ),
            (
                "not json",
                "not json",
                Some("invalid JSON arguments: expected ident"),
            ),
            (
                r#"{"city": "Par"#,
                r#"{"city": "Par"#,
                Some("invalid JSON arguments: EOF"),
            ),
            (
                r#"{"city":"#,
                r#"{"city":"#,
                Some("invalid JSON arguments: EOF"),
            ),
            (
                r#"{"a": 1}}"#,
                r#"{"a": 1}}"#,
                Some("invalid JSON arguments: trailing"),
            ),
            (
                "[1, 2]",
                "[1, 2]",
                Some("invalid JSON arguments: expected a JSON object, got an array"),
            ),
            (
                "\"now\"",
                "\"now\"",
                Some("invalid JSON arguments: expected a JSON object, got a string"),
            ),
        ];
        for (input, output, problem) in rows {
            let (out, changes) = sanitize_tool_calls(vec![call("c1", "current_time", input)]);
            assert_eq!(out.len(), 1, "{input:?}");
            assert_eq!(out[0].call, call("c1", "current_time", output), "{input:?}");
            match (problem, &out[0].problem) {
                (None, None) => {
                    let repaired = input != output;
                    let expected: Vec<Change> = repaired
                        .then(|| Change::RepairedArguments {
                            id: "c1".into(),
                            name: "current_time".into(),
                        })
                        .into_iter()
                        .collect();
                    assert_eq!(changes, expected, "{input:?}");
                }
                (Some(want), Some(got)) => {
                    assert!(got.starts_with(want), "{input:?}: {got}");
                    assert_eq!(
                        changes,
                        vec![Change::InvalidArguments {
                            id: "c1".into(),
                            name: "current_time".into(),
                            problem: got.clone(),
                        }]
                    );
                }
                (want, got) => panic!("{input:?}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn sanitize_drops_nameless_calls_and_makes_ids_unique() {
        // (calls in as (id, name), ids out as (id, name))
        type IdRow<'a> = (&'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)]);
        let rows: &[IdRow] = &[
            (&[("a", "x"), ("b", "y")], &[("a", "x"), ("b", "y")]),
            (&[("", "x"), ("", "y")], &[("call_0", "x"), ("call_1", "y")]),
            (&[("a", "x"), ("a", "y")], &[("a", "x"), ("call_1", "y")]),
            (
                &[("call_1", "x"), ("", "y")],
                &[("call_1", "x"), ("call_1_1", "y")],
            ),
            (
                &[("", "x"), ("call_0", "y")],
                &[("call_0_1", "x"), ("call_0", "y")],
            ),
            (&[("  ", "x")], &[("call_0", "x")]),
            (&[("a", " "), ("", "y")], &[("call_0", "y")]),
            (&[("a", ""), ("b", "\t")], &[]),
        ];
        for (input, output) in rows {
            let calls = input.iter().map(|(id, n)| call(id, n, "{}")).collect();
            let (out, _) = sanitize_tool_calls(calls);
            let got: Vec<(&str, &str)> = out
                .iter()
                .map(|s| (s.call.id.as_str(), s.call.name.as_str()))
                .collect();
            assert_eq!(&got, output, "{input:?}");
            assert!(out.iter().all(|s| s.problem.is_none()));
        }
    }

    #[test]
    fn sanitize_reports_every_change_with_final_ids() {
        let (out, changes) = sanitize_tool_calls(vec![
            call("x", "  ", "{}"),
            call("", "web_search", r#"{"q": "rust",}"#),
            call("", "current_time", "{oops"),
        ]);
        let problem = out[1].problem.clone().unwrap();
        assert_eq!(
            changes,
            vec![
                Change::DroppedNameless { id: "x".into() },
                Change::AssignedId {
                    name: "web_search".into(),
                    previous: String::new(),
                    id: "call_0".into()
                },
                Change::AssignedId {
                    name: "current_time".into(),
                    previous: String::new(),
                    id: "call_1".into()
                },
                Change::RepairedArguments {
                    id: "call_0".into(),
                    name: "web_search".into()
                },
                Change::InvalidArguments {
                    id: "call_1".into(),
                    name: "current_time".into(),
                    problem
                },
            ]
        );
    }

    // ---- layer 2 -----------------------------------------------------------------------------

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

    // ---- layer 3 -----------------------------------------------------------------------------

    #[test]
    fn trim_resolves_decorated_names_to_offered_tools() {
        // (name in, name out)
        let rows = [
            ("current_time", "current_time"),
            (" current_time \n", "current_time"),
            ("\"current_time\"", "current_time"),
            ("'web_search'", "web_search"),
            ("functions.current_time", "current_time"),
            ("current_time()", "current_time"),
            ("`functions.current_time()`", "current_time"),
            ("\" functions.web_search() \"", "web_search"),
            ("Current_Time", "current_time"),
            ("Lookup", "Lookup"),
            ("lookup", "lookup"),
            // unknown or ambiguous names stay as they are
            ("LOOKUP", "LOOKUP"),
            ("delete_everything", "delete_everything"),
            ("functions.delete_everything", "functions.delete_everything"),
            ("current_time_v2", "current_time_v2"),
            ("\"current_time", "\"current_time"),
        ];
        for (input, output) in rows {
            let mut calls = vec![Sanitized::valid(call("c", input, "{}"))];
            let changes = trim_tool_names(&mut calls, &offered());
            assert_eq!(calls[0].call.name, output, "{input:?}");
            let expected: Vec<Change> = (input != output)
                .then(|| Change::TrimmedName {
                    id: "c".into(),
                    from: input.into(),
                    to: output.into(),
                })
                .into_iter()
                .collect();
            assert_eq!(changes, expected, "{input:?}");
        }
    }

    #[test]
    fn trim_keeps_a_calls_problem() {
        let mut calls = vec![Sanitized {
            call: call("c", "functions.current_time", "{x"),
            problem: Some("invalid JSON arguments: x".into()),
        }];
        trim_tool_names(&mut calls, &offered());
        assert_eq!(calls[0].call.name, "current_time");
        assert_eq!(
            calls[0].problem.as_deref(),
            Some("invalid JSON arguments: x")
        );
    }

    // ---- all layers, in order ----------------------------------------------------------------

    #[test]
    fn an_invalid_text_tool_call_is_not_promoted_though_the_same_structured_call_is_repaired() {
        let args = r#"{"tz": "UTC",}"#;
        let text =
            format!(r#"<tool_call>{{"name": "current_time", "arguments": {args}}}</tool_call>"#);
        let n = normalize(turn(&text, vec![], FinishReason::Stop), &offered());
        assert_eq!(n.turn, turn(&text, vec![], FinishReason::Stop));
        assert!(n.invalid.is_empty());
        assert!(matches!(n.changes.as_slice(), [Change::NotPromoted { .. }]));

        let structured = vec![call("c", "current_time", args)];
        let n = normalize(turn("", structured, FinishReason::ToolCalls), &offered());
        assert_eq!(
            n.turn.tool_calls,
            vec![call("c", "current_time", r#"{"tz":"UTC"}"#)]
        );
    }

    #[test]
    fn a_promoted_call_then_gets_its_name_trimmed() {
        let text =
            "<tool_call>{\"name\": \"functions.current_time\", \"arguments\": {}}</tool_call>";
        let n = normalize(turn(text, vec![], FinishReason::Stop), &offered());
        assert_eq!(
            n.turn,
            turn(
                "",
                vec![call("call_0", "current_time", "{}")],
                FinishReason::ToolCalls
            )
        );
        assert_eq!(
            n.changes,
            vec![
                Change::PromotedTextCall {
                    id: "call_0".into(),
                    name: "functions.current_time".into()
                },
                Change::TrimmedName {
                    id: "call_0".into(),
                    from: "functions.current_time".into(),
                    to: "current_time".into()
                },
            ]
        );
    }

    #[test]
    fn normalize_marks_invalid_calls_for_an_error_result_and_keeps_them_paired() {
        let calls = vec![
            call("a", "\"web_search\"", r#"{"q": "rust"}"#),
            call("a", "current_time", "{not json"),
            call("b", " ", "{}"),
            call("c", "nope", "{}"),
        ];
        let text = r#"{"name": "current_time", "arguments": {}}"#;
        let n = normalize(turn(text, calls, FinishReason::ToolCalls), &offered());
        assert_eq!(
            n.turn,
            turn(
                text,
                vec![
                    call("a", "web_search", r#"{"q": "rust"}"#),
                    call("call_1", "current_time", "{not json"),
                    call("c", "nope", "{}"),
                ],
                FinishReason::ToolCalls
            )
        );
        assert_eq!(n.invalid.keys().collect::<Vec<_>>(), vec!["call_1"]);
        let problem = n.problem("call_1").unwrap();
        assert!(problem.starts_with("invalid JSON arguments: "), "{problem}");
        assert_eq!(n.problem("a"), None);
        assert_eq!(n.problem("c"), None);
    }

    #[test]
    fn normalize_promotes_only_after_a_normal_finish() {
        let text = r#"{"name": "current_time", "arguments": {}}"#;
        for finish in [
            FinishReason::Length,
            FinishReason::ContentFilter,
            FinishReason::Other("pause".into()),
        ] {
            let n = normalize(turn(text, vec![], finish.clone()), &offered());
            assert_eq!(n.turn, turn(text, vec![], finish));
            assert!(n.changes.is_empty());
        }
    }

    #[test]
    fn a_clean_turn_passes_through_untouched() {
        let clean = turn(
            "Here you go.",
            vec![call("a", "current_time", r#"{"tz": "UTC"}"#)],
            FinishReason::ToolCalls,
        );
        let n = normalize(clean.clone(), &offered());
        assert_eq!(n.turn, clean);
        assert!(n.invalid.is_empty() && n.changes.is_empty());
    }

    #[test]
    fn changes_serialize_for_events_and_read_well_in_logs() {
        let change = Change::TrimmedName {
            id: "call_0".into(),
            from: "functions.current_time".into(),
            to: "current_time".into(),
        };
        assert_eq!(
            serde_json::to_value(&change).unwrap(),
            serde_json::json!({
                "kind": "trimmed_name",
                "id": "call_0",
                "from": "functions.current_time",
                "to": "current_time"
            })
        );
        assert_eq!(
            change.to_string(),
            "tool name \"functions.current_time\" resolved to current_time (call_0)"
        );
        let refused = Change::NotPromoted {
            name: None,
            reason: "x".into(),
        };
        assert_eq!(
            serde_json::to_value(&refused).unwrap(),
            serde_json::json!({ "kind": "not_promoted", "name": null, "reason": "x" })
        );
    }
}
