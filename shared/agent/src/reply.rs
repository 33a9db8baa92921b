//! Final payloads from the last assistant message (SPEC §3).

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

#[cfg(test)]
mod tests {
    use super::*;

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
