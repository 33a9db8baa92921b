//! Following a run's events as Server-Sent Events.

use crate::support::{LONG, SLOW_REPLY, assert_run_frame, assistant_deltas, scenario};
use agentlane_core::RunStatus;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sse_stream_follows_a_run_from_start_to_end_then_closes() -> anyhow::Result<()> {
    // GIVEN a slow turn that was just accepted
    let scn = scenario()?;
    let a = scn.a();
    let turn = a.agent("followed", "slow and steady").await?;

    // WHEN the client follows its events with Accept: text/event-stream
    let live = a.events_sse(&turn.run_id, LONG).await?;

    // THEN the stream carries lifecycle start, the reply's deltas, lifecycle end, then an
    // `end` frame with the run's status, and closes by itself
    assert_run_frame(&live.events, "ok");
    assert_eq!(assistant_deltas(&live.events), SLOW_REPLY);
    assert_eq!(
        live.end,
        Some(json!({"runId": turn.run_id, "status": "ok"}))
    );
    assert_eq!(a.run(&turn.run_id).await?.status, RunStatus::Ok);

    // AND it is the same history the JSON endpoint gives, which a late follower also replays
    let listed = a.events(&turn.run_id).await?;
    assert_eq!(live.events, listed);
    let replay = a.events_sse(&turn.run_id, LONG).await?;
    assert_eq!(replay, live);
    Ok(())
}
