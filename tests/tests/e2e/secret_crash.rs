//! `kill -9` while a secret is being replaced (issue 42): after a restart on the same data
//! directory (the same table on AWS) the secret a run sends is exactly one of the values that
//! were written, whole (it opens, it is not a mix of two writes), its version matches that
//! write, and no acknowledged replacement was lost.

use crate::support::{LONG, scenario_with};
use agentlane_core::RunStatus;
use agentlane_core::tenant_secret::MAX_SECRET_VALUE_BYTES;
use agentlane_tests::Client;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use reqwest::Method;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "rotating";
/// Client tasks replacing the secret at once.
const WRITERS: usize = 4;
/// Kill, restart, check; this many times.
const ROUNDS: usize = 6;
/// Replacements acknowledged in a round before the kill comes.
const ACKED_BEFORE_KILL: usize = 40;

/// Every `Authorization` header the receiver got.
type Seen = Arc<Mutex<Vec<String>>>;

async fn record(State(seen): State<Seen>, headers: HeaderMap) -> (StatusCode, String) {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    seen.lock().unwrap_or_else(|e| e.into_inner()).push(auth);
    (StatusCode::OK, json!({"received": true}).to_string())
}

async fn receiver() -> anyhow::Result<(Seen, String)> {
    let seen = Seen::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/record", listener.local_addr()?);
    let app = Router::new()
        .route("/record", post(record))
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    Ok((seen, url))
}

/// The value of write `i` of `writer` in `round`: distinct from every other (its tag), of a
/// length that changes from one write to the next (a few bytes to the 16 KiB maximum), padded
/// with a letter of its own, so a value made of two writes cannot pass for either.
fn value(round: usize, writer: usize, i: usize) -> String {
    let tag = format!("r{round}-w{writer}-i{i}:");
    let len = match (i + writer) % 4 {
        0 => 0,
        1 => 100,
        2 => 4_000,
        _ => MAX_SECRET_VALUE_BYTES - 200,
    } + (i * 37 + writer * 11) % 150;
    let letter = char::from(b'a' + u8::try_from((i + writer) % 26).unwrap_or(0));
    let mut out = tag;
    while out.len() < len {
        out.push(letter);
    }
    out
}

/// What the writers saw: the version each acknowledged value got, and every value sent
/// (acknowledged or not: one cut off by the kill may have been stored).
#[derive(Default)]
struct Writes {
    acked: HashMap<String, u64>,
    sent: Vec<String>,
}

