//! Aborting a turn while the model streams.

use crate::support::{GLACIAL_REPLY, GREETING, LONG, assert_dense, assert_run_frame, scenario};
use agentlane_core::{EventStream, Message, RunStatus};
use agentlane_tests::{WaitStatus, assistant_text, check_pairing, transcript_items};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_streaming_turn_stops_it_quickly_and_frees_the_session() -> anyhow::Result<()> {
    // GIVEN a turn whose reply streams for several seconds, already streaming
    let scn = scenario()?;
    let a = scn.a();
    let turn = a.agent("stoppable", "a glacial answer please").await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !a
        .events(&turn.run_id)
        .await?
        .iter()
        .any(|e| e.stream == EventStream::Assistant)
    {
        assert!(
            Instant::now() < deadline,
            "the turn never started streaming"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // WHEN the user aborts it
    let asked = Instant::now();
    assert_eq!(a.abort(&turn.run_id).await?, StatusCode::ACCEPTED);

    // THEN it ends `aborted` within a couple of seconds, long before the reply would finish
    let run = a
        .poll_run(&turn.run_id, Duration::from_secs(20), "ended", |r| {
            r.status.is_terminal()
        })
        .await?;
    let took = asked.elapsed();
    assert_eq!(run.status, RunStatus::Aborted, "{run:?}");
    assert!(took < Duration::from_secs(3), "abort took {took:?}");
    let wait = a.wait(&turn.run_id, 1_000).await?;
    assert_ne!(wait.status, WaitStatus::Timeout, "{wait:?}");
    assert_eq!(wait.run_status, RunStatus::Aborted);
    assert_run_frame(&a.events(&turn.run_id).await?, "aborted");

    // AND the transcript keeps the user's message and is consistent, without the full reply
    let transcript = a.transcript("stoppable").await?;
    assert_dense(&transcript.seqs(), "transcript");
    assert_eq!(transcript.user_texts(), ["a glacial answer please"]);
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    assert!(
        !transcript
            .entries
            .iter()
            .any(|e| assistant_text(&e.message) == Some(GLACIAL_REPLY)),
        "the aborted reply was not completed: {transcript:#?}"
    );

    // WHEN the user writes again on the same session
    let next = a.agent("stoppable", "hello again").await?;
    let next_run = a.wait_done(&next.run_id, LONG).await?;

    // THEN the session is free: the new turn runs normally
    assert_eq!(next_run.status, RunStatus::Ok, "{next_run:?}");
    assert_eq!(next_run.reply_text(), GREETING);
    let transcript = a.transcript("stoppable").await?;
    let last_two: Vec<&Message> = transcript
        .entries
        .iter()
        .rev()
        .take(2)
        .map(|e| &e.message)
        .collect();
    assert_eq!(assistant_text(last_two[0]), Some(GREETING));
    assert_eq!(last_two[1], &Message::user("hello again"));
    Ok(())
}
