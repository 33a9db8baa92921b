//! Rate limits that hold across processes (issue 25.1): two `serve` processes on one DynamoDB
//! table hold a tenant to its `requests_per_second` between them (the window count is in the
//! table), the other tenant is not refused meanwhile, a simple turn costs at most one more AWS
//! request for it, and an address that spent its unknown-key lookups is refused before the
//! lookup. Always on the emulator (the limits are only shared on the AWS backend); the AWS
//! pass of the suite skips them, as it would only repeat them.

use crate::support::{LONG, scenario_with};
use agentlane_core::RunStatus;
use agentlane_tests::{TENANT_A, TENANT_B};
use std::time::{Duration, Instant, SystemTime};

/// Tenant A's rate in these scenarios (requests per second).
const RATE: u32 = 20;

/// A config file giving tenant A `RATE` requests per second (and as much burst).
fn rate_config(dir: &tempfile::TempDir) -> anyhow::Result<String> {
    let config = dir.path().join("agentlane.toml");
    std::fs::write(
        &config,
        format!(
            "[limits.tenants.{}]\nrequests_per_second = {RATE}\nburst = {RATE}\n",
            TENANT_A.name
        ),
    )?;
    Ok(config.display().to_string())
}

/// Milliseconds since the epoch on this machine (the servers' clock too).
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One request's outcome: the second it was sent in, and its status.
type Outcome = (u64, u16);

