//! The tool-call pairing invariant, checked on every history the model is sent (and on
//! transcripts): each tool call of an assistant message has exactly one result carrying its id
//! before the next non-tool message, and no result answers a call that is not pending.

use agentlane_core::{Message, TranscriptEntry};
use serde_json::Value;

/// A message reduced to what pairing cares about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingItem {
    /// An assistant message and the ids of the tool calls it made (possibly none).
    Assistant {
        /// Tool call ids in call order.
        tool_call_ids: Vec<String>,
    },
    /// A tool result answering the call with this id.
    ToolResult {
        /// The id of the call it answers.
        tool_call_id: String,
    },
    /// Any other message (user, system, developer).
    Other {
        /// Its role.
        role: String,
    },
}

/// How a history breaks the pairing invariant. `index` is the position of the offending message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairingViolation {
    /// A call was left without a result when another message began.
    #[error("message {index} ({role}) arrives while tool call {id:?} still has no result")]
    MissingResult {
        /// Where the interrupting message is.
        index: usize,
        /// Its role.
        role: String,
        /// The unanswered call.
        id: String,
    },
    /// The history ends with a call still unanswered.
    #[error("the history ends while tool call {id:?} still has no result")]
    MissingResultAtEnd {
        /// The unanswered call.
        id: String,
    },
    /// A result answers no pending call (an orphan, or a second result for the same call).
    #[error("message {index} is a tool result for {id:?}, which is not a pending tool call")]
    Orphan {
        /// Where the result is.
        index: usize,
        /// The id it claims to answer.
        id: String,
    },
    /// One assistant message uses the same call id twice.
    #[error("message {index} uses tool call id {id:?} twice")]
    DuplicateCallId {
        /// Where the assistant message is.
        index: usize,
        /// The repeated id.
        id: String,
    },
    /// A message that does not have the chat-completions shape.
    #[error("message {index} is malformed: {problem}")]
    Malformed {
        /// Where it is.
        index: usize,
        /// What is wrong.
        problem: String,
    },
}

/// Checks the invariant over a whole history.
pub fn check_pairing(items: &[PairingItem]) -> Result<(), PairingViolation> {
    // Calls of the latest assistant message still waiting for their result, in call order.
    let mut pending: Vec<String> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        match item {
            PairingItem::ToolResult { tool_call_id } => {
                match pending.iter().position(|id| id == tool_call_id) {
                    Some(at) => {
                        pending.remove(at);
                    }
                    None => {
                        return Err(PairingViolation::Orphan {
                            index,
                            id: tool_call_id.clone(),
                        });
                    }
                }
            }
            PairingItem::Assistant { tool_call_ids } => {
                close_block(&pending, index, "assistant")?;
                pending.clear();
                for (n, id) in tool_call_ids.iter().enumerate() {
                    if tool_call_ids[..n].contains(id) {
                        return Err(PairingViolation::DuplicateCallId {
                            index,
                            id: id.clone(),
                        });
                    }
                    pending.push(id.clone());
                }
            }
            PairingItem::Other { role } => {
                close_block(&pending, index, role)?;
                pending.clear();
            }
        }
    }
    match pending.first() {
        Some(id) => Err(PairingViolation::MissingResultAtEnd { id: id.clone() }),
        None => Ok(()),
    }
}

fn close_block(pending: &[String], index: usize, role: &str) -> Result<(), PairingViolation> {
    match pending.first() {
        Some(id) => Err(PairingViolation::MissingResult {
            index,
            role: role.to_owned(),
            id: id.clone(),
        }),
        None => Ok(()),
    }
}

/// Reduces OpenAI chat-completions `messages` (as a provider sends them) to pairing items.
pub fn openai_items(messages: &[Value]) -> Result<Vec<PairingItem>, PairingViolation> {
    messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let malformed = |problem: &str| PairingViolation::Malformed {
                index,
                problem: problem.to_owned(),
            };
            let role = message
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed("no role"))?;
            match role {
                "assistant" => {
                    let calls = match message.get("tool_calls") {
                        None | Some(Value::Null) => Vec::new(),
                        Some(Value::Array(calls)) => calls
                            .iter()
                            .map(|call| {
                                call.get("id")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned)
                                    .ok_or_else(|| malformed("a tool call without an id"))
                            })
                            .collect::<Result<_, _>>()?,
                        Some(_) => return Err(malformed("tool_calls is not an array")),
                    };
                    Ok(PairingItem::Assistant {
                        tool_call_ids: calls,
                    })
                }
                "tool" => {
                    let id = message
                        .get("tool_call_id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| malformed("a tool result without tool_call_id"))?;
                    Ok(PairingItem::ToolResult {
                        tool_call_id: id.to_owned(),
                    })
                }
                other => Ok(PairingItem::Other {
                    role: other.to_owned(),
                }),
            }
        })
        .collect()
}

