//! `GET /v1/sessions`, `GET /v1/runs?sessionKey=` and `DELETE /v1/sessions/{sessionKey}`.

use crate::common::*;
use agentlane_api::ApiConfig;
use agentlane_core::{Message, RunStatus, SessionKey};
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::Value;

impl Harness {
    async fn delete(&self, path: &str, key: &str) -> Reply {
        self.send(Self::request(
            Method::DELETE,
            path,
            Some(key),
            Body::empty(),
        ))
        .await
    }
}

fn keys_in(reply: &Reply) -> Vec<String> {
    reply.json["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionKey"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn sessions_list_newest_activity_first_in_pages_per_tenant() {
    // GIVEN three sessions of acme, one of beta
    let h = Harness::new().await;
    for key in ["a", "b", "c"] {
        h.submit(ACME_KEY, key, "hi").await;
        h.clock.advance(10);
    }
    h.submit(BETA_KEY, "theirs", "hi").await;
    // AND "a" sees activity last
    h.submit(ACME_KEY, "a", "again").await;

    // WHEN acme lists two at a time
    let first = h.get("/v1/sessions?limit=2", ACME_KEY).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(keys_in(&first), ["a", "c"]);
    assert_eq!(first.json["sessions"][0]["agentId"], "main");
    assert_eq!(first.json["sessions"][0]["runsAccepted"], 2);
    let cursor = first.json["next"].as_str().unwrap().to_owned();
    let second = h
        .get(&format!("/v1/sessions?limit=2&cursor={cursor}"), ACME_KEY)
        .await;

    // THEN the rest follows, and the list ends
    assert_eq!(keys_in(&second), ["b"]);
    assert_eq!(second.json["next"], Value::Null);
    // AND beta sees only its own
    let theirs = h.get("/v1/sessions", BETA_KEY).await;
    assert_eq!(keys_in(&theirs), ["theirs"]);
}

#[tokio::test]
async fn sessions_filter_by_status_and_agent_and_refuse_bad_queries() {
    let h = Harness::new().await;
    h.submit(ACME_KEY, "idle", "hi").await;
    let busy = h.submit_run(ACME_KEY, "busy", "hi").await;
    let (_fence, _run) = h.start(&acme(), &busy, vec![]).await;

    let processing = h.get("/v1/sessions?status=processing", ACME_KEY).await;
    assert_eq!(keys_in(&processing), ["busy"]);
    let idle = h
        .get("/v1/sessions?status=idle&agentId=main", ACME_KEY)
        .await;
    assert_eq!(keys_in(&idle), ["idle"]);
    let other = h.get("/v1/sessions?agentId=helper", ACME_KEY).await;
    assert_eq!(keys_in(&other), Vec::<String>::new());

    h.get("/v1/sessions?status=sleeping", ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
    h.get("/v1/sessions?cursor=nonsense", ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
    h.get("/v1/sessions?limit=0", ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn a_sessions_runs_list_newest_first_by_status_in_pages() {
    // GIVEN three runs of a session, the first finished
    let h = Harness::new().await;
    let runs: Vec<String> = vec![
        h.submit_run(ACME_KEY, "main", "one").await,
        h.submit_run(ACME_KEY, "main", "two").await,
        h.submit_run(ACME_KEY, "main", "three").await,
    ];
    h.finish(&acme(), &runs[0], RunStatus::Ok, vec![]).await;
    let ids = |reply: &Reply| -> Vec<String> {
        reply.json["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["runId"].as_str().unwrap().to_owned())
            .collect()
    };

    let all = h.get("/v1/runs?sessionKey=main", ACME_KEY).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(
        ids(&all),
        [runs[2].clone(), runs[1].clone(), runs[0].clone()]
    );
    assert_eq!(all.json["runs"][2]["status"], "ok");
    assert_eq!(all.json["runs"][0].get("tenant"), None);
    assert_eq!(all.json["runs"][0].get("requestFingerprint"), None);
    assert_eq!(all.json["next"], Value::Null);

    let ok = h.get("/v1/runs?sessionKey=main&status=ok", ACME_KEY).await;
    assert_eq!(ids(&ok), [runs[0].clone()]);
    let page = h.get("/v1/runs?sessionKey=main&limit=2", ACME_KEY).await;
    assert_eq!(ids(&page), [runs[2].clone(), runs[1].clone()]);
    assert_eq!(page.json["next"], 1);
    let rest = h
        .get("/v1/runs?sessionKey=main&limit=2&before=1", ACME_KEY)
        .await;
    assert_eq!(ids(&rest), [runs[0].clone()]);

    // AND another tenant sees none of them; a missing key is refused
    let theirs = h.get("/v1/runs?sessionKey=main", BETA_KEY).await;
    assert_eq!(ids(&theirs), Vec::<String>::new());
    h.get("/v1/runs", ACME_KEY)
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn deleting_a_session_removes_it_and_everything_of_it() {
    // GIVEN a session with a finished run (events, transcript) and a queued one
    let h = Harness::new().await;
    let done = h.submit_run(ACME_KEY, "user/1", "hi").await;
    let (fence, _) = h.start(&acme(), &done, vec![event(0, "hello")]).await;
    h.end_ok(
        &fence,
        &acme(),
        &done,
        vec![entry(1, &done, Message::user("hi"))],
    )
    .await;
    let queued = h.submit_run(ACME_KEY, "user/1", "again").await;
    h.submit(BETA_KEY, "user/1", "beta's own").await;

    // WHEN acme deletes it
    let reply = h.delete("/v1/sessions/user%2F1", ACME_KEY).await;

    // THEN 204, and nothing of it can be read any more
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    h.get("/v1/sessions/user%2F1", ACME_KEY)
        .await
        .assert_error(404, "not_found");
    for run in [&done, &queued] {
        h.get(&format!("/v1/runs/{run}"), ACME_KEY)
            .await
            .assert_error(404, "not_found");
    }
    let runs = h.get("/v1/runs?sessionKey=user%2F1", ACME_KEY).await;
    assert_eq!(runs.json["runs"], serde_json::json!([]));
    let listed = h.get("/v1/sessions", ACME_KEY).await;
    assert_eq!(keys_in(&listed), Vec::<String>::new());
    // AND a second delete is a 404
    h.delete("/v1/sessions/user%2F1", ACME_KEY)
        .await
        .assert_error(404, "not_found");
    // AND the other tenant's session of the same key is untouched
    let theirs = h.get("/v1/sessions/user%2F1", BETA_KEY).await;
    assert_eq!(theirs.status, StatusCode::OK);
    assert!(
        h.store
            .get_session(
                &agentlane_core::TenantId::new("beta"),
                &SessionKey::new("user/1")
            )
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn deleting_a_session_aborts_its_running_turn_and_answers_busy_while_it_holds_on() {
    // GIVEN a running turn that holds the session's lock and does not stop
    let h = Harness::with_config(ApiConfig {
        reset_wait_ms: 200,
        ..ApiConfig::default()
    })
    .await;
    let run = h.submit_run(ACME_KEY, "main", "hi").await;
    let (fence, _) = h.start(&acme(), &run, vec![]).await;

    // WHEN the session is deleted
    let refused = h.delete("/v1/sessions/main", ACME_KEY).await;

    // THEN the turn was asked to abort, and the delete answers busy
    refused.assert_error(409, "session_busy");
    assert!(h.run(&acme(), &run).await.abort_requested);
    // AND once the turn has stopped, the delete goes through
    h.end_ok(&fence, &acme(), &run, vec![]).await;
    let reply = h.delete("/v1/sessions/main", ACME_KEY).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}
