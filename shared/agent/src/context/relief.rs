//! Compaction inside a run, the pure part: when a tool loop's prompt passes its budget, what
//! relieves it, cheapest first — cutting the tool results of the run's earlier rounds (head and
//! tail kept, with a marker), then one summary of the history before the run, then one summary
//! of everything before the run's most recent rounds. A cut splits no round and a summary ends
//! where a round starts, so every tool call keeps its result. The model call and the writes are
//! the runner's (`runner::compaction`).

use super::tokens::message_chars;
use agentlane_core::Message;
use std::borrow::Borrow;
use std::ops::Range;

/// An earlier round's tool result keeps this many characters from its start...
pub const CUT_HEAD_CHARS: usize = 700;
/// ...and this many from its end.
pub const CUT_TAIL_CHARS: usize = 300;
/// A result no longer than this (head, tail and marker) is never cut.
const CUT_MIN_CHARS: usize = CUT_HEAD_CHARS + CUT_TAIL_CHARS + 120;
/// What a summary is assumed to cost in the prompt (its text and framing), in tokens.
pub const SUMMARY_TOKENS: u64 = 600;

/// Tokens of one message in the prompt, the way the precheck counts them (a quarter of its
/// characters with the 1.2 safety margin, plus the framing of a message).
pub fn message_tokens(m: &Message) -> u64 {
    let chars = message_chars(m) as u64 + 4;
    (chars.div_ceil(4) as f64 * super::precheck::SAFETY_MARGIN) as u64
        + super::precheck::TOKENS_PER_MESSAGE
}

/// Tokens of `messages` (see [`message_tokens`]).
pub fn tokens_of<M: Borrow<Message>>(messages: &[M]) -> u64 {
    messages.iter().map(|m| message_tokens(m.borrow())).sum()
}

/// The run's tool rounds in `history[run_start..]`, oldest first: each starts at an assistant
/// message with tool calls and runs to the next one (its results, and whatever joined the run
/// after them: steer messages, a revision).
pub fn rounds<M: Borrow<Message>>(history: &[M], run_start: usize) -> Vec<Range<usize>> {
    let starts: Vec<usize> = history
        .iter()
        .enumerate()
        .skip(run_start)
        .filter(
            |(_, m)| matches!(Borrow::<Message>::borrow(*m), Message::Assistant { tool_calls, .. } if !tool_calls.is_empty()),
        )
        .map(|(i, _)| i)
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(k, &start)| start..starts.get(k + 1).copied().unwrap_or(history.len()))
        .collect()
}

/// Characters cutting `content` frees (0 when it is short enough to keep whole).
fn cuttable_chars(content: &str) -> usize {
    let total = content.chars().count();
    if total <= CUT_MIN_CHARS {
        0
    } else {
        total - CUT_HEAD_CHARS - CUT_TAIL_CHARS
    }
}

/// Tokens cutting the tool results of `round` would free.
pub fn cuttable_tokens<M: Borrow<Message>>(round: &[M]) -> u64 {
    let chars: usize = round
        .iter()
        .map(|m| match m.borrow() {
            Message::Tool { content, .. } => cuttable_chars(content),
            _ => 0,
        })
        .sum();
    ((chars as u64).div_ceil(4) as f64 * super::precheck::SAFETY_MARGIN) as u64
}

/// `content` with its head and tail kept and a marker saying what was cut; `None` when it is
/// short enough to keep whole (so cutting twice changes nothing).
pub fn cut_result(content: &str) -> Option<String> {
    let removed = cuttable_chars(content);
    if removed == 0 {
        return None;
    }
    let head: String = content.chars().take(CUT_HEAD_CHARS).collect();
    let tail: String = content.chars().skip(CUT_HEAD_CHARS + removed).collect();
    Some(format!(
        "{head}\n[... {removed} characters of this earlier tool result cut to fit the context \
         window ...]\n{tail}"
    ))
}

/// Cuts the tool results in `ranges` of `history`; returns how many were cut.
pub fn cut_rounds<M>(history: &mut [M], ranges: &[Range<usize>]) -> usize
where
    M: Borrow<Message> + From<Message>,
{
    let mut cut = 0;
    for range in ranges {
        for m in &mut history[range.clone()] {
            if let Message::Tool { content, .. } = (*m).borrow()
                && let Some(short) = cut_result(content)
            {
                *m = M::from(with_content((*m).borrow(), short));
                cut += 1;
            }
        }
    }
    cut
}

/// A tool result `m` with `content` instead of its own.
pub(crate) fn with_content(m: &Message, content: String) -> Message {
    match m {
        Message::Tool {
            tool_call_id,
            name,
            is_error,
            ..
        } => Message::Tool {
            tool_call_id: tool_call_id.clone(),
            name: name.clone(),
            content,
            is_error: *is_error,
        },
        other => other.clone(),
    }
}

