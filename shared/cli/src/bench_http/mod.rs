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

mod history;
mod server;
mod throughput;
mod turns;

use anyhow::{Context, bail};
use std::path::PathBuf;

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
    let target = server::connect(&bench, &dir).await?;
    let prefix = bench
        .session_prefix
        .clone()
        .unwrap_or_else(server::run_unique_prefix);
    println!("sessions: {prefix}0 … {prefix}{}", bench.sessions - 1);
    if bench.history.is_empty() {
        throughput::throughput(&bench, &target, &prefix).await
    } else {
        history::history(&bench, &target, &prefix).await
    }
}
