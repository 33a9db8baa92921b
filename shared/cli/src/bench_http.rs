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
//! Session keys start with a prefix unique to the run (`--session-prefix` to choose one), so
//! runs against one `--url` server never share sessions. The child server's `bench` tenant
//! gets a request limit that does not cap the run.
//!
//! It prints what it measured first: turns/s, turn latency percentiles, the server's CPU time
//! and peak RSS (`VmHWM`), and the same server's `GET /healthz` rate with as many clients (2 s,
//! right after the turns), with turns/s as a share of it. Then (untimed, waiting out `429`s so the tenant's request limit
//! paces them) it reads every run and every session's transcript: it reports the overhead
//! (latency minus the model time the run recorded) and fails when a run did not end `ok` or a
//! session's transcript is not in the order its turns were sent.
//!
//! `--history 10,100,500` instead measures a turn at N prior turns of its session: latency
//! (one turn at a time) and server CPU per turn.

use crate::api_client::{ApiClient, ApiError, Auth};
use crate::bench::percentile;
use crate::proc_mem;
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
    /// The session keys' prefix (default: `bench-<random>-`, unique per run).
    pub session_prefix: Option<String>,
    /// `--history`: the prior-turn counts to measure a turn at (none: the throughput run).
    pub history: Vec<usize>,
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
    /// The child's binary and data directory, to tell its memory's file pages apart.
    exe: String,
    data_dir: String,
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn start_server(
    bench: &HttpBench,
    dir: &std::path::Path,
    config: Option<&std::path::Path>,
) -> anyhow::Result<(Child, String)> {
    let exe = std::env::current_exe().context("cannot find the agentlane binary")?;
    let mut command = tokio::process::Command::new(&exe);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(["--workers", &bench.workers.to_string()])
        .env("AGENTLANE_API_KEYS", format!("bench:{KEY}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if let Some(config) = config {
        command.env("AGENTLANE_CONFIG", config);
    }
    // Provider settings pass through; only the demo pacing and log level get bench defaults.
    for (name, default) in [("AGENTLANE_DEMO_DELAY_MS", "0"), ("AGENTLANE_LOG", "warn")] {
        if std::env::var_os(name).is_none() {
            command.env(name, default);
        }
    }
    let mut child = command.spawn().context("cannot start agentlane serve")?;
    let pid = child.id().context("serve exited at once")?;
    let stdout = child.stdout.take().context("no stdout from serve")?;
    let child = Child {
        child,
        pid,
        exe: exe.display().to_string(),
        data_dir: format!("{}/", dir.display()),
    };
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

/// The session keys of one benchmark run start with this (unless `--session-prefix` says
/// otherwise): unique per run, so a second run against the same server never finds the first
/// run's sessions (whose transcripts would not be in the order this run sends).
fn run_unique_prefix() -> String {
    use rand::Rng;
    let tag: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(8)
        .map(char::from)
        .collect();
    format!("bench-{}-", tag.to_lowercase())
}

/// A call that waits out `429`s (the tenant's request limit: its windows are one second long)
/// instead of failing: the untimed checks, and a server given by `--url`, are paced by it.
async fn call_paced(
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
async fn one_turn(
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

/// The server the benchmark talks to, and how to reach it.
struct Target {
    child: Option<Child>,
    client: ApiClient,
    /// The config file of the child (raising the bench tenant's request limit), kept alive.
    _config: Option<tempfile::TempDir>,
}

/// Starts the child server (or takes `--url`) and builds the client.
async fn connect(bench: &HttpBench, dir: &std::path::Path) -> anyhow::Result<Target> {
    let (child, url, key, config) = match &bench.url {
        Some(url) => {
            let key = bench
                .api_key
                .clone()
                .context("--url needs --api-key (or AGENTLANE_API_KEY)")?;
            (None, url.clone(), key, None)
        }
        None => {
            // The bench tenant's request limit is raised (two requests a turn would cap the
            // default 5,000 requests/s at 2,500 turns/s); a config the environment names wins.
            let config = if std::env::var_os("AGENTLANE_CONFIG").is_none() {
                let config = tempfile::tempdir().context("cannot create a temporary directory")?;
                std::fs::write(
                    config.path().join("agentlane.toml"),
                    "[limits.tenants.bench]\nrequests_per_second = 10000000\nburst = 10000000\n",
                )?;
                Some(config)
            } else {
                None
            };
            let file = config.as_ref().map(|c| c.path().join("agentlane.toml"));
            let (child, url) = start_server(bench, dir, file.as_deref()).await?;
            (Some(child), url, KEY.to_owned(), config)
        }
    };
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(bench.concurrency * 2)
        .tcp_nodelay(true)
        .build()?;
    Ok(Target {
        child,
        client: ApiClient::new(&url, Auth::Bearer(key)).with_http(http),
        _config: config,
    })
}

/// Runs `counts[s]` turns on session `prefix{s}` for every `s`, with `concurrency` clients and
/// never two turns of a session in flight; the turns in completion order.
async fn drive(
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

/// Runs the benchmark and prints its figures; an error when a run failed or order broke.
pub async fn run(bench: HttpBench) -> anyhow::Result<()> {
    if bench.turns == 0 || bench.sessions == 0 || bench.concurrency == 0 {
        bail!("--turns, --sessions and --concurrency must be at least 1");
    }
    let tmp;
    let dir = match &bench.data_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir().context("cannot create a temporary directory")?;
            tmp.path().to_path_buf()
        }
    };
    let target = connect(&bench, &dir).await?;
    let prefix = bench
        .session_prefix
        .clone()
        .unwrap_or_else(run_unique_prefix);
    println!("sessions: {prefix}0 … {prefix}{}", bench.sessions - 1);
    if bench.history.is_empty() {
        throughput(&bench, &target, &prefix).await
    } else {
        history(&bench, &target, &prefix).await
    }
}

/// `--history N,...`: per N, `--sessions` sessions get N turns each (untimed), then five
/// rounds of one turn per session, one turn at a time: latency and server CPU per turn.
async fn history(bench: &HttpBench, target: &Target, prefix: &str) -> anyhow::Result<()> {
    const ROUNDS: usize = 5;
    let client = &target.client;
    let pid = target.child.as_ref().map(|c| c.pid);
    let model = bench.model.as_deref();
    let mut failed = 0usize;
    for &prior in &bench.history {
        let prefix = format!("{prefix}h{prior}-");
        let fill = Instant::now();
        let counts = vec![prior; bench.sessions];
        let filled = drive(client, &prefix, &counts, bench.concurrency, model).await?;
        failed += filled.iter().filter(|t| t.status != "ok").count();
        let fill = fill.elapsed();
        let mut latencies = Vec::with_capacity(ROUNDS * bench.sessions);
        let cpu_before = pid.and_then(proc_mem::cpu_seconds);
        let progress = crate::progress::bar(
            (ROUNDS * bench.sessions) as u64,
            &format!("measured turns at {prior} prior"),
        );
        let started = Instant::now();
        for round in 0..ROUNDS {
            for session in 0..bench.sessions {
                let t = Instant::now();
                let (run_id, status) = one_turn(
                    client,
                    &format!("{prefix}{session}"),
                    format!("measured turn {round} of session {session}"),
                    model,
                )
                .await?;
                latencies.push(t.elapsed());
                progress.inc(1);
                if status != "ok" {
                    failed += 1;
                    eprintln!("run {run_id} ended {status}");
                }
            }
        }
        let took = started.elapsed();
        progress.finish_and_clear();
        let cpu = cpu_before
            .zip(pid.and_then(proc_mem::cpu_seconds))
            .map(|(before, after)| after - before);
        latencies.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let n = latencies.len();
        let mean = latencies.iter().sum::<Duration>() / u32::try_from(n).unwrap_or(u32::MAX);
        let cpu_text = cpu.map_or_else(
            || "server CPU unknown (--url)".to_owned(),
            |c| format!("server CPU {:.2} ms/turn", c * 1000.0 / n as f64),
        );
        println!(
            "history {prior}..{} prior turns: {n} turns one at a time in {:.2} s; latency p50 \
             {:.2} ms  mean {:.2} ms  p90 {:.2} ms; {cpu_text} (fill: {} turns in {:.1} s)",
            prior + ROUNDS - 1,
            took.as_secs_f64(),
            ms(percentile(&latencies, 0.50)),
            ms(mean),
            ms(percentile(&latencies, 0.90)),
            prior * bench.sessions,
            fill.as_secs_f64(),
        );
    }
    if let Some(kib) = pid.and_then(proc_mem::peak_rss_kib) {
        println!("server peak RSS (VmHWM): {:.1} MiB", kib as f64 / 1024.0);
    }
    if failed > 0 {
        bail!("{failed} runs did not end ok");
    }
    Ok(())
}

/// The throughput run: `--turns` over `--sessions` with `--concurrency` clients.
async fn throughput(bench: &HttpBench, target: &Target, prefix: &str) -> anyhow::Result<()> {
    let client = &target.client;
    let pid = target.child.as_ref().map(|c| c.pid);
    // Turns per session; a session is in the queue only while none of its turns runs.
    let per_session = bench.turns / bench.sessions;
    let extra = bench.turns % bench.sessions;
    let counts: Vec<usize> = (0..bench.sessions)
        .map(|s| per_session + usize::from(s < extra))
        .collect();
    let cpu_before = pid.and_then(proc_mem::cpu_seconds);
    let client_cpu_before = proc_mem::cpu_seconds(std::process::id());
    let started = Instant::now();
    let turns = drive(
        client,
        prefix,
        &counts,
        bench.concurrency,
        bench.model.as_deref(),
    )
    .await?;
    let took = started.elapsed();
    let cpu = match (cpu_before, pid.and_then(proc_mem::cpu_seconds)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let client_cpu = proc_mem::cpu_seconds(std::process::id())
        .zip(client_cpu_before)
        .map(|(after, before)| after - before);
    let peak = pid.and_then(proc_mem::peak_rss_kib);

    // What was measured is printed before any check can fail.
    let mut latencies: Vec<Duration> = turns.iter().map(|t| t.latency).collect();
    latencies.sort();
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
    if let Some(child) = &target.child {
        // Every session idle now: what the server keeps for them (caches, the database's
        // pages) once the turns' own buffers are gone.
        tokio::time::sleep(Duration::from_secs(2)).await;
        if let Some(r) = proc_mem::resident_of(child.pid, &child.exe, &child.data_dir) {
            let mib = |kib: u64| kib as f64 / 1024.0;
            println!(
                "server RSS with the {} sessions idle (smaps, 2 s after the last turn): {:.1} MiB \
                 = {:.1} MiB anonymous + file pages: {:.1} MiB of the binary, {:.1} MiB of the \
                 database mapped in, {:.1} MiB other",
                bench.sessions,
                mib(r.total()),
                mib(r.anonymous),
                mib(r.binary),
                mib(r.database),
                mib(r.other),
            );
        }
    }
    // The same server's `/healthz` rate right after, with as many clients: the HTTP ceiling a
    // turn (two requests and the whole pipeline) is measured against.
    let healthz = healthz_rate(client, bench.concurrency, HEALTHZ_FOR).await?;
    println!(
        "healthz: {healthz:.0} req/s with {} clients; turns/s are {:.3} of it",
        bench.concurrency,
        rate / healthz.max(f64::EPSILON)
    );
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!(
            "load average: {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }

    // Untimed checks, paced under the tenant's request limit: every run ok, model time per
    // run, per-session order.
    let failed: Vec<&Turn> = turns.iter().filter(|t| t.status != "ok").collect();
    let mut overheads = Vec::with_capacity(turns.len());
    for turn in &turns {
        let run = call_paced(
            client,
            Method::GET,
            &format!("/v1/runs/{}", turn.run_id),
            None,
        )
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
        overheads.push(turn.latency.saturating_sub(Duration::from_millis(model_ms)));
    }
    overheads.sort();
    println!(
        "overhead (latency - model):   p50 {:.2} ms  p99 {:.2} ms",
        ms(percentile(&overheads, 0.50)),
        ms(percentile(&overheads, 0.99))
    );
    let out_of_order = check_order(client, &turns, prefix, bench.sessions).await?;
    println!(
        "runs not ok: {}; sessions out of order: {}",
        failed.len(),
        out_of_order
    );
    if let Some(turn) = failed.first() {
        bail!("run {} ended {}", turn.run_id, turn.status);
    }
    if out_of_order > 0 {
        bail!("{out_of_order} sessions have their turns out of order");
    }
    Ok(())
}

/// How long the `/healthz` rate is measured for.
const HEALTHZ_FOR: Duration = Duration::from_secs(2);

/// `GET /healthz` requests per second that `concurrency` clients get answered in `span`.
async fn healthz_rate(
    client: &ApiClient,
    concurrency: usize,
    span: Duration,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut clients = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let client = client.clone();
        clients.push(tokio::spawn(async move {
            let mut answered = 0u64;
            while started.elapsed() < span {
                let response = client.request(Method::GET, "/healthz").send().await?;
                if !response.status().is_success() {
                    bail!("/healthz answered {}", response.status());
                }
                response.bytes().await?;
                answered += 1;
            }
            Ok::<_, anyhow::Error>(answered)
        }));
    }
    let mut answered = 0;
    for c in clients {
        answered += c.await.context("a client panicked")??;
    }
    Ok(answered as f64 / started.elapsed().as_secs_f64())
}

/// Sessions whose transcript does not hold their runs in the order the client sent them (each
/// run's entries together, a user message first).
async fn check_order(
    client: &ApiClient,
    turns: &[Turn],
    prefix: &str,
    sessions: usize,
) -> anyhow::Result<usize> {
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
                Some(a) => format!("/v1/sessions/{prefix}{session}/transcript?after={a}"),
                None => format!("/v1/sessions/{prefix}{session}/transcript"),
            };
            let page = call_paced(client, Method::GET, &path, None).await?;
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
