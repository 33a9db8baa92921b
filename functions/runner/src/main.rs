//! The runner Lambda: wiring only. Each invocation goes through
//! [`agentlane_runner::RunnerFunction`] with the shared lane worker.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

use agentlane_agent::LaneWorker;
use agentlane_host as host;
use agentlane_runner::RunnerFunction;
use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{LambdaEvent, service_fn};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    host::init_tracing(true);
    let backends = host::open_aws().await?;
    // Provider keys from Secrets Manager / SSM, read once per cold start.
    let runner = host::runner_with(&backends, &host::load_deployed().await?)?;
    let margin = host::env_ms("AGENTLANE_HANDBACK_MARGIN_MS", Duration::from_secs(30))?;
    let function = RunnerFunction::new(
        LaneWorker::new(backends.queue.clone(), runner),
        backends.queue,
        backends.clock,
        margin,
    );
    let function = &function;
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| async move {
        Ok::<_, lambda_runtime::Error>(function.handle(event.payload, event.context.deadline).await)
    }))
    .await
}
