//! A session's and a tenant's data lifecycle (issue 24), on the backend `AGENTLANE_E2E_BACKEND`
//! names: `DELETE /v1/sessions/{key}` leaves no stored item of the session, and `agentlane
//! tenants erase T` none of the tenant (its API keys included). The tests look at the whole
//! store (every row of every table, or a Scan of the DynamoDB table); the code under test
//! never scans.

use crate::support::{GREETING, LONG, SERVER_BIN};
use agentlane_core::RunStatus;
use agentlane_tests::{Aimock, Client, Fixtures, Server, ServerOptions, TENANT_A, TENANT_B};
use reqwest::Method;
use reqwest::StatusCode;
use serde_json::Value;

/// Every stored record as one line of text: on AWS every item of the table (a Scan), on the
/// embedded store every row of every table.
async fn stored_records(server: &Server) -> anyhow::Result<Vec<String>> {
    let env: std::collections::HashMap<_, _> = server.backend_env().into_iter().collect();
    let mut records = Vec::new();
    if let Some(table) = env.get("AGENTLANE_TABLE") {
        let sdk = crate::support::emulator_sdk_config(server).await;
        let dynamo = agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk);
        let mut start = None;
        loop {
            let page = dynamo
                .scan()
                .table_name(table)
                .set_exclusive_start_key(start)
                .send()
                .await?;
            records.extend(page.items().iter().map(|item| format!("{item:?}")));
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(records);
            }
        }
    }
    let db = rusqlite::Connection::open(server.data_dir().join("agentlane.sqlite3"))?;
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for table in tables {
        let mut stmt = db.prepare(&format!("SELECT * FROM \"{table}\""))?;
        let columns = stmt.column_count();
        let rows = stmt.query_map([], |row| {
            let mut line = format!("{table}:");
            for i in 0..columns {
                let value: rusqlite::types::Value = row.get(i)?;
                line.push_str(&format!(" {value:?}"));
            }
            Ok(line)
        })?;
        for row in rows {
            records.push(row?);
        }
    }
    Ok(records)
}

/// The stored records that mention any of `needles`.
async fn records_with(server: &Server, needles: &[&str]) -> anyhow::Result<Vec<String>> {
    Ok(stored_records(server)
        .await?
        .into_iter()
        .filter(|record| needles.iter().any(|n| record.contains(n)))
        .collect())
}

