//! Ending a run its runner left behind, from outside the runner (the supervisor's sweep, the
//! dead-letter reconciliation): one call instead of reaching into the writer and the context
//! modules. The caller holds the session lock (`fence`) and has checked the run is still the
//! one to end.

use crate::context::history::assemble;
use crate::context::repair::missing_results;
use crate::writer::record::Ending;
use crate::writer::{CommitKind, DeltaFlush, Positions, RunWriter};
use agentlane_core::{
    Clock, EventStream, Fence, HistoryReader, LivenessState, Message, Run, RunError, RunStatus,
    Store, StoreResult, TranscriptEntry,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Transcript entries read per page while looking for dangling tool calls.
const PAGE: usize = 1000;

/// Ends `run` with `status` and `error`, liveness `abandoned`, in one fenced commit: every tool
/// call of the session's transcript still waiting for its result gets one, a lifecycle `error`
/// event says how it ended, the session goes idle and the lock in `fence` is released. Returns
/// the ended run record.
///
/// Nothing is written when the commit fails (a lost fence, a store error); the caller releases
/// the lock then.
pub async fn end_abandoned(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    fence: Fence,
    run: Run,
    status: RunStatus,
    error: RunError,
) -> StoreResult<Run> {
    let entries = whole_transcript(store.as_ref(), &run).await?;
    let history: Vec<Message> = assemble(&entries)
        .into_iter()
        .map(|e| e.message.clone())
        .collect();
    let dangling = missing_results(&history);
    let next_event_seq = store.next_event_seq(&run.tenant, &run.run_id).await?;
    let positions = Positions {
        next_seq: entries.last().map_or(0, |e| e.seq + 1),
        next_event_seq,
    };
    // Nothing streams here: the flush settings only matter to assistant text.
    let flush = DeltaFlush {
        bytes: 512,
        every: Duration::from_millis(150),
    };
    let mut writer = RunWriter::new(store, clock, fence, run, positions, flush);
    writer.end(Ending {
        status,
        liveness: LivenessState::Abandoned,
        error: Some(error),
        payloads: Vec::new(),
    });
    let ended = writer.run();
    let event = json!({
        "phase": "error",
        "status": status.as_str(),
        "endedAt": ended.ended_at,
        "error": ended.error,
        "livenessState": ended.liveness_state,
    });
    writer.event(EventStream::Lifecycle, event);
    writer.commit(CommitKind::Finish(dangling)).await?;
    Ok(writer.run().clone())
}

/// The whole transcript of `run`'s session, page by page.
async fn whole_transcript(
    store: &dyn HistoryReader,
    run: &Run,
) -> StoreResult<Vec<TranscriptEntry>> {
    let mut all: Vec<TranscriptEntry> = Vec::new();
    loop {
        let page = store
            .read_transcript(
                &run.tenant,
                &run.session_id,
                all.last().map(|e| e.seq),
                PAGE,
            )
            .await?;
        let done = page.len() < PAGE;
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}
