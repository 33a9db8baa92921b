//! Cron jobs end to end (SPEC §9): the real server's ticker fires scheduled, isolated turns
//! against aimock, on either backend.

use crate::support::{GREETING, LONG, scenario_with};
use agentlane_core::RunStatus;
use agentlane_tests::{Client, Scenario, ServerOptions};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A fast ticker, so fires land within ~250 ms of their slot.
fn fast_ticks(options: ServerOptions) -> ServerOptions {
    options.env("AGENTLANE_CRON_TICK_MS", "250")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn create(client: &Client, body: Value) -> anyhow::Result<Value> {
    let (status, job) = client
        .json(Method::POST, "/v1/cron/jobs", Some(body))
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    Ok(job)
}

async fn job(client: &Client, id: &str) -> anyhow::Result<(StatusCode, Value)> {
    Ok(client
        .json(Method::GET, &format!("/v1/cron/jobs/{id}"), None)
        .await?)
}

/// Polls the job until `done(job)` holds, at most `within`.
async fn job_until(
    client: &Client,
    id: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let start = Instant::now();
    loop {
        let (status, body) = job(client, id).await?;
        assert_eq!(status, StatusCode::OK, "{body}");
        if done(&body) {
            return Ok(body);
        }
        if start.elapsed() > within {
            anyhow::bail!("job {id} did not get there within {within:?}: {body}");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

fn runs(job: &Value) -> Vec<Value> {
    job["lastRuns"].as_array().cloned().unwrap_or_default()
}

fn with_status<'a>(job: &'a Value, status: &str) -> Vec<&'a Value> {
    job["lastRuns"]
        .as_array()
        .map(|r| r.iter().filter(|e| e["status"] == status).collect())
        .unwrap_or_default()
}

fn id_of(job: &Value) -> String {
    job["jobId"].as_str().unwrap_or_default().to_owned()
}

async fn delete(client: &Client, id: &str) -> anyhow::Result<StatusCode> {
    Ok(client
        .json(Method::DELETE, &format!("/v1/cron/jobs/{id}"), None)
        .await?
        .0)
}

/// How late a fire may be and still count as on time: a few ticks, and room for an emulator
/// that stalls for a few seconds (the exact slot is checked by `dueAt`; UTC instead of the
/// job's time zone would be hours off).
const LATE_FIRE_MS: u64 = 5_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_every_two_seconds_job_fires_three_times_into_fresh_sessions() -> anyhow::Result<()> {
    // GIVEN a server and a job saying hello every 2 s
    let scn = scenario_with(fast_ticks)?;
    let (a, b) = (scn.a(), scn.b());
    let created = create(
        &a,
        json!({"name": "greeter", "schedule": {"everySeconds": 2}, "message": "hello"}),
    )
    .await?;
    let id = id_of(&created);
    let created_at = created["createdAt"].as_u64().unwrap_or_default();

    // WHEN ~6 s pass
    let job = job_until(&a, &id, Duration::from_secs(20), |j| {
        with_status(j, "ok").len() >= 3
    })
    .await?;
    assert_eq!(delete(&a, &id).await?, StatusCode::NO_CONTENT);

    // THEN it fired into 3 distinct cron sessions, all ok, listed newest first; a slot that came
    // while the previous fire still ran (a slow emulator can make a turn outlast 2 s) is
    // recorded skipped, never overlapped
    let mut listed: Vec<Value> = runs(&job);
    listed.reverse();
    for skipped in listed.iter().filter(|f| f["status"] == "skipped") {
        assert_eq!(
            skipped["error"], "the previous run was still in progress",
            "{job}"
        );
        assert!(skipped.get("runId").is_none(), "{job}");
    }
    let fires: Vec<&Value> = listed.iter().filter(|f| f["runId"].is_string()).collect();
    let fires = &fires[..3];
    let sessions: HashSet<&str> = fires
        .iter()
        .filter_map(|f| f["sessionKey"].as_str())
        .collect();
    assert_eq!(sessions.len(), 3, "{job}");
    let (mut last_due, mut last_end) = (created_at, 0);
    for fire in fires {
        let run_id = fire["runId"].as_str().unwrap_or_default();
        assert_eq!(fire["status"], "ok", "{job}");
        assert_eq!(fire["sessionKey"], format!("cron:{id}:{run_id}"));
        // on a 2-second slot (exactly), later than the previous fire's, never early; fired
        // within a few ticks (the bound leaves room for an emulator that stalls for a few
        // seconds: CI saw one of 2.5 s)
        let due = fire["dueAt"].as_u64().unwrap_or_default();
        assert!(
            due > last_due && (due - created_at) % 2_000 == 0,
            "off its slot: {fire} in {job}"
        );
        last_due = due;
        let fired = fire["firedAt"].as_u64().unwrap_or_default();
        assert!(
            fired >= due && fired - due < LATE_FIRE_MS,
            "late fire: {fire}"
        );
        assert!(fired >= last_end, "overlapped the previous fire: {job}");
        last_end = fire["endedAt"].as_u64().unwrap_or(u64::MAX);
        // AND each is an ordinary run with the greeting, in its own transcript
        let run = a.run(run_id).await?;
        assert_eq!(run.status, RunStatus::Ok);
        assert_eq!(run.payloads[0].text, GREETING);
        let transcript = a
            .json(
                Method::GET,
                &format!(
                    "/v1/sessions/{}/transcript",
                    fire["sessionKey"].as_str().unwrap_or_default()
                ),
                None,
            )
            .await?;
        assert_eq!(transcript.0, StatusCode::OK, "{}", transcript.1);
        assert_eq!(
            transcript.1["entries"].as_array().map(Vec::len),
            Some(2),
            "{}",
            transcript.1
        );
        // AND another tenant sees neither the run nor the session
        let (status, _) = b
            .json(Method::GET, &format!("/v1/runs/{run_id}"), None)
            .await?;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    assert_eq!(job["consecutiveErrors"], 0);
    // AND another tenant sees no job
    let (_, listed) = b.json(Method::GET, "/v1/cron/jobs", None).await?;
    assert_eq!(listed["jobs"], json!([]));
    assert_eq!(job_status(&b, &id).await?, StatusCode::NOT_FOUND);
    Ok(())
}

async fn job_status(client: &Client, id: &str) -> anyhow::Result<StatusCode> {
    Ok(job(client, id).await?.0)
}

/// `ss mm hh * * *` for the wall-clock time `at_ms` in Asia/Kolkata (UTC+05:30, no DST).
fn kolkata_cron(at_ms: u64) -> String {
    let local = at_ms / 1000 + 5 * 3600 + 30 * 60;
    let (h, m, s) = ((local / 3600) % 24, (local / 60) % 60, local % 60);
    format!("{s} {m} {h} * * *")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_six_field_cron_in_a_time_zone_fires_at_its_local_time() -> anyhow::Result<()> {
    // GIVEN a daily job at a Kolkata wall-clock time 4 s from now (to the second)
    let scn = scenario_with(fast_ticks)?;
    let a = scn.a();
    let at = (now_ms() / 1000 + 4) * 1000;
    let created = create(
        &a,
        json!({"name": "daily", "schedule": {"cron": kolkata_cron(at), "tz": "Asia/Kolkata"},
               "message": "hello"}),
    )
    .await?;
    // THEN its next run is that instant (read in UTC it would be 5 h 30 min away)
    assert_eq!(created["nextRunAt"], at, "{created}");

    // WHEN the time comes THEN it fires once, ok, and the next run is a day later
    let id = id_of(&created);
    let job = job_until(&a, &id, Duration::from_secs(20), |j| {
        !with_status(j, "ok").is_empty()
    })
    .await?;
    let fire = &runs(&job)[0];
    assert_eq!(fire["dueAt"], at);
    assert!(
        fire["firedAt"].as_u64().unwrap_or_default() - at < LATE_FIRE_MS,
        "{fire}"
    );
    assert_eq!(runs(&job).len(), 1);
    assert_eq!(job["nextRunAt"], at + 24 * 3600 * 1000);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_timeout_ends_timeout_and_its_lane_is_free() -> anyhow::Result<()> {
    // GIVEN a job whose run takes ~8 s and whose timeout is 2 s
    let scn = scenario_with(fast_ticks)?;
    let a = scn.a();
    let created = create(
        &a,
        json!({"name": "slowpoke", "schedule": {"everySeconds": 3600}, "message": "glacial",
               "timeoutSeconds": 2}),
    )
    .await?;
    let id = id_of(&created);

    // WHEN it is fired
    let (status, fired) = a
        .json(Method::POST, &format!("/v1/cron/jobs/{id}/run"), None)
        .await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{fired}");
    let run_id = fired["runId"].as_str().unwrap_or_default().to_owned();
    let fired_at = fired["firedAt"].as_u64().unwrap_or_default();

    // THEN the run ends `timeout` about 2 s after the fire, and the job lists it so
    let run = a
        .poll_run(&run_id, LONG, "end", |r| r.status.is_terminal())
        .await?;
    assert_eq!(run.status, RunStatus::Timeout);
    let ended = run.ended_at.unwrap_or_default();
    assert!(
        ended >= fired_at + 2_000 && ended < fired_at + 6_000,
        "ended {} ms after the fire",
        ended - fired_at
    );
    let job = job_until(&a, &id, Duration::from_secs(10), |j| {
        !with_status(j, "timeout").is_empty()
    })
    .await?;
    assert_eq!(runs(&job)[0]["runId"], run_id.as_str());

    // AND its session is idle again, and the job's next fire runs (not skipped) and ends ok
    let session_key = fired["sessionKey"].as_str().unwrap_or_default();
    let (_, session) = a
        .json(Method::GET, &format!("/v1/sessions/{session_key}"), None)
        .await?;
    assert_eq!(session["status"], "idle", "{session}");
    let (status, _) = a
        .json(
            Method::PATCH,
            &format!("/v1/cron/jobs/{id}"),
            Some(json!({"message": "hello"})),
        )
        .await?;
    assert_eq!(status, StatusCode::OK);
    let (_, again) = a
        .json(Method::POST, &format!("/v1/cron/jobs/{id}/run"), None)
        .await?;
    let next = a
        .wait_done(again["runId"].as_str().unwrap_or_default(), LONG)
        .await?;
    assert_eq!(next.status, RunStatus::Ok);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_that_pauses_is_listed_requires_action_and_its_timeout_still_applies()
-> anyhow::Result<()> {
    // GIVEN an agent whose `current_time` needs approval, and a job of it with a 2 s timeout
    let scn = scenario_with(|o| fast_ticks(o).env("AGENTLANE_SWEEP_INTERVAL_MS", "200"))?;
    scn.mock.add_fixtures(vec![json!({"match": {"userMessage": "what time is it at the office"},
        "response": {"toolCalls": [{"id": "call_clock", "name": "current_time", "arguments": {}}]}})])?;
    let a = scn.a();
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "clerk", "approval": {"tools": ["current_time"]}})),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let created = create(
        &a,
        json!({"name": "office-clock", "schedule": {"everySeconds": 3600}, "agentId": "clerk",
               "message": "what time is it at the office", "timeoutSeconds": 2}),
    )
    .await?;
    let id = id_of(&created);

    // WHEN it is fired and nobody approves the call
    let (status, fired) = a
        .json(Method::POST, &format!("/v1/cron/jobs/{id}/run"), None)
        .await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{fired}");
    let run_id = fired["runId"].as_str().unwrap_or_default().to_owned();
    let fired_at = fired["firedAt"].as_u64().unwrap_or_default();

    // THEN the job lists the run requires_action while it waits, expiring at the timeout
    let paused = job_until(&a, &id, Duration::from_secs(10), |j| {
        !with_status(j, "requires_action").is_empty()
    })
    .await?;
    assert_eq!(runs(&paused)[0]["runId"], run_id.as_str());
    let (_, run) = a
        .json(Method::GET, &format!("/v1/runs/{run_id}"), None)
        .await?;
    let expires_at = run["requiredAction"]["expiresAt"]
        .as_u64()
        .unwrap_or_default();
    assert!(
        expires_at <= fired_at + 2_000,
        "the pause ends at the job's timeout, not a day later: {run}"
    );
    // AND at the timeout the run ends `timeout`, the call answered, the job listing it so
    let run = a
        .poll_run(&run_id, LONG, "end", |r| r.status.is_terminal())
        .await?;
    assert_eq!(run.status, RunStatus::Timeout, "{run:?}");
    let ended = run.ended_at.unwrap_or_default();
    assert!(
        ended >= fired_at + 2_000 && ended < fired_at + 8_000,
        "ended {} ms after the fire",
        ended - fired_at
    );
    job_until(&a, &id, Duration::from_secs(10), |j| {
        !with_status(j, "timeout").is_empty()
    })
    .await?;
    let session_key = fired["sessionKey"].as_str().unwrap_or_default();
    let transcript = a.transcript(session_key).await?;
    assert_eq!(
        agentlane_tests::check_pairing(&agentlane_tests::transcript_items(&transcript.entries)),
        Ok(())
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_job_fires_no_more() -> anyhow::Result<()> {
    // GIVEN a job firing every second, seen firing
    let scn = scenario_with(fast_ticks)?;
    let a = scn.a();
    let created = create(
        &a,
        json!({"name": "chatty", "schedule": {"everySeconds": 1}, "message": "hello, deleted job"}),
    )
    .await?;
    let id = id_of(&created);
    job_until(&a, &id, Duration::from_secs(20), |j| {
        !with_status(j, "ok").is_empty()
    })
    .await?;

    // WHEN it is deleted
    assert_eq!(delete(&a, &id).await?, StatusCode::NO_CONTENT);
    assert_eq!(job_status(&a, &id).await?, StatusCode::NOT_FOUND);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let settled = scn.mock.model_requests_for("deleted job")?.len();

    // THEN three more seconds bring no model call for it
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(scn.mock.model_requests_for("deleted job")?.len(), settled);
    assert!(settled >= 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_downtime_fires_one_catch_up_not_a_burst() -> anyhow::Result<()> {
    // GIVEN a job every 4 s that fired once
    let mut scn = scenario_with(fast_ticks)?;
    let created = create(
        &scn.a(),
        json!({"name": "steady", "schedule": {"everySeconds": 4}, "message": "hello"}),
    )
    .await?;
    let id = id_of(&created);
    let created_at = created["createdAt"].as_u64().unwrap_or_default();
    job_until(&scn.a(), &id, Duration::from_secs(20), |j| {
        !with_status(j, "ok").is_empty()
    })
    .await?;

    // WHEN the server is down while two more slots pass, then starts again
    scn.server.kill_hard();
    let back_at = created_at + 13_000;
    tokio::time::sleep(Duration::from_millis(back_at.saturating_sub(now_ms()))).await;
    scn.server.restart()?;
    let restarted = now_ms();
    let a = scn.a();

    // THEN exactly one fire catches up, for the first missed slot; the second missed slot is
    // not replayed
    let job = job_until(&a, &id, Duration::from_secs(20), |j| runs(j).len() >= 2).await?;
    let after: Vec<Value> = runs(&job)
        .into_iter()
        .filter(|r| r["firedAt"].as_u64().unwrap_or_default() >= restarted.saturating_sub(2_000))
        .filter(|r| r["dueAt"].as_u64().unwrap_or_default() < restarted)
        .collect();
    assert_eq!(after.len(), 1, "{job}");
    assert_eq!(after[0]["dueAt"], created_at + 8_000, "{job}");
    let due: Vec<u64> = runs(&job)
        .iter()
        .filter_map(|r| r["dueAt"].as_u64())
        .collect();
    assert!(
        !due.contains(&(created_at + 12_000)),
        "slot 12 s was replayed: {job}"
    );
    // AND the schedule goes on from now
    assert!(
        job["nextRunAt"].as_u64().unwrap_or_default() > restarted,
        "{job}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tickers_on_one_backend_never_fire_a_slot_twice() -> anyhow::Result<()> {
    // GIVEN two server processes on one backend (one table and queue on AWS, one database file
    // embedded), each ticking 4 times a second, and a job due every second
    let scn: Scenario = scenario_with(fast_ticks)?;
    let sibling = scn.server.start_sibling()?;
    let a = scn.a();
    let created = create(
        &a,
        json!({"name": "contended", "schedule": {"everySeconds": 1}, "message": "hello"}),
    )
    .await?;
    let id = id_of(&created);

    // WHEN 5 slots pass
    let job = job_until(&a, &id, Duration::from_secs(30), |j| runs(j).len() >= 5).await?;
    assert_eq!(delete(&a, &id).await?, StatusCode::NO_CONTENT);
    drop(sibling);

    // THEN every slot was claimed once: no slot listed twice, no run listed twice
    let entries = runs(&job);
    let slots: HashSet<u64> = entries.iter().filter_map(|r| r["dueAt"].as_u64()).collect();
    assert_eq!(
        slots.len(),
        entries.len(),
        "a slot was claimed twice: {job}"
    );
    let run_ids: Vec<&str> = entries.iter().filter_map(|r| r["runId"].as_str()).collect();
    let unique: HashSet<&&str> = run_ids.iter().collect();
    assert_eq!(unique.len(), run_ids.len(), "{job}");
    // AND each slot fired one model call at most
    let calls = scn.mock.model_requests_for("hello")?.len();
    assert!(
        calls <= entries.len() + 1,
        "{calls} model calls for {} slots",
        entries.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_ticker_at_random_moments_never_fires_a_slot_twice_or_loses_a_fire()
-> anyhow::Result<()> {
    // GIVEN a job every 2 s, and short leases and visibility so a killed fire comes back quickly
    let mut scn = scenario_with(|o| {
        fast_ticks(o)
            .env("AGENTLANE_LOCK_LEASE_MS", "900")
            .env("AGENTLANE_VISIBILITY_TIMEOUT_MS", "900")
    })?;
    let created = create(
        &scn.a(),
        json!({"name": "crashy", "schedule": {"everySeconds": 2}, "message": "hello"}),
    )
    .await?;
    let id = id_of(&created);
    let created_at = created["createdAt"].as_u64().unwrap_or_default();

    // WHEN for ~12 s the server is killed (SIGKILL) at random moments, 0.3–2.5 s apart, and
    // restarted on the same data
    let mut rng = now_ms() | 1;
    let mut kills = 0;
    while now_ms() < created_at + 12_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        tokio::time::sleep(Duration::from_millis(300 + rng % 2_200)).await;
        scn.server.kill_hard();
        scn.server.restart()?;
        kills += 1;
    }

    // THEN once it runs undisturbed, the job goes on: two more fires end ok and none is left
    // in flight
    let a = scn.a();
    let calm = now_ms();
    let job = job_until(&a, &id, Duration::from_secs(60), |j| {
        let listed = runs(j);
        let settled = listed
            .iter()
            .filter(|f| f["runId"].is_string())
            .all(|f| f["status"] != "queued" && f["status"] != "running");
        let ok_since_calm = listed
            .iter()
            .filter(|f| f["status"] == "ok")
            .filter(|f| f["firedAt"].as_u64().unwrap_or_default() >= calm)
            .count();
        settled && ok_since_calm >= 2
    })
    .await?;
    assert_eq!(delete(&a, &id).await?, StatusCode::NO_CONTENT);
    let mut listed = runs(&job);
    listed.reverse();
    let statuses: Vec<&str> = listed.iter().filter_map(|f| f["status"].as_str()).collect();
    eprintln!("cron crash: {kills} kills, fires {statuses:?}");

    // AND no slot was fired (or skipped) twice, every slot is on the schedule's grid
    let due: Vec<u64> = listed.iter().filter_map(|f| f["dueAt"].as_u64()).collect();
    let distinct: HashSet<&u64> = due.iter().collect();
    assert_eq!(distinct.len(), due.len(), "a slot listed twice: {job}");
    assert!(
        due.iter()
            .all(|d| *d > created_at && (d - created_at) % 2_000 == 0),
        "{job}"
    );
    // AND every fire is its own run in its own session, ended, and fires never overlapped
    let mut sessions = HashSet::new();
    let mut last_end = 0;
    for fire in listed.iter().filter(|f| f["runId"].is_string()) {
        let run_id = fire["runId"].as_str().unwrap_or_default();
        assert_eq!(fire["sessionKey"], format!("cron:{id}:{run_id}"), "{job}");
        assert!(sessions.insert(run_id.to_owned()), "{job}");
        let run = a.wait_done(run_id, LONG).await?;
        assert!(run.status.is_terminal(), "{run:?}");
        assert_eq!(
            fire["status"],
            serde_json::to_value(run.status)?,
            "the job's record agrees with the run: {job}"
        );
        let fired = fire["firedAt"].as_u64().unwrap_or_default();
        assert!(fired >= last_end, "overlapped the previous fire: {job}");
        last_end = fire["endedAt"].as_u64().unwrap_or(u64::MAX);
    }
    Ok(())
}

/// A scenario whose server reads `toml` as its config file (kept in the returned directory).
fn configured(toml: &str) -> anyhow::Result<(Scenario, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentlane.toml");
    std::fs::write(&config, toml)?;
    let path = config.display().to_string();
    let scn = scenario_with(|o| fast_ticks(o).env("AGENTLANE_CONFIG", path))?;
    Ok((scn, dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_timeouts_are_held_to_the_run_limits_of_a_turn() -> anyhow::Result<()> {
    // GIVEN a deployment allowing runs of at most 60 s, none unlimited
    let (scn, _dir) =
        configured("[limits]\nmax_run_timeout_seconds = 60\nallow_unlimited_runs = false\n")?;
    let a = scn.a();
    let body_with = |timeout: u64| {
        json!({"name": "bounded", "schedule": {"everySeconds": 3600}, "message": "hello",
               "timeoutSeconds": timeout})
    };

    // WHEN jobs ask for no limit, an hour or a week, THEN each is refused as a turn would be
    for timeout in [0u64, 3_600, 604_800] {
        let (status, refused) = a
            .json(Method::POST, "/v1/cron/jobs", Some(body_with(timeout)))
            .await?;
        let (turn_status, turn) = a
            .json(
                Method::POST,
                "/v1/agent",
                Some(
                    json!({"sessionKey": "limits", "message": "hello", "timeoutSeconds": timeout}),
                ),
            )
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{timeout}: {refused}");
        assert_eq!(turn_status, StatusCode::BAD_REQUEST, "{timeout}: {turn}");
        assert_eq!(refused["error"]["code"], "invalid_request");
        assert_eq!(refused["error"], turn["error"], "{timeout}");
    }

    // AND a job within the limit is created, but cannot be edited past it
    let created = create(&a, body_with(60)).await?;
    let path = format!("/v1/cron/jobs/{}", id_of(&created));
    for timeout in [0u64, 61] {
        let (status, body) = a
            .json(
                Method::PATCH,
                &path,
                Some(json!({"timeoutSeconds": timeout})),
            )
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{timeout}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request");
    }
    let (_, kept) = job(&a, &id_of(&created)).await?;
    assert_eq!(kept["timeoutSeconds"], 60, "{kept}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_every_second_jobs_is_held_to_the_fire_budget() -> anyhow::Result<()> {
    // GIVEN tenant A may fire 6 jobs a minute (B keeps the default 60)
    let (scn, _dir) = configured(&format!(
        "[limits.tenants.{}]\ncron_fires_per_minute = 6\n",
        agentlane_tests::TENANT_A.name
    ))?;
    let (a, b) = (scn.a(), scn.b());

    // WHEN A creates 10 jobs firing every second, and B one
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..10 {
        let created = create(
            &a,
            json!({"name": format!("flood-{i}"), "schedule": {"everySeconds": 1},
                   "message": "hello, flood"}),
        )
        .await?;
        ids.push(id_of(&created));
    }
    let other = id_of(
        &create(
            &b,
            json!({"name": "steady", "schedule": {"everySeconds": 1}, "message": "hello, steady"}),
        )
        .await?,
    );
    // ... for ~6 s
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut jobs = Vec::new();
    for id in &ids {
        jobs.push(job(&a, id).await?.1);
        delete(&a, id).await?;
    }
    let elapsed = started.elapsed();
    let (_, steady) = job(&b, &other).await?;
    delete(&b, &other).await?;

    // THEN A fired its bucket (6) and at most one refill a 10 s, however many slots came due
    let fired: usize = jobs
        .iter()
        .map(|j| runs(j).iter().filter(|r| r["runId"].is_string()).count())
        .sum();
    let allowed = 6 + 1 + usize::try_from(elapsed.as_secs() / 10).unwrap_or(0);
    assert!(
        (6..=allowed).contains(&fired),
        "{fired} fires in {elapsed:?} (at most {allowed})"
    );
    // AND the rest are listed skipped, saying why
    let over: Vec<Value> = jobs
        .iter()
        .flat_map(runs)
        .filter(|r| {
            r["error"]
                .as_str()
                .is_some_and(|e| e.contains("cron fire budget (6 per minute)"))
        })
        .collect();
    // (at least once for each job that never fired: 10 jobs, at most 7 fires; a busy emulator
    // claims fewer slots in 6 s, so no more is promised)
    assert!(
        over.len() >= 10usize.saturating_sub(fired),
        "{} skipped over the budget",
        over.len()
    );
    assert!(
        over.iter()
            .all(|r| r["status"] == "skipped" && r.get("runId").is_none())
    );
    // AND the model saw no more fires than were listed
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(scn.mock.model_requests_for("hello, flood")?.len() <= fired);
    // AND the other tenant's job fired on, untouched by A's budget
    let steady_fires = runs(&steady)
        .iter()
        .filter(|r| r["runId"].is_string())
        .count();
    assert!(steady_fires >= 3, "{steady}");
    assert!(
        runs(&steady)
            .iter()
            .all(|r| !r["error"].as_str().unwrap_or_default().contains("budget")),
        "{steady}"
    );
    Ok(())
}

/// Issue 23.6: a `run now` once stayed `queued` for 30 s on the AWS backend right after another
/// job of the tenant was deleted. Each round deletes a job that keeps firing (its fires still
/// in flight run to their end) and at once fires another job of the tenant by hand: the manual
/// fire must be picked up promptly and end `ok`, every round. (Not reproduced: 15 rounds on the
/// emulator each picked up in < 0.2 s. A manual fire shares nothing with the deleted job: a
/// fresh session and lane, its own idempotency key and dedup id; a lost enqueue is sent again by
/// the ticker 5 s after the fire. 30 s is exactly the worker's visibility timeout: what leaves
/// a delivered turn invisible that long was a pickup that returned an error or `Abandoned`
/// (then left to its visibility timeout), e.g. a transient emulator error on the first
/// delivery; such a pickup now releases the lock and comes back after the runner's
/// `failed_pickup_pause`, 5 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_right_after_another_job_is_deleted_is_picked_up_at_once() -> anyhow::Result<()> {
    let scn = scenario_with(fast_ticks)?;
    let a = scn.a();
    let manual = id_of(
        &create(
            &a,
            json!({"name": "on-demand", "schedule": {"everySeconds": 3600}, "message": "hello, on demand"}),
        )
        .await?,
    );
    for round in 0..3 {
        // GIVEN a job firing every second, seen firing
        let busy = id_of(
            &create(
                &a,
                json!({"name": format!("busy-{round}"), "schedule": {"everySeconds": 1},
                       "message": "hello, busy"}),
            )
            .await?,
        );
        job_until(&a, &busy, Duration::from_secs(20), |j| {
            runs(j).iter().any(|r| r["runId"].is_string())
        })
        .await?;

        // WHEN it is deleted and the other job is fired by hand right away
        assert_eq!(delete(&a, &busy).await?, StatusCode::NO_CONTENT);
        let (status, fired) = a
            .json(Method::POST, &format!("/v1/cron/jobs/{manual}/run"), None)
            .await?;
        assert_eq!(status, StatusCode::ACCEPTED, "{fired}");
        let run_id = fired["runId"].as_str().unwrap_or_default().to_owned();

        // THEN its run is picked up within a few seconds (not left queued), and ends ok
        let started = Instant::now();
        let picked = a
            .poll_run(&run_id, Duration::from_secs(10), "pickup", |r| {
                r.status != RunStatus::Queued
            })
            .await?;
        assert_ne!(picked.status, RunStatus::Queued, "round {round}");
        let done = a.wait_done(&run_id, LONG).await?;
        assert_eq!(done.status, RunStatus::Ok, "round {round}: {done:?}");
        note_pickup(round, started.elapsed());
    }
    // AND the job lists every manual fire ok
    let job = job_until(&a, &manual, Duration::from_secs(20), |j| {
        with_status(j, "ok").len() >= 3
    })
    .await?;
    assert!(runs(&job).iter().all(|r| r["manual"] == true), "{job}");
    Ok(())
}

/// How long a round's pickup took, on the test's output (read when the scenario fails).
fn note_pickup(round: usize, took: Duration) {
    eprintln!("run-now round {round}: picked up in {took:?}");
}
