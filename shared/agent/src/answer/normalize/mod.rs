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

mod names;
mod promote;
mod sanitize;

pub use names::trim_tool_names;
pub use promote::promote_text_tool_calls;
pub use sanitize::sanitize_tool_calls;

use agentlane_core::ToolCall;
use agentlane_providers::{AssistantTurn, FinishReason};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// A structured tool call after sanitizing. `problem` is set when the call must not run: the
/// runner records it as an error result carrying that text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sanitized {
    /// The call as it will be recorded (name trimmed, id assigned, arguments repaired if possible).
    pub call: ToolCall,
    /// Why the call must not run; `None` when it may run.
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
    DroppedNameless {
        /// The dropped call's id.
        id: String,
    },
    /// A call without an id, or with an id already used in the turn, got a new one.
    AssignedId {
        /// The call's tool name.
        name: String,
        /// The id the model gave (empty when it gave none).
        previous: String,
        /// The id assigned in its place.
        id: String,
    },
    /// Arguments that were not valid JSON were repaired.
    RepairedArguments {
        /// The call's id.
        id: String,
        /// The call's tool name.
        name: String,
    },
    /// Arguments stayed invalid; the call gets an error result instead of running.
    InvalidArguments {
        /// The call's id.
        id: String,
        /// The call's tool name.
        name: String,
        /// Why the arguments are invalid; the text of the call's error result.
        problem: String,
    },
    /// A tool call written as text became a structured call.
    PromotedTextCall {
        /// The id given to the new call.
        id: String,
        /// The call's tool name.
        name: String,
    },
    /// Text shaped like a tool call was left as text.
    NotPromoted {
        /// The tool name the text named, if one could be read.
        name: Option<String>,
        /// Why the text was not promoted.
        reason: String,
    },
    /// A tool name was resolved to the offered tool.
    TrimmedName {
        /// The call's id.
        id: String,
        /// The name as the model wrote it.
        from: String,
        /// The offered tool's name it resolved to.
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
        empty_text,
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
            empty_text,
        },
        invalid,
        changes,
    }
}

/// Builders shared by the layers' tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use agentlane_core::ToolCall;
    use agentlane_providers::{AssistantTurn, FinishReason};
    use std::collections::BTreeSet;

    pub(crate) fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        }
    }

    pub(crate) fn offered() -> BTreeSet<String> {
        ["current_time", "web_search", "Lookup", "lookup"]
            .map(str::to_owned)
            .into()
    }

    pub(crate) fn turn(text: &str, calls: Vec<ToolCall>, finish: FinishReason) -> AssistantTurn {
        AssistantTurn {
            text: text.to_owned(),
            tool_calls: calls,
            finish: Some(finish),
            ..AssistantTurn::default()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::fixtures::{call, offered, turn};
    use super::*;

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
