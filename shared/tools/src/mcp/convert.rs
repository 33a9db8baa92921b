//! An MCP `tools/call` result as the text the model sees.
//!
//! Text blocks are kept; `structuredContent` is added as JSON text (unless a text block already
//! carries the same JSON, as servers do for older clients); images, audio and binary resources
//! become a short note with their type and size, never their bytes; embedded text resources keep
//! their text under a note naming them. `isError: true` becomes [`ToolError::Failed`].

use crate::{ToolError, ToolOutput};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

/// What the model sees for a result with nothing in it.
const EMPTY: &str = "(the tool returned no content)";

/// Bytes encoded by base64 text `data` (no decoding: only its length and padding).
fn base64_len(data: &str) -> usize {
    let data = data.trim_end();
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
    (data.len() / 4 * 3 + (data.len() % 4).saturating_sub(1)).saturating_sub(padding)
}

/// The wire `type` of a block this version does not know, for the note that replaces it.
fn kind(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "unsupported".to_owned())
}

fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!(
            "[image: {}, {} bytes omitted]",
            image.mime_type,
            base64_len(&image.data)
        ),
        ContentBlock::Audio(audio) => format!(
            "[audio: {}, {} bytes omitted]",
            audio.mime_type,
            base64_len(&audio.data)
        ),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => format!(
                "[resource: {uri}, {}]\n{text}",
                mime_type.as_deref().unwrap_or("text")
            ),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => format!(
                "[resource: {uri}, {}, {} bytes omitted]",
                mime_type.as_deref().unwrap_or("binary"),
                base64_len(blob)
            ),
            other => format!("[resource: {} omitted]", kind(other)),
        },
        ContentBlock::ResourceLink(link) => match &link.mime_type {
            Some(mime) => format!("[resource link: {} ({}, {mime})]", link.uri, link.name),
            None => format!("[resource link: {} ({})]", link.uri, link.name),
        },
        other => format!("[{} content omitted]", kind(other)),
    }
}

/// The text of a result: its blocks, one per paragraph, then its structured content.
fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = result.content.iter().map(block_text).collect();
    if let Some(structured) = &result.structured_content {
        let duplicated = result.content.iter().any(|block| match block {
            ContentBlock::Text(text) => {
                serde_json::from_str::<serde_json::Value>(&text.text)
                    .ok()
                    .as_ref()
                    == Some(structured)
            }
            _ => false,
        });
        if !duplicated {
            parts.push(structured.to_string());
        }
    }
    parts.join("\n")
}

/// The model's view of `result`; `redact` scrubs secrets from it.
pub(crate) fn convert(
    result: &CallToolResult,
    redact: impl Fn(&str) -> String,
) -> Result<ToolOutput, ToolError> {
    let text = redact(&result_text(result));
    if result.is_error == Some(true) {
        return Err(ToolError::Failed(if text.is_empty() {
            "the MCP tool reported an error without a message".to_owned()
        } else {
            text
        }));
    }
    Ok(ToolOutput {
        content: if text.is_empty() {
            EMPTY.to_owned()
        } else {
            text
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    fn same(s: &str) -> String {
        s.to_owned()
    }

    #[test]
    fn base64_lengths() {
        assert_eq!(base64_len(""), 0);
        assert_eq!(base64_len("QQ=="), 1);
        assert_eq!(base64_len("QUI="), 2);
        assert_eq!(base64_len("QUJD"), 3);
        assert_eq!(base64_len("QUJDRA=="), 4);
        assert_eq!(base64_len("QUJDRA"), 4); // unpadded
    }

    #[test]
    fn text_image_audio_resources_and_structured() {
        let result = parse(json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "QUJDRA==", "mimeType": "image/png"},
                {"type": "audio", "data": "QUJD", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "QQ=="}},
                {"type": "resource_link", "uri": "file:///c", "name": "c"}
            ],
            "structuredContent": {"sum": 3}
        }));
        let out = convert(&result, same).unwrap().content;
        assert_eq!(
            out,
            "hello\n[image: image/png, 4 bytes omitted]\n[audio: audio/wav, 3 bytes omitted]\n\
             [resource: file:///a.txt, text/plain]\ninside\n\
             [resource: file:///b.bin, binary, 1 bytes omitted]\n[resource link: file:///c (c)]\n\
             {\"sum\":3}"
        );
        assert!(!out.contains("QUJD"));
    }

    #[test]
    fn structured_content_already_in_text_is_not_repeated() {
        let result = parse(json!({
            "content": [{"type": "text", "text": "{\"sum\": 3}"}],
            "structuredContent": {"sum": 3}
        }));
        assert_eq!(convert(&result, same).unwrap().content, "{\"sum\": 3}");
    }

    #[test]
    fn is_error_is_a_failure_and_empty_is_said() {
        let result = parse(json!({"content": [{"type": "text", "text": "boom"}], "isError": true}));
        assert_eq!(
            convert(&result, same),
            Err(ToolError::Failed("boom".into()))
        );
        let result = parse(json!({"content": [], "isError": true}));
        assert!(
            matches!(convert(&result, same), Err(ToolError::Failed(m)) if m.contains("without a message"))
        );
        let result = parse(json!({"content": []}));
        assert_eq!(convert(&result, same).unwrap().content, EMPTY);
    }

    #[test]
    fn redacts() {
        let result = parse(json!({"content": [{"type": "text", "text": "token s3cr3t"}]}));
        let out = convert(&result, |t: &str| t.replace("s3cr3t", "[redacted]")).unwrap();
        assert_eq!(out.content, "token [redacted]");
    }
}
