//! The supervisor seen from outside (SPEC §10): a model stream that goes silent under an idle
//! timeout far longer than the abort threshold holds its lane until the sweep notices — the
//! session shows `diagnostic: session.stalled`, the run is aborted (code `stuck`, abandoned)
//! through the normal abort path, and the session's next queued turn answers.

use crate::support::{LONG, SERVER_BIN, retry_loop_mock};
use agentlane_core::{LivenessState, RunStatus};
use agentlane_tests::{Client, Scenario, Server, ServerOptions};
use reqwest::Method;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A turn whose model call hangs after its first chunk (`fixtures/retry_loop.json`).
const STALL: &str = "stall-forever: hi";
/// A turn the model answers [`ANSWER`].
const ANSWERED: &str = "recorded reasoning but no visible answer? answer now";
/// The model's answer to [`ANSWERED`].
const ANSWER: &str = "The answer is 42.";

/// aimock with the retry-loop fixtures and a server pointed at it whose model idle timeout (60 s)
/// outlasts every scenario, with the options `configure` adds.
fn stalling_scenario(
    configure: impl FnOnce(ServerOptions) -> ServerOptions,
) -> anyhow::Result<Scenario> {
    let mock = retry_loop_mock()?;
    let options = ServerOptions::new(SERVER_BIN)
        .model_server(&mock)
        .env("AGENTLANE_MODEL_IDLE_TIMEOUT_MS", "60000");
    Ok(Scenario {
        server: Server::start(configure(options))?,
        mock,
    })
}

/// A supervisor that warns after 300 ms without progress and acts after 1.5 s, sweeping every
/// 100 ms.
fn quick_supervisor(options: ServerOptions) -> ServerOptions {
    options
        .env("AGENTLANE_STUCK_WARN_MS", "300")
        .env("AGENTLANE_STUCK_ABORT_MS", "1500")
        .env("AGENTLANE_SWEEP_INTERVAL_MS", "100")
}

/// Waits for `run_id` to end and checks that it answered [`ANSWER`].
async fn assert_answers(a: &Client, run_id: &str) -> anyhow::Result<()> {
    let answered = a.wait_done(run_id, LONG).await?;
    assert_eq!(answered.status, RunStatus::Ok, "{answered:?}");
    assert_eq!(answered.reply_text(), ANSWER);
    Ok(())
}

/// Polls session `key` for up to 20 s until its diagnostic is of `class`, and returns the
/// session then; `None` if it never is, or once `until_ended` (a run id) has ended.
async fn wait_diagnosed(
    a: &Client,
    key: &str,
    class: &str,
    until_ended: Option<&str>,
) -> anyhow::Result<Option<Value>> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        let (_, session) = a
            .json(Method::GET, &format!("/v1/sessions/{key}"), None)
            .await?;
        if session["diagnostic"]["class"] == class {
            return Ok(Some(session));
        }
        if let Some(run_id) = until_ended
            && a.run(run_id).await?.status.is_terminal()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(None)
}

/// Checks that session `key` is idle with no diagnostic.
async fn assert_healthy(a: &Client, key: &str) -> anyhow::Result<()> {
    let (_, session) = a
        .json(Method::GET, &format!("/v1/sessions/{key}"), None)
        .await?;
    assert_eq!(session["status"], "idle");
    assert!(session.get("diagnostic").is_none(), "{session}");
    Ok(())
}

