//! The ingress Lambda: wiring only. The handler is `agentlane_api::app`, the same router the
//! local server runs.

use agentlane_api::ApiState;
use agentlane_host as host;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    host::init_tracing(true);
    let backends = host::open_aws().await?;
    // Provider keys come from Secrets Manager / SSM (the ingress checks model names against
    // the configured providers), never from plaintext variables.
    let settings = host::load_deployed().await?;
    // Store-backed keys (`agentlane keys create`); `AGENTLANE_API_KEYS` is optional.
    let keys = host::api_keys_with_store(&backends, host::api_keys_from_env()?)?;
    // API Gateway ends requests at 30 s: waits are capped below that.
    let mut config = settings.api_config(Duration::from_secs(25));
    config.max_cron_jobs = host::cron::CronSettings::from_env()?.max_jobs;
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
