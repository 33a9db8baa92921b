//! `/v1/cron/jobs` over the real router and the SQLite backend: what a client sees when it
//! manages jobs (the ticker itself is exercised in the scheduler and end-to-end tests).

use crate::common::{ACME_KEY, BETA_KEY, Harness, T0, acme};
use agentlane_api::ApiConfig;
use axum::body::Body;
use axum::http::Method;
use serde_json::{Value, json};
use std::time::Duration;

fn every(seconds: u64) -> Value {
    json!({"name": "pulse", "schedule": {"everySeconds": seconds}, "message": "ping"})
}

async fn delete(h: &Harness, path: &str, key: &str) -> crate::common::Reply {
    h.send(Harness::request(
        Method::DELETE,
        path,
        Some(key),
        Body::empty(),
    ))
    .await
}

#[tokio::test]
async fn a_created_job_shows_its_schedule_and_next_run() {
    // GIVEN a tenant
    let h = Harness::new().await;

    // WHEN it creates a job firing every 90 s, and a 6-field cron job in Paris time
    let created = h.post("/v1/cron/jobs", ACME_KEY, every(90)).await;
    let paris = h
        .post(
            "/v1/cron/jobs",
            ACME_KEY,
            json!({"name": "morning", "schedule": {"cron": "30 0 9 * * *", "tz": "Europe/Paris"},
                   "message": "brief me", "timeoutSeconds": 120,
                   "delivery": {"webhook": {"url": "https://hooks.example/x", "token": "s3cret-token"}}}),
        )
        .await;

    // THEN both answer 201 with the job: next run 90 s after creation; 09:00:30 Paris (UTC+2
    // in June: T0 is 2025-06-15T15:06:40Z, so the next is the 16th at 07:00:30 UTC)
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    let job = &created.json;
    assert!(job["jobId"].as_str().unwrap().starts_with("job_"));
    assert_eq!(job["schedule"], json!({"everySeconds": 90}));
    assert_eq!(job["enabled"], true);
    assert_eq!(job["nextRunAt"], T0 + 90_000);
    assert_eq!(job["lastRuns"], json!([]));
    assert_eq!(job["consecutiveErrors"], 0);
    assert_eq!(job["createdAt"], T0);
    assert_eq!(paris.status.as_u16(), 201, "{}", paris.text);
    assert_eq!(paris.json["nextRunAt"], 1_750_057_230_000u64);
    // AND the webhook token is never shown
    assert_eq!(
        paris.json["delivery"],
        json!({"webhook": {"url": "https://hooks.example/x", "hasToken": true}})
    );
    assert!(!paris.text.contains("s3cret-token"));

    // AND the list and the job read back the same
    let id = job["jobId"].as_str().unwrap();
    let listed = h.get("/v1/cron/jobs", ACME_KEY).await;
    assert_eq!(listed.json["jobs"].as_array().unwrap().len(), 2);
    let read = h.get(&format!("/v1/cron/jobs/{id}"), ACME_KEY).await;
    assert_eq!(read.json, created.json);
}

