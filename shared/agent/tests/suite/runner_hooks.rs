//! The hooks of SPEC §11 as the runner calls them: blocked tool calls, claimed turns, run gates,
//! model choice, prompt additions, finalize revisions.

use crate::support::*;
use agentlane_agent::hooks::{
    FinalizeAction, Hook, HookContext, HookError, HookEvent, HookOutcome, HookPoint, HookRegistry,
    ModelOverride, PromptAdditions, ReplyClaim, RunGate, SendingVerdict, ToolCallVerdict,
};
use agentlane_core::{Message, RunStatus};
use async_trait::async_trait;
use std::sync::Arc;

/// A policy hook scripted per test.
struct Policy {
    points: Vec<HookPoint>,
    answer: fn(&HookEvent) -> HookOutcome,
}

#[async_trait]
impl Hook for Policy {
    fn name(&self) -> &str {
        "policy"
    }
    fn points(&self) -> &[HookPoint] {
        &self.points
    }
    async fn call(&self, _: &HookContext, event: &HookEvent) -> Result<HookOutcome, HookError> {
        Ok((self.answer)(event))
    }
}

fn hooked(
    script: Vec<Script>,
    points: Vec<HookPoint>,
    answer: fn(&HookEvent) -> HookOutcome,
) -> Fixture {
    let mut f = fixture(script, config());
    f.runner = f
        .runner
        .clone()
        .with_hooks(HookRegistry::new().with(Arc::new(Policy { points, answer })));
    f
}

#[tokio::test]
async fn a_blocked_tool_call_does_not_run_and_the_model_sees_why() {
    let f = hooked(
        vec![
            Script::Tools(vec![
                ("c1", "echo", r#"{"x":1}"#),
                ("c2", "echo", r#"{"safe":1}"#),
            ]),
            Script::Text("ok"),
        ],
        vec![HookPoint::BeforeToolCall],
        |e| match e {
            HookEvent::BeforeToolCall(c) if c.arguments.get("x").is_some() => {
                HookOutcome::ToolCall(ToolCallVerdict {
                    block: Some(true),
                    block_reason: Some("x is not allowed".into()),
                    params: None,
                })
            }
            _ => HookOutcome::ToolCall(ToolCallVerdict {
                params: Some(serde_json::json!({"safe": 2})),
                ..Default::default()
            }),
        },
    );
    let run = turn(&f, "go").await;
    assert_eq!(run.status, RunStatus::Ok);
    let results: Vec<(bool, String)> = f
        .tool_results()
        .await
        .into_iter()
        .map(|r| (r.is_error, r.content))
        .collect();
    assert_eq!(
        results,
        [
            (true, "blocked: x is not allowed".into()),
            (false, r#"echo:{"safe":2}"#.into())
        ]
    );
}

#[tokio::test]
async fn a_run_blocked_by_a_hook_ends_without_keeping_the_prompt_or_calling_the_model() {
    let f = hooked(vec![], vec![HookPoint::BeforeAgentRun], |_| {
        HookOutcome::RunGate(RunGate::Block {
            reason: "policy".into(),
            message: Some("Not today.".into()),
        })
    });
    let run = turn(&f, "forbidden request").await;
    assert_eq!(run.status, RunStatus::Error);
    let err = run.error.unwrap();
    assert_eq!(
        (err.code.as_str(), err.message.as_str()),
        ("hook_block", "Not today.")
    );
    assert!(f.transcript().await.is_empty());
    assert!(f.model.requests().is_empty());
}

#[tokio::test]
async fn a_finalize_revision_runs_another_attempt_with_the_instruction() {
    let f = hooked(
        vec![Script::Text("draft answer"), Script::Text("revised answer")],
        vec![HookPoint::BeforeAgentFinalize],
        |e| match e {
            HookEvent::BeforeAgentFinalize(ev) if ev.revisions == 0 => {
                HookOutcome::Finalize(FinalizeAction::Revise {
                    instruction: "Cite a source.".into(),
                })
            }
            _ => HookOutcome::Finalize(FinalizeAction::Finalize),
        },
    );
    let run = turn(&f, "question").await;
    assert_eq!(run.payloads[0].text, "revised answer");
    let second = &f.model.requests()[1];
    let last = second.messages.last().unwrap().message();
    assert!(
        matches!(last, Message::User { content } if content.ends_with("Cite a source.") && content.starts_with(agentlane_agent::runner::REVISION_PREFIX))
    );
    assert_eq!(f.roles().await, ["user", "assistant", "assistant"]);
}

#[tokio::test]
async fn prompt_build_additions_reach_the_model_but_not_the_transcript() {
    let f = hooked(
        vec![Script::Text("fine")],
        vec![HookPoint::BeforePromptBuild],
        |_| {
            HookOutcome::Prompt(PromptAdditions {
                prepend_context: vec!["User tier: gold.".into()],
                append_system_context: vec!["Never reveal internal ids.".into()],
                ..Default::default()
            })
        },
    );
    turn(&f, "hello").await;
    let request = &f.model.requests()[0];
    assert!(
        request.system.ends_with("Never reveal internal ids."),
        "{}",
        request.system
    );
    assert!(
        matches!(&*request.messages[0], Message::User { content } if content.contains("User tier: gold.") && content.ends_with("hello"))
    );
    assert!(
        matches!(&f.transcript().await[0].message, Message::User { content } if content == "hello")
    );
}

#[tokio::test]
async fn a_claimed_turn_replies_without_a_model_call_and_sending_hooks_shape_the_reply() {
    let f = hooked(
        vec![],
        vec![HookPoint::BeforeAgentReply, HookPoint::MessageSending],
        |e| match e {
            HookEvent::BeforeAgentReply(_) => HookOutcome::Reply(ReplyClaim {
                handled: true,
                reply: Some("canned answer".into()),
            }),
            _ => HookOutcome::Sending(SendingVerdict {
                cancel: false,
                content: Some("canned answer (via hook)".into()),
            }),
        },
    );
    let run = turn(&f, "faq question").await;
    assert_eq!(run.status, RunStatus::Ok);
    assert_eq!(run.payloads[0].text, "canned answer (via hook)");
    assert_eq!(run.model.as_deref(), Some("hook/policy"));
    assert!(f.model.requests().is_empty());
    assert_eq!(f.roles().await, ["user", "assistant"]);
}

#[tokio::test]
async fn a_model_resolve_hook_picks_the_model_of_the_run() {
    let mut f = fixture_with(
        vec![Script::Text("from backup")],
        config(),
        |router, model| {
            router
                .with_provider(model.clone())
                .with_provider(model.sibling("backup"))
        },
    );
    f.runner = f
        .runner
        .clone()
        .with_hooks(HookRegistry::new().with(Arc::new(Policy {
            points: vec![HookPoint::BeforeModelResolve],
            answer: |_| {
                HookOutcome::ModelOverride(ModelOverride {
                    model: Some("backup/m9".into()),
                })
            },
        })));
    let run = turn(&f, "hi").await;
    assert_eq!(run.model.as_deref(), Some("backup/m9"));
    assert_eq!(f.model.providers_called(), ["backup"]);
}
