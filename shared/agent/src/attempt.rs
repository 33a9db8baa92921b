//! One streamed model call, with the idle watchdog and the run's stop signal.

use crate::writer::RunWriter;
use agentlane_core::StoreError;
use agentlane_providers::{
    AssistantTurn, FailoverReason, ModelProvider, ModelRequest, ProviderError, StreamAccumulator,
    StreamEvent,
};
use futures::StreamExt;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Why an attempt produced no assistant turn.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The run's stop signal fired (abort, timeout, lock lost, shutdown).
    #[error("stopped")]
    Stopped,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Streams one model call. Text deltas go to `writer` as they arrive (coalesced there). The call
/// fails with a `Timeout` provider error when no chunk arrives for `idle_timeout`.
pub async fn stream_attempt(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    idle_timeout: Duration,
    stop: &CancellationToken,
    writer: &mut RunWriter,
) -> Result<AssistantTurn, AttemptError> {
    let call = stop.child_token();
    let _cancel_on_drop = call.clone().drop_guard();
    writer.begin_attempt_text();
    let mut stream = tokio::select! {
        _ = stop.cancelled() => return Err(AttemptError::Stopped),
        opened = tokio::time::timeout(idle_timeout, provider.stream(request, call.clone())) => match opened {
            Ok(result) => result?,
            Err(_) => return Err(idle_error(idle_timeout).into()),
        },
    };
    let mut acc = StreamAccumulator::new();
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => {
                writer.discard_delta();
                return Err(AttemptError::Stopped);
            }
            next = tokio::time::timeout(idle_timeout, stream.next()) => next,
        };
        let event = match next {
            Err(_) => {
                writer.discard_delta();
                return Err(idle_error(idle_timeout).into());
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                writer.discard_delta();
                return Err(e.into());
            }
            Ok(Some(Ok(event))) => event,
        };
        if let StreamEvent::TextDelta(text) = &event {
            writer.assistant_delta(text).await?;
        }
        acc.push(&event);
        if matches!(event, StreamEvent::Finished(_)) {
            break;
        }
    }
    let turn = acc.finish();
    if turn.finish.is_none() {
        writer.discard_delta();
        return Err(ProviderError::new(
            FailoverReason::Network,
            "the model stream ended before the response was complete",
        )
        .into());
    }
    Ok(turn)
}

fn idle_error(idle: Duration) -> ProviderError {
    ProviderError::new(
        FailoverReason::Timeout,
        format!("model idle timeout: no data for {} ms", idle.as_millis()),
    )
}