/// One round's size, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundSize {
    /// What the round takes in the prompt.
    pub tokens: u64,
    /// What cutting its tool results would free.
    pub cuttable: u64,
}

/// What a prompt over its budget is made of, in estimated tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pressure {
    /// How far the prompt is over its budget (0: it fits).
    pub over: u64,
    /// The prompt budget of the window.
    pub budget: u64,
    /// The history before the run, when it holds something to summarise (not only a summary).
    pub before_run: Option<u64>,
    /// The run's tool rounds, oldest first.
    pub rounds: Vec<RoundSize>,
    /// An overflow compaction (a summary) is left in the run's budget.
    pub summaries_left: bool,
}

/// What relieves the prompt, cheapest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relief {
    /// Nothing to do.
    Fits,
    /// Cut the tool results of the run's first `rounds` rounds (never the last one).
    CutEarlier {
        /// How many of the run's rounds, from the first, get their results cut.
        rounds: usize,
    },
    /// Summarise the history before the run; the run's prompt and rounds stay as they are.
    SummariseBeforeRun,
    /// Summarise the history before the run, the run's prompt and its first `rounds` rounds;
    /// the rounds after them stay.
    SummariseRounds {
        /// How many of the run's rounds, from the first, go into the summary.
        rounds: usize,
    },
    /// Nothing here helps (no earlier round, no summary left): the oversized results are cut
    /// and the provider has the last word.
    Nothing,
}

/// Freed tokens beyond the overflow, so the next round does not overflow again at once.
fn slack(budget: u64) -> u64 {
    (budget / 8).max(512)
}

/// The rule. Cutting the earlier rounds' results is free (no model call) and is done oldest
/// first until it frees the overflow and some slack. When cutting every earlier round is not
/// enough, a summary (one model call, counted against the overflow compactions of SPEC §5) is
/// made: of the history before the run alone when that frees enough (the run's own messages
/// stay verbatim), else of everything before the most recent rounds that fit a quarter of the
/// budget (at least the last round stays). With no summary left, the earlier rounds are cut
/// as far as they go.
pub fn relief(p: &Pressure) -> Relief {
    if p.over == 0 {
        return Relief::Fits;
    }
    let need = p.over + slack(p.budget);
    let earlier = p.rounds.len().saturating_sub(1);
    let mut freed = 0;
    for (i, round) in p.rounds[..earlier].iter().enumerate() {
        freed += round.cuttable;
        if freed >= need {
            return Relief::CutEarlier { rounds: i + 1 };
        }
    }
    let cut_all = || {
        if freed > 0 {
            Relief::CutEarlier { rounds: earlier }
        } else {
            Relief::Nothing
        }
    };
    if !p.summaries_left {
        return cut_all();
    }
    if let Some(before) = p.before_run
        && before >= need + SUMMARY_TOKENS
    {
        return Relief::SummariseBeforeRun;
    }
    if earlier > 0 {
        let mut kept = 1;
        let mut kept_tokens = p.rounds[earlier].tokens;
        while kept < p.rounds.len() {
            let next = p.rounds[p.rounds.len() - 1 - kept].tokens;
            if kept_tokens + next > p.budget / 4 {
                break;
            }
            kept_tokens += next;
            kept += 1;
        }
        if kept < p.rounds.len() {
            return Relief::SummariseRounds {
                rounds: p.rounds.len() - kept,
            };
        }
    }
    if p.before_run.is_some() {
        return Relief::SummariseBeforeRun;
    }
    cut_all()
}

