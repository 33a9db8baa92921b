//! The terminal run record always fits one stored record ([`MAX_RECORD_BYTES`]), so no size
//! the API accepts can make a run's final commit fail for good (and its turn be run — and the
//! model called — again). A finished run no longer needs what only a resumed run reads, so
//! when its JSON is too large, in this order until it fits:
//! 1. its checkpoint is dropped (a finished run is never resumed);
//! 2. the request's message, then its extra system prompt, are replaced by a marker (the
//!    message is in the transcript; runs are matched to idempotent retries by their
//!    fingerprint, and the run view shows neither), then its seeded history is dropped (it is
//!    in the transcript too);
//! 3. the longest payload text is cut from the end with a marker (the transcript keeps the
//!    answer as its own record).

use agentlane_core::{MAX_RECORD_BYTES, Run};

/// Room for a marker line.
const MARKER_ROOM: usize = 128;

fn json_len(run: &Run) -> usize {
    serde_json::to_string(run).map_or(usize::MAX, |j| j.len())
}

/// `run` (terminal) shrunk until its JSON fits [`MAX_RECORD_BYTES`]; unchanged when it does.
pub fn fit_finished(mut run: Run) -> Run {
    if json_len(&run) <= MAX_RECORD_BYTES {
        return run;
    }
    let original = json_len(&run);
    run.checkpoint = None;
    if json_len(&run) > MAX_RECORD_BYTES {
        elide(&mut run.request.message, "message");
    }
    if json_len(&run) > MAX_RECORD_BYTES
        && let Some(prompt) = run.request.extra_system_prompt.as_mut()
    {
        elide(prompt, "extra system prompt");
    }
    if json_len(&run) > MAX_RECORD_BYTES {
        // The seeded history is in the transcript, ahead of the message.
        run.request.history.clear();
    }
    // A cut scales the excess by the text's raw/JSON ratio (escapes make JSON longer), so one
    // or two cuts per payload are enough; the bound only guards against a loop.
    for _ in 0..run.payloads.len() * 4 {
        let len = json_len(&run);
        if len <= MAX_RECORD_BYTES {
            break;
        }
        let Some(longest) = run.payloads.iter_mut().max_by_key(|p| p.text.len()) else {
            break;
        };
        let raw = longest.text.len().max(1);
        let json = serde_json::to_string(&longest.text).map_or(raw, |j| j.len().max(1));
        let excess = (len - MAX_RECORD_BYTES) * raw / json + 1;
        cut(&mut longest.text, excess);
    }
    tracing::warn!(
        run = %run.run_id,
        bytes = original,
        now = json_len(&run),
        "the finished run record was too large to store whole; shrunk to fit"
    );
    run
}

fn elide(text: &mut String, what: &str) {
    let bytes = text.len();
    *text = format!(
        "[agentlane: the {what} ({bytes} bytes) is not kept in the finished run record; see the transcript]"
    );
}

fn cut(text: &mut String, excess: usize) {
    let mut keep = text.len().saturating_sub(excess + MARKER_ROOM);
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    let omitted = text.len() - keep;
    text.truncate(keep);
    text.push_str(&format!(
        "\n[agentlane: {omitted} bytes truncated to fit the store's item size limit; the transcript has the whole answer]"
    ));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agentlane_conformance::fixtures;
    use agentlane_core::{
        LivenessState, NewTurn, Payload, RunStatus, SessionId, SessionKey, TenantId, TurnRequest,
    };

    fn finished(message: usize, prompt: usize, reply: usize) -> Run {
        let turn = NewTurn {
            request: TurnRequest {
                queue_mode: None,
                extra_system_prompt: Some("p".repeat(prompt)),
                ..fixtures::request(&"m".repeat(message))
            },
            ..fixtures::turn(&TenantId::new("acme"), &SessionKey::new("s"), 1)
        };
        let mut run = turn.queued_run(SessionId::generate(), 0, None, &Default::default());
        run.status = RunStatus::Ok;
        run.liveness_state = LivenessState::Working;
        run.checkpoint = Some(serde_json::json!({"answer": "x".repeat(1000)}));
        run.payloads = vec![Payload {
            text: "r\"".repeat(reply / 2),
            is_error: false,
        }];
        run
    }

    #[test]
    fn a_run_that_fits_is_kept_whole() {
        let run = finished(1000, 1000, 1000);
        assert_eq!(fit_finished(run.clone()), run);
    }

    #[test]
    fn a_max_size_turn_with_a_long_reply_fits_and_keeps_its_reply() {
        // 256 KiB message + 90 KB system prompt (accepted: the queued run fits) + 200 KB reply
        let run = finished(256 * 1024, 90_000, 200_000);
        let fitted = fit_finished(run.clone());
        assert!(serde_json::to_string(&fitted).unwrap().len() <= MAX_RECORD_BYTES);
        assert_eq!(fitted.payloads, run.payloads, "the reply is whole");
        assert!(
            fitted.request.message.contains("not kept"),
            "{}",
            fitted.request.message
        );
        assert_eq!(fitted.request_fingerprint, run.request_fingerprint);
        assert_eq!(fitted.checkpoint, None);
    }

    #[test]
    fn a_reply_too_long_for_the_record_is_cut_with_a_marker() {
        let run = finished(10, 10, 800_000);
        let fitted = fit_finished(run);
        assert!(serde_json::to_string(&fitted).unwrap().len() <= MAX_RECORD_BYTES);
        let text = &fitted.payloads[0].text;
        assert!(text.starts_with("r\"r\""));
        assert!(
            text.ends_with("the transcript has the whole answer]"),
            "{}",
            &text[text.len() - 200..]
        );
    }

    #[test]
    fn a_long_seeded_history_goes_before_the_reply_is_cut() {
        // A stateless client's 300 KB conversation and a 100 KB reply
        let mut run = finished(10, 10, 100_000);
        run.request.history = vec![
            agentlane_core::Message::user("h".repeat(150_000)),
            agentlane_core::Message::Assistant {
                content: "a".repeat(150_000),
                reasoning: None,
                tool_calls: Vec::new(),
                model: None,
            },
        ];
        let fitted = fit_finished(run.clone());
        assert!(serde_json::to_string(&fitted).unwrap().len() <= MAX_RECORD_BYTES);
        assert_eq!(fitted.request.history, Vec::new());
        assert_eq!(fitted.payloads, run.payloads, "the reply is whole");
        // A history that fits stays.
        run.request.history.truncate(1);
        run.request.history[0] = agentlane_core::Message::user("short");
        assert_eq!(fit_finished(run.clone()), run);
    }
}
