//! `--history`: the latency and server CPU of a turn at N prior turns of its session.

use super::HttpBench;
use super::server::Target;
use super::turns::{drive, one_turn};
use crate::bench::percentile;
use crate::proc_mem;
use anyhow::bail;
use std::time::{Duration, Instant};

/// `--history N,...`: per N, `--sessions` sessions get N turns each (untimed), then five
/// rounds of one turn per session, one turn at a time: latency and server CPU per turn.
pub(super) async fn history(
    bench: &HttpBench,
    target: &Target,
    prefix: &str,
) -> anyhow::Result<()> {
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
