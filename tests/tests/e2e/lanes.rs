//! Lanes: one turn at a time per session, in submission order; sessions side by side.

use crate::support::{GREETING, LONG, SLOW_REPLY, assert_dense, scenario, scenario_with};
use agentlane_core::{Message, RunStatus};
use agentlane_tests::{RunView, assistant_text};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_run_their_turns_at_the_same_time() -> anyhow::Result<()> {
    // GIVEN a server with several workers and a model that takes a few seconds to reply
    let scn = scenario()?;
    let a = scn.a();

    // WHEN two sessions each get a slow turn
    let first = a.agent("left", "slow please").await?;
    let second = a.agent("right", "slow as well").await?;
    let (left, right) = tokio::join!(
        a.wait_done(&first.run_id, LONG),
        a.wait_done(&second.run_id, LONG)
    );
    let (left, right) = (left?, right?);

    // THEN both end ok with the full reply, and their running times overlap
    for run in [&left, &right] {
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
        assert_eq!(run.reply_text(), SLOW_REPLY);
    }
    let (l_start, l_end) = left.interval().expect("timestamps");
    let (r_start, r_end) = right.interval().expect("timestamps");
    assert!(
        l_start.max(r_start) < l_end.min(r_end),
        "the two sessions did not run in parallel: left [{l_start}, {l_end}], right [{r_start}, {r_end}]"
    );
    assert_ne!(first.session_id, second.session_id);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_turns_on_one_session_run_one_at_a_time_in_submission_order() -> anyhow::Result<()> {
    ten_turns_in_order(scenario()?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_turns_keep_their_order_when_the_queue_long_polls_and_sessions_share_a_group()
-> anyhow::Result<()> {
    // The other scenarios on SQS short-poll: moto's FIFO long poll can hand out a group's next
    // message while the previous one is in flight. Here the lane workers long-poll (1 s) and
    // every session of the tenant shares one message group (tenant lanes 1), so the queue may
    // deliver a turn early; the store must keep the order all the same.
    ten_turns_in_order(scenario_with(|o| {
        o.env("AGENTLANE_RECEIVE_WAIT_MS", "1000")
            .env("AGENTLANE_TENANT_LANES", "1")
    })?)
    .await
}

/// Ten turns submitted back to back on one session (and one turn on another session of the
/// same tenant) run one at a time, in submission order, each seeing the conversation so far.
async fn ten_turns_in_order(scn: agentlane_tests::Scenario) -> anyhow::Result<()> {
    // GIVEN a model with a distinct, slightly streamed reply for each of ten messages
    let a = scn.a();
    let messages: Vec<String> = (1..=10).map(|n| format!("order-{n:02}")).collect();
    let reply = |message: &str| format!("reply to {message}");
    scn.mock.add_fixtures(
        messages
            .iter()
            .map(|m| {
                json!({
                    "match": {"userMessage": m},
                    "response": {"content": reply(m)},
                    "chunkSize": 5,
                    "latency": 40
                })
            })
            .collect(),
    )?;

    // WHEN the ten messages are submitted back to back on one session, without waiting
    // (with a turn of another session in the middle)
    let mut accepted = Vec::new();
    let mut side = None;
    for (k, message) in messages.iter().enumerate() {
        accepted.push(a.agent("one-lane", message).await?);
        if k == 4 {
            side = Some(a.agent("side-lane", "hello").await?);
        }
    }
    let mut runs: Vec<RunView> = Vec::new();
    for turn in &accepted {
        runs.push(a.wait_done(&turn.run_id, LONG).await?);
    }
    let side = side.expect("the side turn was submitted");
    let side = a.wait_done(&side.run_id, LONG).await?;
    assert_eq!(side.status, RunStatus::Ok, "{side:?}");
    assert_eq!(side.reply_text(), GREETING);

    // THEN each ends ok with its own reply
    for (run, message) in runs.iter().zip(&messages) {
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
        assert_eq!(run.reply_text(), reply(message));
    }
    assert!(
        accepted
            .iter()
            .all(|t| t.session_id == accepted[0].session_id)
    );

    // AND they ran one after another, in the order they were submitted, never overlapping
    for pair in runs.windows(2) {
        let (_, end) = pair[0].interval().expect("timestamps");
        let (start, _) = pair[1].interval().expect("timestamps");
        assert!(
            end <= start,
            "{} started at {start} before {} ended at {end}",
            pair[1].run_id,
            pair[0].run_id
        );
    }

    // AND the transcript shows each message followed by its reply, in order
    let transcript = a.transcript("one-lane").await?;
    assert_eq!(transcript.entries.len(), 20, "{transcript:#?}");
    assert_dense(&transcript.seqs(), "transcript");
    for ((pair, message), turn) in transcript.entries.chunks(2).zip(&messages).zip(&accepted) {
        assert_eq!(pair[0].message, Message::user(message.clone()));
        assert_eq!(
            assistant_text(&pair[1].message),
            Some(reply(message).as_str())
        );
        assert_eq!(pair[0].run_id.as_str(), turn.run_id);
        assert_eq!(pair[1].run_id.as_str(), turn.run_id);
    }

    // AND each model call saw the whole conversation so far, in order
    let requests: Vec<_> = scn
        .mock
        .model_requests()?
        .into_iter()
        .filter(|r| {
            r.roles_and_texts()
                .iter()
                .any(|(_, text)| text.contains("order-"))
        })
        .collect();
    assert_eq!(requests.len(), 10, "one model call per turn");
    for (k, request) in requests.iter().enumerate() {
        let seen: Vec<(String, String)> = request
            .roles_and_texts()
            .into_iter()
            .filter(|(role, _)| role == "user" || role == "assistant")
            .collect();
        let mut expected = Vec::new();
        for message in &messages[..k] {
            expected.push(("user".to_owned(), message.clone()));
            expected.push(("assistant".to_owned(), reply(message)));
        }
        expected.push(("user".to_owned(), messages[k].clone()));
        assert_eq!(seen.len(), expected.len(), "request {k}: {seen:?}");
        for ((role, text), (want_role, want_text)) in seen.iter().zip(&expected) {
            assert_eq!(role, want_role, "request {k}: {seen:?}");
            assert!(text.contains(want_text.as_str()), "request {k}: {seen:?}");
        }
    }
    Ok(())
}
