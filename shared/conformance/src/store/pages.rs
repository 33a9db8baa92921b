//! Page reads bounded by bytes ([`PageBudget`]): a read stops before the record that would take
//! the page over its bytes (each record's stored JSON, one `,` between records), always returns
//! the first record, and paging on from the last `seq` visits every record once.

use super::commit::locked_run;
use crate::fixtures;
use agentlane_core::{
    Commit, Event, EventStream, Fence, Message, PageBudget, Run, Store, TranscriptEntry,
};
use std::sync::Arc;

/// An entry of `run` whose tool result is `bytes` long.
fn sized_entry(seq: u64, run: &Run, now: u64, bytes: usize) -> TranscriptEntry {
    TranscriptEntry {
        seq,
        run_id: run.run_id.clone(),
        ts: now + seq,
        message: Message::Tool {
            tool_call_id: format!("call_{seq}"),
            name: "fetch".into(),
            content: char::from(b'a' + (seq % 26) as u8)
                .to_string()
                .repeat(bytes),
            is_error: false,
        },
    }
}

/// An event whose text is `bytes` long.
fn sized_event(seq: u64, now: u64, bytes: usize) -> Event {
    Event {
        seq,
        stream: EventStream::Tool,
        ts: now + seq,
        data: serde_json::json!({ "phase": "result", "text": "e".repeat(bytes) }),
    }
}

/// The size a page counts for a record: its compact JSON, as stored.
fn json_len<T: serde::Serialize>(record: &T) -> usize {
    serde_json::to_string(record).expect("to JSON").len()
}

/// The bytes a page of `records` takes: their JSON joined by commas.
fn page_len<T: serde::Serialize>(records: &[T]) -> usize {
    records.iter().map(json_len).sum::<usize>() + records.len().saturating_sub(1)
}

/// Commits `entries` in commits of at most `per_commit`.
async fn commit_entries(
    store: &Arc<dyn Store>,
    fence: &Fence,
    entries: &[TranscriptEntry],
    per_commit: usize,
) {
    for chunk in entries.chunks(per_commit) {
        let commit = Commit {
            transcript: chunk.to_vec(),
            ..Commit::default()
        };
        store.commit(fence, commit).await.expect("commit");
    }
}

/// Every entry after `after`, paged with `budget`, checking each page against it.
async fn page_through(
    store: &Arc<dyn Store>,
    run: &Run,
    budget: PageBudget,
) -> Vec<Vec<TranscriptEntry>> {
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .read_transcript_page(&run.tenant, &run.session_id, after, budget)
            .await
            .expect("read_transcript_page");
        let Some(last) = page.last() else { break };
        after = Some(last.seq);
        assert!(page.len() <= budget.count);
        assert!(
            page.len() == 1 || page_len(&page) <= budget.bytes,
            "a page of {} records takes {} bytes, over its {} budget",
            page.len(),
            page_len(&page),
            budget.bytes
        );
        pages.push(page);
    }
    pages
}

/// A transcript page stops before the entry that would cross its bytes, exactly at the edge;
/// the first entry comes even when it alone is larger; the count still bounds; paging on from
/// the last seq gives every entry once, in order.
pub async fn case_a_transcript_page_stops_at_its_byte_budget(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let sizes = [3_000, 1_000, 1_000, 5_000, 200, 200, 200, 8_000, 10, 2_000];
    let all: Vec<_> = sizes
        .iter()
        .zip(1..)
        .map(|(&bytes, seq)| sized_entry(seq, &run, now, bytes))
        .collect();
    commit_entries(&store, &fence, &all, 4).await;
    let read = |after: Option<u64>, budget: PageBudget| {
        let store = store.clone();
        let (tenant, session_id) = (run.tenant.clone(), run.session_id.clone());
        async move {
            store
                .read_transcript_page(&tenant, &session_id, after, budget)
                .await
                .expect("read_transcript_page")
        }
    };

    let three = page_len(&all[..3]);
    assert_eq!(
        read(None, PageBudget::new(100, three)).await,
        all[..3],
        "three entries fit exactly"
    );
    assert_eq!(read(None, PageBudget::new(100, three - 1)).await, all[..2]);
    // From seq 3 on: 1,000 + 5,000 do not fit in 5,000 bytes; the first entry always comes.
    assert_eq!(read(Some(2), PageBudget::new(100, 5_000)).await, all[2..3]);
    assert_eq!(read(Some(3), PageBudget::new(100, 10)).await, all[3..4]);
    assert_eq!(read(Some(3), PageBudget::new(100, 0)).await, all[3..4]);
    // The count still bounds a page with room to spare.
    assert_eq!(
        read(Some(4), PageBudget::new(2, usize::MAX)).await,
        all[4..6]
    );
    assert_eq!(read(Some(10), PageBudget::new(100, 50_000)).await, vec![]);
    assert_eq!(read(None, PageBudget::count(100)).await, all);

    for budget in [
        PageBudget::new(100, 6_000),
        PageBudget::new(3, 12_000),
        PageBudget::new(100, 1),
    ] {
        let pages = page_through(&store, &run, budget).await;
        let paged: Vec<_> = pages.concat();
        assert_eq!(paged, all, "paging with {budget:?} visits every entry once");
    }
    let pages = page_through(&store, &run, PageBudget::new(100, 6_000)).await;
    let lens: Vec<_> = pages.iter().map(Vec::len).collect();
    // 3,0xx+1,0xx | 1,0xx | 5,0xx | 200×3+... | 8,0xx | 10+2,0xx
    assert!(lens.len() >= 5, "{lens:?}");
}

