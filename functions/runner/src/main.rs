//! The runner Lambda: wiring only. Each batch goes through `agentlane_runner::handle_batch`
//! with the shared lane worker; turns still running shortly before the invocation's deadline
//! are handed back (their state is kept; the next invocation resumes them).

use agentlane_agent::LaneWorker;
use agentlane_host as host;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{LambdaEvent, service_fn};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    host::init_tracing(true);
    let backends = host::open_aws().await?;
    let runner = host::runner_with(&backends, &host::load()?)?;
    let worker = LaneWorker::new(backends.queue.clone(), runner);
    let margin = host::env_ms("AGENTLANE_HANDBACK_MARGIN_MS", Duration::from_secs(30))?;
    let queue = backends.queue;
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| {
        let (worker, queue) = (worker.clone(), queue.clone());
        async move {
            let shutdown = CancellationToken::new();
            let deadline_ms = event.context.deadline;
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms));
            let timer = {
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(left.saturating_sub(margin)).await;
                    shutdown.cancel();
                })
            };
            let response: SqsBatchResponse =
                agentlane_runner::handle_batch(event.payload, queue.as_ref(), |delivery| {
                    let (worker, shutdown) = (worker.clone(), shutdown.clone());
                    async move { worker.process(&delivery, &shutdown).await }
                })
                .await;
            timer.abort();
            Ok::<_, lambda_runtime::Error>(response)
        }
    }))
    .await
}
