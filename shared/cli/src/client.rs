//! Client commands: thin wrappers over the HTTP API that print JSON (or text) to stdout.

use crate::args::{AgentArgs, ClientArgs, EventsArgs, TranscriptArgs, WaitArgs};
use anyhow::{Context, bail};
use futures::StreamExt;
use serde_json::{Value, json};
use std::process::ExitCode;

pub(crate) struct Api {
    http: reqwest::Client,
    url: String,
    key: String,
}

impl Api {
    pub(crate) fn new(args: &ClientArgs) -> anyhow::Result<Self> {
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
        Ok(Self {
            http: reqwest::Client::new(),
            url: args.url.trim_end_matches('/').to_owned(),
            key,
        })
    }

    pub(crate) async fn send(&self, req: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let resp = req
            .bearer_auth(&self.key)
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.url))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let code = body
                .pointer("/error/code")
                .and_then(Value::as_str)
                .unwrap_or("error");
            let msg = body
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("");
            bail!("{status}: {code}: {msg}");
        }
        Ok(body)
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.send(self.http.post(format!("{}{path}", self.url)).json(&body))
            .await
    }

    pub(crate) async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.http.get(format!("{}{path}", self.url)))
            .await
    }

    pub(crate) async fn patch(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.send(self.http.patch(format!("{}{path}", self.url)).json(&body))
            .await
    }

    pub(crate) async fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.http.delete(format!("{}{path}", self.url)))
            .await
    }
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
    let api = Api::new(&a.client)?;
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
    let accepted = api.post("/v1/agent", body).await?;
    print(&accepted);
    if !a.wait {
        return Ok(ExitCode::SUCCESS);
    }
    let run_id = accepted
        .get("runId")
        .and_then(Value::as_str)
        .context("the server answered without a runId")?
        .to_owned();
    let result = wait_until_done(&api, &run_id, None).await?;
    let run = api.get(&format!("/v1/runs/{run_id}")).await?;
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

/// Waits in 30 s slices until the run ends (or `limit_ms` passes).
async fn wait_until_done(api: &Api, run_id: &str, limit_ms: Option<u64>) -> anyhow::Result<Value> {
    let started = std::time::Instant::now();
    loop {
        let slice = match limit_ms {
            Some(limit) => limit
                .saturating_sub(started.elapsed().as_millis() as u64)
                .min(30_000),
            None => 30_000,
        };
        let result = api
            .post(
                "/v1/agent.wait",
                json!({ "runId": run_id, "timeoutMs": slice }),
            )
            .await?;
        let still_going = matches!(
            result.get("runStatus").and_then(Value::as_str),
            Some("queued" | "running")
        );
        let out_of_time = limit_ms.is_some_and(|l| started.elapsed().as_millis() as u64 >= l);
        if !still_going || out_of_time {
            return Ok(result);
        }
    }
}

pub async fn wait(a: WaitArgs) -> anyhow::Result<ExitCode> {
    let api = Api::new(&a.client)?;
    let result = wait_until_done(&api, &a.run_id, Some(a.timeout_ms)).await?;
    print(&result);
    Ok(wait_exit(&result))
}

pub async fn events(a: EventsArgs) -> anyhow::Result<ExitCode> {
    let api = Api::new(&a.client)?;
    if !a.follow {
        print(&api.get(&format!("/v1/runs/{}/events", a.run_id)).await?);
        return Ok(ExitCode::SUCCESS);
    }
    let resp = api
        .http
        .get(format!("{}/v1/runs/{}/events", api.url, a.run_id))
        .header("accept", "text/event-stream")
        .bearer_auth(&api.key)
        .send()
        .await
        .with_context(|| format!("cannot reach {}", api.url))?;
    if !resp.status().is_success() {
        bail!(
            "{}: {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        );
    }
    let mut stream = eventsource_stream::Eventsource::eventsource(resp.bytes_stream());
    while let Some(event) = stream.next().await {
        let event = event.context("event stream broke")?;
        println!("{} {}", event.event, event.data);
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn transcript(a: TranscriptArgs) -> anyhow::Result<ExitCode> {
    let api = Api::new(&a.client)?;
    print(
        &api.get(&format!("/v1/sessions/{}/transcript", a.session))
            .await?,
    );
    Ok(ExitCode::SUCCESS)
}
