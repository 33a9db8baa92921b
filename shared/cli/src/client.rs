//! Client commands: thin wrappers over the HTTP API ([`ApiClient`]) that print the human form
//! ([`human`]) or, with `--json`, the API's JSON to stdout.

use crate::api_client::{ApiClient, Auth};
use crate::args::{AgentArgs, ClientArgs, EventsArgs, TranscriptArgs, WaitArgs};
use crate::human;
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

/// Prints a wait's answer: the JSON with `--json`; else the reply as prose, or one line on
/// stderr saying how the run ended (or that it is still going, or what it waits for).
fn print_wait(result: &Value, as_json: bool) {
    if as_json {
        print(result);
        return;
    }
    match result["status"].as_str() {
        Some("ok") => println!("{}", human::reply(result)),
        Some("requires_action") => eprintln!(
            "run {} is paused for {} call(s): answer with `agentlane runs approve|answer`",
            result["runId"].as_str().unwrap_or("?"),
            result["requiredAction"]["toolCalls"]
                .as_array()
                .map_or(0, Vec::len)
        ),
        Some("pending" | "timeout") if result["error"].is_null() => eprintln!(
            "run {} is still {} (the wait ended; the run goes on)",
            result["runId"].as_str().unwrap_or("?"),
            result["runStatus"].as_str().unwrap_or("going")
        ),
        _ => eprintln!("{}", human::failure(result)),
    }
}

/// The body of `POST /v1/agent` for `a`.
fn turn_body(a: &AgentArgs) -> Value {
    let mut body = json!({ "sessionKey": a.session, "message": a.message });
    let optional = [
        ("idempotencyKey", a.idempotency_key.as_ref()),
        ("model", a.model.as_ref()),
        ("agentId", a.agent.as_ref()),
        ("thinking", a.thinking.as_ref()),
        ("queueMode", a.queue_mode.as_ref()),
        ("extraSystemPrompt", a.extra_system_prompt.as_ref()),
    ];
    for (field, value) in optional {
        if let Some(value) = value {
            body[field] = json!(value);
        }
    }
    if let Some(t) = a.timeout_seconds {
        body["timeoutSeconds"] = json!(t);
    }
    body
}

pub(crate) async fn agent(a: AgentArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let accepted = api
        .call(Method::POST, "/v1/agent", Some(turn_body(&a)))
        .await?;
    if !a.wait {
        if a.client.json {
            print(&accepted);
        } else {
            println!("{}", human::accepted(&accepted));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let run_id = accepted
        .get("runId")
        .and_then(Value::as_str)
        .context("the server answered without a runId")?
        .to_owned();
    let spinner = crate::progress::spinner(!a.client.json, "waiting for the reply");
    let result = api.wait_until_done(&run_id, None).await;
    spinner.finish_and_clear();
    let result = result?;
    print_wait(&result, a.client.json);
    Ok(wait_exit(&result))
}

pub(crate) async fn wait(a: WaitArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let within = Duration::from_millis(a.timeout_ms);
    let spinner = crate::progress::spinner(!a.client.json, "waiting for the run");
    let result = api.wait_until_done(&a.run_id, Some(within)).await;
    spinner.finish_and_clear();
    let result = result?;
    print_wait(&result, a.client.json);
    Ok(wait_exit(&result))
}

pub(crate) async fn events(a: EventsArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let path = format!("/v1/runs/{}/events", a.run_id);
    if !a.follow {
        let page = api.call(Method::GET, &path, None).await?;
        if a.client.json {
            print(&page);
        } else {
            for event in page["events"].as_array().into_iter().flatten() {
                println!("{}", human::event_line(event));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let as_json = a.client.json;
    let mut printer = human::FollowPrinter::default();
    follow_events(&api, &a.run_id, |event, data| {
        if as_json {
            let data: Value = serde_json::from_str(data).unwrap_or_else(|_| json!(data));
            println!("{}", json!({ "event": event, "data": data }));
        } else if let Some(frame) = human::follow_frame(event, data) {
            use std::io::Write;
            print!("{}", printer.render(frame));
            let _ = std::io::stdout().flush();
        }
    })
    .await?;
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

pub(crate) async fn transcript(a: TranscriptArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let path = format!(
        "/v1/sessions/{}/transcript",
        agentlane_core::validate::path_segment(&a.session)
    );
    let page = api.call(Method::GET, &path, None).await?;
    if a.client.json {
        print(&page);
    } else {
        print!("{}", human::transcript(&page));
    }
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
