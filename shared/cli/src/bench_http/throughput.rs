//! The throughput run and its report: turns/s, latency, the server's CPU and memory, the
//! `/healthz` rate it is measured against, then the untimed checks (every run ok, each
//! session's transcript in send order).

use super::HttpBench;
use super::server::{Child, Target};
use super::turns::{Turn, call_paced, drive};
use crate::api_client::ApiClient;
use crate::bench::percentile;
use crate::proc_mem;
use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The throughput run: `--turns` over `--sessions` with `--concurrency` clients.
pub(super) async fn throughput(
    bench: &HttpBench,
    target: &Target,
    prefix: &str,
) -> anyhow::Result<()> {
    let client = &target.client;
    let measured = measure(bench, target, prefix).await?;
    // What was measured is printed before any check can fail.
    print_measured(bench, &measured);
    if let Some(child) = &target.child {
        print_idle_rss(bench, child).await;
    }
    // The same server's `/healthz` rate right after, with as many clients: the HTTP ceiling a
    // turn (two requests and the whole pipeline) is measured against.
    let healthz = healthz_rate(client, bench.concurrency, HEALTHZ_FOR).await?;
    println!(
        "healthz: {healthz:.0} req/s with {} clients; turns/s are {:.3} of it",
        bench.concurrency,
        measured.rate() / healthz.max(f64::EPSILON)
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
    let turns = &measured.turns;
    let failed: Vec<&Turn> = turns.iter().filter(|t| t.status != "ok").collect();
    let overheads = overheads(client, turns).await?;
    println!(
        "overhead (latency - model):   p50 {:.2} ms  p99 {:.2} ms",
        ms(percentile(&overheads, 0.50)),
        ms(percentile(&overheads, 0.99))
    );
    let out_of_order = check_order(client, turns, prefix, bench.sessions).await?;
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

/// What the timed part of a throughput run measured.
struct Measured {
    /// The turns, in completion order.
    turns: Vec<Turn>,
    /// How long all the turns took.
    took: Duration,
    /// The server's CPU seconds over the turns (none for a `--url` server).
    server_cpu: Option<f64>,
    /// This process's CPU seconds over the turns: the HTTP clients'.
    client_cpu: Option<f64>,
    /// The server's peak RSS (`VmHWM`) in KiB (none for a `--url` server).
    peak_kib: Option<u64>,
}

impl Measured {
    /// Turns per second.
    fn rate(&self) -> f64 {
        self.turns.len() as f64 / self.took.as_secs_f64()
    }
}

/// Spreads `--turns` over `--sessions` and drives them, measuring time and CPU around it.
async fn measure(bench: &HttpBench, target: &Target, prefix: &str) -> anyhow::Result<Measured> {
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
        &target.client,
        prefix,
        &counts,
        bench.concurrency,
        bench.model.as_deref(),
    )
    .await?;
    let took = started.elapsed();
    let server_cpu = match (cpu_before, pid.and_then(proc_mem::cpu_seconds)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let client_cpu = proc_mem::cpu_seconds(std::process::id())
        .zip(client_cpu_before)
        .map(|(after, before)| after - before);
    let peak_kib = pid.and_then(proc_mem::peak_rss_kib);
    Ok(Measured {
        turns,
        took,
        server_cpu,
        client_cpu,
        peak_kib,
    })
}

/// Prints turns/s, the latency percentiles, and the CPU and peak memory figures there are.
fn print_measured(bench: &HttpBench, measured: &Measured) {
    let turns = &measured.turns;
    let mut latencies: Vec<Duration> = turns.iter().map(|t| t.latency).collect();
    latencies.sort();
    println!(
        "http: {} turns over {} sessions, {} clients, {} workers in {:.2} s = {:.0} turns/s",
        turns.len(),
        bench.sessions,
        bench.concurrency,
        bench.workers,
        measured.took.as_secs_f64(),
        measured.rate()
    );
    println!(
        "turn latency (submit + wait): p50 {:.2} ms  p99 {:.2} ms",
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.99))
    );
    if let Some(cpu) = measured.server_cpu {
        println!(
            "server CPU: {cpu:.2} s ({:.0} turns per CPU-second)",
            turns.len() as f64 / cpu.max(f64::EPSILON)
        );
    }
    if let Some(client) = measured.client_cpu {
        println!(
            "client CPU: {client:.2} s (this process: the {} HTTP clients)",
            bench.concurrency
        );
    }
    if let Some(kib) = measured.peak_kib {
        println!("server peak RSS (VmHWM): {:.1} MiB", kib as f64 / 1024.0);
    }
}

/// Every session idle now: prints what the child server keeps for them (caches, the
/// database's pages) once the turns' own buffers are gone, 2 s after the last turn.
async fn print_idle_rss(bench: &HttpBench, child: &Child) {
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

/// Each turn's latency minus the model time its run recorded (its attempts' `durationMs`),
/// sorted; read untimed, paced under the tenant's request limit.
async fn overheads(client: &ApiClient, turns: &[Turn]) -> anyhow::Result<Vec<Duration>> {
    let mut overheads = Vec::with_capacity(turns.len());
    for turn in turns {
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
    Ok(overheads)
}

/// A duration in milliseconds, for the report.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
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
