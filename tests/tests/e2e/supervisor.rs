//! The supervisor seen from outside (SPEC §10): a model stream that goes silent under an idle
//! timeout far longer than the abort threshold holds its lane until the sweep notices — the
//! session shows `diagnostic: session.stalled`, the run is aborted (abandoned) through the
//! normal abort path, and the session's next queued turn answers.

use crate::support::{LONG, SERVER_BIN};
use agentlane_core::{LivenessState, RunStatus};
use agentlane_tests::{Aimock, Fixtures, Scenario, Server, ServerOptions};
use reqwest::Method;
use std::path::Path;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_a_stalled_stream_is_diagnosed_then_aborted_and_the_next_turn_answers()
-> anyhow::Result<()> {
    // GIVEN a model that stalls after its first chunk, an idle timeout of 60 s, and a supervisor
    // that warns after 300 ms without progress and aborts after 1.5 s, sweeping every 100 ms
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/retry_loop.json");
    let mock = Aimock::start(Fixtures::File(fixtures))?;
    let options = ServerOptions::new(SERVER_BIN)
        .model_server(&mock)
        .env("AGENTLANE_MODEL_IDLE_TIMEOUT_MS", "60000")
        .env("AGENTLANE_STUCK_WARN_MS", "300")
        .env("AGENTLANE_STUCK_ABORT_MS", "1500")
        .env("AGENTLANE_SWEEP_INTERVAL_MS", "100");
    let scn = Scenario {
        server: Server::start(options)?,
        mock,
    };
    let a = scn.a();

    // WHEN a turn that stalls is followed by a second turn on the same session
    let started = Instant::now();
    let stalled = a.agent("watched", "stall-forever: hi").await?;
    let next = a
        .agent(
            "watched",
            "recorded reasoning but no visible answer? answer now",
        )
        .await?;

    // THEN the session is diagnosed stalled while the stream hangs
    let mut seen = None;
    while started.elapsed() < Duration::from_secs(20) {
        let (_, session) = a.json(Method::GET, "/v1/sessions/watched", None).await?;
        if session["diagnostic"]["class"] == "session.stalled" {
            seen = Some(session);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = seen.expect("the session was diagnosed session.stalled");
    assert_eq!(seen["status"], "processing");
    assert!(
        seen["diagnostic"]["ageMs"].as_u64().unwrap() >= 300,
        "{seen}"
    );

    // AND the stalled run is aborted past the abort threshold, long before the idle timeout
    let run = a.wait_done(&stalled.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Aborted, "{run:?}");
    assert_eq!(run.liveness_state, LivenessState::Abandoned);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );

    // AND the next queued turn of the session answers
    let answered = a.wait_done(&next.run_id, LONG).await?;
    assert_eq!(answered.status, RunStatus::Ok, "{answered:?}");
    assert_eq!(answered.reply_text(), "The answer is 42.");
    let (_, session) = a.json(Method::GET, "/v1/sessions/watched", None).await?;
    assert_eq!(session["status"], "idle");
    assert!(session.get("diagnostic").is_none(), "{session}");
    Ok(())
}
