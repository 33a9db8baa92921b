//! `agent.wait`: a short wait ends with `timeout` while the run goes on; a later wait sees it end.

use crate::support::{SLOW_REPLY, scenario};
use agentlane_core::RunStatus;
use agentlane_tests::WaitStatus;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_wait_times_out_and_a_longer_one_sees_the_run_end() -> anyhow::Result<()> {
    // GIVEN a slow turn (a few seconds)
    let scn = scenario()?;
    let a = scn.a();
    let accepted = a.agent("patience", "slow reply please").await?;

    // WHEN the client waits only 200 ms
    let asked = Instant::now();
    let early = a.wait(&accepted.run_id, 200).await?;

    // THEN the wait ends promptly while the run goes on: `pending` (phase `queue`) while it is
    // queued, `timeout` (phase `run`) once it runs
    assert_eq!(early.run_id, accepted.run_id);
    match early.run_status {
        RunStatus::Queued => {
            assert_eq!(early.status, WaitStatus::Pending, "{early:?}");
            assert_eq!(early.timeout_phase.as_deref(), Some("queue"), "{early:?}");
        }
        RunStatus::Running => {
            assert_eq!(early.status, WaitStatus::Timeout, "{early:?}");
            assert_eq!(early.timeout_phase.as_deref(), Some("run"), "{early:?}");
        }
        other => panic!("the run ended within 200 ms: {other:?} {early:?}"),
    }
    assert_eq!(early.payloads, None);
    assert_eq!(early.ended_at, None);
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "a 200 ms wait took {:?}",
        asked.elapsed()
    );

    // WHEN the client then waits long enough
    let late = a.wait(&accepted.run_id, 60_000).await?;

    // THEN the wait reports the run ended ok, with its times
    assert_eq!(late.status, WaitStatus::Ok, "{late:?}");
    assert_eq!(late.run_status, RunStatus::Ok);
    let (started, ended) = (
        late.started_at.expect("startedAt"),
        late.ended_at.expect("endedAt"),
    );
    assert!(started <= ended);
    assert_eq!(late.error, None);
    assert_eq!(a.run(&accepted.run_id).await?.reply_text(), SLOW_REPLY);

    // AND waiting on a finished run answers at once
    let asked = Instant::now();
    let again = a.wait(&accepted.run_id, 30_000).await?;
    assert_eq!(
        (again.status, again.run_status),
        (WaitStatus::Ok, RunStatus::Ok)
    );
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    Ok(())
}
