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
        _ => ExitCode::FAILURE,
    }
}

pub async fn agent(a: AgentArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let mut body = json!({ "sessionKey": a.session, "message": a.message });
    if let Some(k) = a.idempotency_key {
        body["idempotencyKey"] = json!(k);
    }
    if let Some(m) = a.model {
        body["model"] = json!(m);
    }
    if let Some(t) = a.timeout_seconds {
        body["timeoutSeconds"] = json!(t);
    }
    let accepted = api.call(Method::POST, "/v1/agent", Some(body)).await?;
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
    let mut stream = api.event_stream(&a.run_id).await?;
    if !stream.content_type.starts_with("text/event-stream") {
        bail!("{path} answered {} instead of events", stream.content_type);
    }
    while let Some(event) = stream.frames.next().await {
        let event = event.context("event stream broke")?;
        println!("{} {}", event.event, event.data);
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn transcript(a: TranscriptArgs) -> anyhow::Result<ExitCode> {
    let api = api(&a.client)?;
    let path = format!("/v1/sessions/{}/transcript", a.session);
    print(&api.call(Method::GET, &path, None).await?);
    Ok(ExitCode::SUCCESS)
}
