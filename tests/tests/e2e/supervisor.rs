//! The supervisor seen from outside (SPEC §10): a model stream that goes silent under an idle
//! timeout far longer than the abort threshold holds its lane until the sweep notices — the
//! session shows `diagnostic: session.stalled`, the run is aborted (code `stuck`, abandoned)
//! through the normal abort path, and the session's next queued turn answers.

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
    let error = run.error.clone().expect("an aborted run says why");
    assert_eq!(
        error.code, "stuck",
        "the supervisor's abort, not a user's: {error:?}"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_a_turn_failing_every_delivery_ends_poisoned_after_the_cap_and_the_next_answers()
-> anyhow::Result<()> {
    // GIVEN a cap of 2 failed deliveries, short leases and visibility, and a turn whose model
    // call hangs, so that every delivery of it dies with the server (kill -9)
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/retry_loop.json");
    let mock = Aimock::start(Fixtures::File(fixtures))?;
    let options = ServerOptions::new(SERVER_BIN)
        .model_server(&mock)
        .env("AGENTLANE_MODEL_IDLE_TIMEOUT_MS", "60000")
        .env("AGENTLANE_MAX_FAILED_PICKUPS", "2")
        .env("AGENTLANE_LOCK_LEASE_MS", "600")
        .env("AGENTLANE_VISIBILITY_TIMEOUT_MS", "600");
    let mut scn = Scenario {
        server: Server::start(options)?,
        mock,
    };
    let a = scn.a();
    let poisoned = a.agent("poison", "stall-forever: hi").await?;
    let next = a
        .agent(
            "poison",
            "recorded reasoning but no visible answer? answer now",
        )
        .await?;

    // WHEN two deliveries in a row die mid-turn
    for pickup in 1..=2u32 {
        let a = scn.a();
        a.poll_run(&poisoned.run_id, LONG, "picked up", |r| {
            r.status == RunStatus::Running && r.pickups >= pickup
        })
        .await?;
        scn.server.kill_hard();
        scn.server.restart()?;
    }

    // THEN the next pickup ends it poisoned without calling the model again
    let a = scn.a();
    let run = a.wait_done(&poisoned.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    let error = run.error.clone().expect("a poisoned run says why");
    assert_eq!(error.code, "poisoned", "{error:?}");
    assert!(error.message.contains("2 deliveries"), "{error:?}");
    let stalls = scn
        .mock
        .model_requests()?
        .iter()
        .filter(|r| {
            r.last_user_text()
                .is_some_and(|t| t.contains("stall-forever"))
        })
        .count();
    assert_eq!(
        stalls, 2,
        "one model call per failed delivery, none after the cap"
    );

    // AND the session's next turn answers
    let answered = a.wait_done(&next.run_id, LONG).await?;
    assert_eq!(answered.status, RunStatus::Ok, "{answered:?}");
    assert_eq!(answered.reply_text(), "The answer is 42.");
    assert_eq!(
        scn.mock.model_requests()?.len(),
        3,
        "two stalls and the next turn"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_a_turn_that_reached_the_sqs_dead_letter_queue_ends_dead_lettered_and_the_next_answers()
-> anyhow::Result<()> {
    // Only the AWS backend has an SQS dead-letter queue (the embedded one is covered by the
    // supervisor crate's tests).
    if !agentlane_tests::server::backend_is_aws() {
        return Ok(());
    }
    // GIVEN a lane queue that dead-letters a message after 2 receives, a poison cap far above
    // that (so only the DLQ can end the turn), short leases and visibility, a sweep every
    // 100 ms, and a turn whose model call hangs, so every delivery of it dies with the server
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/retry_loop.json");
    let mock = Aimock::start(Fixtures::File(fixtures))?;
    let options = ServerOptions::new(SERVER_BIN)
        .model_server(&mock)
        .env("AGENTLANE_MODEL_IDLE_TIMEOUT_MS", "60000")
        .env("AGENTLANE_MAX_RECEIVE_COUNT", "2")
        .env("AGENTLANE_MAX_FAILED_PICKUPS", "10")
        .env("AGENTLANE_LOCK_LEASE_MS", "300")
        .env("AGENTLANE_VISIBILITY_TIMEOUT_MS", "900")
        .env("AGENTLANE_SWEEP_INTERVAL_MS", "100");
    let mut scn = Scenario {
        server: Server::start(options)?,
        mock,
    };
    let a = scn.a();
    let lost = a.agent("dlq", "stall-forever: hi").await?;

    // WHEN both receives the queue allows die mid-turn (kill -9)
    for pickup in 1..=2u32 {
        let a = scn.a();
        a.poll_run(&lost.run_id, LONG, "picked up", |r| {
            r.status == RunStatus::Running && r.pickups >= pickup
        })
        .await?;
        scn.server.kill_hard();
        scn.server.restart()?;
    }

    // THEN SQS moves the message to the DLQ, and the sweep ends its run `dead_lettered`
    let a = scn.a();
    let run = a.wait_done(&lost.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    let error = run.error.clone().expect("a dead-lettered run says why");
    assert_eq!(error.code, "dead_lettered", "{error:?}");
    assert_eq!(run.pickups, 2, "no pickup after the DLQ: {run:?}");

    // AND the session's next turn answers. (It is sent only now: the emulator hands out a FIFO
    // group's next message while one is in flight, and with 2 receives allowed a turn queued
    // behind the lost one would be dead-lettered too by its hand-backs.)
    let next = a
        .agent(
            "dlq",
            "recorded reasoning but no visible answer? answer now",
        )
        .await?;
    let answered = a.wait_done(&next.run_id, LONG).await?;
    assert_eq!(answered.status, RunStatus::Ok, "{answered:?}");
    assert_eq!(answered.reply_text(), "The answer is 42.");
    let (_, session) = a.json(Method::GET, "/v1/sessions/dlq", None).await?;
    assert_eq!(session["status"], "idle");
    Ok(())
}
