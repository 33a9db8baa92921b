//! A tool round too large for one store transaction: the writer splits its commit into parts
//! that land in order, and a transient failure between the parts loses and duplicates nothing.

use crate::support::*;
use agentlane_agent::TurnExit;
use agentlane_core::{
    Commit, EventStream, Fence, Layered, MAX_COMMIT_WRITES, Message, RunStatus, SessionStatus,
    Store, StoreError, StoreLayer, StoreResult, ToolCall,
};
use async_trait::async_trait;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// How the injected failure behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The part is refused: nothing of it is written.
    Refused,
    /// The part is written, but the answer is lost (the caller sees an error).
    LandedAnswerLost,
}

/// The embedded store, except that the commit right after a full non-final part (the second
/// part of a split commit) fails once with a transient error.
struct FlakySecondPart {
    inner: Arc<dyn Store>,
    fault: Fault,
    /// The previous commit was a full part without the run record.
    after_full_part: Mutex<bool>,
    /// Failures injected so far (shared with the test).
    injected: Arc<AtomicUsize>,
}

impl FlakySecondPart {
    fn wrap(
        fault: Fault,
        injected: &Arc<AtomicUsize>,
    ) -> impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store> {
        let injected = injected.clone();
        move |inner| {
            Arc::new(Layered(Self {
                inner,
                fault,
                after_full_part: Mutex::new(false),
                injected,
            }))
        }
    }
}

#[async_trait]
impl StoreLayer for FlakySecondPart {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    async fn commit(&self, fence: &Fence, commit: Commit) -> StoreResult<()> {
        let full_part = commit.run.is_none() && commit.write_count() == MAX_COMMIT_WRITES;
        let second_part = std::mem::replace(&mut *self.after_full_part.lock().unwrap(), full_part);
        if second_part
            && self
                .injected
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            // The retry of this part must come back here (not be taken for another first part).
            *self.after_full_part.lock().unwrap() = true;
            if self.fault == Fault::LandedAnswerLost {
                self.inner.commit(fence, commit).await?;
            }
            return Err(StoreError::Unavailable("injected: connection reset".into()));
        }
        self.inner.commit(fence, commit).await
    }
}

const CALLS: usize = 60;

fn many_calls() -> Vec<ToolCall> {
    (0..CALLS)
        .map(|i| ToolCall {
            id: format!("call_{i:02}"),
            name: "echo".into(),
            arguments: format!(r#"{{"n":{i}}}"#),
        })
        .collect()
}

async fn sixty_parallel_calls_survive(fault: Fault) {
    // GIVEN a model that asks for 60 tools at once, then answers, over a store that fails the
    // second part of the results' commit once
    let script = vec![Script::Calls(many_calls()), Script::Text("all sixty done")];
    let injected = Arc::new(AtomicUsize::new(0));
    let f = fixture_on(
        script,
        config(),
        |router, model| router.with_provider(model.clone()),
        FlakySecondPart::wrap(fault, &injected),
    );

    // WHEN the turn runs
    let msg = f.accept("run them all").await;
    let exit = f.execute(&msg).await;

    // THEN it ends ok with the answer, the failure having been injected once
    assert_eq!(exit, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(
        injected.load(Ordering::SeqCst),
        1,
        "the results' commit was split and its second part failed once"
    );
    let run = finished_run(&f, &msg).await;
    assert_eq!(run.payloads[0].text, "all sixty done");
    let outcomes: Vec<&str> = run.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["tool_calls", "ok"]);

    // AND the transcript holds every result exactly once, in call order, with dense seqs
    let transcript = f.transcript().await;
    let seqs: Vec<u64> = transcript.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..(CALLS as u64 + 3)).collect::<Vec<_>>());
    let mut roles = vec!["user", "assistant"];
    roles.extend(["tool"; CALLS]);
    roles.push("assistant");
    assert_eq!(f.roles().await, roles);
    let results = f.tool_results().await;
    let ids: Vec<String> = results.iter().map(|r| r.id.clone()).collect();
    let want: Vec<String> = many_calls().into_iter().map(|c| c.id).collect();
    assert_eq!(ids, want);
    assert!(results.iter().all(|r| !r.is_error), "{results:?}");
    assert_eq!(results[7].content, r#"echo:{"n":7}"#);

    // AND every tool started and ended once, the events dense, the run's end last
    let events = f
        .store
        .read_events(&f.tenant, &msg.run_id, None, 10_000)
        .await
        .unwrap();
    let event_seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(event_seqs, (0..events.len() as u64).collect::<Vec<_>>());
    for phase in ["start", "end"] {
        let ids: BTreeSet<&str> = events
            .iter()
            .filter(|e| e.stream == EventStream::Tool && e.data["phase"] == phase)
            .filter_map(|e| e.data["toolCallId"].as_str())
            .collect();
        assert_eq!(ids.len(), CALLS, "one tool {phase} per call");
    }
    let last = events.last().unwrap();
    assert_eq!(
        (last.stream, last.data["phase"].as_str()),
        (EventStream::Lifecycle, Some("end"))
    );

    // AND the session is idle with its lock released: the next turn runs at once
    let session = f.session().await;
    assert_eq!(session.status, SessionStatus::Idle);
    assert_eq!(session.active_run_id, None);
    assert_eq!(session.runs_finished, 1);
    assert_eq!(session.lock_owner, None, "the lock was released");
    assert!(matches!(
        transcript.last().map(|e| &e.message),
        Some(Message::Assistant { content, .. }) if content == "all sixty done"
    ));
}

#[tokio::test]
async fn a_part_refused_between_parts_is_retried_and_nothing_is_lost() {
    sixty_parallel_calls_survive(Fault::Refused).await;
}

#[tokio::test]
async fn a_part_that_landed_but_lost_its_answer_is_not_written_twice() {
    sixty_parallel_calls_survive(Fault::LandedAnswerLost).await;
}
