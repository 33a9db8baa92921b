//! Conversions between domain records and DynamoDB items, and the attribute names they use.

use agentlane_core::{
    Event, Message, Run, RunId, Session, SessionId, SessionKey, SessionStatus, StoreError,
    StoreResult, TenantId, TranscriptEntry,
};
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// One DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

// Session item attributes.
pub(crate) const TENANT: &str = "tenant";
pub(crate) const SESSION_KEY: &str = "sessionKey";
pub(crate) const SESSION_ID: &str = "sessionId";
pub(crate) const STATUS: &str = "status";
pub(crate) const ACTIVE_RUN_ID: &str = "activeRunId";
pub(crate) const CREATED_AT: &str = "createdAt";
pub(crate) const UPDATED_AT: &str = "updatedAt";
pub(crate) const LAST_PROGRESS_AT: &str = "lastProgressAt";
pub(crate) const RUNS_ACCEPTED: &str = "runsAccepted";
pub(crate) const RUNS_FINISHED: &str = "runsFinished";
pub(crate) const GENERATION: &str = "generation";
pub(crate) const LOCK_OWNER: &str = "lockOwner";
pub(crate) const LOCK_UNTIL: &str = "lockUntil";
pub(crate) const FENCE: &str = "fence";
/// Sparse GSI `processing` partition key: present only while the session is processing.
pub(crate) const PROC_PK: &str = "procPk";
/// Sparse GSI `processing` sort key: the session's last progress time (ms).
pub(crate) const PROC_AT: &str = "procAt";
/// The single partition value of the `processing` GSI.
pub(crate) const PROC_PK_VALUE: &str = "PROCESSING";

// Run item attributes (besides STATUS, SESSION_ID, UPDATED_AT).
pub(crate) const RUN_JSON: &str = "run";
pub(crate) const ABORT_REQUESTED: &str = "abortRequested";

// Transcript entry, event and idempotency attributes.
pub(crate) const ENTRY_JSON: &str = "entry";
pub(crate) const EVENT_JSON: &str = "event";
pub(crate) const SEQ: &str = "seq";
pub(crate) const RUN_ID: &str = "runId";
/// DynamoDB TTL attribute (epoch seconds).
pub(crate) const EXPIRES_AT: &str = "expiresAt";
/// Exact idempotency expiry (ms), checked in conditions: TTL deletion is only eventual.
pub(crate) const EXPIRES_AT_MS: &str = "expiresAtMs";

/// Largest transcript entry / event JSON kept verbatim; DynamoDB items are capped at 400 KB.
pub(crate) const MAX_RECORD_JSON_BYTES: usize = 350_000;

pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub(crate) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn corrupt(item: &Item, what: &str) -> StoreError {
    let pk = item
        .get(super::keys::PK)
        .and_then(|v| v.as_s().ok())
        .map_or("?", String::as_str);
    StoreError::Corrupt(format!("item {pk}: {what}"))
}

pub(crate) fn get_str<'a>(item: &'a Item, name: &str) -> StoreResult<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v),
        _ => Err(corrupt(item, &format!("missing string attribute {name}"))),
    }
}

pub(crate) fn opt_str<'a>(item: &'a Item, name: &str) -> StoreResult<Option<&'a str>> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::S(v)) => Ok(Some(v)),
        Some(_) => Err(corrupt(item, &format!("attribute {name} is not a string"))),
    }
}

pub(crate) fn get_u64(item: &Item, name: &str) -> StoreResult<u64> {
    opt_u64(item, name)?.ok_or_else(|| corrupt(item, &format!("missing number attribute {name}")))
}

pub(crate) fn opt_u64(item: &Item, name: &str) -> StoreResult<Option<u64>> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::N(v)) => v
            .parse()
            .map(Some)
            .map_err(|_| corrupt(item, &format!("attribute {name} is not a u64: {v}"))),
        Some(_) => Err(corrupt(item, &format!("attribute {name} is not a number"))),
    }
}

pub(crate) fn status_str(status: SessionStatus) -> &'static str {
    match status {
        SessionStatus::Idle => "idle",
        SessionStatus::Processing => "processing",
    }
}

