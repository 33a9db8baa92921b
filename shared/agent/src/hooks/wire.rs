//! The webhook wire format: the request body and the typed parse of an answer (pure).

use super::HookError;
use super::event::{HookContext, HookEvent};
use super::outcome::{
    FinalizeAction, HookOutcome, ModelOverride, PersistRewrite, PromptAdditions, ReplyClaim,
    RunGate, SendingVerdict, ToolCallVerdict,
};
use super::point::{Dispatch, HookPoint};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// `{"hook": "<point>", "context": {...}, "event": {...}}`.
pub(crate) fn request_body(ctx: &HookContext, event: &HookEvent) -> Value {
    json!({ "hook": event.point().as_str(), "context": ctx, "event": event })
}

/// Reads a webhook's answer for `point`. Pure observers ignore the body; `before_model_resolve`
/// accepts an empty body; the others need JSON of the point's shape (`null` = no opinion,
/// except on policy points, which must answer).
pub(crate) fn parse_response(point: HookPoint, body: &[u8]) -> Result<HookOutcome, HookError> {
    let empty = body.iter().all(u8::is_ascii_whitespace);
    match point.dispatch() {
        Dispatch::Observer if point != HookPoint::BeforeModelResolve => {
            return Ok(HookOutcome::Continue);
        }
        Dispatch::Observer if empty => return Ok(HookOutcome::Continue),
        _ if empty => return Err(invalid("empty body")),
        _ => {}
    }
    let value: Value = serde_json::from_slice(body).map_err(invalid)?;
    if value.is_null() {
        return if point.is_policy() {
            Err(invalid("null answer"))
        } else {
            Ok(HookOutcome::Continue)
        };
    }
    Ok(match point {
        HookPoint::BeforeModelResolve => HookOutcome::ModelOverride(typed::<ModelOverride>(value)?),
        HookPoint::BeforePromptBuild => HookOutcome::Prompt(typed::<PromptAdditions>(value)?),
        HookPoint::BeforeAgentReply => HookOutcome::Reply(typed::<ReplyClaim>(value)?),
        HookPoint::BeforeAgentRun => HookOutcome::RunGate(typed::<RunGateWire>(value)?.into()),
        HookPoint::BeforeAgentFinalize => {
            HookOutcome::Finalize(typed::<FinalizeWire>(value)?.try_into()?)
        }
        HookPoint::BeforeToolCall => HookOutcome::ToolCall(typed::<ToolCallVerdict>(value)?),
        HookPoint::ToolResultPersist => HookOutcome::Persist(typed::<PersistRewrite>(value)?),
        HookPoint::MessageSending => HookOutcome::Sending(typed::<SendingVerdict>(value)?),
        HookPoint::AgentEnd
        | HookPoint::BeforeCompaction
        | HookPoint::AfterCompaction
        | HookPoint::AfterToolCall
        | HookPoint::MessageReceived
        | HookPoint::MessageSent
        | HookPoint::SessionStart
        | HookPoint::SessionEnd => HookOutcome::Continue,
    })
}

fn invalid(why: impl std::fmt::Display) -> HookError {
    HookError::InvalidResponse(why.to_string())
}

