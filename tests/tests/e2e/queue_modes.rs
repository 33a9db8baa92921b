//! Queue modes (SPEC §4): a `steer` message joins the running turn at its next model boundary
//! (after the tool batch) and the answer comes after it; with nothing running it is an
//! ordinary turn.

use crate::support::{GREETING, LONG, scenario};
use agentlane_core::RunStatus;
use serde_json::json;

const STEERED_ANSWER: &str = "Left it is, right after the clock check.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_joins_the_turn_running_a_tool_and_the_answer_follows_it() -> anyhow::Result<()> {
    // GIVEN a turn whose first answer streams for about two seconds and then calls a tool
    let scn = scenario()?;
    let a = scn.a();
    scn.mock.add_fixtures(vec![
        json!({
            "match": {"userMessage": "steer-drive", "hasToolResult": false},
            "response": {
                "content": "Checking the clock before we drive off.",
                "toolCalls": [{"id": "call_clock", "name": "current_time",
                               "arguments": {"timezone": "UTC"}}]
            },
            "chunkSize": 4,
            "latency": 200
        }),
        json!({
            // aimock's hasToolResult looks after the last user message: the steer is last
            "match": {"userMessage": "steer-left"},
            "response": {"content": STEERED_ANSWER},
            "chunkSize": 8
        }),
        json!({
            "match": {"userMessage": "steer-drive", "hasToolResult": true},
            "response": {"content": "Driving straight on."},
            "chunkSize": 8
        }),
    ])?;
    let carrier = a.agent("steer-e2e", "steer-drive please").await?;
    a.poll_run(&carrier.run_id, LONG, "running", |r| {
        r.status == RunStatus::Running
    })
    .await?;

    // WHEN a steer message arrives while it runs
    let steer = a
        .agent_with(json!({
            "sessionKey": "steer-e2e",
            "message": "steer-left now",
            "queueMode": "steer"
        }))
        .await?;
    assert_ne!(
        steer.run_id, carrier.run_id,
        "every message keeps its own runId"
    );

    // THEN the running turn answers it, after the tool result
    let done = a.wait_done(&carrier.run_id, LONG).await?;
    assert_eq!(done.status, RunStatus::Ok, "{done:?}");
    assert_eq!(done.reply_text(), STEERED_ANSWER);
    let seen = scn.mock.model_requests_for("steer-left")?;
    assert_eq!(seen.len(), 1, "one model call saw the steer");
    let roles: Vec<String> = seen[0]
        .roles_and_texts()
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert!(
        roles.ends_with(&["assistant".into(), "tool".into(), "user".into()]),
        "the steer comes after the tool result: {roles:?}"
    );
    let transcript = a.transcript("steer-e2e").await?;
    assert_eq!(
        transcript.roles(),
        ["user", "assistant", "tool", "user", "assistant"]
    );
    assert_eq!(
        transcript.user_texts(),
        ["steer-drive please", "steer-left now"]
    );

    // AND the steer's own run says where it went and ends with the carrier's answer
    let steered = a.wait_done(&steer.run_id, LONG).await?;
    assert_eq!(steered.status, RunStatus::Ok, "{steered:?}");
    assert_eq!(steered.queue_outcome.as_deref(), Some("steered"));
    assert_eq!(
        steered.into_run_id.as_deref(),
        Some(carrier.run_id.as_str())
    );
    assert_eq!(steered.reply_text(), STEERED_ANSWER);
    assert!(steered.attempts.is_empty(), "no model call of its own");
    assert_eq!(
        a.run(&carrier.run_id).await?.queue_outcome.as_deref(),
        Some("ran")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_on_an_idle_session_is_an_ordinary_turn() -> anyhow::Result<()> {
    // GIVEN a session with nothing running
    let scn = scenario()?;
    let a = scn.a();

    // WHEN a steer message arrives (by one of OpenClaw's aliases)
    let steer = a
        .agent_with(
            json!({"sessionKey": "steer-idle", "message": "hello", "queueMode": "steering"}),
        )
        .await?;

    // THEN it runs as its own turn
    let run = a.wait_done(&steer.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), GREETING);
    assert_eq!(run.queue_outcome.as_deref(), Some("ran"));
    assert_eq!(run.into_run_id, None);
    Ok(())
}

