//! tool_use / tool_result pairing repair: a pure function over a history.
//!
//! Invariant after repair: every assistant tool call is followed, before the next user or
//! assistant message, by exactly one tool result with its id; no tool result lacks its call.

use agentlane_core::Message;
use std::borrow::Borrow;

/// The text of a synthetic result for a call whose result was never recorded.
pub const ABORTED_RESULT: &str =
    "aborted: the tool call did not complete (the run was interrupted)";

/// Returns `history` with orphan tool results dropped, duplicate results dropped, and missing
/// results filled with an "aborted" error result right after their assistant message's results.
/// Takes the messages borrowed (a slice, or a view such as [`super::history::limit_turns`]'s)
/// so the one copy made is the repaired history itself — of shared messages, no message is
/// copied at all.
pub fn repair_pairing<'a, M>(history: impl IntoIterator<Item = &'a M>) -> Vec<M>
where
    M: Borrow<Message> + From<Message> + Clone + 'a,
{
    let history = history.into_iter();
    let mut out = Vec::with_capacity(history.size_hint().0);
    // (call id, tool name) awaiting a result
    let mut pending: Vec<(&'a str, &'a str)> = Vec::new();
    for item in history {
        let message: &'a Message = item.borrow();
        match message {
            Message::Tool { tool_call_id, .. } => {
                if let Some(pos) = pending.iter().position(|(id, _)| id == tool_call_id) {
                    pending.remove(pos);
                    out.push(item.clone());
                }
                // else: orphan or duplicate — dropped
            }
            Message::User { .. } | Message::Assistant { .. } | Message::Compaction { .. } => {
                fill_missing(&mut out, &mut pending);
                if let Message::Assistant { tool_calls, .. } = message {
                    pending = tool_calls
                        .iter()
                        .map(|c| (c.id.as_str(), c.name.as_str()))
                        .collect();
                }
                out.push(item.clone());
            }
        }
    }
    fill_missing(&mut out, &mut pending);
    out
}

/// The synthetic results `repair_pairing` would add at the end of `history` (the calls of the
/// last assistant message that have no result yet).
pub fn missing_results<M>(history: &[M]) -> Vec<Message>
where
    M: Borrow<Message> + From<Message> + Clone,
{
    let repaired: Vec<M> = repair_pairing(history);
    let tail_start = history.len().min(repaired.len());
    if repaired.len() > history.len() && same(&repaired[..tail_start], &history[..tail_start]) {
        repaired[tail_start..]
            .iter()
            .map(|m| m.borrow().clone())
            .collect()
    } else {
        Vec::new()
    }
}

fn same<M: Borrow<Message>>(a: &[M], b: &[M]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.borrow() == y.borrow())
}

fn fill_missing<M: From<Message>>(out: &mut Vec<M>, pending: &mut Vec<(&str, &str)>) {
    for (id, name) in pending.drain(..) {
        out.push(M::from(Message::Tool {
            tool_call_id: id.to_owned(),
            name: name.to_owned(),
            content: ABORTED_RESULT.to_owned(),
            is_error: true,
        }));
    }
}

/// Checks the pairing invariant; `Err` names the first violation.
pub fn check_pairing<M>(history: &[M]) -> Result<(), String>
where
    M: Borrow<Message> + From<Message> + Clone,
{
    let repaired: Vec<M> = repair_pairing(history);
    if same(&repaired, history) {
        Ok(())
    } else {
        Err("tool calls and tool results do not pair up".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::ToolCall;

    fn assistant(calls: &[&str]) -> Message {
        Message::Assistant {
            content: String::new(),
            reasoning: None,
            tool_calls: calls
                .iter()
                .map(|id| ToolCall {
                    id: (*id).into(),
                    name: "t".into(),
                    arguments: "{}".into(),
                })
                .collect(),
            model: None,
        }
    }
    fn result(id: &str) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "t".into(),
            content: "r".into(),
            is_error: false,
        }
    }
    fn aborted(id: &str) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "t".into(),
            content: ABORTED_RESULT.into(),
            is_error: true,
        }
    }

    #[test]
    fn repair_table() {
        let u = Message::user("hi");
        let cases: Vec<(&str, Vec<Message>, Vec<Message>)> = vec![
            (
                "already paired",
                vec![u.clone(), assistant(&["a"]), result("a")],
                vec![u.clone(), assistant(&["a"]), result("a")],
            ),
            (
                "orphan result dropped",
                vec![u.clone(), result("x"), assistant(&[])],
                vec![u.clone(), assistant(&[])],
            ),
            (
                "missing result at end filled",
                vec![u.clone(), assistant(&["a", "b"]), result("a")],
                vec![u.clone(), assistant(&["a", "b"]), result("a"), aborted("b")],
            ),
            (
                "missing result before next user filled",
                vec![assistant(&["a"]), u.clone()],
                vec![assistant(&["a"]), aborted("a"), u.clone()],
            ),
            (
                "duplicate result dropped",
                vec![assistant(&["a"]), result("a"), result("a")],
                vec![assistant(&["a"]), result("a")],
            ),
            (
                "result of an older call dropped",
                vec![
                    assistant(&["a"]),
                    result("a"),
                    assistant(&["b"]),
                    result("a"),
                    result("b"),
                ],
                vec![
                    assistant(&["a"]),
                    result("a"),
                    assistant(&["b"]),
                    result("b"),
                ],
            ),
        ];
        for (name, input, want) in cases {
            assert_eq!(repair_pairing(&input), want, "{name}");
            assert!(check_pairing(&want).is_ok(), "{name}");
        }
    }

    #[test]
    fn missing_results_are_the_tail() {
        let h = vec![Message::user("hi"), assistant(&["a", "b"]), result("a")];
        assert_eq!(missing_results(&h), vec![aborted("b")]);
        assert!(missing_results(&[Message::user("x")]).is_empty());
    }
}
