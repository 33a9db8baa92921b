//! `kill -9` in the middle of a turn: after a restart on the same data directory, the
//! interrupted turn is finished exactly once and the turn queued behind it runs exactly once,
//! after it.

use crate::support::{GREETING, LONG, SLOW_REPLY, assert_dense, scenario_with};
use agentlane_core::{EventStream, Message, RunStatus};
use agentlane_tests::{assistant_text, check_pairing, transcript_items};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_interrupted_by_sigkill_is_recovered_and_the_next_runs_once_after_it()
-> anyhow::Result<()> {
    // GIVEN a server with short lock leases and queue visibility, a slow turn running on a
    // session and a second turn queued behind it
    let mut scn = scenario_with(|o| {
        o.env("AGENTLANE_LOCK_LEASE_MS", "2000")
            .env("AGENTLANE_VISIBILITY_TIMEOUT_MS", "2000")
    })?;
    let a = scn.a();
    let first = a.agent("crashy", "slow words before the crash").await?;
    let second = a.agent("crashy", "hello after the crash").await?;
    let running = a
        .poll_run(&first.run_id, Duration::from_secs(30), "running", |r| {
            r.status == RunStatus::Running
        })
        .await?;
    assert_eq!(running.status, RunStatus::Running);
    // Streaming has begun: the model call is in flight.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !a
        .events(&first.run_id)
        .await?
        .iter()
        .any(|e| e.stream == EventStream::Assistant)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow turn never streamed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let queued = a.run(&second.run_id).await?;
    assert_eq!(
        queued.status,
        RunStatus::Queued,
        "the second turn waits its turn"
    );

    // WHEN the server is killed with SIGKILL and started again on the same data directory
    scn.server.kill_hard();
    scn.server.restart()?;
    let a = scn.a();

    // THEN the interrupted turn ends: ok with the full reply (or a clear error, never a
    // half-written transcript)
    let first_run = a.wait_done(&first.run_id, LONG).await?;
    assert!(
        first_run.pickups >= 2,
        "a runner picked the interrupted turn up again: {first_run:?}"
    );
    // AND the second turn then runs exactly once, after the first ended
    let second_run = a.wait_done(&second.run_id, LONG).await?;
    assert_eq!(second_run.status, RunStatus::Ok, "{second_run:?}");
    assert_eq!(second_run.reply_text(), GREETING);
    let (_, first_end) = first_run.interval().expect("the first run has ended");
    let (second_start, _) = second_run.interval().expect("the second run has run");
    assert!(
        first_end <= second_start,
        "the queued turn started ({second_start}) before the interrupted one ended ({first_end})"
    );

    // AND the transcript has one user entry per turn, in order, nothing duplicated
    let transcript = a.transcript("crashy").await?;
    assert_dense(&transcript.seqs(), "transcript");
    assert_eq!(
        transcript.user_texts(),
        ["slow words before the crash", "hello after the crash"]
    );
    assert_eq!(
        check_pairing(&transcript_items(&transcript.entries)),
        Ok(())
    );
    let first_entries = transcript.entries_of(&first.run_id);
    match first_run.status {
        RunStatus::Ok => {
            assert_eq!(first_run.reply_text(), SLOW_REPLY);
            assert_eq!(
                first_entries.len(),
                2,
                "the message and one reply: {first_entries:?}"
            );
            assert_eq!(
                first_entries[0].message,
                Message::user("slow words before the crash")
            );
            assert_eq!(assistant_text(&first_entries[1].message), Some(SLOW_REPLY));
        }
        RunStatus::Error | RunStatus::Timeout | RunStatus::Aborted => {
            let error = first_run.error.as_ref().expect("a failed run says why");
            assert!(
                !error.code.is_empty() && !error.message.is_empty(),
                "{error:?}"
            );
            assert_eq!(
                first_entries.len(),
                1,
                "only the user's message: {first_entries:?}"
            );
        }
        RunStatus::Queued | RunStatus::Running | RunStatus::RequiresAction => {
            unreachable!("wait_done returns ended runs")
        }
    }
    let second_entries = transcript.entries_of(&second.run_id);
    assert_eq!(second_entries.len(), 2, "{second_entries:?}");
    assert_eq!(
        second_entries[0].message,
        Message::user("hello after the crash")
    );
    assert_eq!(assistant_text(&second_entries[1].message), Some(GREETING));
    assert_eq!(transcript.entries.len(), first_entries.len() + 2);

    // AND the model was asked for the second turn exactly once
    assert_eq!(
        scn.mock.model_requests_for("hello after the crash")?.len(),
        1
    );
    Ok(())
}