/// Submits `message` on `session` and waits for its `ok` end; the run id and session id.
async fn turn(client: &Client, session: &str, message: &str) -> anyhow::Result<(String, String)> {
    let accepted = client.agent(session, message).await?;
    let run = client.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), GREETING);
    Ok((accepted.run_id, accepted.session_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_leaves_no_stored_item_of_it() -> anyhow::Result<()> {
    // GIVEN a session with two answered turns (transcript, events), reset once in between,
    // and a neighbouring session of the same tenant
    let mock = Aimock::start(Fixtures::scenarios())?;
    let server = Server::start(ServerOptions::new(SERVER_BIN).model_server(&mock))?;
    let a = server.client(TENANT_A);
    let (first, old_id) = turn(&a, "lifecycle-doomed", "hello").await?;
    let (status, _) = a
        .json(Method::POST, "/v1/sessions/lifecycle-doomed/reset", None)
        .await?;
    assert_eq!(status, StatusCode::OK);
    let (second, new_id) = turn(&a, "lifecycle-doomed", "hello").await?;
    let (kept, _) = turn(&a, "lifecycle-kept", "hello").await?;
    let doomed = [
        "lifecycle-doomed",
        first.as_str(),
        second.as_str(),
        old_id.as_str(),
        new_id.as_str(),
    ];
    assert!(!records_with(&server, &doomed).await?.is_empty());

    // WHEN the session is deleted
    let (status, body) = a
        .json(Method::DELETE, "/v1/sessions/lifecycle-doomed", None)
        .await?;

    // THEN 204, then 404
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = a
        .json(Method::DELETE, "/v1/sessions/lifecycle-doomed", None)
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // AND no stored item names its key, its session ids or its runs
    let left = records_with(&server, &doomed).await?;
    assert!(left.is_empty(), "left behind:\n{}", left.join("\n"));
    // AND the neighbour is whole
    assert!(!records_with(&server, &[kept.as_str()]).await?.is_empty());
    assert_eq!(a.run(&kept).await?.status, RunStatus::Ok);
    assert_eq!(listed_keys(&a).await?, ["lifecycle-kept"]);
    Ok(())
}

/// The session keys `GET /v1/sessions` lists for the client's tenant.
async fn listed_keys(client: &Client) -> anyhow::Result<Vec<String>> {
    let (status, listed) = client.json(Method::GET, "/v1/sessions", None).await?;
    anyhow::ensure!(status == StatusCode::OK, "{status}: {listed}");
    Ok(listed["sessions"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|s| s["sessionKey"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// `agentlane <args>` with the server's backend settings; fails unless it succeeds.
fn cli(server: &Server, args: &[&str]) -> anyhow::Result<std::process::Output> {
    let output = server.cli().args(args).output()?;
    anyhow::ensure!(
        output.status.success(),
        "agentlane {args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_tenant_leaves_no_stored_item_of_it_and_its_keys_stop_working()
-> anyhow::Result<()> {
    // GIVEN a tenant with a stored API key, two sessions with answered turns and a cron job,
    // and another tenant with a session
    let mock = Aimock::start(Fixtures::scenarios())?;
    let server = Server::start(
        ServerOptions::new(SERVER_BIN)
            .model_server(&mock)
            .env("AGENTLANE_API_KEY_CACHE_TTL_MS", "500"),
    )?;
    let tenant = "erasable-tenant";
    let created: Value =
        serde_json::from_slice(&cli(&server, &["keys", "create", "--tenant", tenant])?.stdout)?;
    let key_id = created["keyId"].as_str().unwrap_or_default().to_owned();
    let key = created["key"].as_str().unwrap_or_default().to_owned();
    let client = Client::new(server.url(), &key);
    turn(&client, "first", "hello").await?;
    turn(&client, "second", "hello").await?;
    let job = serde_json::json!({
        "name": "nightly", "schedule": {"everySeconds": 86400}, "message": "hello"
    });
    let (status, body) = client
        .json(Method::POST, "/v1/cron/jobs", Some(job))
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (other_run, _) = turn(&server.client(TENANT_A), "other", "hello").await?;
    let needles = [tenant, key_id.as_str()];
    assert!(!records_with(&server, &needles).await?.is_empty());

    // WHEN the operator erases the tenant
    let refused = server.cli().args(["tenants", "erase", tenant]).output()?;
    assert!(!refused.status.success(), "erased without --yes");
    let output = cli(&server, &["tenants", "erase", tenant, "--yes", "--json"])?;
    let report: Value = serde_json::from_slice(&output.stdout)?;

    // THEN it reports what it removed
    assert_eq!(report["tenant"], tenant, "{report}");
    assert_eq!(report["removed"]["runs"], 2, "{report}");
    assert_eq!(report["removed"]["sessions"], 2, "{report}");
    assert_eq!(report["removed"]["apiKeys"], 1, "{report}");
    assert!(report["total"].as_u64().unwrap_or(0) >= 8, "{report}");
    // AND no stored item of it is left, its key included
    let left = records_with(&server, &needles).await?;
    assert!(left.is_empty(), "left behind:\n{}", left.join("\n"));
    // AND its key no longer authenticates (once the server's key cache let it go)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, _) = client.json(Method::GET, "/v1/sessions", None).await?;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the erased key still works"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // AND the other tenant is whole
    assert_eq!(
        server.client(TENANT_A).run(&other_run).await?.status,
        RunStatus::Ok
    );
    // AND a human report of a second erasure says nothing was left
    let again = cli(&server, &["tenants", "erase", tenant, "--yes"])?;
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("nothing stored"), "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_idle_past_its_tenants_retention_is_swept_with_everything_of_it()
-> anyhow::Result<()> {
    // GIVEN sessions kept one day, a day lasting five seconds (the test-only
    // AGENTLANE_RETENTION_DAY_MS), tenant b kept a thousand days, and a sweep every 200 ms
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentlane.toml");
    std::fs::write(
        &config,
        "[limits.tenant]\nretention_days = 1\n\n[limits.tenants.tenant-b]\nretention_days = 1000\n",
    )?;
    let mock = Aimock::start(Fixtures::scenarios())?;
    let server = Server::start(
        ServerOptions::new(SERVER_BIN)
            .model_server(&mock)
            .env("AGENTLANE_CONFIG", config.display().to_string())
            .env("AGENTLANE_RETENTION_DAY_MS", "5000")
            .env("AGENTLANE_SWEEP_INTERVAL_MS", "200"),
    )?;
    let (a, b) = (server.client(TENANT_A), server.client(TENANT_B));
    let started = std::time::Instant::now();
    let (old_run, old_id) = turn(&a, "retention-old", "hello").await?;
    let (kept_run, _) = turn(&b, "retention-other-tenant", "hello").await?;
    // AND a session of tenant a active a few seconds later
    tokio::time::sleep(std::time::Duration::from_millis(3500).saturating_sub(started.elapsed()))
        .await;
    let (fresh_run, _) = turn(&a, "retention-fresh", "hello").await?;
    let old = ["retention-old", old_run.as_str(), old_id.as_str()];
    assert!(!records_with(&server, &old).await?.is_empty());

    // WHEN the old session has been idle for longer than a "day"
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !records_with(&server, &old).await?.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the expired session is still stored:\n{}",
            records_with(&server, &old).await?.join("\n")
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // THEN no stored item of it is left, and the API no longer knows it
    let (status, body) = a
        .json(Method::GET, "/v1/sessions/retention-old", None)
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // AND the session active since and the other tenant's are whole
    assert_eq!(a.run(&fresh_run).await?.status, RunStatus::Ok);
    assert_eq!(b.run(&kept_run).await?.status, RunStatus::Ok);
    assert_eq!(listed_keys(&a).await?, ["retention-fresh"]);
    Ok(())
}
