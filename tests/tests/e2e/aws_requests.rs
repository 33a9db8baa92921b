//! What a turn costs on AWS (issue 26.3), counted by a logging proxy in front of the emulator
//! (`scripts/aws-request-log.py`): the DynamoDB and SQS requests of a simple turn and of a
//! waited one, and an idle lane worker's receives (long polls, not one a second). Always on
//! the emulator; the AWS pass of the suite skips it, as it would only repeat it.

use crate::support::{AwsRequestLog, GREETING, LONG, scenario_with};
use agentlane_core::RunStatus;
use reqwest::StatusCode;
use std::collections::BTreeMap;
use std::time::Duration;

/// The requests of a turn, not counting what its server does on its own clock: the lane
/// workers' receives and the cron ticker's due-job queries.
fn turn_requests(log: &AwsRequestLog, from: usize) -> (u32, Vec<String>) {
    let lines: Vec<String> = log
        .lines_since(from)
        .into_iter()
        .filter(|l| !l.contains("ReceiveMessage") && !l.contains("cronDue"))
        .collect();
    (u32::try_from(lines.len()).unwrap_or(u32::MAX), lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_and_idle_workers_make_a_bounded_number_of_aws_requests() -> anyhow::Result<()> {
    if agentlane_tests::backend_is_aws() {
        return Ok(());
    }
    // GIVEN a server on DynamoDB + SQS (4 lane workers polling as deployed) behind a logging
    // proxy that shows which item each request touches, warmed by one turn
    // SAFETY: nextest runs each test in its own process; the proxy starts after this.
    unsafe { std::env::set_var("AGENTLANE_AWS_LOG_BODIES", "200") };
    let log = AwsRequestLog::start().await?;
    let scn = scenario_with(|o| {
        o.aws_backend()
            .deployed_receive_wait()
            .workers(4)
            .env("AGENTLANE_SWEEP_INTERVAL_MS", "3600000")
    })?;
    let a = scn.a();
    let first = a.agent("counted", "hello").await?;
    a.wait_done(&first.run_id, LONG).await?;

    // WHEN the server idles for 10 s
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = log.len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle: BTreeMap<String, u32> = log.since(before);
    // THEN each worker sent at most one receive (a 20 s long poll), not one a second
    let receives = idle.get("ReceiveMessage").copied().unwrap_or(0);
    assert!(receives <= 4, "{receives} receives in 10 s idle: {idle:?}");

    // WHEN a turn is sent and left to finish (no client request meanwhile)
    let before = log.len();
    let turn = a.agent("counted", "hello again").await?;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (simple, simple_lines) = turn_requests(&log, before);
    anyhow::ensure!(
        a.run(&turn.run_id).await?.status == RunStatus::Ok,
        "{simple_lines:#?}"
    );
    // AND a turn is sent and waited for
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = log.len();
    let turn = a.agent("counted", "and again").await?;
    let waited = a.wait(&turn.run_id, 30_000).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (with_wait, waited_lines) = turn_requests(&log, before);
    anyhow::ensure!(
        a.run(&turn.run_id).await?.status == RunStatus::Ok,
        "{waited:?}"
    );
    eprintln!("AWS requests of a simple turn, its receive aside ({simple}): {simple_lines:#?}");
    eprintln!("AWS requests of a waited turn, its receive aside ({with_wait}): {waited_lines:#?}");

    // THEN a simple turn makes at most 8 requests besides its receive: at most one claim of
    // the tenant's rate window (an allowance of 2: the accept and its wait, or the next
    // request); accept: a read, a write, a send; the runner: the lock (the run is taken from
    // the accepted record its message carries, checked by the start's write), its start,
    // its end with the lock's release, the delete (before: 9)
    assert!(simple <= 8, "{simple} requests: {simple_lines:#?}");
    // AND a waited turn at most 10: the wait adds one read of the run, and its wait slot's
    // take and release only if it outlives its grace (a second); its end is answered from the
    // runner's commit in this process, not read again, and a run this process picked up is
    // not polled (before: 13)
    assert!(with_wait <= 10, "{with_wait} requests: {waited_lines:#?}");
    drop(log);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_aborted_while_queued_never_starts_though_its_message_carries_its_record()
-> anyhow::Result<()> {
    if agentlane_tests::backend_is_aws() {
        return Ok(());
    }
    // GIVEN a server on DynamoDB + SQS, and a turn streaming slowly on a session
    let scn = scenario_with(|o| o.aws_backend())?;
    let a = scn.a();
    let first = a.agent("queued-abort", "a glacial answer please").await?;
    a.poll_run(&first.run_id, LONG, "running", |r| {
        r.status == RunStatus::Running
    })
    .await?;

    // WHEN a second turn, queued behind it (its lane message carries the record its accept
    // wrote), is aborted before its pickup, and then the first is aborted too
    let second = a.agent("queued-abort", "never to be answered").await?;
    assert_eq!(a.abort(&second.run_id).await?, StatusCode::ACCEPTED);
    assert_eq!(a.abort(&first.run_id).await?, StatusCode::ACCEPTED);

    // THEN the second ends aborted without starting: the runner's first commit found the
    // record changed, read the run and saw the abort; its prompt is not in the transcript
    let run = a.wait_done(&second.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Aborted, "{run:?}");
    assert_eq!(run.started_at, None, "{run:?}");
    let transcript = a.transcript("queued-abort").await?;
    assert_eq!(transcript.user_texts(), ["a glacial answer please"]);
    // AND the session answers its next turn
    let next = a.agent("queued-abort", "hello").await?;
    let next = a.wait_done(&next.run_id, LONG).await?;
    assert_eq!(next.status, RunStatus::Ok, "{next:?}");
    assert_eq!(next.reply_text(), GREETING);
    Ok(())
}
