//! The one size rule for stored records ([`agentlane_core::record_size`]): every backend stores
//! exactly what the rule gives, so a transcript reads back the same on all of them.

use super::commit::{locked_run, stored_run};
use crate::fixtures;
use agentlane_core::{
    Commit, Event, EventStream, MAX_RECORD_BYTES, Message, NewTurn, Run, Store, StoreError,
    TranscriptEntry, record_size,
};
use std::sync::Arc;

/// An entry and an event larger than a DynamoDB item are stored as the size rule cuts them (the
/// tool result cut and marked, the event data replaced by its size), next to records kept whole;
/// a run record over the limit is refused and writes nothing.
pub async fn case_oversized_records_are_stored_by_the_size_rule(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let started = fixtures::running(&run, now);
    let result = "0123456789".repeat(60_000); // 600 KB, above DynamoDB's 400 KB item cap
    let big_entry = TranscriptEntry {
        seq: 1,
        run_id: run.run_id.clone(),
        ts: now,
        message: Message::Tool {
            tool_call_id: "call_1".into(),
            name: "fetch".into(),
            content: result.clone(),
            is_error: false,
        },
    };
    let big_event = Event {
        seq: 0,
        stream: EventStream::Tool,
        ts: now,
        data: serde_json::json!({ "phase": "result", "text": "x".repeat(500_000) }),
    };
    let commit = Commit {
        transcript: vec![big_entry.clone(), fixtures::entry(2, &run.run_id, now)],
        events: vec![big_event.clone(), fixtures::event(1, now)],
        run: Some(started.clone()),
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");

    let transcript = store
        .read_transcript(&run.tenant, &run.session_id, None, 10)
        .await
        .expect("read_transcript");
    let cut_entry = record_size::fit_entry(big_entry).expect("the rule cuts it");
    assert_eq!(
        transcript,
        vec![cut_entry, fixtures::entry(2, &run.run_id, now)]
    );
    let Message::Tool { content, .. } = &transcript[0].message else {
        panic!("not a tool message: {:?}", transcript[0])
    };
    let (kept, marker) = content.rsplit_once('\n').expect("a marker line");
    assert!(
        result.starts_with(kept) && kept.len() > 300_000,
        "{}",
        kept.len()
    );
    assert!(marker.contains("bytes truncated"), "{marker}");
    assert!(serde_json::to_string(&transcript[0]).expect("json").len() <= MAX_RECORD_BYTES);

    let events = store
        .read_events(&run.tenant, &run.run_id, None, 10)
        .await
        .expect("read_events");
    let cut_event = record_size::fit_event(big_event).expect("the rule cuts it");
    assert_eq!(cut_event.data["truncated"], serde_json::json!(true));
    assert_eq!(events, vec![cut_event, fixtures::event(1, now)]);

    // a run record too large to store is refused, with the rest of its commit
    let huge = Run {
        checkpoint: Some(serde_json::json!({ "blob": "y".repeat(MAX_RECORD_BYTES) })),
        ..started.clone()
    };
    let refused = Commit {
        transcript: vec![fixtures::entry(3, &run.run_id, now)],
        run: Some(huge),
        ..Commit::default()
    };
    let result = store.commit(&fence, refused).await;
    assert!(matches!(result, Err(StoreError::TooLarge(_))), "{result:?}");
    assert_eq!(stored_run(&store, &run).await, started);
    let after = store
        .read_transcript(&run.tenant, &run.session_id, Some(2), 10)
        .await
        .expect("read_transcript");
    assert!(after.is_empty(), "{after:?}");
}

/// A turn whose run record would be over the limit (a huge message) is refused with `TooLarge`
/// before anything is written: no session, no run.
pub async fn case_a_turn_too_large_to_store_is_refused(store: Arc<dyn Store>) {
    let (tenant, key, now) = fixtures::fresh();
    let turn = NewTurn {
        request: fixtures::request(&"m".repeat(MAX_RECORD_BYTES)),
        ..fixtures::turn(&tenant, &key, now)
    };
    let run_id = turn.run_id.clone();
    let result = store.accept_turn(turn).await;
    assert!(matches!(result, Err(StoreError::TooLarge(_))), "{result:?}");
    assert_eq!(
        store.get_session(&tenant, &key).await.expect("get_session"),
        None
    );
    assert_eq!(
        store.get_run(&tenant, &run_id).await.expect("get_run"),
        None
    );
    // a turn of ordinary size then goes through
    fixtures::accept(&store, &tenant, &key, now).await;
}
