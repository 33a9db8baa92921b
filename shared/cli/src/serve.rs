//! `agentlane serve`: the HTTP API, the lane workers and the runner in one process, on the
//! embedded store (default) or on DynamoDB + SQS (`AGENTLANE_BACKEND=aws`).

use crate::args::ServeArgs;
use agentlane_agent::LaneWorker;
use agentlane_api::{ApiKeys, ApiState, Notifier, NotifyingStore};
use agentlane_host::{self as host, BackendKind, Backends};
use anyhow::Context;
use rand::Rng;
use std::io::Write;
use std::path::Path;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// API keys from `AGENTLANE_API_KEYS`, or a generated key for tenant `local` kept in
/// `<data-dir>/api-key` (created once, readable by the owner only).
fn api_keys(data_dir: &Path) -> anyhow::Result<ApiKeys> {
    if let Some(keys) = host::api_keys_from_env()? {
        return Ok(keys);
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
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

/// SQS's longest long poll: how long an idle lane worker's receive waits on the AWS backend
/// unless `AGENTLANE_RECEIVE_WAIT_MS` says otherwise.
const SQS_LONG_POLL: std::time::Duration = std::time::Duration::from_secs(20);

/// Runs `agentlane serve` until Ctrl-C or SIGTERM: the API and the lane workers (and the cron
/// ticker) in one process, on the embedded store or, with `AGENTLANE_BACKEND=aws`, on SQS and
/// DynamoDB; fails when the configuration or the backend cannot be set up.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    host::init_tracing(false);
    let kind = BackendKind::from_env()?;
    let (mut backends, embedded): (Backends, _) = match kind {
        BackendKind::Embedded => {
            let (backends, sqlite) = host::open_embedded_backend(&args.data_dir)?;
            (backends, Some(sqlite))
        }
        BackendKind::Aws => (host::open_aws().await?, None),
    };
    // Every commit of this process wakes its waiters and event streams at once.
    let notifier = Notifier::new();
    backends.store = std::sync::Arc::new(NotifyingStore::new(backends.store, notifier.clone()));
    // Provider keys: the environment, plus a Secrets Manager secret / SSM path when one is
    // named (as the functions read them).
    let mut settings = host::read_provider_secrets().await?.load_settings()?;
    if kind == BackendKind::Aws && settings.runner.receive_wait.is_none() {
        // An idle worker long-polls SQS for as long as it allows (3 requests a minute each,
        // not 60); a message sent meanwhile still answers the poll at once.
        settings.runner.receive_wait = Some(SQS_LONG_POLL);
    }
    let runner = host::runner_with(&backends, &settings)?;
    let models = &settings.models;
    // Configured (or generated) keys, then the store's (`agentlane keys create`).
    let keys = host::api_keys_with_store(&backends, Some(api_keys(&args.data_dir)?))?;
    if models.demo {
        tracing::warn!(
            model = host::DEMO_MODEL,
            "no model provider configured: runs use the built-in OFFLINE DEMO model \
             (set OPENAI_API_KEY / OPENAI_BASE_URL and AGENTLANE_MODEL for a real one)"
        );
    } else {
        tracing::info!(model = %models.default_model, "default model");
    }
    if let Some(sqlite) = &embedded {
        // The runners' store is this backend: a receive takes the session's lock in the write
        // that delivers the message (one write per turn fewer).
        let owner = format!("serve-{}", std::process::id());
        sqlite.lock_on_receive(&owner, runner.config().lock_lease);
        // Fair dispatch across tenants: one tenant's runs hold at most its share of the workers.
        sqlite.set_tenant_in_flight_cap(
            settings
                .api
                .limits
                .tenant_in_flight_cap(args.workers.max(1)),
        );
    }
    let cron = host::cron::CronSettings::from_env()?;
    let mut config = settings.api_config(Duration::from_secs(15 * 60));
    config.max_cron_jobs = cron.max_jobs;
    config.max_agents = host::settings::max_agents_from_env()?;
    config.max_secrets = host::settings::max_secrets_from_env()?;
    let api = ApiState {
        // On the AWS backend several `serve` replicas may share one deployment: the stream and
        // wait caps are kept in the table (one process on the embedded store: in memory).
        shared_slots: match kind {
            BackendKind::Aws => Some(backends.slots.clone()),
            BackendKind::Embedded => None,
        },
        store: host::api_store(&backends, &settings)?,
        queue: backends.queue.clone(),
        clock: backends.clock.clone(),
        cron: backends.cron.clone(),
        catalog: backends.catalog.clone(),
        agents: backends.agents.clone(),
        secrets: backends.secrets.clone(),
        spend: Some(backends.spend.clone()),
        keys,
        config,
    };

    let shutdown = CancellationToken::new();
    let mut workers = Vec::new();
    for _ in 0..args.workers.max(1) {
        let worker = LaneWorker::new(backends.queue.clone(), runner.clone());
        workers.push(tokio::spawn(worker.run(shutdown.clone())));
    }

    let ticker = cron.enabled.then(|| {
        let ticker = host::cron::ticker(&backends, &settings, &cron);
        let stop = shutdown.clone();
        tokio::spawn(async move { ticker.run(stop, None).await })
    });

    // The stuck-session sweep (SPEC §10), every AGENTLANE_SWEEP_INTERVAL_MS.
    let sweeper = {
        let thresholds = agentlane_supervisor::Thresholds::from_lookup(|n| std::env::var(n).ok())
            .map_err(anyhow::Error::msg)?;
        let interval = host::env_ms(
            "AGENTLANE_SWEEP_INTERVAL_MS",
            agentlane_supervisor::DEFAULT_SWEEP_INTERVAL,
        )?;
        let mut supervisor = agentlane_supervisor::Supervisor::new(
            backends.store.clone(),
            backends.processing.clone(),
            backends.clock.clone(),
            thresholds,
        )
        // Lost lane messages of idle sessions' queued runs are re-enqueued (issue 11).
        .with_queue(backends.queue.clone())
        // Sessions past their tenant's retention are deleted (issue 24).
        .with_retention(agentlane_supervisor::RetentionSweep::new(
            backends.retention.clone(),
            host::retention_policy(&settings)?,
        ));
        if let Some(sqlite) = embedded {
            // The embedded queue's dead letters (its `lane_dead` table), on the same backend.
            supervisor = supervisor.with_dead_letters(std::sync::Arc::new(sqlite));
        } else if let Some(dead_letters) = host::aws_dead_letters().await? {
            // The SQS lane queue's dead-letter queue.
            supervisor = supervisor.with_dead_letters(std::sync::Arc::new(dead_letters));
        }
        tokio::spawn(agentlane_supervisor::run_every(
            std::sync::Arc::new(supervisor),
            interval,
            shutdown.clone(),
        ))
    };

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
    let limits = api.config.limits.clone();
    let app = agentlane_api::app_with(api, notifier);
    let server = agentlane_api::serve(listener, app, &limits, async move {
        server_stop.cancelled().await
    });
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
    if let Some(t) = ticker {
        let _ = t.await;
    }
    let _ = sweeper.await;
    Ok(())
}

/// `agentlane setup-aws` arguments.
#[derive(Debug, clap::Args)]
pub struct SetupAwsArgs {
    /// Also add the index attributes (`sessTenant`, `runSession`) and tenant-registry items
    /// that items written before them lack, so session lists, tenant erasure and retention see
    /// them. Scans the table once (an operator's one-off); safe to run again.
    #[arg(long)]
    pub backfill_indexes: bool,
}

/// `agentlane setup-aws`: creates the table, the queues and the KMS key of tenant secrets when
/// absent; with `--backfill-indexes` also backfills the index attributes of older items.
pub async fn setup_aws(args: SetupAwsArgs) -> anyhow::Result<()> {
    host::init_tracing(false);
    let spinner = crate::progress::spinner(
        true,
        "creating the table, queues and secrets key when absent",
    );
    let resources = host::setup_aws().await;
    spinner.finish_and_clear();
    let resources = resources?;
    println!("table:     {}", resources.table);
    println!("queue:     {}", resources.queue_url);
    if let Some(dlq) = resources.dlq_url {
        println!("dlq:       {dlq}");
    }
    println!(
        "secrets:   {} ({}; set AGENTLANE_SECRETS_KMS_KEY={} for serve)",
        resources.secrets_key.key, resources.secrets_key.arn, resources.secrets_key.key
    );
    if args.backfill_indexes {
        let spinner = crate::progress::spinner(true, "backfilling index attributes (a scan)");
        let done = host::backfill_aws_indexes().await;
        spinner.finish_and_clear();
        let done = done?;
        println!(
            "backfill:  {} sessions, {} runs indexed; {} tenants registered",
            done.sessions, done.runs, done.tenants
        );
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
