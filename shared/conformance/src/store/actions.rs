//! Answers to paused runs (issue 20): recorded once per pause, beside the run record, so no
//! runner commit (a small update or a whole replace) loses one.

use super::commit::locked_run;
use crate::fixtures;
use agentlane_core::{
    ActionAnswer, AnswerOutcome, ApprovalAnswer, Commit, PendingCall, PendingKind, RecordedAnswer,
    RequiredAction, Run, RunId, RunStatus, Store,
};
use std::sync::Arc;

fn paused(run: &Run, id: u32, now: u64) -> Run {
    Run {
        status: RunStatus::RequiresAction,
        required_action: Some(RequiredAction {
            event_seq: Some(3),
            id,
            tool_calls: vec![PendingCall {
                id: format!("call-{id}"),
                name: "send_email".into(),
                arguments: serde_json::json!({"to": "a@example.com"}),
                kind: PendingKind::Approval,
            }],
            paused_at: now,
            expires_at: now + 60_000,
            resumed: false,
        }),
        ..fixtures::running(run, now)
    }
}

fn answer(id: u32, approve: bool, now: u64) -> RecordedAnswer {
    RecordedAnswer {
        action_id: id,
        answer: ActionAnswer {
            tool_outputs: Vec::new(),
            approvals: vec![ApprovalAnswer {
                tool_call_id: format!("call-{id}"),
                approve,
                reason: None,
            }],
        },
        answered_at: now,
        expired: false,
    }
}

/// A paused run takes one answer per pause; the answer survives the runner's later commits
/// (including a whole replace of a large run), a second answer to the same pause is refused
/// with the run as it stands, and the run's next pause takes a new one. A run that is not
/// paused, or does not exist, takes none.
pub async fn case_a_paused_run_takes_one_answer_per_pause(store: Arc<dyn Store>) {
    let now = fixtures::wall_ms();
    let (run, fence) = locked_run(&store, now).await;
    let tenant = run.tenant.clone();

    // A queued run, and an unknown one, take no answer.
    match store
        .answer_action(&tenant, &run.run_id, answer(1, true, now))
        .await
    {
        Ok(AnswerOutcome::NotWaiting(r)) => assert_eq!(r.status, RunStatus::Queued),
        other => panic!("a queued run takes no answer: {other:?}"),
    }
    let unknown = RunId::new(format!("run-{}", uuid::Uuid::new_v4().simple()));
    assert_eq!(
        store
            .answer_action(&tenant, &unknown, answer(1, true, now))
            .await,
        Ok(AnswerOutcome::NotFound)
    );

    // WHEN the runner pauses the run and someone answers
    let first = paused(&run, 1, now);
    let commit = Commit {
        run: Some(first.clone()),
        release_lock: true,
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("pause commit");
    let recorded = match store
        .answer_action(&tenant, &run.run_id, answer(1, true, now))
        .await
    {
        Ok(AnswerOutcome::Recorded(r)) => r,
        other => panic!("the paused run takes the answer: {other:?}"),
    };
    assert_eq!(recorded.action_answer, Some(answer(1, true, now)));
    assert_eq!(recorded.status, RunStatus::RequiresAction);

    // THEN a second answer to the same pause is refused, with the first one shown
    match store
        .answer_action(&tenant, &run.run_id, answer(1, false, now))
        .await
    {
        Ok(AnswerOutcome::NotWaiting(r)) => {
            assert_eq!(r.action_answer, Some(answer(1, true, now)))
        }
        other => panic!("one answer per pause: {other:?}"),
    }

    // AND the runner's resume (a commit from its copy) keeps the answer, even replaced whole
    let fence = fixtures::lock(
        &store,
        &tenant,
        &run.session_key,
        "runner-b",
        super::commit::LEASE_MS,
        now,
    )
    .await;
    let mut resumed = Run {
        status: RunStatus::Running,
        ..first.clone()
    };
    resumed.action_answer = None;
    resumed.request.message = "m".repeat(300_000);
    let commit = Commit {
        run: Some(resumed.clone()),
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("resume commit");
    let stored = fixtures::stored_run(&store, &run).await;
    assert_eq!(stored.status, RunStatus::Running);
    assert_eq!(stored.action_answer, Some(answer(1, true, now)));
    assert_eq!(stored.request.message.len(), 300_000);

    // AND a running run takes no answer
    assert!(matches!(
        store
            .answer_action(&tenant, &run.run_id, answer(2, true, now))
            .await,
        Ok(AnswerOutcome::NotWaiting(_))
    ));

    // AND its next pause takes a new one
    let second = paused(&resumed, 2, now);
    let commit = Commit {
        run: Some(second),
        ..Commit::default()
    };
    store.commit(&fence, commit).await.expect("second pause");
    assert!(
        matches!(
            store
                .answer_action(&tenant, &run.run_id, answer(1, false, now))
                .await,
            Ok(AnswerOutcome::NotWaiting(_))
        ),
        "an answer to the earlier pause is stale"
    );
    match store
        .answer_action(&tenant, &run.run_id, answer(2, false, now))
        .await
    {
        Ok(AnswerOutcome::Recorded(r)) => assert_eq!(r.action_answer, Some(answer(2, false, now))),
        other => panic!("the second pause takes its answer: {other:?}"),
    }

    // AND another tenant cannot answer it
    let other = agentlane_core::TenantId::new(format!("t-{}", uuid::Uuid::new_v4().simple()));
    assert_eq!(
        store
            .answer_action(&other, &run.run_id, answer(3, true, now))
            .await,
        Ok(AnswerOutcome::NotFound)
    );
}