/// Reduces transcript entries to pairing items.
pub fn transcript_items(entries: &[TranscriptEntry]) -> Vec<PairingItem> {
    entries
        .iter()
        .map(|entry| match &entry.message {
            Message::User { .. } => PairingItem::Other {
                role: "user".to_owned(),
            },
            Message::Compaction { .. } => PairingItem::Other {
                role: "compaction".to_owned(),
            },
            Message::Assistant { tool_calls, .. } => PairingItem::Assistant {
                tool_call_ids: tool_calls.iter().map(|c| c.id.clone()).collect(),
            },
            Message::Tool { tool_call_id, .. } => PairingItem::ToolResult {
                tool_call_id: tool_call_id.clone(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn check(messages: Value) -> Result<(), PairingViolation> {
        let messages = messages.as_array().unwrap().clone();
        check_pairing(&openai_items(&messages)?)
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "current_time", "arguments": "{}"}})
    }

    #[test]
    fn a_complete_round_trip_with_parallel_calls_passes() {
        let history = json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "time?"},
            {"role": "assistant", "content": "checking", "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "2"},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
        ]);
        assert_eq!(check(history), Ok(()));
    }

    #[test]
    fn a_call_without_result_before_the_next_user_message_fails() {
        let history = json!([
            {"role": "user", "content": "time?"},
            {"role": "assistant", "content": "", "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "user", "content": "hello?"},
        ]);
        assert_eq!(
            check(history),
            Err(PairingViolation::MissingResult {
                index: 3,
                role: "user".into(),
                id: "b".into()
            })
        );
    }

    #[test]
    fn a_call_left_open_at_the_end_fails() {
        let history = json!([
            {"role": "user", "content": "time?"},
            {"role": "assistant", "content": "", "tool_calls": [call("a")]},
        ]);
        assert_eq!(
            check(history),
            Err(PairingViolation::MissingResultAtEnd { id: "a".into() })
        );
    }

    #[test]
    fn orphan_and_duplicate_results_fail() {
        let orphan = json!([
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
        ]);
        assert_eq!(
            check(orphan),
            Err(PairingViolation::Orphan {
                index: 1,
                id: "a".into()
            })
        );
        let duplicate = json!([
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "1 again"},
        ]);
        assert_eq!(
            check(duplicate),
            Err(PairingViolation::Orphan {
                index: 3,
                id: "a".into()
            })
        );
    }

    #[test]
    fn a_result_for_an_earlier_assistant_message_is_an_orphan() {
        let history = json!([
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "assistant", "content": "", "tool_calls": [call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "2"},
            {"role": "tool", "tool_call_id": "a", "content": "late"},
        ]);
        assert_eq!(
            check(history),
            Err(PairingViolation::Orphan {
                index: 5,
                id: "a".into()
            })
        );
    }

    #[test]
    fn repeated_ids_in_one_message_and_malformed_messages_fail() {
        let repeated = json!([
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [call("a"), call("a")]},
        ]);
        assert_eq!(
            check(repeated),
            Err(PairingViolation::DuplicateCallId {
                index: 1,
                id: "a".into()
            })
        );
        let no_id = json!([{"role": "tool", "content": "1"}]);
        assert!(matches!(
            check(no_id),
            Err(PairingViolation::Malformed { index: 0, .. })
        ));
    }

    #[test]
    fn transcripts_reduce_to_the_same_items() {
        let entries: Vec<TranscriptEntry> = serde_json::from_value(json!([
            {"seq": 1, "runId": "r", "ts": 1, "message": {"role": "user", "content": "x"}},
            {"seq": 2, "runId": "r", "ts": 2, "message": {"role": "assistant", "content": "",
                "toolCalls": [{"id": "a", "name": "current_time", "arguments": "{}"}]}},
            {"seq": 3, "runId": "r", "ts": 3, "message": {"role": "tool", "toolCallId": "a",
                "name": "current_time", "content": "1", "isError": false}},
        ]))
        .unwrap();
        let items = transcript_items(&entries);
        assert_eq!(
            items,
            vec![
                PairingItem::Other {
                    role: "user".into()
                },
                PairingItem::Assistant {
                    tool_call_ids: vec!["a".into()]
                },
                PairingItem::ToolResult {
                    tool_call_id: "a".into()
                },
            ]
        );
        assert_eq!(check_pairing(&items), Ok(()));
        assert!(check_pairing(&items[..2]).is_err());
    }
}
