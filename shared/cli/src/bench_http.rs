//! `agentlane bench --http`: throughput of a real `agentlane serve` over real HTTP.
//!
//! Starts this binary's `serve` as a child process on a free loopback port with a fresh data
//! directory (or uses `--url`), then `--concurrency` clients run `--turns` turns over
//! `--sessions` sessions: each turn is `POST /v1/agent` then `POST /v1/agent.wait`, and a session
//! never has two turns in flight (a client takes the next session whose previous turn ended).
//! The provider is whatever the environment configures for `serve` (`OPENAI_BASE_URL`,
//! `AGENTLANE_MODEL`, `AGENTLANE_CONFIG`, ...); with none it is the demo model, unpaced unless
//! `AGENTLANE_DEMO_DELAY_MS` says otherwise.
//!
//! Afterwards (untimed) it reads every run and every session's transcript: it reports turns/s,
//! turn latency and overhead (latency minus the model time the run recorded) percentiles, the
//! server's peak RSS (`VmHWM`), and fails when a run did not end `ok` or a session's transcript
//! is not in the order its turns were sent.

use crate::api_client::{ApiClient, Auth};
use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

const KEY: &str = "bench-key-0123456789abcdef";

/// What the HTTP benchmark needs.
#[derive(Debug, Clone)]
pub struct HttpBench {
    /// Turns in all.
    pub turns: usize,
    /// Sessions the turns are spread over.
    pub sessions: usize,
    /// Concurrent clients.
    pub concurrency: usize,
    /// `serve --workers`.
    pub workers: usize,
    /// An already running server (with `api_key`) instead of a child `serve`.
    pub url: Option<String>,
    /// The key for `url`.
    pub api_key: Option<String>,
    /// The child's data directory (default: a fresh temporary one).
    pub data_dir: Option<PathBuf>,
    /// Extra model to ask for on every turn (`provider/model`), else the server's default.
    pub model: Option<String>,
}

/// One finished turn as the client saw it.
struct Turn {
    session: usize,
    run_id: String,
    latency: Duration,
    status: String,
}