/// A brand-new session item (no lock, fence 0).
pub(crate) fn new_session_item(
    pk: String,
    tenant: &TenantId,
    key: &SessionKey,
    session_id: &SessionId,
    now: u64,
) -> Item {
    HashMap::from([
        (super::keys::PK.to_owned(), s(pk)),
        (super::keys::SK.to_owned(), s(super::keys::SESSION_SK)),
        (TENANT.to_owned(), s(tenant.as_str())),
        (SESSION_KEY.to_owned(), s(key.as_str())),
        (SESSION_ID.to_owned(), s(session_id.as_str())),
        (STATUS.to_owned(), s(status_str(SessionStatus::Idle))),
        (CREATED_AT.to_owned(), n(now)),
        (UPDATED_AT.to_owned(), n(now)),
        (RUNS_ACCEPTED.to_owned(), n(1)),
        (RUNS_FINISHED.to_owned(), n(0)),
        (GENERATION.to_owned(), n(0)),
        (LOCK_UNTIL.to_owned(), n(0)),
        (FENCE.to_owned(), n(0)),
    ])
}

pub(crate) fn session_from_item(item: &Item) -> StoreResult<Session> {
    let status = match get_str(item, STATUS)? {
        "idle" => SessionStatus::Idle,
        "processing" => SessionStatus::Processing,
        other => return Err(corrupt(item, &format!("unknown session status {other}"))),
    };
    Ok(Session {
        tenant: TenantId::new(get_str(item, TENANT)?),
        session_key: SessionKey::new(get_str(item, SESSION_KEY)?),
        session_id: SessionId::new(get_str(item, SESSION_ID)?),
        status,
        active_run_id: opt_str(item, ACTIVE_RUN_ID)?.map(RunId::new),
        created_at: get_u64(item, CREATED_AT)?,
        updated_at: get_u64(item, UPDATED_AT)?,
        last_progress_at: opt_u64(item, LAST_PROGRESS_AT)?,
        runs_accepted: get_u64(item, RUNS_ACCEPTED)?,
        runs_finished: get_u64(item, RUNS_FINISHED)?,
        generation: get_u64(item, GENERATION)?,
        lock_owner: opt_str(item, LOCK_OWNER)?.map(str::to_owned),
        lock_until: opt_u64(item, LOCK_UNTIL)?.unwrap_or(0),
        fence: opt_u64(item, FENCE)?.unwrap_or(0),
    })
}

/// The run as JSON. A run too large for one item is refused up front (a permanent failure),
/// rather than sent and rejected by DynamoDB with an error that would look transient.
pub(crate) fn run_json(run: &Run) -> StoreResult<String> {
    let json = to_json(run)?;
    if json.len() > MAX_RECORD_JSON_BYTES {
        return Err(StoreError::Corrupt(format!(
            "run {} is {} bytes as JSON; DynamoDB items are capped at 400 KB",
            run.run_id,
            json.len()
        )));
    }
    Ok(json)
}

/// The run JSON with the `abortRequested` attribute merged back: that attribute is the only
/// truth about abort requests (runner writes never touch it).
pub(crate) fn run_from_item(item: &Item) -> StoreResult<Run> {
    let mut run: Run = serde_json::from_str(get_str(item, RUN_JSON)?)
        .map_err(|e| corrupt(item, &format!("run JSON: {e}")))?;
    run.abort_requested = matches!(item.get(ABORT_REQUESTED), Some(AttributeValue::Bool(true)));
    Ok(run)
}

/// The entry as JSON, with its message content cut (and marked) when it would not fit an item.
pub(crate) fn entry_json(entry: &TranscriptEntry) -> StoreResult<String> {
    let json = to_json(entry)?;
    if json.len() <= MAX_RECORD_JSON_BYTES {
        return Ok(json);
    }
    let mut cut = entry.clone();
    let excess = json.len() - MAX_RECORD_JSON_BYTES;
    let content = match &mut cut.message {
        Message::User { content }
        | Message::Assistant { content, .. }
        | Message::Tool { content, .. }
        | Message::Compaction {
            summary: content, ..
        } => content,
    };
    truncate_with_marker(content, excess);
    let json = to_json(&cut)?;
    if json.len() > MAX_RECORD_JSON_BYTES {
        // Only possible when something other than the content (reasoning, tool-call arguments)
        // is huge; DynamoDB would refuse the item anyway.
        return Err(StoreError::Corrupt(format!(
            "transcript entry {} is {} bytes even with its content truncated",
            entry.seq,
            json.len()
        )));
    }
    Ok(json)
}

