//! The cron Lambda: wiring only.

use agentlane_cron::CronFunction;
use agentlane_host::{self as runtime, cron::CronSettings};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    runtime::init_tracing(true);
    let backends = runtime::open_aws().await?;
    let settings = runtime::load()?;
    let ticker = runtime::cron::ticker(&backends, &settings, &CronSettings::from_env()?);
    let handler = CronFunction::new(ticker, backends.clock.clone());
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