/// The child `serve`, killed when dropped.
struct Child {
    child: tokio::process::Child,
    pid: u32,
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn start_server(bench: &HttpBench, dir: &std::path::Path) -> anyhow::Result<(Child, String)> {
    let exe = std::env::current_exe().context("cannot find the agentlane binary")?;
    let mut command = tokio::process::Command::new(exe);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(["--workers", &bench.workers.to_string()])
        .env("AGENTLANE_API_KEYS", format!("bench:{KEY}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    // Provider settings pass through; only the demo pacing and log level get bench defaults.
    for (name, default) in [("AGENTLANE_DEMO_DELAY_MS", "0"), ("AGENTLANE_LOG", "warn")] {
        if std::env::var_os(name).is_none() {
            command.env(name, default);
        }
    }
    let mut child = command.spawn().context("cannot start agentlane serve")?;
    let pid = child.id().context("serve exited at once")?;
    let stdout = child.stdout.take().context("no stdout from serve")?;
    let child = Child { child, pid };
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .context("serve did not start within 30 s")??
        .context("serve exited before listening")?;
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .with_context(|| format!("serve printed no URL: {line}"))?
        .to_owned();
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, url))
}

/// `VmHWM` of a process, in KiB.
fn peak_rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// CPU seconds (user + system) a process used so far, from `/proc/<pid>/stat`.
fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)`: state is field 3; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some((utime + stime) / 100.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Runs the benchmark and prints its figures; an error when a run failed or order broke.
pub async fn run(bench: HttpBench) -> anyhow::Result<()> {
    if bench.turns == 0 || bench.sessions == 0 || bench.concurrency == 0 {
        bail!("--turns, --sessions and --concurrency must be at least 1");
    }
    let tmp;
    let (child, url, key) = match &bench.url {
        Some(url) => {
            let key = bench
                .api_key
                .clone()
                .context("--url needs --api-key (or AGENTLANE_API_KEY)")?;
            (None, url.clone(), key)
        }
        None => {
            let dir = match &bench.data_dir {
                Some(d) => d.clone(),
                None => {
                    tmp = tempfile::tempdir().context("cannot create a temporary directory")?;
                    tmp.path().to_path_buf()
                }
            };
            let (child, url) = start_server(&bench, &dir).await?;
            (Some(child), url, KEY.to_owned())
        }
    };
    let pid = child.as_ref().map(|c| c.pid);
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(bench.concurrency * 2)
        .tcp_nodelay(true)
        .build()?;
    let client = ApiClient::new(&url, Auth::Bearer(key)).with_http(http);

    // Turns left per session; a session is in the queue only while none of its turns runs.
    let per_session = bench.turns / bench.sessions;
    let extra = bench.turns % bench.sessions;
    let ready: VecDeque<(usize, usize)> = (0..bench.sessions)
        .map(|s| (s, per_session + usize::from(s < extra)))
        .filter(|&(_, left)| left > 0)
        .collect();
    let ready = Arc::new(Mutex::new(ready));
    let turns = Arc::new(Mutex::new(Vec::with_capacity(bench.turns)));
    let cpu_before = pid.and_then(cpu_seconds_of);
    let client_cpu_before = cpu_seconds_of(std::process::id());
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..bench.concurrency {
        let (client, ready, turns, model) = (
            client.clone(),
            ready.clone(),
            turns.clone(),
            bench.model.clone(),
        );
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
                let mut body = json!({
                    "sessionKey": format!("bench-{session}"),
                    "message": format!("turn {left} of session {session}"),
                });
                if let Some(model) = &model {
                    body["model"] = json!(model);
                }
                let accepted = client.call(Method::POST, "/v1/agent", Some(body)).await?;
                let run_id = accepted
                    .get("runId")
                    .and_then(Value::as_str)
                    .context("no runId in the answer")?
                    .to_owned();
                let reply = client.wait_until_done(&run_id, None).await?;
                let status = reply
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned();
                turns
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Turn {
                        session,
                        run_id,
                        latency: t.elapsed(),
                        status,
                    });
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
    let took = started.elapsed();
    let cpu = match (cpu_before, pid.and_then(cpu_seconds_of)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let client_cpu = cpu_seconds_of(std::process::id())
        .zip(client_cpu_before)
        .map(|(after, before)| after - before);
    let peak = pid.and_then(peak_rss_of);
    let turns = std::mem::take(&mut *turns.lock().unwrap_or_else(PoisonError::into_inner));

    // Untimed checks: every run ok, model time per run, per-session order.
    let failed: Vec<&Turn> = turns.iter().filter(|t| t.status != "ok").collect();
    let mut overheads = Vec::with_capacity(turns.len());
    let mut latencies = Vec::with_capacity(turns.len());
    for turn in &turns {
        let run = client
            .call(Method::GET, &format!("/v1/runs/{}", turn.run_id), None)
            .await?;
        let model_ms: u64 = run
            .get("attempts")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.get("durationMs").and_then(Value::as_u64))
                    .sum()
            })
            .unwrap_or(0);
        latencies.push(turn.latency);
        overheads.push(turn.latency.saturating_sub(Duration::from_millis(model_ms)));
    }
    let out_of_order = check_order(&client, &turns, bench.sessions).await?;
    latencies.sort();
    overheads.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let rate = turns.len() as f64 / took.as_secs_f64();
    println!(
        "http: {} turns over {} sessions, {} clients, {} workers in {:.2} s = {:.0} turns/s",
        turns.len(),
        bench.sessions,
        bench.concurrency,
        bench.workers,
        took.as_secs_f64(),
        rate
    );
    println!(
        "turn latency (submit + wait): p50 {:.2} ms  p99 {:.2} ms",
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.99))
    );
    println!(
        "overhead (latency - model):   p50 {:.2} ms  p99 {:.2} ms",
        ms(percentile(&overheads, 0.50)),
        ms(percentile(&overheads, 0.99))
    );
    if let Some(cpu) = cpu {
        println!(
            "server CPU: {cpu:.2} s ({:.0} turns per CPU-second)",
            turns.len() as f64 / cpu.max(f64::EPSILON)
        );
    }
    if let Some(client) = client_cpu {
        println!(
            "client CPU: {client:.2} s (this process: the {} HTTP clients)",
            bench.concurrency
        );
    }
    if let Some(kib) = peak {
        println!("server peak RSS (VmHWM): {:.1} MiB", kib as f64 / 1024.0);
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!(
            "load average: {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    println!(
        "runs not ok: {}; sessions out of order: {}",
        failed.len(),
        out_of_order
    );
    drop(child);
    if let Some(turn) = failed.first() {
        bail!("run {} ended {}", turn.run_id, turn.status);
    }
    if out_of_order > 0 {
        bail!("{out_of_order} sessions have their turns out of order");
    }
    Ok(())
}

/// Sessions whose transcript does not hold their runs in the order the client sent them (each
/// run's entries together, a user message first).
async fn check_order(client: &ApiClient, turns: &[Turn], sessions: usize) -> anyhow::Result<usize> {
    let mut sent: Vec<Vec<&str>> = vec![Vec::new(); sessions];
    // `turns` is in completion order, which per session is send order (one turn at a time).
    for turn in turns {
        sent[turn.session].push(&turn.run_id);
    }
    let mut bad = 0;
    for (session, runs) in sent.iter().enumerate() {
        if runs.is_empty() {
            continue;
        }
        let mut seen: Vec<String> = Vec::new();
        let mut after: Option<u64> = None;
        loop {
            let path = match after {
                Some(a) => format!("/v1/sessions/bench-{session}/transcript?after={a}"),
                None => format!("/v1/sessions/bench-{session}/transcript"),
            };
            let page = client.call(Method::GET, &path, None).await?;
            let entries = page
                .get("entries")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if entries.is_empty() {
                break;
            }
            for entry in &entries {
                let run = entry.get("runId").and_then(Value::as_str).unwrap_or("");
                if seen.last().map(String::as_str) != Some(run) {
                    seen.push(run.to_owned());
                }
            }
            after = page.get("next").and_then(Value::as_u64);
            if after.is_none() {
                break;
            }
        }
        if seen.iter().map(String::as_str).ne(runs.iter().copied()) {
            bad += 1;
        }
    }
    Ok(bad)
}
