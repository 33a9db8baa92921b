//! One rule for the size of stored records, the same on every backend, so the embedded and the
//! AWS store keep identical content.
//!
//! DynamoDB caps an item at 400 KB. No backend stores a record whose JSON is over
//! [`MAX_RECORD_BYTES`]:
//! - a transcript entry keeps its seq, run, time and kind; its text (`content`, or a compaction's
//!   `summary`) is cut from the end and ends with a marker line
//!   `[agentlane: N bytes truncated to fit the store's item size limit]`. An entry still too
//!   large after that (huge reasoning or tool-call arguments) is refused (`TooLarge`);
//! - an event keeps its seq, stream and time; its `data` becomes
//!   `{"truncated": true, "bytes": N}`, N being the JSON size of the whole event;
//! - a run record is refused (`TooLarge`): it is the run's state and cannot be cut.
//!
//! Adapters apply it through [`Commit::check`](crate::Commit::check) and, for the queued run of
//! an accepted turn, [`run_json`].

use crate::run::{Event, Run};
use crate::store::{StoreError, StoreResult};
use crate::transcript::{Message, TranscriptEntry};

/// Largest JSON of one stored transcript entry, event or run record (DynamoDB items are capped
/// at 400 KB; the rest is room for keys and attributes).
pub const MAX_RECORD_BYTES: usize = 350_000;

/// Room kept at the end of a cut text for the marker line.
const MARKER_ROOM: usize = 96;

/// The JSON a record is stored as (and measured by).
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("to JSON: {e}")))
}

/// The entry as it is stored: itself when its JSON is within [`MAX_RECORD_BYTES`], else with its
/// text cut and marked. `TooLarge` when cutting the text is not enough.
pub fn fit_entry(entry: TranscriptEntry) -> StoreResult<TranscriptEntry> {
    let json = to_json(&entry)?;
    Ok(stored_entry(entry, json)?.0)
}

/// [`fit_entry`] for an entry already encoded (`json` is its JSON), with the JSON it is stored
/// as: `json` itself when it is within [`MAX_RECORD_BYTES`], so it is not encoded again.
pub fn stored_entry(
    entry: TranscriptEntry,
    json: String,
) -> StoreResult<(TranscriptEntry, String)> {
    let len = json.len();
    if len <= MAX_RECORD_BYTES {
        return Ok((entry, json));
    }
    let mut cut = entry;
    let text = match &mut cut.message {
        Message::User { content }
        | Message::Assistant { content, .. }
        | Message::Tool { content, .. }
        | Message::Compaction {
            summary: content, ..
        } => content,
    };
    truncate_with_marker(text, len - MAX_RECORD_BYTES);
    let cut_json = to_json(&cut)?;
    let cut_len = cut_json.len();
    if cut_len > MAX_RECORD_BYTES {
        return Err(StoreError::TooLarge(format!(
            "transcript entry {} is {cut_len} bytes even with its text cut; stored records are \
             limited to {MAX_RECORD_BYTES} bytes",
            cut.seq
        )));
    }
    Ok((cut, cut_json))
}

/// Removes at least `excess` bytes (plus room for the marker) from the end of `text` and
/// appends a marker saying how much was cut. Removing a raw byte removes at least one JSON byte,
/// so one cut is enough.
fn truncate_with_marker(text: &mut String, excess: usize) {
    let mut keep = text.len().saturating_sub(excess + MARKER_ROOM);
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    let omitted = text.len() - keep;
    text.truncate(keep);
    text.push_str(&format!(
        "\n[agentlane: {omitted} bytes truncated to fit the store's item size limit]"
    ));
}

/// The event as it is stored: itself when its JSON is within [`MAX_RECORD_BYTES`], else with its
/// `data` replaced by a note of its size.
pub fn fit_event(event: Event) -> StoreResult<Event> {
    let json = to_json(&event)?;
    Ok(stored_event(event, json)?.0)
}

/// [`fit_event`] for an event already encoded (`json` is its JSON), with the JSON it is stored
/// as: `json` itself when it is within [`MAX_RECORD_BYTES`].
pub fn stored_event(event: Event, json: String) -> StoreResult<(Event, String)> {
    let len = json.len();
    if len <= MAX_RECORD_BYTES {
        return Ok((event, json));
    }
    let cut = Event {
        data: serde_json::json!({ "truncated": true, "bytes": len }),
        ..event
    };
    let cut_json = to_json(&cut)?;
    Ok((cut, cut_json))
}

