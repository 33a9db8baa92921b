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
    /// The model call failed. `started`: the response had begun (assistant stage) rather than
    /// being refused up front (prompt stage). `progress`: visible text or a tool call had
    /// arrived before the failure.
    #[error("{error}")]
    Provider {
        error: ProviderError,
        started: bool,
        progress: bool,
    },
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
    let failed = |error, started, progress| AttemptError::Provider {
        error,
        started,
        progress,
    };
    let mut stream = tokio::select! {
        biased;
        _ = stop.cancelled() => return Err(AttemptError::Stopped),
        opened = tokio::time::timeout(idle_timeout, provider.stream(request, call.clone())) => match opened {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(failed(e, false, false)),
            Err(_) => return Err(failed(idle_error(idle_timeout), false, false)),
        },
    };
    let mut acc = StreamAccumulator::new();
    let mut progress = false;
    loop {
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => {
                writer.discard_delta();
                return Err(AttemptError::Stopped);
            }
            next = tokio::time::timeout(idle_timeout, stream.next()) => next,
        };
        // A provider ends its stream when the call is cancelled: that is the stop, not a
        // broken response.
        if stop.is_cancelled() {
            writer.discard_delta();
            return Err(AttemptError::Stopped);
        }
        let event = match next {
            Err(_) => {
                writer.discard_delta();
                return Err(failed(idle_error(idle_timeout), true, progress));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                writer.discard_delta();
                return Err(failed(e, true, progress));
            }
            Ok(Some(Ok(event))) => event,
        };
        match &event {
            StreamEvent::TextDelta(text) => {
                progress |= !text.trim().is_empty();
                writer.assistant_delta(text).await?;
            }
            StreamEvent::ToolCallStart { .. } => progress = true,
            _ => {}
        }
        acc.push(&event);
        if matches!(event, StreamEvent::Finished(_)) {
            break;
        }
    }
    let turn = acc.finish();
    if turn.finish.is_none() {
        writer.discard_delta();
        return Err(failed(
            ProviderError::new(
                FailoverReason::Network,
                "the model stream ended before the response was complete",
            ),
            true,
            progress,
        ));
    }
    Ok(turn)
}

fn idle_error(idle: Duration) -> ProviderError {
    ProviderError::new(
        FailoverReason::Timeout,
        format!("model idle timeout: no data for {} ms", idle.as_millis()),
    )
}
