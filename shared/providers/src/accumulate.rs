//! Folds a provider's [`StreamEvent`]s into one assistant turn.

use crate::{FinishReason, StreamEvent};
use agentlane_core::{ToolCall, Usage};

/// The assistant message a complete (or cut-off) stream produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantTurn {
    /// The visible answer text, every delta concatenated.
    pub text: String,
    /// The model's reasoning text, every delta concatenated.
    pub reasoning: String,
    /// The tool calls, in the order of their `index`.
    pub tool_calls: Vec<ToolCall>,
    /// Token usage as the stream last reported it.
    pub usage: Usage,
    /// `None` while the stream has not finished.
    pub finish: Option<FinishReason>,
    /// The message had a text part that stayed empty ([`StreamEvent::EmptyText`]).
    pub empty_text: bool,
}

impl AssistantTurn {
    /// Whether the response carried an assistant message at all: some text (even an empty text
    /// part), reasoning or a tool call. `false`: it finished with no assistant content.
    pub fn has_message(&self) -> bool {
        self.empty_text
            || !self.text.is_empty()
            || !self.reasoning.is_empty()
            || !self.tool_calls.is_empty()
    }
}

/// Accumulates stream events. Tool calls keep the order of their `index`, whatever order their
/// fragments arrive in.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    turn: AssistantTurn,
    calls: Vec<(usize, ToolCall)>,
}

impl StreamAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one event into the turn.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta(t) => self.turn.text.push_str(t),
            StreamEvent::ReasoningDelta(t) => self.turn.reasoning.push_str(t),
            StreamEvent::ToolCallStart { index, id, name } => match self.call_mut(*index) {
                Some(call) => {
                    if call.id.is_empty() {
                        call.id.clone_from(id);
                    }
                    call.name.push_str(name);
                }
                None => self.calls.push((
                    *index,
                    ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        arguments: String::new(),
                    },
                )),
            },
            StreamEvent::ToolCallArgumentsDelta { index, delta } => match self.call_mut(*index) {
                Some(call) => call.arguments.push_str(delta),
                None => self.calls.push((
                    *index,
                    ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: delta.clone(),
                    },
                )),
            },
            StreamEvent::Usage(u) => self.turn.usage = *u,
            StreamEvent::Finished(reason) => self.turn.finish = Some(reason.clone()),
            StreamEvent::EmptyText => self.turn.empty_text = true,
            StreamEvent::KeepAlive => {}
        }
    }

    fn call_mut(&mut self, index: usize) -> Option<&mut ToolCall> {
        self.calls
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, c)| c)
    }

    /// The visible text received so far.
    pub fn text(&self) -> &str {
        &self.turn.text
    }

    /// The turn so far. Tool calls are sorted by index.
    pub fn finish(mut self) -> AssistantTurn {
        self.calls.sort_by_key(|(i, _)| *i);
        self.turn.tool_calls = self.calls.into_iter().map(|(_, c)| c).collect();
        self.turn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_text_and_parallel_tool_calls_by_index() {
        let mut acc = StreamAccumulator::new();
        for e in [
            StreamEvent::TextDelta("Let me ".into()),
            StreamEvent::TextDelta("check.".into()),
            StreamEvent::ToolCallStart {
                index: 1,
                id: "b".into(),
                name: "get_time".into(),
            },
            StreamEvent::ToolCallStart {
                index: 0,
                id: "a".into(),
                name: "get_weather".into(),
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 0,
                delta: "{\"city\":\"Pa".into(),
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 1,
                delta: "{}".into(),
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 0,
                delta: "ris\"}".into(),
            },
            StreamEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Default::default()
            }),
            StreamEvent::Finished(FinishReason::ToolCalls),
        ] {
            acc.push(&e);
        }
        let turn = acc.finish();
        assert_eq!(
            turn,
            AssistantTurn {
                text: "Let me check.".into(),
                reasoning: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "a".into(),
                        name: "get_weather".into(),
                        arguments: "{\"city\":\"Paris\"}".into()
                    },
                    ToolCall {
                        id: "b".into(),
                        name: "get_time".into(),
                        arguments: "{}".into()
                    },
                ],
                usage: Usage {
                    input_tokens: 3,
                    output_tokens: 4,
                    ..Default::default()
                },
                finish: Some(FinishReason::ToolCalls),
                empty_text: false,
            }
        );
        assert!(turn.has_message());
    }

    #[test]
    fn an_empty_text_part_is_a_message_and_nothing_at_all_is_none() {
        let fold = |events: &[StreamEvent]| {
            let mut acc = StreamAccumulator::new();
            events.iter().for_each(|e| acc.push(e));
            acc.finish()
        };
        let finished = StreamEvent::Finished(FinishReason::Stop);
        let empty = fold(&[StreamEvent::EmptyText, finished.clone()]);
        assert!(empty.has_message() && empty.text.is_empty());
        let nothing = fold(&[StreamEvent::Usage(Usage::default()), finished]);
        assert!(!nothing.has_message());
    }
}
