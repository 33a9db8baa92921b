//! Layer 1 of normalisation: structured tool calls are kept whatever their arguments look
//! like — repaired lightly, or marked with a problem so they get an error result — and get
//! unique ids.

use super::{Change, Sanitized};
use agentlane_core::ToolCall;
use serde_json::Value;
use std::collections::HashSet;

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::fixtures::call;
    use super::*;

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
}
