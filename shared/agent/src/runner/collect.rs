//! Queue mode `collect` (SPEC §4): the first collect run whose turn comes waits for a quiet
//! window (no newer message accepted on its session for [`RunnerConfig::collect_window`],
//! at most [`MAX_QUIET_WINDOWS`] windows), takes the collect messages accepted after it in
//! fenced writes (their runs end `collected` into it) and runs once for all of them. The
//! model sees at most [`MAX_COLLECTED_PER_TURN`] of the messages in full; older ones are
//! summarised in one line of the same prompt, never dropped.
//!
//! [`RunnerConfig::collect_window`]: crate::RunnerConfig::collect_window

use super::turn_loop::Turn;
use agentlane_core::{EventStream, Message, QueueMode, Run, StoreError};
use agentlane_providers::SharedMessage;
use serde_json::json;

/// A collect turn shows at most this many messages in full (the carrier's own included).
pub const MAX_COLLECTED_PER_TURN: usize = 20;

/// The quiet wait ends after this many windows even if messages keep coming.
pub const MAX_QUIET_WINDOWS: u32 = 10;

/// Takes per collect turn at most (each takes up to `MAX_STEERS_PER_TAKE` messages).
const MAX_TAKES: usize = 8;

/// Characters of each message quoted in the summary line.
const SUMMARY_QUOTE_CHARS: usize = 60;

impl Turn<'_> {
    /// Whether this run was accepted in `collect` mode (and so collects the ones behind it).
    pub(super) fn collects(&self) -> bool {
        self.writer.run().request.queue_mode == Some(QueueMode::Collect)
    }

    /// After the start commit of a collect run: the quiet window (skipped on a resume), then
    /// the takes. The history ends with the turn's prompt: the messages in order, the oldest
    /// beyond [`MAX_COLLECTED_PER_TURN`] folded into one summary line.
    pub(super) async fn collect(&mut self, resumed: bool) -> Result<(), StoreError> {
        if !resumed {
            self.quiet_window().await?;
        }
        let mut collected: Vec<Run> = Vec::new();
        for _ in 0..MAX_TAKES {
            let taken = self.writer.take_collects().await?;
            if taken.is_empty() {
                break;
            }
            collected.extend(taken);
        }
        if collected.is_empty() {
            return Ok(());
        }
        let run_ids: Vec<&str> = collected.iter().map(|r| r.run_id.as_str()).collect();
        tracing::info!(run = %self.writer.run().run_id, collected = ?run_ids, "collect messages joined the run");
        self.writer.event(
            EventStream::Lifecycle,
            json!({ "phase": "collected", "runIds": run_ids }),
        );
        // The carrier's own message is the history's last entry after a fresh start.
        let mut texts = Vec::with_capacity(collected.len() + 1);
        if !resumed
            && matches!(
                self.history.last().map(|m| m.message()),
                Some(Message::User { .. })
            )
        {
            self.history.pop();
            texts.push(self.writer.run().request.message.clone());
        }
        texts.extend(collected.iter().map(|r| r.request.message.clone()));
        self.history
            .extend(prompt(&texts).into_iter().map(SharedMessage::from));
        Ok(())
    }

    /// Sleeps a window at a time until one passes without a new message on the session (its
    /// `runs_accepted` unchanged), at most [`MAX_QUIET_WINDOWS`] windows, or the run is stopped.
    async fn quiet_window(&mut self) -> Result<(), StoreError> {
        let window = self.runner.config.collect_window;
        if window.is_zero() {
            return Ok(());
        }
        let run = self.writer.run();
        let (tenant, key) = (run.tenant.clone(), run.session_key.clone());
        let accepted = |s: Option<agentlane_core::Session>| s.map_or(0, |s| s.runs_accepted);
        let mut seen = accepted(self.runner.store.get_session(&tenant, &key).await?);
        for _ in 0..MAX_QUIET_WINDOWS {
            tokio::select! {
                _ = self.stop.token().cancelled() => return Ok(()),
                _ = tokio::time::sleep(window) => {}
            }
            let now = accepted(self.runner.store.get_session(&tenant, &key).await?);
            if now == seen {
                break;
            }
            seen = now;
        }
        Ok(())
    }
}

/// The user messages of a collect turn: every text in full when there are at most
/// [`MAX_COLLECTED_PER_TURN`]; else one line summarising the oldest, then the newest
/// `MAX_COLLECTED_PER_TURN - 1` in full.
pub(crate) fn prompt(texts: &[String]) -> Vec<Message> {
    if texts.len() <= MAX_COLLECTED_PER_TURN {
        return texts.iter().map(|t| Message::user(t.clone())).collect();
    }
    let folded = texts.len() - (MAX_COLLECTED_PER_TURN - 1);
    let quotes: Vec<String> = texts[..folded].iter().map(|t| quote(t)).collect();
    let summary = format!(
        "[{folded} earlier messages sent meanwhile, summarised: {}]",
        quotes.join(" | ")
    );
    std::iter::once(Message::user(summary))
        .chain(texts[folded..].iter().map(|t| Message::user(t.clone())))
        .collect()
}

/// One message on one line, cut to [`SUMMARY_QUOTE_CHARS`] characters.
fn quote(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= SUMMARY_QUOTE_CHARS {
        format!("\"{line}\"")
    } else {
        let cut: String = line.chars().take(SUMMARY_QUOTE_CHARS).collect();
        format!("\"{cut}…\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_to_the_cap_every_message_is_shown_in_full() {
        let texts: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
        let prompt = prompt(&texts);
        assert_eq!(prompt.len(), 20);
        assert_eq!(prompt[0], Message::user("m0"));
    }

    #[test]
    fn beyond_the_cap_the_oldest_are_summarised_in_one_line() {
        let mut texts: Vec<String> = (0..25).map(|i| format!("m{i}")).collect();
        texts[0] = format!("first\nline {}", "x".repeat(100));
        let prompt = prompt(&texts);
        assert_eq!(prompt.len(), 20);
        let Message::User { content } = &prompt[0] else {
            panic!("{prompt:?}")
        };
        assert!(content.contains("6 earlier messages"), "{content}");
        assert!(
            content.contains("\"m5\"") && !content.contains("\"m6\""),
            "{content}"
        );
        assert!(
            !content.contains('\n') && content.contains('…'),
            "{content}"
        );
        assert_eq!(prompt[1], Message::user("m6"));
        assert_eq!(prompt[19], Message::user("m24"));
    }
}