#[tokio::test]
async fn bad_jobs_get_a_400_naming_the_problem() {
    let h = Harness::new().await;
    let cases = [
        (
            json!({"name": "x", "schedule": {"cron": "61 * * * *"}, "message": "m"}),
            "invalid cron expression",
        ),
        (
            json!({"name": "x", "schedule": {"cron": "* * *"}, "message": "m"}),
            "expected 5 fields",
        ),
        (
            json!({"name": "x", "schedule": {"cron": "0 9 * * *", "tz": "Mars/Base"}, "message": "m"}),
            "unknown time zone",
        ),
        (
            json!({"name": "x", "schedule": {"at": "2020-01-01T00:00:00Z"}, "message": "m"}),
            "in the past",
        ),
        (
            json!({"name": "x", "schedule": {"at": "next tuesday"}, "message": "m"}),
            "RFC 3339",
        ),
        (
            json!({"name": "x", "schedule": {"everySeconds": 0}, "message": "m"}),
            "at least 1",
        ),
        (
            json!({"name": "x", "schedule": {"everySeconds": -5}, "message": "m"}),
            "whole number",
        ),
        (
            json!({"name": "x", "schedule": {"everySeconds": 5, "at": "2030-01-01T00:00:00Z"}, "message": "m"}),
            "more than one kind",
        ),
        (
            json!({"name": "x", "schedule": {"every": 5}, "message": "m"}),
            "unknown field `every`",
        ),
        (
            json!({"name": "x", "schedule": {"everySeconds": 5, "tz": "UTC"}, "message": "m"}),
            "tz only goes with `cron`",
        ),
        (
            json!({"name": "x", "schedule": {}, "message": "m"}),
            "needs one of",
        ),
        (
            json!({"name": "x", "schedule": {"everySeconds": 5}, "message": "m", "colour": "red"}),
            "unknown field `colour`",
        ),
        (
            json!({"name": "", "schedule": {"everySeconds": 5}, "message": "m"}),
            "name must not be empty",
        ),
        (
            json!({"name": "x", "schedule": {"everySeconds": 5}, "message": ""}),
            "message must not be empty",
        ),
        (
            json!({"name": "x", "schedule": {"everySeconds": 5}, "message": "m", "timeoutSeconds": 999_999_999}),
            "timeoutSeconds",
        ),
        (
            json!({"name": "x", "schedule": {"everySeconds": 5}, "message": "m", "delivery": {"webhook": {"url": "ftp://x"}}}),
            "delivery.webhook.url",
        ),
        (
            json!({"schedule": {"everySeconds": 5}, "message": "m"}),
            "name",
        ),
    ];
    for (body, needle) in cases {
        let reply = h.post("/v1/cron/jobs", ACME_KEY, body.clone()).await;
        reply.assert_error(400, "invalid_request");
        let message = reply.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    // AND nothing was created
    let listed = h.get("/v1/cron/jobs", ACME_KEY).await;
    assert_eq!(listed.json["jobs"], json!([]));
}

#[tokio::test]
async fn another_tenant_sees_nothing() {
    // GIVEN a job of acme
    let h = Harness::new().await;
    let created = h.post("/v1/cron/jobs", ACME_KEY, every(60)).await;
    let id = created.json["jobId"].as_str().unwrap();
    let path = format!("/v1/cron/jobs/{id}");

    // THEN beta lists nothing and every access to acme's id is a 404
    assert_eq!(
        h.get("/v1/cron/jobs", BETA_KEY).await.json["jobs"],
        json!([])
    );
    h.get(&path, BETA_KEY).await.assert_error(404, "not_found");
    h.patch(&path, BETA_KEY, json!({"enabled": false}))
        .await
        .assert_error(404, "not_found");
    h.post(&format!("{path}/run"), BETA_KEY, json!({}))
        .await
        .assert_error(404, "not_found");
    delete(&h, &path, BETA_KEY)
        .await
        .assert_error(404, "not_found");
    // AND acme's job is untouched
    let read = h.get(&path, ACME_KEY).await;
    assert_eq!(read.json["enabled"], true);
    assert_eq!(read.json["lastRuns"], json!([]));
}

#[tokio::test]
async fn the_per_tenant_cap_is_a_409_and_frees_up_on_delete() {
    let h = Harness::with_config(ApiConfig {
        max_cron_jobs: 2,
        ..ApiConfig::default()
    })
    .await;
    let first = h.post("/v1/cron/jobs", ACME_KEY, every(60)).await;
    h.post("/v1/cron/jobs", ACME_KEY, every(60)).await;
    let third = h.post("/v1/cron/jobs", ACME_KEY, every(60)).await;
    third.assert_error(409, "conflict");
    assert!(third.text.contains("cap is 2"), "{}", third.text);
    // another tenant has its own cap
    assert_eq!(
        h.post("/v1/cron/jobs", BETA_KEY, every(60))
            .await
            .status
            .as_u16(),
        201
    );
    let id = first.json["jobId"].as_str().unwrap();
    assert_eq!(
        delete(&h, &format!("/v1/cron/jobs/{id}"), ACME_KEY)
            .await
            .status
            .as_u16(),
        204
    );
    assert_eq!(
        h.post("/v1/cron/jobs", ACME_KEY, every(60))
            .await
            .status
            .as_u16(),
        201
    );
}

#[tokio::test]
async fn patch_disables_and_reenabling_does_not_replay_missed_slots() {
    let h = Harness::new().await;
    let created = h.post("/v1/cron/jobs", ACME_KEY, every(10)).await;
    let path = format!("/v1/cron/jobs/{}", created.json["jobId"].as_str().unwrap());

    // WHEN it is disabled
    let off = h.patch(&path, ACME_KEY, json!({"enabled": false})).await;
    assert_eq!(off.json["enabled"], false);
    assert_eq!(off.json["nextRunAt"], Value::Null);

    // AND re-enabled 95 s later
    h.clock.advance(95_000);
    let on = h
        .patch(
            &path,
            ACME_KEY,
            json!({"enabled": true, "message": "pong", "name": "renamed"}),
        )
        .await;

    // THEN the next slot is the first after now (anchored at creation), the rest changed too
    assert_eq!(on.status.as_u16(), 200, "{}", on.text);
    assert_eq!(on.json["nextRunAt"], T0 + 100_000);
    assert_eq!(on.json["message"], "pong");
    assert_eq!(on.json["name"], "renamed");

    // AND a new schedule counts from now; a bad one is refused and changes nothing
    let moved = h
        .patch(&path, ACME_KEY, json!({"schedule": {"everySeconds": 60}}))
        .await;
    assert_eq!(moved.json["nextRunAt"], T0 + 95_000 + 60_000);
    h.patch(&path, ACME_KEY, json!({"schedule": {"cron": "bogus"}}))
        .await
        .assert_error(400, "invalid_request");
    h.patch(&path, ACME_KEY, json!({"nmae": "typo"}))
        .await
        .assert_error(400, "invalid_request");
    assert_eq!(
        h.get(&path, ACME_KEY).await.json["schedule"],
        json!({"everySeconds": 60})
    );
}

#[tokio::test]
async fn delete_answers_204_then_404() {
    let h = Harness::new().await;
    let created = h.post("/v1/cron/jobs", ACME_KEY, every(60)).await;
    let path = format!("/v1/cron/jobs/{}", created.json["jobId"].as_str().unwrap());
    assert_eq!(delete(&h, &path, ACME_KEY).await.status.as_u16(), 204);
    h.get(&path, ACME_KEY).await.assert_error(404, "not_found");
    delete(&h, &path, ACME_KEY)
        .await
        .assert_error(404, "not_found");
    h.get("/v1/cron/jobs/../../etc", ACME_KEY)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn run_now_fires_one_run_in_a_fresh_cron_session_listed_at_once() {
    // GIVEN a disabled job (manual runs do not need the schedule)
    let h = Harness::new().await;
    let mut body = every(3600);
    body["enabled"] = json!(false);
    body["timeoutSeconds"] = json!(30);
    let created = h.post("/v1/cron/jobs", ACME_KEY, body).await;
    let id = created.json["jobId"].as_str().unwrap().to_owned();

    // WHEN it is run now
    let fired = h
        .post(&format!("/v1/cron/jobs/{id}/run"), ACME_KEY, json!({}))
        .await;

    // THEN 202 with the run, in session cron:<jobId>:<runId>
    assert_eq!(fired.status.as_u16(), 202, "{}", fired.text);
    let run_id = fired.json["runId"].as_str().unwrap();
    assert_eq!(fired.json["sessionKey"], format!("cron:{id}:{run_id}"));

    // AND the run was accepted with the job's message, its deadline counted from the fire and
    // the stall cap of an explicit timeout
    let run = h.run(&acme(), run_id).await;
    assert_eq!(run.request.message, "ping");
    assert_eq!(run.request.deadline_at, Some(T0 + 30_000));
    assert_eq!(run.request.model_idle_timeout_ms, Some(60_000));
    // AND enqueued on its own lane
    let delivered = h
        .queue
        .receive(10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].message.body.run_id.as_str(), run_id);
    assert_eq!(
        delivered[0].message.lane.as_str(),
        format!("acme/cron:{id}:{run_id}")
    );

    // AND the job lists it as queued, manual, and its schedule is unchanged
    let job = h.get(&format!("/v1/cron/jobs/{id}"), ACME_KEY).await.json;
    assert_eq!(job["lastRuns"].as_array().unwrap().len(), 1);
    assert_eq!(job["lastRuns"][0]["runId"], run_id);
    assert_eq!(job["lastRuns"][0]["status"], "queued");
    assert_eq!(job["lastRuns"][0]["manual"], true);
    assert_eq!(job["lastRuns"][0]["firedAt"], T0);
    assert_eq!(job["enabled"], false);
}

#[tokio::test]
async fn a_passed_one_shot_cannot_be_reenabled_without_a_new_time() {
    // GIVEN a one-shot in a minute, disabled, and the minute passes
    let h = Harness::new().await;
    let created = h
        .post(
            "/v1/cron/jobs",
            ACME_KEY,
            json!({"name": "once", "schedule": {"at": "2025-06-15T15:07:40Z"}, "message": "m",
                   "enabled": false}),
        )
        .await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    let path = format!("/v1/cron/jobs/{}", created.json["jobId"].as_str().unwrap());
    h.clock.advance(120_000);

    // WHEN it is re-enabled THEN 400 says why; with a new time it works
    let reply = h.patch(&path, ACME_KEY, json!({"enabled": true})).await;
    reply.assert_error(400, "invalid_request");
    assert!(reply.text.contains("no time left"), "{}", reply.text);
    let ok = h
        .patch(
            &path,
            ACME_KEY,
            json!({"enabled": true, "schedule": {"at": "2025-06-15T16:00:00Z"}}),
        )
        .await;
    assert_eq!(ok.status.as_u16(), 200, "{}", ok.text);
    assert_eq!(ok.json["nextRunAt"], 1_750_003_200_000u64);
}

#[tokio::test]
async fn job_timeouts_meet_the_run_limits_of_a_turn() {
    // (max_run_timeout_seconds, allow_unlimited_runs)
    let settings = [(604_800, true), (604_800, false), (60, true), (60, false)];
    let timeouts = [0u64, 1, 60, 61, 3_600, 604_800, 604_801];
    for (max, unlimited) in settings {
        let h = Harness::with_config(ApiConfig {
            limits: agentlane_api::Limits {
                max_run_timeout_seconds: max,
                allow_unlimited_runs: unlimited,
                ..agentlane_api::Limits::default()
            },
            ..ApiConfig::default()
        })
        .await;
        let existing = h.post("/v1/cron/jobs", ACME_KEY, every(60)).await;
        assert_eq!(existing.status.as_u16(), 201, "{}", existing.text);
        let path = format!("/v1/cron/jobs/{}", existing.json["jobId"].as_str().unwrap());
        for t in timeouts {
            let allowed = if t == 0 { unlimited } else { t <= max };
            let case = format!("timeout {t} under max {max}, unlimited {unlimited}");
            // WHEN a turn, a new job and an edit ask for the timeout
            let turn = h
                .post(
                    "/v1/agent",
                    ACME_KEY,
                    json!({"sessionKey": "s", "message": "m", "timeoutSeconds": t}),
                )
                .await;
            let mut body = every(60);
            body["timeoutSeconds"] = json!(t);
            let created = h.post("/v1/cron/jobs", ACME_KEY, body).await;
            let edited = h.patch(&path, ACME_KEY, json!({"timeoutSeconds": t})).await;
            // THEN all three take it, or all three refuse it the same way
            if allowed {
                assert_eq!(turn.status.as_u16(), 202, "{case}: {}", turn.text);
                assert_eq!(created.status.as_u16(), 201, "{case}: {}", created.text);
                assert_eq!(created.json["timeoutSeconds"], t, "{case}");
                assert_eq!(edited.status.as_u16(), 200, "{case}: {}", edited.text);
                assert_eq!(edited.json["timeoutSeconds"], t, "{case}");
            } else {
                for reply in [&turn, &created, &edited] {
                    reply.assert_error(400, "invalid_request");
                    assert_eq!(
                        reply.json["error"]["message"], turn.json["error"]["message"],
                        "{case}"
                    );
                }
            }
        }
    }
}