/// Removes at least `excess` bytes (plus room for the marker) from the end of `content` and
/// appends a marker saying how much was cut. Removing a raw byte removes at least one JSON byte,
/// so one cut is enough.
fn truncate_with_marker(content: &mut String, excess: usize) {
    const MARKER_ROOM: usize = 96;
    let mut keep = content.len().saturating_sub(excess + MARKER_ROOM);
    while !content.is_char_boundary(keep) {
        keep -= 1;
    }
    let omitted = content.len() - keep;
    content.truncate(keep);
    content.push_str(&format!(
        "\n[agentlane: {omitted} bytes truncated to fit the store's item size limit]"
    ));
}

/// The event as JSON; an oversized `data` is replaced by a note of its size.
pub(crate) fn event_json(event: &Event) -> StoreResult<String> {
    let json = to_json(event)?;
    if json.len() <= MAX_RECORD_JSON_BYTES {
        return Ok(json);
    }
    let mut cut = event.clone();
    cut.data = serde_json::json!({ "truncated": true, "bytes": json.len() });
    to_json(&cut)
}

fn to_json<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("to JSON: {e}")))
}

pub(crate) fn entry_from_item(item: &Item) -> StoreResult<TranscriptEntry> {
    serde_json::from_str(get_str(item, ENTRY_JSON)?)
        .map_err(|e| corrupt(item, &format!("transcript entry JSON: {e}")))
}

pub(crate) fn event_from_item(item: &Item) -> StoreResult<Event> {
    serde_json::from_str(get_str(item, EVENT_JSON)?)
        .map_err(|e| corrupt(item, &format!("event JSON: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use agentlane_core::EventStream;

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
    fn small_entries_are_stored_verbatim() {
        let entry = tool_entry("hello".into());
        let json = entry_json(&entry).unwrap();
        let back: TranscriptEntry = serde_json::from_str(&json).unwrap();
        assert_eq!(back, entry);
    }

    #[test]
    fn oversized_tool_results_are_truncated_with_a_marker() {
        // Multi-byte characters and characters JSON escapes, so the cut must respect both.
        let content = "é\"".repeat(200_000);
        let json = entry_json(&tool_entry(content.clone())).unwrap();
        assert!(json.len() <= MAX_RECORD_JSON_BYTES, "{}", json.len());
        let back: TranscriptEntry = serde_json::from_str(&json).unwrap();
        let Message::Tool { content: kept, .. } = back.message else {
            panic!("not a tool message")
        };
        let (prefix, marker) = kept.rsplit_once('\n').unwrap();
        assert!(content.starts_with(prefix));
        assert!(marker.starts_with("[agentlane: "), "{marker}");
        assert!(marker.contains("bytes truncated"), "{marker}");
        assert_eq!(back.seq, 4);
    }

    #[test]
    fn oversized_event_data_is_replaced_by_its_size() {
        let event = Event {
            seq: 1,
            stream: EventStream::Tool,
            ts: 5,
            data: serde_json::json!({ "blob": "x".repeat(400_000) }),
        };
        let back: Event = serde_json::from_str(&event_json(&event).unwrap()).unwrap();
        assert_eq!(back.data["truncated"], serde_json::json!(true));
        assert_eq!(back.seq, 1);
    }

    #[test]
    fn a_run_too_large_for_an_item_is_refused_as_permanent() {
        let item = new_session_item(
            "pk".into(),
            &TenantId::new("t"),
            &SessionKey::new("k"),
            &SessionId::new("s"),
            1,
        );
        let session = session_from_item(&item).unwrap();
        let run: Run = serde_json::from_value(serde_json::json!({
            "runId": "run_1", "tenant": "t", "sessionKey": "k", "sessionId": session.session_id,
            "status": "running", "livenessState": "working",
            "request": { "message": "x".repeat(400_000) }, "acceptedAt": 1
        }))
        .unwrap();
        let err = run_json(&run).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
        assert!(!err.is_transient());
    }

    #[test]
    fn a_new_session_item_decodes_to_an_idle_unlocked_session() {
        let tenant = TenantId::new("t");
        let key = SessionKey::new("k");
        let item = new_session_item("pk".into(), &tenant, &key, &SessionId::new("s1"), 42);
        let session = session_from_item(&item).unwrap();
        assert_eq!(
            session,
            Session {
                tenant,
                session_key: key,
                session_id: SessionId::new("s1"),
                status: SessionStatus::Idle,
                active_run_id: None,
                created_at: 42,
                updated_at: 42,
                last_progress_at: None,
                runs_accepted: 1,
                runs_finished: 0,
                generation: 0,
                lock_owner: None,
                lock_until: 0,
                fence: 0,
            }
        );
    }
}
