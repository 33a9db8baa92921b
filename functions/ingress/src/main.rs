//! The ingress Lambda: wiring only. The handler is `agentlane_api::app`, the same router the
//! local server runs.

use agentlane_api::ApiState;
use agentlane_runtime as runtime;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    runtime::init_tracing(true);
    let backends = runtime::open_aws().await?;
    let settings = runtime::load()?;
    let keys = runtime::api_keys_from_env()?.ok_or_else(|| {
        anyhow::anyhow!("AGENTLANE_API_KEYS must be set for the ingress function")
    })?;
    // API Gateway ends requests at 30 s: waits are capped below that.
    let mut config = settings.api_config(Duration::from_secs(25));
    config.max_cron_jobs = runtime::cron::CronSettings::from_env()?.max_jobs;
    let app = agentlane_api::app(ApiState {
        store: backends.store,
        queue: backends.queue,
        clock: backends.clock,
        cron: backends.cron,
        keys,
        config,
    });
    lambda_http::run(app).await
}