/// `GET /v1/models` (an authenticated read) with `key` on `base`.
async fn one_request(http: reqwest::Client, base: String, key: &'static str) -> Outcome {
    let second = wall_ms() / 1_000;
    let status = http
        .get(format!("{base}/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .map_or(0, |r| r.status().as_u16());
    (second, status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_at_five_times_its_rate_on_two_servers_is_held_to_it_and_the_other_is_not_refused()
-> anyhow::Result<()> {
    if agentlane_tests::backend_is_aws() {
        return Ok(());
    }
    // GIVEN two servers on one DynamoDB table, tenant A allowed 20 requests per second (each
    // server alone would let 20 a second through: 40 between them)
    let dir = tempfile::tempdir()?;
    let config = rate_config(&dir)?;
    let scn = scenario_with(|o| {
        o.aws_backend()
            .env("AGENTLANE_CONFIG", config.clone())
            .env("AGENTLANE_SWEEP_INTERVAL_MS", "3600000")
    })?;
    let sibling = scn.server.start_sibling()?;
    let bases = [scn.server.url().to_owned(), sibling.url().to_owned()];
    let http = reqwest::Client::new();

    // WHEN A sends 100 requests a second for 3 s, spread over both servers, and B sends 5 a
    // second meanwhile (starting just after a second begins, so the windows are whole)
    tokio::time::sleep(Duration::from_millis(1_050 - wall_ms() % 1_000)).await;
    let started = Instant::now();
    let mut a_sent = Vec::new();
    let mut b_sent = Vec::new();
    for i in 0..300u32 {
        let at = Duration::from_millis(u64::from(i) * 10);
        tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
        let base = bases[(i % 2) as usize].clone();
        a_sent.push(tokio::spawn(one_request(http.clone(), base, TENANT_A.key)));
        if i % 20 == 0 {
            let base = bases[(i / 20 % 2) as usize].clone();
            b_sent.push(tokio::spawn(one_request(http.clone(), base, TENANT_B.key)));
        }
    }
    let mut a_outcomes = Vec::new();
    for sent in a_sent {
        a_outcomes.push(sent.await?);
    }
    let mut b_outcomes = Vec::new();
    for sent in b_sent {
        b_outcomes.push(sent.await?);
    }

    // THEN A got 429s beyond its rate: what was admitted is within 10 % of 20 in each second
    // it sent in (fewer where it sent fewer), across both servers together
    let mut seconds: std::collections::BTreeMap<u64, (u32, u32)> = Default::default();
    for (second, status) in &a_outcomes {
        let entry = seconds.entry(*second).or_default();
        entry.0 += 1;
        match status {
            200 => entry.1 += 1,
            429 => {}
            other => anyhow::bail!("tenant A got {other}: {a_outcomes:?}"),
        }
    }
    let admitted: u32 = seconds.values().map(|(_, ok)| ok).sum();
    let expected: u32 = seconds.values().map(|(sent, _)| (*sent).min(RATE)).sum();
    eprintln!(
        "tenant A per second (sent, admitted): {seconds:?}; admitted {admitted}, expected {expected}"
    );
    let slack = expected / 10;
    assert!(
        admitted.abs_diff(expected) <= slack,
        "admitted {admitted}, expected {expected} ± {slack}: {seconds:?}"
    );
    assert!(
        admitted < 300 / 2,
        "most of A's 300 requests were refused: {admitted}"
    );
    // AND B, under its own rate, was never refused
    let refused: Vec<&Outcome> = b_outcomes.iter().filter(|(_, s)| *s != 200).collect();
    assert!(refused.is_empty(), "tenant B refused: {refused:?}");
    assert_eq!(b_outcomes.len(), 15);
    // AND a 429 says when to come back (the next second)
    let refused = http
        .get(format!("{}/v1/models", bases[0]))
        .bearer_auth(TENANT_A.key)
        .send()
        .await?;
    if refused.status() == 429 {
        assert_eq!(
            refused
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()),
            Some("1")
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simple_turn_costs_at_most_one_more_aws_request_for_the_shared_rate() -> anyhow::Result<()>
{
    if agentlane_tests::backend_is_aws() {
        return Ok(());
    }
    // GIVEN servers on DynamoDB + SQS behind a logging proxy: one with tenant A's rate off,
    // one with it on
    let log = crate::support::AwsRequestLog::start().await?;
    let (off_dir, on_dir) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let off = off_dir.path().join("agentlane.toml");
    std::fs::write(
        &off,
        format!(
            "[limits.tenants.{}]\nrequests_per_second = 0\n",
            TENANT_A.name
        ),
    )?;
    let on = rate_config(&on_dir)?;
    let mut counts = Vec::new();
    for config in [off.display().to_string(), on] {
        let scn = scenario_with(|o| {
            o.aws_backend()
                .env("AGENTLANE_CONFIG", config.clone())
                .env("AGENTLANE_SWEEP_INTERVAL_MS", "3600000")
        })?;
        let a = scn.a();
        let first = a.agent("counted", "hello").await?;
        a.wait_done(&first.run_id, LONG).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        // WHEN a simple turn is sent and waited for: two requests, counted with the runner's
        // work (done by the time the wait answers; a pause lets its last requests land)
        let before = log.len();
        let turn = a.agent("counted", "hello again").await?;
        let waited = a.wait(&turn.run_id, 30_000).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = log.since(before);
        anyhow::ensure!(
            a.run(&turn.run_id).await?.status == RunStatus::Ok,
            "{waited:?}"
        );
        let writes = after.get("UpdateItem").copied().unwrap_or(0);
        eprintln!("turn requests (rate config {config}): {after:?}");
        counts.push((writes, after));
    }
    // THEN the rate adds at most one UpdateItem (one claim covers the accept and the wait)
    let (off, on) = (&counts[0], &counts[1]);
    assert!(
        on.0 <= off.0 + 1,
        "UpdateItem: {} with the rate, {} without: {counts:?}",
        on.0,
        off.0
    );
    eprintln!(
        "store requests added per simple turn by the shared rate: {}",
        on.0.saturating_sub(off.0)
    );
    drop(log);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_spent_its_unknown_key_lookups_is_refused_before_the_lookup()
-> anyhow::Result<()> {
    if agentlane_tests::backend_is_aws() {
        return Ok(());
    }
    // GIVEN a server on DynamoDB behind a logging proxy, at most 5 unknown keys a minute per
    // address
    let log = crate::support::AwsRequestLog::start().await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentlane.toml");
    std::fs::write(&config, "[limits]\nkey_probes_per_minute = 5\n")?;
    let config = config.display().to_string();
    let scn = scenario_with(|o| {
        o.aws_backend()
            .env("AGENTLANE_CONFIG", config.clone())
            .env("AGENTLANE_SWEEP_INTERVAL_MS", "3600000")
    })?;
    let http = reqwest::Client::new();
    let base = scn.server.url().to_owned();
    let probe = |key: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            http.get(format!("{base}/v1/models"))
                .bearer_auth(key)
                .send()
                .await
                .map(|r| r.status().as_u16())
        }
    };
    let stranger = || {
        agentlane_core::api_key::NewApiKey::generate(agentlane_core::TenantId::new("x"), None, 1)
            .key
    };

    // WHEN a client sends no key, or a key that cannot be a store key, THEN it gets a 401 and
    // nothing reaches the table
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = log.len();
    for _ in 0..5 {
        assert_eq!(
            http.get(format!("{base}/v1/models")).send().await?.status(),
            401
        );
        assert_eq!(probe("not-a-store-key-0123456789".into()).await?, 401);
    }
    let keyless = log.since(before);
    assert!(
        keyless
            .keys()
            .all(|op| op == "ReceiveMessage" || op == "Query"),
        "keyless requests reached the table: {keyless:?}"
    );
    // WHEN it tries 5 made-up keys of the store's shape, THEN each is a 401 after one key read
    let before = log.len();
    for _ in 0..5 {
        assert_eq!(probe(stranger()).await?, 401);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let probes = log.since(before);
    eprintln!("AWS requests of 5 unknown keys (401): {probes:?}");
    assert_eq!(
        probes.get("GetItem"),
        Some(&10),
        "a key read and a window read each: {probes:?}"
    );
    // WHEN it tries 5 more, THEN each is a 429 and none reads a key from the table
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = log.len();
    for _ in 0..5 {
        assert_eq!(probe(stranger()).await?, 429);
    }
    let after = log.since(before);
    eprintln!("AWS requests of 5 refused probes: {after:?}");
    assert_eq!(after.get("GetItem"), None, "{after:?}");
    // AND a configured key is answered as before
    assert_eq!(
        http.get(format!("{base}/v1/models"))
            .bearer_auth(TENANT_A.key)
            .send()
            .await?
            .status(),
        200
    );
    drop(log);
    Ok(())
}
