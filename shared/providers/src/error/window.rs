//! The wording that tells a short rate-limit window (per minute) from a long one (per day, a
//! quota, a subscription limit), after OpenClaw's `assistant-failover.ts` (§1.9). Every function
//! takes lowercased text.

use std::time::Duration;

/// The longest wait that still counts as a short window.
pub(super) const SHORT_MAX: Duration = Duration::from_secs(60);

/// Phrases of a daily/monthly quota or an exhausted plan.
const LONG_PHRASES: &[&str] = &[
    "daily",
    "weekly",
    "monthly",
    "per day",
    "per week",
    "per month",
    "tokens per day",
    "usage limit",
    "subscription",
    "insufficient_quota",
    "quota exceeded",
    "quota_exceeded",
    "exceeded your current quota",
];

/// Abbreviations of a daily quota, matched as whole words.
const LONG_WORDS: &[&str] = &["rpd", "tpd"];

/// Phrases of a per-minute limit or a short cooldown (English and Chinese provider wording).
const SHORT_PHRASES: &[&str] = &[
    "per minute",
    "per-minute",
    "per min",
    "model_cooldown",
    "频率限制",
    "请求过于频繁",
    "请求频率",
];

/// Abbreviations of a per-minute limit, matched as whole words.
const SHORT_WORDS: &[&str] = &["rpm", "tpm"];

/// Phrases a provider puts before the delay it asks for ("Please try again in 20s").
const DELAY_PREFIXES: &[&str] = &["try again in ", "retry after ", "retry in "];

pub(super) fn has_long_wording(text: &str) -> bool {
    LONG_PHRASES.iter().any(|p| text.contains(p)) || LONG_WORDS.iter().any(|w| has_word(text, w))
}

pub(super) fn has_short_wording(text: &str) -> bool {
    SHORT_PHRASES.iter().any(|p| text.contains(p))
        || SHORT_WORDS.iter().any(|w| has_word(text, w))
        || DELAY_PREFIXES.iter().any(|prefix| {
            text.match_indices(prefix)
                .filter_map(|(at, _)| delay(&text[at + prefix.len()..]))
                .any(|d| d <= SHORT_MAX)
        })
}

/// Whether `word` occurs in `text` with no letter or digit on either side.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// The delay at the start of `text`: one or more number-and-unit pairs such as `20s`, `1.5 s`,
/// `250ms`, `1m30s`, `2 minutes`. `None` if it does not start with one.
fn delay(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = 0.0_f64;
    let mut parsed = false;
    loop {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let Ok(number) = rest[..number_len].parse::<f64>() else {
            break;
        };
        let after_number = rest[number_len..].trim_start();
        let unit_len = after_number
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after_number.len());
        let seconds_per_unit = match &after_number[..unit_len] {
            "ms" | "millisecond" | "milliseconds" => 0.001,
            "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
            _ => break,
        };
        total += number * seconds_per_unit;
        parsed = true;
        rest = &after_number[unit_len..];
    }
    (parsed && total.is_finite()).then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("20s. visit", Some(Duration::from_secs(20))),
            ("1.5 s", Some(Duration::from_millis(1500))),
            ("250ms", Some(Duration::from_millis(250))),
            ("1m30s", Some(Duration::from_secs(90))),
            ("2 minutes", Some(Duration::from_secs(120))),
            ("a moment", None),
            ("5 apples", None),
        ];
        for (text, want) in cases {
            assert_eq!(delay(text), *want, "{text}");
        }
    }

    #[test]
    fn words_need_boundaries() {
        assert!(has_word("limit on requests per min (rpm): 3", "rpm"));
        assert!(!has_word("rpms", "rpm"));
        assert!(!has_word("xtpm", "tpm"));
    }
}
