//! `agentlane bench`: the per-turn overhead of the embedded path (in process), or with
//! `--http` the throughput of a real `serve` over real HTTP ([`crate::bench_http`]).
//!
//! Runs N turns through the real pieces, in process: the API router accepts each message
//! (auth, validation, store write, enqueue), a lane worker receives it, runs the turn against a
//! zero-latency model (the demo model without pacing), commits, and acks. It reports turn wall
//! time minus the time spent inside the model, as percentiles, and the process's peak RSS.

use agentlane_agent::LaneWorker;
use agentlane_api::{ApiConfig, ApiKeys, ApiState};
use agentlane_providers::{ModelProvider, ModelRequest, ModelStream, ProviderError};
use anyhow::{Context, bail};
use async_trait::async_trait;
use axum::body::Body;
use clap::Args;
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Options of `agentlane bench` (turns, sessions, concurrency, where the database goes).
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Turns to run.
    #[arg(long, default_value_t = 1000)]
    pub turns: usize,
    /// Sessions the turns are spread over (round robin).
    #[arg(long, default_value_t = 10)]
    pub sessions: usize,
    /// Where to put the benchmark's database (default: a fresh temporary directory).
    #[arg(long)]
    pub data_dir: Option<std::path::PathBuf>,
    /// Benchmark a real `agentlane serve` (a child process, or `--url`) over HTTP, with
    /// whatever provider the environment configures (the unpaced demo model by default).
    #[arg(long)]
    pub http: bool,
    /// `--http`: concurrent clients.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// `--http`: the child server's `--workers`.
    #[arg(long, default_value_t = 32)]
    pub workers: usize,
    /// `--http`: benchmark this running server instead of starting one.
    #[arg(long, requires = "http")]
    pub url: Option<String>,
    /// `--http --url`: its API key.
    #[arg(long, env = "AGENTLANE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// `--http`: the model every turn asks for (`provider/model`; default: the server's).
    #[arg(long)]
    pub model: Option<String>,
    /// `--http`: the sessions' key prefix (default: `bench-<random>-`, unique per run, so a
    /// second run against the same `--url` starts fresh sessions).
    #[arg(long)]
    pub session_prefix: Option<String>,
    /// Latency and server CPU per turn at these prior-turn counts (e.g. `10,100,500`; implies
    /// `--http`): `--sessions` sessions get N turns each, then five rounds of one turn per
    /// session are measured one at a time.
    #[arg(long, value_delimiter = ',')]
    pub history: Vec<usize>,
}

/// Wraps a provider and adds up the time spent inside it (opening the call and producing each
/// stream item), so the runner's own time can be told apart.
struct TimedProvider {
    inner: Arc<dyn ModelProvider>,
    nanos: Arc<AtomicU64>,
}

#[async_trait]
impl ModelProvider for TimedProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ProviderError> {
        let t = Instant::now();
        let inner = self.inner.stream(request, cancel).await;
        self.nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let nanos = self.nanos.clone();
        let mut inner = inner?;
        Ok(async_stream(move |tx| async move {
            loop {
                let t = Instant::now();
                let item = inner.next().await;
                nanos.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                match item {
                    Some(item) => {
                        if tx.send(item).is_err() {
                            return;
                        }
                    }
                    None => return,
                }
            }
        }))
    }
}

/// A stream fed by a task (keeps the timing wrapper free of hand-written `Stream` impls).
fn async_stream<F, Fut>(f: F) -> ModelStream
where
    F: FnOnce(
        tokio::sync::mpsc::UnboundedSender<Result<agentlane_providers::StreamEvent, ProviderError>>,
    ) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(f(tx));
    tokio_stream::wrappers::UnboundedReceiverStream::new(rx).boxed()
}

