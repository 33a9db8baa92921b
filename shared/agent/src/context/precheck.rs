//! The token-budget precheck before every model call (OpenClaw's pre-prompt context check) and
//! the tool-result size caps that scale with the context window. Pure functions.

use agentlane_core::Message;
use std::borrow::Borrow;

/// Tokens always left for the model's answer (the compaction reserve floor).
pub const RESERVE_TOKENS: u64 = 20_000;
/// The prompt keeps at least this many tokens, or half the window when that is smaller.
pub const MIN_PROMPT_BUDGET_TOKENS: u64 = 8_000;
/// Estimates are multiplied by this before comparing (they are rough).
pub const SAFETY_MARGIN: f64 = 1.2;
/// Tokens added per message for framing.
pub const TOKENS_PER_MESSAGE: u64 = 12;
/// A truncated tool result keeps at least this many characters.
pub const MIN_KEPT_CHARS: usize = 2_000;

/// What to do before submitting, cheapest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The prompt fits the context window as it is.
    Fits,
    /// Cutting oversized tool results frees enough.
    TruncateToolResultsOnly,
    /// Compact the earlier history, then cut tool results if still needed.
    CompactThenTruncate,
    /// Nothing to cut: only compaction can help.
    CompactOnly,
}

/// The prompt budget of a window: what is left after the answer reserve, never below
/// `min(8000, window / 2)`.
pub fn prompt_budget(context_window: u64) -> u64 {
    let min_prompt = MIN_PROMPT_BUDGET_TOKENS.min((context_window / 2).max(1));
    let reserve = RESERVE_TOKENS.min(context_window.saturating_sub(min_prompt));
    context_window.saturating_sub(reserve).max(1)
}

/// Picks the route for a prompt of `estimate` tokens (already with the safety margin) when
/// `reducible_chars` characters of tool results could be cut.
pub fn route(estimate: u64, context_window: u64, reducible_chars: u64) -> Route {
    let overflow = estimate.saturating_sub(prompt_budget(context_window));
    if overflow == 0 {
        return Route::Fits;
    }
    if reducible_chars == 0 {
        return Route::CompactOnly;
    }
    let overflow_chars = overflow * 4;
    let enough = (overflow_chars + 512 * 4).max((overflow_chars * 3).div_ceil(2));
    if reducible_chars >= enough {
        Route::TruncateToolResultsOnly
    } else {
        Route::CompactThenTruncate
    }
}

/// The most characters one tool result keeps: 16 000 below a 100 k-token window, 32 000 below
/// 200 k, 64 000 above, and never more than 30 % of the window (in characters).
pub fn tool_result_cap(context_window: u64) -> usize {
    let by_size: u64 = match context_window {
        w if w >= 200_000 => 64_000,
        w if w >= 100_000 => 32_000,
        _ => 16_000,
    };
    let by_share = context_window * 4 * 3 / 10;
    by_size.min(by_share).max(MIN_KEPT_CHARS as u64) as usize
}

/// Cuts `content` to `cap` characters (at least [`MIN_KEPT_CHARS`]) with a marker saying so.
pub fn truncate(content: &str, cap: usize) -> Option<String> {
    let cap = cap.max(MIN_KEPT_CHARS);
    let total = content.chars().count();
    if total <= cap {
        return None;
    }
    let head: String = content.chars().take(cap).collect();
    Some(format!(
        "{head}\n[truncated: {} of {total} characters removed to fit the context window]",
        total - cap
    ))
}

/// Characters that cutting every tool result down to [`MIN_KEPT_CHARS`] would free.
pub fn reducible_chars<M: Borrow<Message>>(history: &[M]) -> u64 {
    history
        .iter()
        .map(|m| match m.borrow() {
            Message::Tool { content, .. } => {
                content.chars().count().saturating_sub(MIN_KEPT_CHARS + 200) as u64
            }
            _ => 0,
        })
        .sum()
}

/// Cuts tool results, largest first, until about `chars_to_free` characters are gone. Returns
/// how many results were cut.
pub fn truncate_tool_results<M>(history: &mut [M], chars_to_free: u64) -> usize
where
    M: Borrow<Message> + From<Message>,
{
    let mut order: Vec<(usize, usize)> = history
        .iter()
        .enumerate()
        .filter_map(|(i, m)| match m.borrow() {
            Message::Tool { content, .. } => Some((i, content.chars().count())),
            _ => None,
        })
        .collect();
    order.sort_by_key(|(_, len)| std::cmp::Reverse(*len));
    let mut freed = 0u64;
    let mut cut = 0;
    for (i, len) in order {
        if freed >= chars_to_free || len <= MIN_KEPT_CHARS {
            break;
        }
        let keep = len
            .saturating_sub((chars_to_free - freed) as usize)
            .max(MIN_KEPT_CHARS);
        if let Message::Tool { content, .. } = history[i].borrow()
            && let Some(short) = truncate(content, keep)
        {
            freed += (len - keep) as u64;
            history[i] = M::from(super::relief::with_content(history[i].borrow(), short));
            cut += 1;
        }
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(len: usize) -> Message {
        Message::Tool {
            tool_call_id: "c".into(),
            name: "t".into(),
            content: "x".repeat(len),
            is_error: false,
        }
    }

    #[test]
    fn budgets() {
        assert_eq!(prompt_budget(128_000), 108_000);
        assert_eq!(prompt_budget(16_000), 8_000);
        assert_eq!(prompt_budget(4_000), 2_000);
    }

    #[test]
    fn routes() {
        let cases = [
            (100_000, 128_000, 0, Route::Fits),
            (110_000, 128_000, 0, Route::CompactOnly),
            (110_000, 128_000, 20_000, Route::TruncateToolResultsOnly),
            (110_000, 128_000, 9_000, Route::CompactThenTruncate),
            (9_000, 16_000, 100_000, Route::TruncateToolResultsOnly),
        ];
        for (estimate, window, reducible, want) in cases {
            assert_eq!(
                route(estimate, window, reducible),
                want,
                "{estimate} {window} {reducible}"
            );
        }
    }

    #[test]
    fn caps_scale_with_the_window() {
        assert_eq!(tool_result_cap(8_000), 9_600);
        assert_eq!(tool_result_cap(32_000), 16_000);
        assert_eq!(tool_result_cap(128_000), 32_000);
        assert_eq!(tool_result_cap(1_000_000), 64_000);
        assert_eq!(tool_result_cap(1_000), 2_000);
    }

    #[test]
    fn truncation_keeps_the_head_and_says_so() {
        assert_eq!(truncate("short", 10), None);
        let cut = truncate(&"y".repeat(5_000), 2_500).unwrap_or_default();
        assert!(cut.starts_with(&"y".repeat(2_500)));
        assert!(cut.contains("2500 of 5000 characters removed"));
        let mut h = vec![Message::user("q"), tool(10_000), tool(3_000)];
        assert!(reducible_chars(&h) > 7_000);
        assert_eq!(truncate_tool_results(&mut h, 6_000), 1);
        assert!(
            matches!(&h[1], Message::Tool { content, .. } if content.contains("6000 of 10000"))
        );
        assert!(matches!(&h[2], Message::Tool { content, .. } if content.len() == 3_000));
    }
}