/// The run record's JSON, as it is stored; `TooLarge` when it is over [`MAX_RECORD_BYTES`] (a
/// permanent failure: nothing is written).
pub fn run_json(run: &Run) -> StoreResult<String> {
    let json = to_json(run)?;
    let len = json.len();
    if len > MAX_RECORD_BYTES {
        return Err(StoreError::TooLarge(format!(
            "run {} is {len} bytes as JSON; stored records are limited to {MAX_RECORD_BYTES} bytes",
            run.run_id
        )));
    }
    Ok(json)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ids::RunId;
    use crate::run::EventStream;

    fn tool_entry(content: String) -> TranscriptEntry {
        TranscriptEntry {
            seq: 4,
            run_id: RunId::new("run_1"),
            ts: 10,
            message: Message::Tool {
                tool_call_id: "c1".into(),
                name: "fetch".into(),
                content,
                is_error: false,
            },
        }
    }

    #[test]
    fn records_within_the_limit_are_kept_whole() {
        let entry = tool_entry("hello".into());
        assert_eq!(fit_entry(entry.clone()).unwrap(), entry);
        let exact = tool_entry(String::new());
        let room = MAX_RECORD_BYTES - serde_json::to_string(&exact).unwrap().len();
        let full = tool_entry("a".repeat(room));
        assert_eq!(
            serde_json::to_string(&full).unwrap().len(),
            MAX_RECORD_BYTES
        );
        assert_eq!(fit_entry(full.clone()).unwrap(), full);
    }

    #[test]
    fn an_oversized_text_is_cut_with_a_marker() {
        // Multi-byte characters and characters JSON escapes, so the cut must respect both.
        let content = "é\"".repeat(200_000);
        let cut = fit_entry(tool_entry(content.clone())).unwrap();
        assert!(serde_json::to_string(&cut).unwrap().len() <= MAX_RECORD_BYTES);
        let Message::Tool {
            content: kept,
            tool_call_id,
            ..
        } = cut.message
        else {
            panic!("not a tool message")
        };
        assert_eq!(tool_call_id, "c1");
        let (prefix, marker) = kept.rsplit_once('\n').unwrap();
        assert!(content.starts_with(prefix));
        let omitted = content.len() - prefix.len();
        assert_eq!(
            marker,
            format!("[agentlane: {omitted} bytes truncated to fit the store's item size limit]")
        );
        assert_eq!((cut.seq, cut.ts), (4, 10));
    }

    #[test]
    fn an_entry_too_large_besides_its_text_is_refused() {
        let entry = TranscriptEntry {
            message: Message::Assistant {
                content: "short".into(),
                reasoning: Some("r".repeat(400_000)),
                tool_calls: Vec::new(),
                model: None,
            },
            ..tool_entry(String::new())
        };
        let err = fit_entry(entry).unwrap_err();
        assert!(matches!(err, StoreError::TooLarge(_)), "{err:?}");
    }

    #[test]
    fn oversized_event_data_is_replaced_by_its_size() {
        let event = Event {
            seq: 1,
            stream: EventStream::Tool,
            ts: 5,
            data: serde_json::json!({ "blob": "x".repeat(400_000) }),
        };
        let len = serde_json::to_string(&event).unwrap().len();
        let fitted = fit_event(event).unwrap();
        assert_eq!(
            fitted.data,
            serde_json::json!({ "truncated": true, "bytes": len })
        );
        assert_eq!(
            (fitted.seq, fitted.stream, fitted.ts),
            (1, EventStream::Tool, 5)
        );
        let small = Event {
            data: serde_json::json!({ "ok": true }),
            ..fitted
        };
        assert_eq!(fit_event(small.clone()).unwrap(), small);
    }

    #[test]
    fn a_run_too_large_for_a_record_is_refused_as_permanent() {
        let run: Run = serde_json::from_value(serde_json::json!({
            "runId": "run_1", "tenant": "t", "sessionKey": "k", "sessionId": "s",
            "status": "running", "livenessState": "working",
            "request": { "message": "x".repeat(400_000) }, "acceptedAt": 1
        }))
        .unwrap();
        let err = run_json(&run).unwrap_err();
        assert!(matches!(err, StoreError::TooLarge(_)), "{err:?}");
        assert!(!err.is_transient());
    }
}
