//! One plain text turn, seen from every read the API offers.

use crate::support::{GREETING, LONG, assert_dense, assert_run_frame, assistant_deltas, scenario};
use agentlane_core::{LivenessState, RunStatus};
use agentlane_tests::{MODEL, assistant_text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_replies_and_leaves_user_and_assistant_in_the_transcript() -> anyhow::Result<()>
{
    // GIVEN a server whose model greets anyone who says hello
    let scn = scenario()?;
    let a = scn.a();

    // WHEN tenant A says hello on a new session and waits for the run
    let accepted = a.agent("greeting", "hello there").await?;
    assert_eq!(accepted.session_key, "greeting");
    let run = a.wait_done(&accepted.run_id, LONG).await?;

    // THEN the run ended ok with the model's words, answered by the configured model
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.run_id, accepted.run_id);
    assert_eq!(run.reply_text(), GREETING);
    assert_eq!(run.model.as_deref(), Some(MODEL));
    assert_eq!(run.liveness_state, LivenessState::Working);
    assert_eq!(run.error, None);
    assert_eq!(
        run.attempts
            .iter()
            .map(|a| a.model.as_str())
            .collect::<Vec<_>>(),
        [MODEL],
        "one model call: {:?}",
        run.attempts
    );
    let (started, ended) = run
        .interval()
        .expect("a finished run has startedAt and endedAt");
    assert!(
        accepted.accepted_at <= started && started <= ended,
        "accepted {} <= started {started} <= ended {ended}",
        accepted.accepted_at
    );

    // AND the transcript holds the user's message, then the reply, both written by this run
    let transcript = a.transcript("greeting").await?;
    assert_eq!(transcript.session_id, accepted.session_id);
    assert_eq!(transcript.roles(), ["user", "assistant"]);
    assert_eq!(transcript.user_texts(), ["hello there"]);
    assert_eq!(
        assistant_text(&transcript.entries[1].message),
        Some(GREETING)
    );
    assert!(
        transcript
            .entries
            .iter()
            .all(|e| e.run_id.as_str() == accepted.run_id),
        "{transcript:?}"
    );
    assert_dense(&transcript.seqs(), "transcript");

    // AND the events read lifecycle start, assistant deltas spelling the reply, lifecycle end
    let events = a.events(&accepted.run_id).await?;
    assert_run_frame(&events, "ok");
    assert_eq!(assistant_deltas(&events), GREETING, "{events:?}");

    // AND the model got one request: the user's words, with the server's tools on offer
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request = &requests[0];
    assert_eq!(request.model(), Some("gpt-4o-mini"));
    assert!(
        request
            .last_user_text()
            .is_some_and(|t| t.contains("hello there")),
        "{request:?}"
    );
    assert_eq!(
        request
            .messages()
            .last()
            .and_then(|m| m.get("role"))
            .and_then(|r| r.as_str()),
        Some("user"),
        "the user's message is the last thing the model reads"
    );
    let tools = request.tool_names();
    for tool in ["current_time", "http_fetch"] {
        assert!(
            tools.iter().any(|t| t == tool),
            "{tool} is offered: {tools:?}"
        );
    }
    Ok(())
}
