//! Tenants share the lane workers fairly (issue 12: "the lane of one tenant can never starve
//! another's"), and the session key never reaches the server's logs in clear.

use crate::support::{GREETING, LONG, scenario_with};
use agentlane_tests::WaitStatus;
use futures::StreamExt;
use reqwest::Method;

/// A's flood: this many turns over [`FLOOD_SESSIONS`] sessions (a fifth of it on the AWS
/// emulator, whose accepts are slower; still 20 sessions for two workers).
const FLOOD_TURNS: usize = 500;
const FLOOD_SESSIONS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_fairness_a_flooding_tenant_does_not_make_another_tenants_turn_wait_behind_it()
-> anyhow::Result<()> {
    // GIVEN two lane workers (on SQS, one message group per tenant: AGENTLANE_TENANT_LANES;
    // the embedded queue caps a tenant at its share of the workers), and tenant A's 500 slow
    // turns over 100 sessions, all accepted
    // `E2E_TENANT_LANES=0` shows what the groups buy: on SQS, B's turn then waits behind A's
    // backlog and the scenario fails.
    let lanes = std::env::var("E2E_TENANT_LANES").unwrap_or_else(|_| "1".into());
    let scn = scenario_with(|o| o.workers(2).env("AGENTLANE_TENANT_LANES", lanes))?;
    let (a, b) = (scn.a(), scn.b());
    let (turns, sessions) = if agentlane_tests::server::backend_is_aws() {
        (FLOOD_TURNS / 5, FLOOD_SESSIONS / 5)
    } else {
        (FLOOD_TURNS, FLOOD_SESSIONS)
    };
    let flood: Vec<String> = futures::stream::iter(0..turns)
        .map(|i| {
            let a = a.clone();
            async move {
                let session = format!("a-flood-{}", i % sessions);
                a.agent(&session, "slow")
                    .await
                    .map(|accepted| accepted.run_id)
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;

    // WHEN tenant B sends one turn
    let accepted = b.agent("b-one", "hello").await?;
    let wait = b.wait(&accepted.run_id, LONG.as_millis() as u64).await?;

    // THEN it answers while A's backlog is still almost all queued: few of A's turns ended
    // before it
    assert_eq!(wait.status, WaitStatus::Ok, "{wait:?}");
    assert_eq!(
        wait.payloads.as_deref().unwrap_or_default()[0].text,
        GREETING
    );
    let b_ended = wait.ended_at.expect("B's run ended");
    let ended_before_b = futures::stream::iter(flood)
        .map(|run_id| {
            let a = a.clone();
            async move { a.run(&run_id).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|run| run.ended_at.is_some_and(|ended| ended <= b_ended))
        .count();
    assert!(
        ended_before_b <= 10,
        "{ended_before_b} of A's {turns} turns ended before B's one turn"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_fairness_the_session_key_never_appears_in_the_server_logs() -> anyhow::Result<()> {
    // GIVEN a server logging at its default level, and a session key that is personal data
    let scn = scenario_with(|o| o.env("AGENTLANE_LOG", "info"))?;
    let a = scn.a();
    let key = "alice.privacy@example.com";

    // WHEN a turn with a tool call and a plain turn run on it, its transcript is read, its
    // session reset, and one more turn runs
    for message in ["what time is it", "hello"] {
        let accepted = a.agent(key, message).await?;
        let wait = a.wait(&accepted.run_id, LONG.as_millis() as u64).await?;
        assert_eq!(wait.status, WaitStatus::Ok, "{wait:?}");
    }
    a.transcript(key).await?;
    let (status, _) = a
        .json(Method::POST, &format!("/v1/sessions/{key}/reset"), None)
        .await?;
    assert!(status.is_success(), "reset: {status}");
    let accepted = a.agent(key, "hello").await?;
    a.wait(&accepted.run_id, LONG.as_millis() as u64).await?;

    // THEN the logs follow the session by its fingerprint and never write the key
    let logs = scn.server.stderr_tail(16 * 1024 * 1024);
    assert!(
        !logs.contains(key),
        "the session key is in the logs:\n{logs}"
    );
    assert!(
        !logs.contains("alice.privacy"),
        "part of the key is in the logs"
    );
    let fingerprint = agentlane_core::fingerprint(key);
    assert!(
        logs.matches(&fingerprint).count() >= 6,
        "the session's lines carry its fingerprint {fingerprint}:\n{logs}"
    );
    Ok(())
}
