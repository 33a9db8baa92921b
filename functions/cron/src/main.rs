//! The cron Lambda: wiring only.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

use agentlane_cron::CronFunction;
use agentlane_host::{self as host, cron::CronSettings};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    host::init_tracing(true);
    let backends = host::open_aws().await?;
    let settings = host::load_deployed().await?;
    let ticker = host::cron::ticker(&backends, &settings, &CronSettings::from_env()?);
    let thresholds = agentlane_supervisor::Thresholds::from_lookup(|n| std::env::var(n).ok())
        .map_err(lambda_runtime::Error::from)?;
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
        host::retention_policy(&settings).map_err(lambda_runtime::Error::from)?,
    ));
    // Turns that reached the SQS dead-letter queue (AGENTLANE_DLQ_URL) end `dead_lettered`.
    if let Some(dead_letters) = host::aws_dead_letters().await? {
        supervisor = supervisor.with_dead_letters(std::sync::Arc::new(dead_letters));
    }
    let handler = CronFunction::new(ticker, backends.clock.clone())
        .with_supervisor(std::sync::Arc::new(supervisor));
    lambda_runtime::run(service_fn(
        |event: LambdaEvent<EventBridgeEvent<serde_json::Value>>| {
            let handler = handler.clone();
            async move {
                handler
                    .handle(event.payload, Some(event.context.deadline))
                    .await
            }
        },
    ))
    .await
}
