//! Reply shaping (SPEC §3): the final payloads from the last assistant message, the silent
//! token, and which starts of an answer are held back from clients while they may still turn
//! out to be a tool call written as text or the silent token.

use agentlane_core::Payload;

/// The exact silent token: a reply that is only this token shows nothing.
pub const SILENT_TOKEN: &str = "NO_REPLY";

/// Whether `text` is the silent token alone (surrounding whitespace and punctuation allowed,
/// case-insensitive, repeated tokens allowed). A token inside real text is not silent.
pub fn is_silent(text: &str) -> bool {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || matches!(c, '.' | ',' | '!' | '"' | '\'' | '`'))
        .filter(|w| !w.is_empty())
        .collect();
    !words.is_empty() && words.iter().all(|w| w.eq_ignore_ascii_case(SILENT_TOKEN))
}

/// Shapes the final payloads. `last_tool_error` is the name and message of the last failed tool
/// of the run, if any: when nothing displayable remains it becomes an error payload.
pub fn shape_payloads(final_text: &str, last_tool_error: Option<(&str, &str)>) -> Vec<Payload> {
    let text = final_text.trim();
    if !text.is_empty() && !is_silent(text) {
        return vec![Payload {
            text: text.to_owned(),
            is_error: false,
        }];
    }
    match last_tool_error {
        Some((tool, _)) if !is_silent(text) => vec![Payload {
            text: format!("⚠️ {tool} failed and the model gave no reply."),
            is_error: true,
        }],
        _ => Vec::new(),
    }
}

/// Whether the start of an answer may still turn out to be a tool call written as text
/// (`<tool_call>`, a JSON object, a fenced block) or the silent token `NO_REPLY`.
pub fn may_be_hidden(text: &str) -> bool {
    let t = text.trim_start();
    if t.is_empty() {
        return true;
    }
    let upper = t.trim_end().to_ascii_uppercase();
    t.starts_with('<')
        || t.starts_with('{')
        || t.starts_with("```")
        || SILENT_TOKEN.starts_with(&upper)
        || upper.starts_with(SILENT_TOKEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_that_may_be_hidden() {
        for (text, hidden) in [
            ("", true),
            ("  <tool_", true),
            ("{\"name\"", true),
            ("```json", true),
            ("NO_", true),
            ("no_reply", true),
            ("NO_REPLY and more", true),
            ("Hello", false),
            ("No problem", false),
            ("The answer", false),
        ] {
            assert_eq!(may_be_hidden(text), hidden, "{text:?}");
        }
    }

    #[test]
    fn silent_token_table() {
        for (text, silent) in [
            ("NO_REPLY", true),
            ("  no_reply. ", true),
            ("NO_REPLY NO_REPLY", true),
            ("NO_REPLY but here is text", false),
            ("Here is text NO_REPLY", false),
            ("", false),
        ] {
            assert_eq!(is_silent(text), silent, "{text:?}");
        }
    }

    #[test]
    fn payload_shaping() {
        assert_eq!(
            shape_payloads(" hi ", None),
            vec![Payload {
                text: "hi".into(),
                is_error: false
            }]
        );
        assert!(shape_payloads("NO_REPLY", None).is_empty());
        assert!(shape_payloads("NO_REPLY", Some(("http_fetch", "denied"))).is_empty());
        let fallback = shape_payloads("", Some(("http_fetch", "denied")));
        assert_eq!(fallback.len(), 1);
        assert!(fallback[0].is_error);
        assert!(fallback[0].text.contains("http_fetch"));
        assert!(shape_payloads("", None).is_empty());
    }
}
