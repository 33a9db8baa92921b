//! `agentlane serve`: the HTTP API, the lane workers and the runner in one process, on the
//! embedded SQLite store and lane queue.

use crate::args::ServeArgs;
use crate::settings::{self, ModelSettings, env, env_ms};
use agentlane_agent::{LaneWorker, ModelRouter, Runner, RunnerConfig};
use agentlane_api::{ApiConfig, ApiKeys, ApiState};
use agentlane_core::{Clock, LaneQueue, Store, SystemClock};
use agentlane_providers::demo::DemoModel;
use agentlane_providers::openai::{OpenAiConfig, OpenAiProvider};
use agentlane_store_sqlite::SqliteBackend;
use agentlane_tools::ToolRegistry;
use agentlane_tools::current_time::CurrentTime;
use agentlane_tools::http_fetch::{HttpFetch, HttpFetchConfig};
use agentlane_tools::ssrf::SsrfPolicy;
use anyhow::Context;
use rand::Rng;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The pieces `serve` (and `bench`) run.
pub struct System {
    pub store: Arc<dyn Store>,
    pub queue: Arc<dyn LaneQueue>,
    pub clock: Arc<dyn Clock>,
    pub runner: Runner,
    pub models: ModelSettings,
}

/// The runner settings from the environment (defaults: SPEC §12).
pub fn runner_config(self_hosted_default: bool) -> anyhow::Result<RunnerConfig> {
    let d = RunnerConfig::default();
    let idle_default = if self_hosted_default {
        d.model_idle_timeout_self_hosted
    } else {
        d.model_idle_timeout
    };
    let idle = env_ms("AGENTLANE_MODEL_IDLE_TIMEOUT_MS", idle_default)?;
    Ok(RunnerConfig {
        lock_lease: env_ms("AGENTLANE_LOCK_LEASE_MS", d.lock_lease)?,
        lock_acquire_timeout: env_ms("AGENTLANE_LOCK_ACQUIRE_TIMEOUT_MS", d.lock_acquire_timeout)?,
        visibility_timeout: env_ms("AGENTLANE_VISIBILITY_TIMEOUT_MS", d.visibility_timeout)?,
        model_idle_timeout: idle,
        model_idle_timeout_self_hosted: env_ms(
            "AGENTLANE_MODEL_IDLE_TIMEOUT_MS",
            d.model_idle_timeout_self_hosted,
        )?,
        ..d
    })
}

/// The model router for the configured providers (or the demo model).
pub fn model_router(models: &ModelSettings) -> anyhow::Result<ModelRouter> {
    let mut router = ModelRouter::new(models.default_model.clone());
    if let Some(openai) = &models.openai {
        let mut config = OpenAiConfig {
            api_key: openai.api_key.clone(),
            self_hosted: openai.self_hosted,
            ..OpenAiConfig::default()
        };
        if let Some(url) = &openai.base_url {
            config.base_url = url.clone();
        }
        router = router.with_provider(Arc::new(
            OpenAiProvider::new(config).context("OPENAI_BASE_URL / OPENAI_API_KEY")?,
        ));
    }
    // The demo model is always available by name; it is the default only without a provider.
    router = router.with_provider(Arc::new(DemoModel::with_chunk_delay(
        models.demo_chunk_delay,
    )));
    Ok(router)
}

/// The tools offered to the model.
pub fn tool_registry() -> anyhow::Result<ToolRegistry> {
    let mut policy = SsrfPolicy::default();
    if let Some(allow) = env("AGENTLANE_HTTP_FETCH_ALLOW") {
        policy.allow_hosts = allow
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
    }
    Ok(ToolRegistry::new()
        .with(Arc::new(CurrentTime::new()))
        .with(Arc::new(HttpFetch::new(HttpFetchConfig {
            policy,
            ..HttpFetchConfig::default()
        }))))
}

/// Opens the embedded backend under `data_dir` and builds the runner.
pub fn build_system(data_dir: &Path) -> anyhow::Result<System> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
    let backend = SqliteBackend::open(data_dir)
        .with_context(|| format!("cannot open the embedded store in {}", data_dir.display()))?;
    let store: Arc<dyn Store> = Arc::new(backend.clone());
    let queue: Arc<dyn LaneQueue> = Arc::new(backend);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let models = ModelSettings::from_env()?;
    let self_hosted = models.openai.as_ref().is_some_and(|o| o.self_hosted);
    let runner = Runner::new(
        store.clone(),
        clock.clone(),
        model_router(&models)?,
        tool_registry()?,
        runner_config(self_hosted)?,
    );
    Ok(System {
        store,
        queue,
        clock,
        runner,
        models,
    })
}

/// API keys from `AGENTLANE_API_KEYS`, or a generated key for tenant `local` kept in
/// `<data-dir>/api-key` (created once, readable by the owner only).
fn api_keys(data_dir: &Path) -> anyhow::Result<ApiKeys> {
    if let Some(spec) = env("AGENTLANE_API_KEYS") {
        return ApiKeys::parse(&spec).map_err(|e| anyhow::anyhow!("AGENTLANE_API_KEYS: {e}"));
    }
    let path = data_dir.join("api-key");
    let key = match std::fs::read_to_string(&path) {
        Ok(k) if !k.trim().is_empty() => k.trim().to_owned(),
        _ => {
            let key: String = rand::rng()
                .sample_iter(rand::distr::Alphanumeric)
                .take(40)
                .map(char::from)
                .collect();
            write_private(&path, &key)?;
            key
        }
    };
    tracing::warn!(
        path = %path.display(),
        "AGENTLANE_API_KEYS is not set: using the generated key for tenant `local` stored in this file"
    );
    ApiKeys::from_pairs([("local", key)]).map_err(|e| anyhow::anyhow!("generated key: {e}"))
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTLANE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_tracing();
    let system = build_system(&args.data_dir)?;
    let keys = api_keys(&args.data_dir)?;
    if system.models.demo {
        tracing::warn!(
            model = settings::DEMO_MODEL,
            "no model provider configured: runs use the built-in OFFLINE DEMO model \
             (set OPENAI_API_KEY / OPENAI_BASE_URL and AGENTLANE_MODEL for a real one)"
        );
    } else {
        tracing::info!(model = %system.models.default_model, "default model");
    }
    let api = ApiState {
        store: system.store.clone(),
        queue: system.queue.clone(),
        clock: system.clock.clone(),
        keys,
        config: ApiConfig {
            demo_mode: system.models.demo,
            ..ApiConfig::default()
        },
    };

    let shutdown = CancellationToken::new();
    let mut workers = Vec::new();
    for _ in 0..args.workers.max(1) {
        let worker = LaneWorker::new(system.queue.clone(), system.runner.clone());
        workers.push(tokio::spawn(worker.run(shutdown.clone())));
    }

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, workers = args.workers, data_dir = %args.data_dir.display(), "agentlane serving");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "agentlane listening on http://{addr}")?;
        out.flush()?;
    }
    let server_stop = shutdown.clone();
    let server = axum::serve(listener, agentlane_api::app(api))
        .with_graceful_shutdown(async move { server_stop.cancelled().await });
    let signals = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down: handing running turns back");
        signals.cancel();
    });
    server.await.context("HTTP server failed")?;
    for w in workers {
        let _ = w.await;
    }
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
