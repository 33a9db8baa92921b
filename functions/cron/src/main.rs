//! The cron Lambda: wiring only.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    agentlane_runtime::init_tracing(true);
    lambda_runtime::run(service_fn(
        |event: LambdaEvent<EventBridgeEvent<serde_json::Value>>| async move {
            agentlane_cron::tick(event.payload).await
        },
    ))
    .await
}