/// Every answer shape is a JSON object (serde would also build a struct from an array).
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, HookError> {
    if !value.is_object() {
        return Err(invalid("expected a JSON object"));
    }
    serde_json::from_value(value).map_err(invalid)
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum GateOutcome {
    Pass,
    Block,
}

/// `before_agent_run`'s answer; strict, as befits a policy point.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunGateWire {
    outcome: GateOutcome,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

impl From<RunGateWire> for RunGate {
    fn from(w: RunGateWire) -> Self {
        match w.outcome {
            GateOutcome::Pass => RunGate::Pass,
            GateOutcome::Block => RunGate::Block {
                reason: w.reason.unwrap_or_default(),
                message: w.message,
            },
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum FinalizeKind {
    Finalize,
    Revise,
}

#[derive(Deserialize)]
struct RetryWire {
    instruction: Option<String>,
}

/// `before_agent_finalize`'s answer (OpenClaw's `{action, reason, retry: {instruction}}` too).
#[derive(Deserialize)]
struct FinalizeWire {
    action: FinalizeKind,
    #[serde(default)]
    instruction: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    retry: Option<RetryWire>,
}

impl TryFrom<FinalizeWire> for FinalizeAction {
    type Error = HookError;

    fn try_from(w: FinalizeWire) -> Result<Self, HookError> {
        Ok(match w.action {
            FinalizeKind::Finalize => FinalizeAction::Finalize,
            FinalizeKind::Revise => {
                let instruction = w
                    .retry
                    .and_then(|r| r.instruction)
                    .or(w.instruction)
                    .or(w.reason)
                    .ok_or_else(|| invalid("revise without an instruction"))?;
                FinalizeAction::Revise { instruction }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn parse(point: HookPoint, body: &str) -> Result<HookOutcome, HookError> {
        parse_response(point, body.as_bytes())
    }

    #[test]
    fn tool_call_answers_parse_strictly() {
        assert_eq!(
            parse(
                HookPoint::BeforeToolCall,
                r#"{"block":true,"blockReason":"no"}"#
            )
            .unwrap(),
            HookOutcome::ToolCall(ToolCallVerdict {
                block: Some(true),
                block_reason: Some("no".into()),
                params: None,
            })
        );
        assert_eq!(
            parse(HookPoint::BeforeToolCall, "{}").unwrap(),
            HookOutcome::ToolCall(ToolCallVerdict::default())
        );
        for bad in [
            "",
            "null",
            "[]",
            "not json",
            r#"{"blocked":true}"#,
            r#"{"block":"yes"}"#,
        ] {
            assert!(
                matches!(
                    parse(HookPoint::BeforeToolCall, bad),
                    Err(HookError::InvalidResponse(_))
                ),
                "{bad:?} must be unreadable"
            );
        }
    }

    #[test]
    fn run_gate_needs_an_explicit_outcome() {
        assert_eq!(
            parse(HookPoint::BeforeAgentRun, r#"{"outcome":"pass"}"#).unwrap(),
            HookOutcome::RunGate(RunGate::Pass)
        );
        assert_eq!(
            parse(
                HookPoint::BeforeAgentRun,
                r#"{"outcome":"block","reason":"r","message":"m"}"#
            )
            .unwrap(),
            HookOutcome::RunGate(RunGate::Block {
                reason: "r".into(),
                message: Some("m".into()),
            })
        );
        assert!(parse(HookPoint::BeforeAgentRun, "{}").is_err());
        assert!(parse(HookPoint::BeforeAgentRun, r#"{"outcome":"maybe"}"#).is_err());
    }

    #[test]
    fn finalize_accepts_openclaw_shape() {
        assert_eq!(
            parse(
                HookPoint::BeforeAgentFinalize,
                r#"{"action":"revise","reason":"why","retry":{"instruction":"fix it"}}"#
            )
            .unwrap(),
            HookOutcome::Finalize(FinalizeAction::Revise {
                instruction: "fix it".into()
            })
        );
        assert_eq!(
            parse(HookPoint::BeforeAgentFinalize, r#"{"action":"finalize"}"#).unwrap(),
            HookOutcome::Finalize(FinalizeAction::Finalize)
        );
        assert!(parse(HookPoint::BeforeAgentFinalize, r#"{"action":"revise"}"#).is_err());
    }

    #[test]
    fn observers_ignore_the_body_and_null_means_no_opinion_off_policy() {
        assert_eq!(
            parse(HookPoint::AgentEnd, "garbage").unwrap(),
            HookOutcome::Continue
        );
        assert_eq!(
            parse(HookPoint::BeforeModelResolve, "").unwrap(),
            HookOutcome::Continue
        );
        assert_eq!(
            parse(HookPoint::BeforeModelResolve, r#"{"model":"openai/gpt"}"#).unwrap(),
            HookOutcome::ModelOverride(ModelOverride {
                model: Some("openai/gpt".into())
            })
        );
        assert_eq!(
            parse(HookPoint::MessageSending, "null").unwrap(),
            HookOutcome::Continue
        );
        assert_eq!(
            parse(HookPoint::MessageSending, r#"{"content":"hi"}"#).unwrap(),
            HookOutcome::Sending(SendingVerdict {
                cancel: false,
                content: Some("hi".into())
            })
        );
    }

    #[test]
    fn request_body_names_the_hook_and_carries_context_and_event() {
        use crate::hooks::event::MessageEvent;
        use agentlane_core::{SessionId, SessionKey, TenantId};
        let ctx = HookContext {
            tenant: TenantId::new("t1"),
            session_key: SessionKey::new("k"),
            session_id: SessionId::new("s"),
            run_id: None,
        };
        let body = request_body(
            &ctx,
            &HookEvent::MessageSent(MessageEvent { text: "hi".into() }),
        );
        assert_eq!(
            body,
            json!({
                "hook": "message_sent",
                "context": {"tenant": "t1", "sessionKey": "k", "sessionId": "s"},
                "event": {"text": "hi"}
            })
        );
    }
}