/// Kills the server (`kill -9`) and starts it again on the same data.
fn crash(scn: &mut Scenario) -> anyhow::Result<()> {
    scn.server.kill_hard();
    scn.server.restart()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_a_stalled_stream_is_diagnosed_then_aborted_and_the_next_turn_answers()
-> anyhow::Result<()> {
    // GIVEN a model that stalls after its first chunk, an idle timeout of 60 s, and a supervisor
    // that warns after 300 ms without progress and aborts after 1.5 s, sweeping every 100 ms
    let scn = stalling_scenario(quick_supervisor)?;
    let a = scn.a();

    // WHEN a turn that stalls is followed by a second turn on the same session
    let started = Instant::now();
    let stalled = a.agent("watched", STALL).await?;
    let next = a.agent("watched", ANSWERED).await?;

    // THEN the session is diagnosed stalled while the stream hangs
    let seen = wait_diagnosed(&a, "watched", "session.stalled", None).await?;
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
    assert_answers(&a, &next.run_id).await?;
    assert_healthy(&a, "watched").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_a_turn_failing_every_delivery_ends_poisoned_after_the_cap_and_the_next_answers()
-> anyhow::Result<()> {
    // GIVEN a cap of 2 failed deliveries, short leases and visibility, and a turn whose model
    // call hangs, so that every delivery of it dies with the server (kill -9)
    let mut scn = stalling_scenario(|o| {
        o.env("AGENTLANE_MAX_FAILED_PICKUPS", "2")
            .env("AGENTLANE_LOCK_LEASE_MS", "600")
            .env("AGENTLANE_VISIBILITY_TIMEOUT_MS", "600")
    })?;
    let a = scn.a();
    let poisoned = a.agent("poison", STALL).await?;
    let next = a.agent("poison", ANSWERED).await?;

    // WHEN two deliveries in a row die mid-turn
    for pickup in 1..=2u32 {
        let a = scn.a();
        a.poll_run(&poisoned.run_id, LONG, "picked up", |r| {
            r.status == RunStatus::Running && r.pickups >= pickup
        })
        .await?;
        // The pickup is counted when the lock is taken, before the model call: kill only once
        // this delivery's call has reached the model, so each failed delivery made exactly one.
        let deadline = Instant::now() + LONG;
        while scn.mock.model_requests_for("stall-forever")?.len() < pickup as usize {
            anyhow::ensure!(
                Instant::now() < deadline,
                "delivery {pickup} never called the model"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        crash(&mut scn)?;
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
    assert_answers(&a, &next.run_id).await?;
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
    let mut scn = stalling_scenario(|o| {
        o.env("AGENTLANE_MAX_RECEIVE_COUNT", "2")
            .env("AGENTLANE_MAX_FAILED_PICKUPS", "10")
            .env("AGENTLANE_LOCK_LEASE_MS", "300")
            .env("AGENTLANE_VISIBILITY_TIMEOUT_MS", "900")
            .env("AGENTLANE_SWEEP_INTERVAL_MS", "100")
    })?;
    let a = scn.a();
    let lost = a.agent("dlq", STALL).await?;

    // WHEN both receives the queue allows die mid-turn (kill -9)
    for pickup in 1..=2u32 {
        let a = scn.a();
        a.poll_run(&lost.run_id, LONG, "picked up", |r| {
            r.status == RunStatus::Running && r.pickups >= pickup
        })
        .await?;
        crash(&mut scn)?;
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
    let next = a.agent("dlq", ANSWERED).await?;
    assert_answers(&a, &next.run_id).await?;
    let (_, session) = a.json(Method::GET, "/v1/sessions/dlq", None).await?;
    assert_eq!(session["status"], "idle");
    Ok(())
}

/// Deletes every queued lane message of the server's queue: on the embedded backend the rows
/// of `lane_pending` (its SQLite file), on AWS a purge of the SQS lane queue.
async fn lose_queued_messages(server: &Server) -> anyhow::Result<()> {
    let env: std::collections::HashMap<_, _> = server.backend_env().into_iter().collect();
    match env.get("AGENTLANE_QUEUE_NAME") {
        Some(queue) if agentlane_tests::server::backend_is_aws() => {
            let sdk = crate::support::emulator_sdk_config(server).await;
            let sqs = agentlane_aws::aws_sdk_sqs::Client::new(&sdk);
            let url = sqs
                .get_queue_url()
                .queue_name(queue)
                .send()
                .await?
                .queue_url
                .unwrap_or_default();
            sqs.purge_queue().queue_url(url).send().await?;
        }
        _ => {
            let db = rusqlite::Connection::open(server.data_dir().join("agentlane.sqlite3"))?;
            db.busy_timeout(Duration::from_secs(5))?;
            let deleted = db.execute("DELETE FROM lane_pending WHERE receive_count = 0", [])?;
            anyhow::ensure!(deleted == 1, "one queued message lost, not {deleted}");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_a_queued_turn_whose_lane_message_was_lost_answers_after_a_few_sweeps()
-> anyhow::Result<()> {
    // GIVEN a supervisor that warns after 300 ms and acts after 1.5 s, sweeping every 100 ms,
    // and a session whose first turn stalls (holding the lane) with a second turn queued
    let scn = stalling_scenario(quick_supervisor)?;
    let a = scn.a();
    let stalled = a.agent("lost", STALL).await?;
    a.poll_run(&stalled.run_id, LONG, "running", |r| {
        r.status == RunStatus::Running
    })
    .await?;
    let queued = a.agent("lost", ANSWERED).await?;

    // WHEN the queued turn's lane message is lost (deleted from the queue after its accept)
    lose_queued_messages(&scn.server).await?;

    // THEN once the stalled turn is aborted, the idle session with queued work is diagnosed
    // stuck, its lane message re-enqueued, and the lost turn answers within a few sweeps
    let run = a.wait_done(&stalled.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Aborted, "{run:?}");
    let started = Instant::now();
    let diagnosed = wait_diagnosed(&a, "lost", "session.stuck", Some(&queued.run_id)).await?;
    let session = diagnosed.expect("the session was diagnosed session.stuck");
    {
        assert_eq!(session["status"], "idle", "{session}");
        assert_eq!(
            session["diagnostic"]["reason"], "queued work without an active run",
            "{session}"
        );
    }
    assert_answers(&a, &queued.run_id).await?;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );

    // AND the session's next turn answers too, and the session is healthy
    let next = a.agent("lost", ANSWERED).await?;
    let answered = a.wait_done(&next.run_id, LONG).await?;
    assert_eq!(answered.status, RunStatus::Ok, "{answered:?}");
    assert_healthy(&a, "lost").await?;
    Ok(())
}
