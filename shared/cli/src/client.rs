//! Client commands: thin wrappers over the HTTP API ([`ApiClient`]) that print JSON (or text)
//! to stdout.

use crate::api_client::{ApiClient, Auth};
use crate::args::{AgentArgs, ClientArgs, EventsArgs, TranscriptArgs, WaitArgs};
use anyhow::{Context, bail};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::Duration;

/// The client the arguments name: `--api-key`, or the key `agentlane serve` wrote.
pub(crate) fn api(args: &ClientArgs) -> anyhow::Result<ApiClient> {
    let key = match &args.api_key {
        Some(k) => k.clone(),
        None => {
            let path = args.data_dir.join("api-key");
            std::fs::read_to_string(&path)
                .with_context(|| {
                    format!(
                        "no API key: pass --api-key or AGENTLANE_API_KEY, or run `agentlane serve` \
                         here first so it writes {}",
                        path.display()
                    )
                })?
                .trim()
                .to_owned()
        }
    };
    Ok(ApiClient::new(&args.url, Auth::Bearer(key)))
}

pub(crate) fn print(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

fn wait_exit(result: &Value) -> ExitCode {
    match result.get("status").and_then(Value::as_str) {
        Some("ok") => ExitCode::SUCCESS,
        // Paused: `agentlane runs approve|answer` it.
        Some("requires_action") => ExitCode::from(3),
        _ => ExitCode::FAILURE,
    }
}

/// The body of `POST /v1/agent` for `a`.
fn turn_body(a: &AgentArgs) -> Value {
    let mut body = json!({ "sessionKey": a.session, "message": a.message });
    if let Some(k) = &a.idempotency_key {
        body["idempotencyKey"] = json!(k);
    }
    if let Some(m) = &a.model {
        body["model"] = json!(m);
    }
    if let Some(t) = a.timeout_seconds {
        body["timeoutSeconds"] = json!(t);
    }
    if let Some(agent) = &a.agent {
        body["agentId"] = json!(agent);
    }
    body
}

pub async fn agent(a: AgentArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let accepted = api
        .call(Method::POST, "/v1/agent", Some(turn_body(&a)))
        .await?;
    print(&accepted);
    if !a.wait {
        return Ok(ExitCode::SUCCESS);
    }
    let run_id = accepted
        .get("runId")
        .and_then(Value::as_str)
        .context("the server answered without a runId")?
        .to_owned();
    let result = api.wait_until_done(&run_id, None).await?;
    let run = api
        .call(Method::GET, &format!("/v1/runs/{run_id}"), None)
        .await?;
    for payload in run
        .get("payloads")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(text) = payload.get("text").and_then(Value::as_str) {
            println!("\n{text}");
        }
    }
    if result.get("status").and_then(Value::as_str) != Some("ok") {
        print(&result);
    }
    Ok(wait_exit(&result))
}

pub async fn wait(a: WaitArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let within = Duration::from_millis(a.timeout_ms);
    let result = api.wait_until_done(&a.run_id, Some(within)).await?;
    print(&result);
    Ok(wait_exit(&result))
}

pub async fn events(a: EventsArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let path = format!("/v1/runs/{}/events", a.run_id);
    if !a.follow {
        print(&api.call(Method::GET, &path, None).await?);
        return Ok(ExitCode::SUCCESS);
    }
    follow_events(&api, &a.run_id, |event, data| println!("{event} {data}")).await?;
    Ok(ExitCode::SUCCESS)
}

/// Follows a run's SSE stream until the server closes it, handing each frame's event name and
/// data to `emit`. A `reconnect` frame (the streaming Lambda reached its deadline) is not
/// emitted: after its `retry:` pause the stream is reopened with `Last-Event-ID`, and goes on
/// from the next event.
pub(crate) async fn follow_events(
    api: &ApiClient,
    run_id: &str,
    mut emit: impl FnMut(&str, &str),
) -> anyhow::Result<()> {
    let path = format!("/v1/runs/{run_id}/events");
    let mut last_id: Option<String> = None;
    loop {
        let mut stream = api.event_stream_after(run_id, last_id.as_deref()).await?;
        if !stream.content_type.starts_with("text/event-stream") {
            bail!("{path} answered {} instead of events", stream.content_type);
        }
        let mut reconnect_after = None;
        while let Some(frame) = stream.frames.next().await {
            let frame = frame.context("event stream broke")?;
            if !frame.id.is_empty() {
                last_id = Some(frame.id.clone());
            }
            if frame.event == "reconnect" {
                reconnect_after = Some(frame.retry.unwrap_or(Duration::from_millis(500)));
                break;
            }
            emit(&frame.event, &frame.data);
        }
        match reconnect_after {
            Some(pause) => tokio::time::sleep(pause).await,
            None => return Ok(()),
        }
    }
}

pub async fn transcript(a: TranscriptArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let path = format!(
        "/v1/sessions/{}/transcript",
        agentlane_core::validate::path_segment(&a.session)
    );
    print(&api.call(Method::GET, &path, None).await?);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn following_events_reconnects_after_a_reconnect_frame_with_the_last_event_id() {
        // A server whose first stream is cut by its deadline after event 0.
        let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let log = seen.clone();
        let app = axum::Router::new().route(
            "/v1/runs/{id}/events",
            axum::routing::get(move |headers: HeaderMap| {
                let last = headers
                    .get("last-event-id")
                    .map(|v| v.to_str().unwrap().to_owned());
                log.lock().unwrap().push(last.clone());
                let body = match last.as_deref() {
                    None => {
                        "id: 0\nevent: lifecycle\ndata: {\"seq\":0}\n\n\
                             id: 0\nevent: reconnect\nretry: 10\ndata: {}\n\n"
                    }
                    _ => {
                        "id: 1\nevent: assistant\ndata: {\"seq\":1}\n\n\
                          event: end\ndata: {\"status\":\"ok\"}\n\n"
                    }
                };
                async move { ([("content-type", "text/event-stream")], body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

        let api = ApiClient::new(&base, Auth::Bearer("k".repeat(16)));
        let mut got = Vec::new();
        follow_events(&api, "run_1", |event, data| {
            got.push(format!("{event} {data}"))
        })
        .await
        .unwrap();

        assert_eq!(
            got,
            [
                "lifecycle {\"seq\":0}",
                "assistant {\"seq\":1}",
                "end {\"status\":\"ok\"}"
            ]
        );
        assert_eq!(*seen.lock().unwrap(), [None, Some("0".to_owned())]);
    }
}
