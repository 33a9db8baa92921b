//! Driving turns: one turn (submit, then `agent.wait` until it ends), calls that wait out
//! `429`s, and `--concurrency` clients running turns over sessions, never two of a session at
//! once.

use crate::api_client::{ApiClient, ApiError};
use anyhow::Context;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One finished turn as the client saw it.
pub(super) struct Turn {
    pub(super) session: usize,
    pub(super) run_id: String,
    pub(super) latency: Duration,
    pub(super) status: String,
}

/// A call that waits out `429`s (the tenant's request limit: its windows are one second long)
/// instead of failing: the untimed checks, and a server given by `--url`, are paced by it.
pub(super) async fn call_paced(
    client: &ApiClient,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let mut limited = 0u32;
    loop {
        match client.call(method.clone(), path, body.clone()).await {
            Err(ApiError::Status { response, .. })
                if response.status == reqwest::StatusCode::TOO_MANY_REQUESTS && limited < 120 =>
            {
                limited += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => return Ok(other?),
        }
    }
}

/// One turn: submit, then `agent.wait` until it ends.
pub(super) async fn one_turn(
    client: &ApiClient,
    session_key: &str,
    message: String,
    model: Option<&str>,
) -> anyhow::Result<(String, String)> {
    let mut body = json!({ "sessionKey": session_key, "message": message });
    if let Some(model) = model {
        body["model"] = json!(model);
    }
    let accepted = call_paced(client, Method::POST, "/v1/agent", Some(body)).await?;
    let run_id = accepted
        .get("runId")
        .and_then(Value::as_str)
        .context("no runId in the answer")?
        .to_owned();
    let reply = loop {
        match client.wait_until_done(&run_id, None).await {
            Err(ApiError::Status { response, .. })
                if response.status == reqwest::StatusCode::TOO_MANY_REQUESTS =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => break other?,
        }
    };
    let status = reply
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_owned();
    Ok((run_id, status))
}

/// Runs `counts[s]` turns on session `prefix{s}` for every `s`, with `concurrency` clients and
/// never two turns of a session in flight; the turns in completion order.
pub(super) async fn drive(
    client: &ApiClient,
    prefix: &str,
    counts: &[usize],
    concurrency: usize,
    model: Option<&str>,
) -> anyhow::Result<Vec<Turn>> {
    let ready: VecDeque<(usize, usize)> = counts
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, left)| left > 0)
        .collect();
    let total: usize = counts.iter().sum();
    let progress = crate::progress::bar(total as u64, &format!("{prefix}* turns"));
    let ready = Arc::new(Mutex::new(ready));
    let turns = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let mut clients = Vec::new();
    for _ in 0..concurrency {
        let (client, ready, turns) = (client.clone(), ready.clone(), turns.clone());
        let progress = progress.clone();
        let (model, prefix) = (model.map(str::to_owned), prefix.to_owned());
        clients.push(tokio::spawn(async move {
            loop {
                let next = ready
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pop_front();
                let Some((session, left)) = next else {
                    return Ok::<_, anyhow::Error>(());
                };
                let t = Instant::now();
                let (run_id, status) = one_turn(
                    &client,
                    &format!("{prefix}{session}"),
                    format!("turn {left} of session {session}"),
                    model.as_deref(),
                )
                .await?;
                turns
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Turn {
                        session,
                        run_id,
                        latency: t.elapsed(),
                        status,
                    });
                progress.inc(1);
                if left > 1 {
                    ready
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push_back((session, left - 1));
                }
            }
        }));
    }
    for c in clients {
        c.await.context("a client panicked")??;
    }
    progress.finish_and_clear();
    let turns = std::mem::take(&mut *turns.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(turns)
}