/// Events page by bytes the same way: the edge is exact, the first event always comes, and
/// paging on gives every event once.
pub async fn case_an_events_page_stops_at_its_byte_budget(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let sizes = [500, 4_000, 100, 100, 100, 9_000, 50];
    let all: Vec<_> = sizes
        .iter()
        .zip(1..)
        .map(|(&bytes, seq)| sized_event(seq, now, bytes))
        .collect();
    let commit = Commit {
        events: all.clone(),
        run: Some(fixtures::running(&run, now)),
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("commit");
    let read = |after: Option<u64>, budget: PageBudget| {
        let store = store.clone();
        let (tenant, run_id) = (run.tenant.clone(), run.run_id.clone());
        async move {
            store
                .read_events_page(&tenant, &run_id, after, budget)
                .await
                .expect("read_events_page")
        }
    };

    let two = page_len(&all[..2]);
    assert_eq!(read(None, PageBudget::new(100, two)).await, all[..2]);
    assert_eq!(read(None, PageBudget::new(100, two - 1)).await, all[..1]);
    assert_eq!(read(Some(5), PageBudget::new(100, 100)).await, all[5..6]);
    assert_eq!(
        read(Some(2), PageBudget::new(2, usize::MAX)).await,
        all[2..4]
    );
    assert_eq!(read(None, PageBudget::count(100)).await, all);

    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = read(after, PageBudget::new(100, 4_500)).await;
        let Some(last) = page.last() else { break };
        assert!(page.len() == 1 || page_len(&page) <= 4_500);
        after = Some(last.seq);
        paged.extend(page);
    }
    assert_eq!(paged, all, "paging by bytes visits every event once");
}

/// Writes `count` entries of about `bytes` each to a fresh session and reads them with a budget
/// of `budget_bytes`, then unbounded, measuring the heap each read grows by at its peak with
/// [`crate::alloc`] (the test binary must install [`crate::alloc::CountingAlloc`] as its global
/// allocator). Returns `(bounded peak, unbounded peak)` in bytes and checks the bounded page:
/// within its budget, continued by the next page with no gap.
pub async fn read_large_entries(
    store: Arc<dyn Store>,
    count: u64,
    bytes: usize,
    budget_bytes: usize,
) -> (usize, usize) {
    assert!(
        crate::alloc::installed(),
        "the test binary must install agentlane_conformance::alloc::CountingAlloc"
    );
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    // A commit stays under its 3 MiB cap.
    let per_commit = (2_500_000 / bytes).max(1);
    let mut seq = 1;
    while seq <= count {
        let last = (seq + per_commit as u64 - 1).min(count);
        let chunk: Vec<_> = (seq..=last)
            .map(|s| sized_entry(s, &run, now, bytes))
            .collect();
        commit_entries(&store, &fence, &chunk, per_commit).await;
        seq = last + 1;
    }

    let budget = PageBudget::new(5_000, budget_bytes);
    let before = crate::alloc::reset_peak();
    let page = store
        .read_transcript_page(&run.tenant, &run.session_id, None, budget)
        .await
        .expect("read_transcript_page");
    let bounded = crate::alloc::peak().saturating_sub(before);
    assert!(!page.is_empty());
    assert!(page_len(&page) <= budget_bytes, "the page keeps its budget");
    assert!(
        page_len(&page) + json_len(&sized_entry(1, &run, now, bytes)) > budget_bytes,
        "the page is as full as its budget allows"
    );
    let Some(last) = page.last().map(|e| e.seq) else {
        unreachable!("checked non-empty")
    };
    assert_eq!(
        last,
        page.len() as u64,
        "the page starts at the first entry"
    );
    let next = store
        .read_transcript_page(&run.tenant, &run.session_id, Some(last), budget)
        .await
        .expect("read_transcript_page");
    assert_eq!(next.first().map(|e| e.seq), Some(last + 1), "no gap");
    drop((page, next));

    let before = crate::alloc::reset_peak();
    let whole = store
        .read_transcript_page(&run.tenant, &run.session_id, None, PageBudget::count(5_000))
        .await
        .expect("read_transcript_page");
    let unbounded = crate::alloc::peak().saturating_sub(before);
    assert_eq!(
        whole.len() as u64,
        count,
        "an unbounded read gets everything"
    );
    (bounded, unbounded)
}
