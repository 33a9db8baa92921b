//! The server a benchmark talks to: a child `agentlane serve` started on a free loopback port
//! (killed when dropped), or the `--url` one; the client that reaches it; and the run's unique
//! session-key prefix.

use super::HttpBench;
use crate::api_client::{ApiClient, Auth};
use anyhow::Context;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The child server's API key for the `bench` tenant.
const KEY: &str = "bench-key-0123456789abcdef";

/// The child `serve`, killed when dropped.
pub(super) struct Child {
    child: tokio::process::Child,
    pub(super) pid: u32,
    /// The child's binary and data directory, to tell its memory's file pages apart.
    pub(super) exe: String,
    pub(super) data_dir: String,
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
pub(super) fn run_unique_prefix() -> String {
    use rand::Rng;
    let tag: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(8)
        .map(char::from)
        .collect();
    format!("bench-{}-", tag.to_lowercase())
}

/// The server the benchmark talks to, and how to reach it.
pub(super) struct Target {
    pub(super) child: Option<Child>,
    pub(super) client: ApiClient,
    /// The config file of the child (raising the bench tenant's request limit), kept alive.
    _config: Option<tempfile::TempDir>,
}

/// Starts the child server (or takes `--url`) and builds the client.
pub(super) async fn connect(bench: &HttpBench, dir: &std::path::Path) -> anyhow::Result<Target> {
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
