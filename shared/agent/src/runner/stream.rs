//! The one model-call streamer: opens the stream and reads it to its finish, with the idle
//! watchdog (nothing from the provider for the idle timeout fails the call; any bytes count,
//! as the providers yield [`StreamEvent::KeepAlive`] for bytes that complete no event) and the run's stop signal. Attempts
//! stream their text to the run's writer as it arrives; compaction's summarizing call streams
//! to nobody.

use crate::writer::RunWriter;
use agentlane_core::StoreError;
use agentlane_providers::{
    AssistantTurn, ModelProvider, ModelRequest, ProviderError, StreamAccumulator, StreamEvent,
};
use futures::StreamExt;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Why a model call produced no complete turn.
#[derive(Debug)]
pub(super) enum StreamError {
    /// The model call failed.
    Failed(ModelFailure),
    /// The run's stop signal fired (abort, timeout, lock lost, shutdown).
    Stopped,
    /// Writing the streamed text failed.
    Store(StoreError),
}

/// How a model call failed. `progress`: visible text or a tool call had arrived before the
/// failure.
#[derive(Debug)]
pub(super) enum ModelFailure {
    /// The provider refused the call before any output.
    Refused(ProviderError),
    /// No stream opened within the idle timeout.
    OpenTimedOut,
    /// The stream broke after it started.
    Broken {
        error: ProviderError,
        progress: bool,
    },
    /// No chunk arrived for the idle timeout after the stream started.
    Idle { progress: bool },
    /// The stream ended without a finish.
    EndedEarly { progress: bool },
}

/// Streams one model call to its finish. With a `writer`, text deltas go to it as they arrive
/// (coalesced there) and are dropped when the call fails.
pub(super) async fn stream_model(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    idle_timeout: Duration,
    stop: &CancellationToken,
    mut writer: Option<&mut RunWriter>,
) -> Result<AssistantTurn, StreamError> {
    let call = stop.child_token();
    let _cancel_on_drop = call.clone().drop_guard();
    if let Some(w) = writer.as_deref_mut() {
        w.begin_attempt_text();
    }
    // A start held back by the writer is written once its hold has passed.
    let mut held = HeldStart::of(writer.as_deref());
    let open = tokio::time::timeout(idle_timeout, provider.stream(request, call.clone()));
    tokio::pin!(open);
    let mut stream = loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return Err(StreamError::Stopped),
            _ = held.due(), if held.armed() => held.write(writer.as_deref_mut()).await?,
            opened = &mut open => break match opened {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return Err(StreamError::Failed(ModelFailure::Refused(e))),
                Err(_) => return Err(StreamError::Failed(ModelFailure::OpenTimedOut)),
            },
        }
    };
    let mut acc = StreamAccumulator::new();
    let mut progress = false;
    let ended = loop {
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => break Err(StreamError::Stopped),
            _ = held.due(), if held.armed() => {
                held.write(writer.as_deref_mut()).await?;
                continue;
            }
            next = tokio::time::timeout(idle_timeout, stream.next()) => next,
        };
        // A provider ends its stream when the call is cancelled: that is the stop, not a
        // broken response.
        if stop.is_cancelled() {
            break Err(StreamError::Stopped);
        }
        let event = match next {
            Err(_) => break Err(ModelFailure::Idle { progress }.into()),
            Ok(None) => break Ok(()),
            Ok(Some(Err(error))) => break Err(ModelFailure::Broken { error, progress }.into()),
            Ok(Some(Ok(event))) => event,
        };
        match &event {
            StreamEvent::TextDelta(text) => {
                progress |= !text.trim().is_empty();
                if let Some(w) = writer.as_deref_mut() {
                    w.assistant_delta(text).await.map_err(StreamError::Store)?;
                }
            }
            StreamEvent::ToolCallStart { .. } => progress = true,
            _ => {}
        }
        acc.push(&event);
        if matches!(event, StreamEvent::Finished(_)) {
            break Ok(());
        }
    };
    let failure = match ended {
        Ok(()) => {
            let turn = acc.finish();
            if turn.finish.is_some() {
                return Ok(turn);
            }
            ModelFailure::EndedEarly { progress }.into()
        }
        Err(failure) => failure,
    };
    if let Some(w) = writer {
        w.discard_delta();
    }
    Err(failure)
}

/// The writer's held start, as the stream sees it: when it is due, while it is still to be
/// written.
struct HeldStart {
    due: Option<tokio::time::Instant>,
}

impl HeldStart {
    fn of(writer: Option<&RunWriter>) -> Self {
        let due_in = writer.and_then(RunWriter::start_due_in);
        Self {
            due: due_in.map(|d| tokio::time::Instant::now() + d),
        }
    }

    fn armed(&self) -> bool {
        self.due.is_some()
    }

    async fn due(&self) {
        match self.due {
            Some(due) => tokio::time::sleep_until(due).await,
            None => std::future::pending().await,
        }
    }

    /// Writes the held start (once; the writer may have written it with another write).
    async fn write(&mut self, writer: Option<&mut RunWriter>) -> Result<(), StreamError> {
        self.due = None;
        if let Some(w) = writer {
            w.write_held_start().await.map_err(StreamError::Store)?;
        }
        Ok(())
    }
}

impl From<ModelFailure> for StreamError {
    fn from(failure: ModelFailure) -> Self {
        StreamError::Failed(failure)
    }
}