/// The `p` quantile (0..=1) of `sorted` durations, nearest rank; zero for none.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Runs the benchmark `args` asks for and prints its figures.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.http || !args.history.is_empty() {
        return crate::bench_http::run(crate::bench_http::HttpBench {
            turns: args.turns,
            sessions: args.sessions,
            concurrency: args.concurrency,
            workers: args.workers,
            url: args.url,
            api_key: args.api_key,
            data_dir: args.data_dir,
            model: args.model,
            session_prefix: args.session_prefix,
            history: args.history,
        })
        .await;
    }
    if args.turns == 0 {
        bail!("--turns must be at least 1");
    }
    let tmp;
    let dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir().context("cannot create a temporary directory")?;
            tmp.path().to_path_buf()
        }
    };
    // The benchmark always uses the unpaced demo model, timed.
    let nanos = Arc::new(AtomicU64::new(0));
    let backends = agentlane_host::open_embedded(&dir)?;
    let runner = agentlane_host::runner_with(&backends, &agentlane_host::load()?)?;
    let agentlane_host::Backends {
        store,
        queue,
        clock,
        cron,
        agents,
        catalog,
        secrets,
        ..
    } = backends;
    let runner = runner.with_provider(Arc::new(TimedProvider {
        inner: Arc::new(agentlane_providers::demo::DemoModel::with_chunk_delay(
            Duration::ZERO,
        )),
        nanos: nanos.clone(),
    }));
    let worker = LaneWorker::new(queue.clone(), runner.clone());
    let key = "bench-key-0123456789abcdef";
    let app = agentlane_api::app(ApiState {
        shared_slots: None,
        spend: None,
        store,
        queue: queue.clone(),
        clock,
        cron,
        catalog,
        agents,
        secrets,
        keys: ApiKeys::from_pairs([("bench", key)]).map_err(anyhow::Error::msg)?,
        config: ApiConfig {
            demo_mode: true,
            ..ApiConfig::default()
        },
    });
    let shutdown = CancellationToken::new();
    let visibility = runner.config().visibility_timeout;
    let mut overheads = Vec::with_capacity(args.turns);
    let mut walls = Vec::with_capacity(args.turns);
    let progress = crate::progress::bar(args.turns as u64, "turns");
    let started = Instant::now();
    for i in 0..args.turns {
        let before_model = nanos.load(Ordering::Relaxed);
        let t = Instant::now();
        let body = serde_json::json!({
            "sessionKey": format!("bench-{}", i % args.sessions.max(1)),
            "message": format!("benchmark turn {i}"),
            "model": "demo/agentlane-demo",
        });
        let request = http::Request::post("/v1/agent")
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))?;
        let response = app.clone().oneshot(request).await?;
        if response.status() != http::StatusCode::ACCEPTED {
            bail!("turn {i}: the API answered {}", response.status());
        }
        let deliveries = queue.receive(1, visibility, Duration::from_secs(5)).await?;
        let Some(delivery) = deliveries.into_iter().next() else {
            bail!("turn {i}: nothing was delivered");
        };
        let outcome = worker.process(&delivery, &shutdown).await;
        worker.settle(&delivery, &outcome).await;
        let wall = t.elapsed();
        let model = Duration::from_nanos(nanos.load(Ordering::Relaxed) - before_model);
        walls.push(wall);
        overheads.push(wall.saturating_sub(model));
        progress.inc(1);
    }
    let total = started.elapsed();
    progress.finish_and_clear();
    overheads.sort();
    walls.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "turns: {} over {} sessions in {:.2} s ({:.0} turns/s)",
        args.turns,
        args.sessions,
        total.as_secs_f64(),
        args.turns as f64 / total.as_secs_f64()
    );
    println!(
        "per-turn overhead (wall - model): p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        ms(percentile(&overheads, 0.50)),
        ms(percentile(&overheads, 0.90)),
        ms(percentile(&overheads, 0.99)),
        ms(percentile(&overheads, 1.0))
    );
    println!(
        "per-turn wall:                      p50 {:.3} ms  p99 {:.3} ms",
        ms(percentile(&walls, 0.50)),
        ms(percentile(&walls, 0.99))
    );
    if let Some(kib) = crate::proc_mem::peak_rss_kib(std::process::id()) {
        println!("peak RSS: {:.1} MiB", kib as f64 / 1024.0);
    }
    Ok(())
}