const COLLECTED_ANSWER: &str = "All five noted, answering them together.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_collects_while_busy_become_one_turn_containing_all_five() -> anyhow::Result<()> {
    // GIVEN a turn that streams for about two seconds
    let scn = scenario()?;
    let a = scn.a();
    scn.mock.add_fixtures(vec![
        json!({
            "match": {"userMessage": "collect-busy"},
            "response": {"content": "Busy answering the first message, slowly."},
            "chunkSize": 4,
            "latency": 200
        }),
        json!({
            // the collected turn's last user message is the fifth
            "match": {"userMessage": "collect-c5"},
            "response": {"content": COLLECTED_ANSWER},
            "chunkSize": 8
        }),
    ])?;
    let busy = a.agent("collect-e2e", "collect-busy please").await?;
    a.poll_run(&busy.run_id, LONG, "running", |r| {
        r.status == RunStatus::Running
    })
    .await?;

    // WHEN five collect messages arrive while it runs (by the mode and its alias)
    let mut collects = Vec::new();
    for i in 1..=5 {
        let mode = if i % 2 == 0 { "coalesce" } else { "collect" };
        collects.push(
            a.agent_with(json!({
                "sessionKey": "collect-e2e",
                "message": format!("collect-c{i}"),
                "queueMode": mode
            }))
            .await?,
        );
    }

    // THEN after the busy turn, one turn answers all five: one model call saw them, in order
    let first = a.wait_done(&collects[0].run_id, LONG).await?;
    assert_eq!(first.status, RunStatus::Ok, "{first:?}");
    assert_eq!(first.reply_text(), COLLECTED_ANSWER);
    assert_eq!(first.queue_outcome.as_deref(), Some("ran"));
    let seen = scn.mock.model_requests_for("collect-c")?;
    assert_eq!(seen.len(), 1, "one model call for the five messages");
    let texts: Vec<String> = seen[0]
        .roles_and_texts()
        .into_iter()
        .filter(|(role, _)| role == "user")
        .map(|(_, text)| text)
        .collect();
    let expected: Vec<String> = (1..=5).map(|i| format!("collect-c{i}")).collect();
    assert!(texts.ends_with(&expected), "{texts:?}");
    let transcript = a.transcript("collect-e2e").await?;
    assert_eq!(
        transcript.roles(),
        [
            "user",
            "assistant",
            "user",
            "user",
            "user",
            "user",
            "user",
            "assistant"
        ]
    );

    // AND every other message's run ends collected into the first, with its answer
    for other in &collects[1..] {
        // agent.wait answers as the carrier once it ended; the run's own record follows when
        // its message comes
        let waited = a.wait_done(&other.run_id, LONG).await?;
        assert_eq!(waited.queue_outcome.as_deref(), Some("collected"));
        let run = a
            .poll_run(&other.run_id, LONG, "ended", |r| r.status.is_terminal())
            .await?;
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
        assert_eq!(run.queue_outcome.as_deref(), Some("collected"));
        assert_eq!(
            run.into_run_id.as_deref(),
            Some(collects[0].run_id.as_str())
        );
        assert_eq!(run.reply_text(), COLLECTED_ANSWER);
        assert!(run.attempts.is_empty(), "no model call of its own");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_mid_stream_aborts_the_turn_and_runs_before_the_queued_followup()
-> anyhow::Result<()> {
    // GIVEN a turn whose reply streams for several seconds, already streaming
    let scn = scenario()?;
    let a = scn.a();
    let busy = a.agent("interrupt-e2e", "a glacial answer please").await?;
    let deadline = std::time::Instant::now() + LONG;
    while !a
        .events(&busy.run_id)
        .await?
        .iter()
        .any(|e| e.stream == agentlane_core::EventStream::Assistant)
    {
        assert!(std::time::Instant::now() < deadline, "never streamed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // AND a followup queued behind it
    let followup = a.agent("interrupt-e2e", "hello from the followup").await?;

    // WHEN an interrupt arrives
    let interrupt = a
        .agent_with(json!({
            "sessionKey": "interrupt-e2e",
            "message": "hello, stop that",
            "queueMode": "interrupt"
        }))
        .await?;

    // THEN the streaming turn ends aborted (interrupted), its transcript consistent
    let aborted = a.wait_done(&busy.run_id, LONG).await?;
    assert_eq!(aborted.status, RunStatus::Aborted, "{aborted:?}");
    assert_eq!(aborted.queue_outcome.as_deref(), Some("interrupted"));
    // AND the interrupt runs next, then the followup
    let ran = a.wait_done(&interrupt.run_id, LONG).await?;
    assert_eq!(ran.status, RunStatus::Ok, "{ran:?}");
    assert_eq!(ran.reply_text(), GREETING);
    let after = a.wait_done(&followup.run_id, LONG).await?;
    assert_eq!(after.status, RunStatus::Ok, "{after:?}");
    let transcript = a.transcript("interrupt-e2e").await?;
    assert_eq!(
        transcript.user_texts(),
        [
            "a glacial answer please",
            "hello, stop that",
            "hello from the followup"
        ]
    );
    assert_eq!(
        agentlane_tests::check_pairing(&agentlane_tests::transcript_items(&transcript.entries)),
        Ok(())
    );
    // AND the session is free afterwards (every run counted)
    let next = a.agent("interrupt-e2e", "hello again").await?;
    assert_eq!(a.wait_done(&next.run_id, LONG).await?.status, RunStatus::Ok);
    Ok(())
}
