//! The cron Lambda: wiring only.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, service_fn};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // JSON lines on stderr for CloudWatch, filtered by `AGENTLANE_LOG` like every host. The
    // cron function links no backend or runner, so it does not use the host crate for this.
    let filter =
        EnvFilter::try_from_env("AGENTLANE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .without_time()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    lambda_runtime::run(service_fn(
        |event: LambdaEvent<EventBridgeEvent<serde_json::Value>>| async move {
            agentlane_cron::tick(event.payload).await
        },
    ))
    .await
}
