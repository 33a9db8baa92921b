//! Assembling the model's view of a session from its transcript: the latest compaction
//! summary replaces every entry it covers.

use super::cache::SharedEntry;
use agentlane_core::{Message, TranscriptEntry};
use std::borrow::Borrow;

/// What assembling a history needs of a transcript entry: as read from the store, or as the
/// runner's transcript cache keeps it.
pub trait Entry {
    /// The entry's position in the transcript.
    fn seq(&self) -> u64;
    /// The entry's message.
    fn message(&self) -> &Message;
}

impl Entry for TranscriptEntry {
    fn seq(&self) -> u64 {
        self.seq
    }
    fn message(&self) -> &Message {
        &self.message
    }
}

impl Entry for SharedEntry {
    fn seq(&self) -> u64 {
        self.seq
    }
    fn message(&self) -> &Message {
        self.message.message()
    }
}

fn is_compaction<E: Entry>(entry: &E) -> bool {
    matches!(entry.message(), Message::Compaction { .. })
}

/// The entries a model sees, in order: the latest compaction (if any), then every
/// non-compaction entry after the seq it covers.
pub fn assemble<E: Entry>(entries: &[E]) -> Vec<&E> {
    let latest = entries.iter().rev().find(|e| is_compaction(*e));
    match latest {
        None => entries.iter().collect(),
        Some(c) => {
            let through = match c.message() {
                Message::Compaction { through_seq, .. } => *through_seq,
                _ => 0,
            };
            std::iter::once(c)
                .chain(
                    entries
                        .iter()
                        .filter(|e| e.seq() > through && !is_compaction(*e)),
                )
                .collect()
        }
    }
}

/// The history sent to the model when only the last `max_turns` user turns are kept: a leading
/// compaction summary stays; everything before the `max_turns`-th last user message goes.
/// Cutting at a user message never separates a tool call from its result. A borrowed view:
/// nothing is copied.
pub fn limit_turns<M: Borrow<Message>>(history: &[M], max_turns: Option<u32>) -> Vec<&M> {
    let Some(max) = max_turns.filter(|m| *m > 0) else {
        return history.iter().collect();
    };
    // The `max`-th last user message, found from the end (a session's older turns are not
    // visited).
    let cut = history
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| matches!(Borrow::<Message>::borrow(*m), Message::User { .. }))
        .nth(max as usize - 1)
        .map(|(i, _)| i);
    let Some(cut) = cut.filter(|&c| {
        history[..c]
            .iter()
            .any(|m| matches!(m.borrow(), Message::User { .. }))
    }) else {
        return history.iter().collect();
    };
    history
        .first()
        .filter(|m| matches!((*m).borrow(), Message::Compaction { .. }))
        .into_iter()
        .chain(&history[cut..])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::RunId;

    fn entry(seq: u64, message: Message) -> TranscriptEntry {
        TranscriptEntry {
            seq,
            run_id: RunId::new("r"),
            ts: 0,
            message,
        }
    }
    fn compaction(seq: u64, through: u64) -> TranscriptEntry {
        entry(
            seq,
            Message::Compaction {
                summary: format!("up to {through}"),
                through_seq: through,
                tokens_before: 0,
                tokens_after: 0,
            },
        )
    }

    #[test]
    fn only_the_last_turns_are_kept_with_the_summary() {
        let c = compaction(9, 0).message;
        let h = vec![
            c.clone(),
            Message::user("1"),
            Message::user("2"),
            Message::user("3"),
        ];
        let owned = |v: Vec<&Message>| v.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            owned(limit_turns(&h, Some(2))),
            vec![c, Message::user("2"), Message::user("3")]
        );
        assert_eq!(owned(limit_turns(&h, None)), h);
        assert_eq!(owned(limit_turns(&h[1..], Some(5))), h[1..].to_vec());
        assert_eq!(owned(limit_turns(&h[1..], Some(3))), h[1..].to_vec());
        assert_eq!(
            owned(limit_turns(&h[1..], Some(1))),
            vec![Message::user("3")]
        );
    }

    #[test]
    fn the_latest_compaction_replaces_what_it_covers() {
        let entries = vec![
            entry(0, Message::user("a")),
            entry(1, Message::user("b")),
            entry(2, Message::user("c")),
            compaction(3, 1),
            entry(4, Message::user("d")),
            compaction(5, 2),
            entry(6, Message::user("e")),
        ];
        let seqs: Vec<u64> = assemble(&entries).iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [5, 4, 6]);
        let none: Vec<u64> = assemble(&entries[..3]).iter().map(|e| e.seq).collect();
        assert_eq!(none, [0, 1, 2]);
    }
}