/// Replaces the secret in a tight loop until a request gets no answer (the server died).
async fn writer(client: Client, round: usize, id: usize, writes: Arc<Mutex<Writes>>) {
    for i in 0.. {
        let v = value(round, id, i);
        writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sent
            .push(v.clone());
        let answer = client
            .json(
                Method::PUT,
                &format!("/v1/secrets/{SECRET}"),
                Some(json!({ "value": v })),
            )
            .await;
        match answer {
            Ok((StatusCode::OK, body)) => {
                let version = body["version"].as_u64().unwrap_or(0);
                assert!(version > 1, "a replacement: {body}");
                writes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .acked
                    .insert(v, version);
            }
            // Refused (e.g. the server stopping): not acknowledged; go on while it answers.
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// One turn of the agent whose tool sends the secret; the `Authorization` it sent.
async fn sent_by_a_run(client: &Client, seen: &Seen, session: &str) -> anyhow::Result<String> {
    let before = seen.lock().unwrap_or_else(|e| e.into_inner()).len();
    let accepted = client
        .agent_with(
            json!({"sessionKey": session, "agentId": "sender", "message": "send the rotating secret"}),
        )
        .await?;
    let run = client.wait_done(&accepted.run_id, LONG).await?;
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    let (_, view) = client
        .json(Method::GET, &format!("/v1/runs/{}", run.run_id), None)
        .await?;
    assert!(
        !view["warnings"].to_string().contains(SECRET),
        "the secret did not open: {view}"
    );
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(seen.len(), before + 1, "the tool was called once");
    Ok(seen[before].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_replaced_while_the_server_is_killed_is_the_old_or_a_new_value_never_torn()
-> anyhow::Result<()> {
    // GIVEN a secret, and an agent whose HTTP tool sends it to a receiver that records it
    let (seen, url) = receiver().await?;
    let mut scn = scenario_with(|o| o.env("AGENTLANE_HTTP_FETCH_ALLOW", "127.0.0.1"))?;
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "send the rotating secret", "hasToolResult": true},
               "response": {"content": "Sent."}}),
        json!({"match": {"userMessage": "send the rotating secret", "hasToolResult": false},
               "response": {"content": "Sending.", "toolCalls": [
                   {"id": "call_send", "name": "send_secret", "arguments": {}}]}}),
    ])?;
    let a = scn.a();
    let first = value(0, WRITERS, 0);
    let (status, body) = a
        .json(
            Method::PUT,
            &format!("/v1/secrets/{SECRET}"),
            Some(json!({ "value": first })),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let agent = json!({
        "agentId": "sender",
        "tools": {"http": [{
            "name": "send_secret",
            "description": "Sends the secret to the endpoint.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": false},
            "url": url,
            "headers": {"Authorization": {"secret": SECRET}}
        }]}
    });
    let (status, body) = a.json(Method::POST, "/v1/agents", Some(agent)).await?;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(sent_by_a_run(&a, &seen, "before").await?, first);

    let mut acked_total = 1_u64;
    let mut max_acked_version = 1_u64;
    let mut sent_ever: Vec<String> = vec![first];
    for round in 1..=ROUNDS {
        // WHEN several clients replace it in a tight loop, with values of different lengths,
        // and the server is killed with SIGKILL in the middle
        let writes = Arc::new(Mutex::new(Writes::default()));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|id| tokio::spawn(writer(scn.a(), round, id, writes.clone())))
            .collect();
        let started = Instant::now();
        while writes.lock().unwrap_or_else(|e| e.into_inner()).acked.len() < ACKED_BEFORE_KILL {
            assert!(
                started.elapsed() < LONG,
                "round {round}: the writers got too few answers"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // A different moment of the writes each round.
        tokio::time::sleep(Duration::from_millis(u64::try_from(round * 7 % 20)?)).await;
        scn.server.kill_hard();
        for task in tasks {
            task.await?;
        }
        let writes = std::mem::take(&mut *writes.lock().unwrap_or_else(|e| e.into_inner()));
        let unanswered = writes.sent.len() - writes.acked.len();
        acked_total += u64::try_from(writes.acked.len())?;
        max_acked_version = writes
            .acked
            .values()
            .copied()
            .fold(max_acked_version, u64::max);
        sent_ever.extend(writes.sent.iter().cloned());

        // AND it starts again on the same data
        scn.server.restart()?;
        let a = scn.a();

        // THEN a run sends one of the values written, whole
        let sent = sent_by_a_run(&a, &seen, &format!("after-{round}")).await?;
        let (status, meta) = a
            .json(Method::GET, &format!("/v1/secrets/{SECRET}"), None)
            .await?;
        assert_eq!(status, StatusCode::OK, "{meta}");
        let version = meta["version"].as_u64().unwrap_or(0);
        assert!(
            sent_ever.contains(&sent),
            "round {round}: the run sent a value nobody wrote ({} bytes, starting {:?})",
            sent.len(),
            sent.chars().take(40).collect::<String>()
        );
        // AND its version is that write's: the last acknowledged one, or one cut off by the
        // kill that was stored after it
        match writes.acked.get(&sent) {
            Some(&acked_version) => assert_eq!(
                (version, acked_version),
                (max_acked_version, max_acked_version),
                "round {round}: the value sent is an acknowledged write, so it is the last one"
            ),
            None => {
                assert!(
                    writes.sent.contains(&sent),
                    "round {round}: a value of an earlier round ({:?}) came back",
                    sent.chars().take(40).collect::<String>()
                );
                assert!(
                    version > max_acked_version,
                    "round {round}: a write cut off by the kill is stored, so after every \
                     acknowledged one (version {version}, acknowledged up to {max_acked_version})"
                );
            }
        }
        // AND no acknowledged replacement was lost
        assert!(
            version >= acked_total,
            "round {round}: version {version} after {acked_total} acknowledged writes"
        );
        eprintln!(
            "round {round}: {} acknowledged, {unanswered} unanswered; version {version}, \
             the value sent {} bytes ({})",
            writes.acked.len(),
            sent.len(),
            if writes.acked.contains_key(&sent) {
                "acknowledged"
            } else {
                "cut off"
            }
        );
        max_acked_version = version;
    }
    Ok(())
}
