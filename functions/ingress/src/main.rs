//! The ingress Lambda: wiring only. The handler is `agentlane_api::app`, the same router the
//! local server runs.

use agentlane_api::ApiState;
use agentlane_host as host;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    host::init_tracing(true);
    let backends = host::open_aws().await?;
    let settings = host::load()?;
    let keys = host::api_keys_from_env()?.ok_or_else(|| {
        anyhow::anyhow!("AGENTLANE_API_KEYS must be set for the ingress function")
    })?;
    // API Gateway ends requests at 30 s: waits are capped below that.
    let mut config = settings.api_config(Duration::from_secs(25));
    config.max_cron_jobs = host::cron::CronSettings::from_env()?.max_jobs;
    // Metrics go to CloudWatch (EMF from the runner and cron functions), not to a route.
    config.expose_metrics = false;
    let app = agentlane_api::app(ApiState {
        store: host::api_store(&backends, &settings)?,
        queue: backends.queue,
        clock: backends.clock,
        cron: backends.cron,
        keys,
        config,
    });
    lambda_http::run(app).await
}