/// The user's own words in `messages` (the run's prompt, collected and steer messages), for a
/// summary of the run's start to carry verbatim; at most `max_chars` characters each.
pub fn user_words<M: Borrow<Message>>(messages: &[M], max_chars: usize) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m.borrow() {
            Message::User { content } if content.chars().count() > max_chars => Some(format!(
                "{} [...]",
                content.chars().take(max_chars).collect::<String>()
            )),
            Message::User { content } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::ToolCall;

    fn call(id: &str) -> Message {
        Message::Assistant {
            content: String::new(),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "read".into(),
                arguments: "{}".into(),
            }],
            model: None,
        }
    }
    fn result(id: &str, len: usize) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "read".into(),
            content: "r".repeat(len),
            is_error: false,
        }
    }
    fn round(tokens: u64, cuttable: u64) -> RoundSize {
        RoundSize { tokens, cuttable }
    }

    #[test]
    fn rounds_start_at_each_call_and_keep_what_joined_after() {
        let history = vec![
            Message::user("old"),
            Message::user("this run"),
            call("a"),
            result("a", 10),
            call("b"),
            result("b", 10),
            Message::user("a steer"),
            call("c"),
            result("c", 10),
        ];
        assert_eq!(rounds(&history, 1), vec![2..4, 4..7, 7..9]);
        assert_eq!(rounds(&history, 5), vec![7..9]);
        assert!(rounds(&history[..2], 1).is_empty());
    }

    #[test]
    fn a_cut_keeps_head_and_tail_once() {
        let content: String = ('a'..='z').cycle().take(5_000).collect();
        let cut = cut_result(&content).unwrap_or_default();
        assert!(cut.starts_with(&content[..CUT_HEAD_CHARS]));
        assert!(cut.ends_with(&content[5_000 - CUT_TAIL_CHARS..]));
        assert!(cut.contains("4000 characters of this earlier tool result cut"));
        assert_eq!(cut_result(&cut), None, "a cut result is not cut again");
        assert_eq!(cut_result(&"s".repeat(CUT_MIN_CHARS)), None);
        let mut history = vec![
            Message::user("q"),
            call("a"),
            result("a", 5_000),
            call("b"),
            result("b", 5_000),
        ];
        let ranges = rounds(&history, 1);
        assert_eq!(cut_rounds(&mut history, &ranges[..1]), 1);
        assert!(cuttable_tokens(&history[1..3]) == 0);
        assert!(cuttable_tokens(&history[3..5]) > 900);
        assert_eq!(history[4], result("b", 5_000), "the last round stays whole");
    }

    #[test]
    fn the_rule_table() {
        let p = |over, before_run, rounds: Vec<RoundSize>, summaries_left| Pressure {
            over,
            budget: 8_000,
            before_run,
            rounds,
            summaries_left,
        };
        let five = || vec![round(700, 400); 5];
        // (case, pressure, relief); the slack at an 8 000 budget is 1 000 tokens
        let rows = [
            ("fits", p(0, None, five(), true), Relief::Fits),
            (
                "cutting the oldest round frees enough",
                p(100, None, vec![round(700, 1_500), round(700, 1_500)], true),
                Relief::CutEarlier { rounds: 1 },
            ),
            (
                "cutting goes oldest first until enough",
                p(300, None, five(), true),
                Relief::CutEarlier { rounds: 4 },
            ),
            (
                "the last round is never cut",
                p(1_200, None, five(), false),
                Relief::CutEarlier { rounds: 4 },
            ),
            (
                "cuts not enough: summarise all but the rounds of a quarter budget",
                p(2_000, None, five(), true),
                Relief::SummariseRounds { rounds: 3 },
            ),
            (
                "the history before the run is summarised first when that is enough",
                p(2_000, Some(4_000), five(), true),
                Relief::SummariseBeforeRun,
            ),
            (
                "a small history before the run is not enough: the rounds too",
                p(2_000, Some(1_000), five(), true),
                Relief::SummariseRounds { rounds: 3 },
            ),
            (
                "a big last round: the last round stays, the rest is summarised",
                p(
                    2_000,
                    None,
                    vec![round(700, 0), round(700, 0), round(5_000, 0)],
                    true,
                ),
                Relief::SummariseRounds { rounds: 2 },
            ),
            (
                "one round and no history before: nothing helps",
                p(2_000, None, vec![round(9_000, 8_000)], true),
                Relief::Nothing,
            ),
            (
                "no round yet: the history before the run",
                p(2_000, Some(1_000), vec![], true),
                Relief::SummariseBeforeRun,
            ),
            (
                "no summary left, nothing to cut",
                p(
                    2_000,
                    Some(9_000),
                    vec![round(700, 0), round(700, 0)],
                    false,
                ),
                Relief::Nothing,
            ),
            (
                "every round fits a quarter budget: only the history before the run",
                p(2_000, Some(500), vec![round(500, 0), round(500, 0)], true),
                Relief::SummariseBeforeRun,
            ),
            (
                "every round fits a quarter budget and nothing before: cut what there is",
                p(2_000, None, vec![round(500, 100), round(500, 100)], true),
                Relief::CutEarlier { rounds: 1 },
            ),
        ];
        for (case, pressure, want) in rows {
            assert_eq!(relief(&pressure), want, "{case}");
        }
    }

    #[test]
    fn the_users_words_are_kept_verbatim_up_to_a_cap() {
        let messages = vec![
            Message::user("read the pages"),
            call("a"),
            result("a", 10),
            Message::user("x".repeat(50)),
        ];
        assert_eq!(
            user_words(&messages, 20),
            vec![
                "read the pages".to_owned(),
                format!("{} [...]", "x".repeat(20))
            ]
        );
    }
}
