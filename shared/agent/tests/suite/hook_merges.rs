//! SPEC §11 hook merges: priority order, terminal blocks, last-defined and first-wins rules,
//! rewrites that flow down.

use crate::hook_support::*;
use agentlane_agent::hooks::*;
use serde_json::json;
use std::sync::{Arc, Mutex};

#[tokio::test]
async fn hooks_run_by_priority_and_ties_keep_registration_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let add = |name: &'static str, priority| {
        Arc::new(
            Scripted::new(name, priority, HookPoint::BeforePromptBuild, move |_| {
                Ok(HookOutcome::Prompt(PromptAdditions {
                    prepend_context: vec![name.to_owned()],
                    ..Default::default()
                }))
            })
            .log(&log),
        )
    };
    let (low, high, mid_a, mid_b) = (
        add("low", -3),
        add("high", 10),
        add("mid-a", 5),
        add("mid-b", 5),
    );
    let r = registry(&[&low, &high, &mid_a, &mid_b]);

    let merged = r.before_prompt_build(&ctx(), prompt_event()).await;

    let order = ["high", "mid-a", "mid-b", "low"];
    assert_eq!(*log.lock().unwrap(), order);
    assert_eq!(merged.prepend_context, order);
    let names: Vec<&str> = r
        .hooks(HookPoint::BeforePromptBuild)
        .map(|h| h.name())
        .collect();
    assert_eq!(names, order);
}

#[tokio::test]
async fn a_tool_call_block_is_terminal_and_stops_lower_priorities() {
    let high = Arc::new(Scripted::new(
        "rewriter",
        10,
        HookPoint::BeforeToolCall,
        |_| Ok(verdict(None, None, Some(json!({"cmd": "ls"})))),
    ));
    let mid = Arc::new(Scripted::new("guard", 5, HookPoint::BeforeToolCall, |_| {
        Ok(verdict(Some(true), Some("rm is not allowed"), None))
    }));
    let low = Arc::new(Scripted::new(
        "approver",
        1,
        HookPoint::BeforeToolCall,
        |_| Ok(verdict(Some(false), None, Some(json!({"cmd": "echo"})))),
    ));
    let r = registry(&[&low, &mid, &high]);

    let decision = r.before_tool_call(&ctx(), tool_event()).await;

    assert_eq!(
        decision,
        ToolCallDecision::Block {
            reason: "rm is not allowed".into(),
            hook: "guard".into(),
        }
    );
    assert_eq!((high.calls(), mid.calls(), low.calls()), (1, 1, 0));
}

#[tokio::test]
async fn block_false_never_clears_a_block_and_reason_is_last_defined() {
    // The high hook names a reason without blocking; the guard blocks without a reason;
    // an allow (`block: false`) below cannot undo it.
    let high = Arc::new(Scripted::new(
        "labeller",
        10,
        HookPoint::BeforeToolCall,
        |_| Ok(verdict(Some(false), Some("destructive command"), None)),
    ));
    let guard = Arc::new(Scripted::new("guard", 5, HookPoint::BeforeToolCall, |_| {
        Ok(verdict(Some(true), None, None))
    }));
    let allow = Arc::new(Scripted::new("allow", 1, HookPoint::BeforeToolCall, |_| {
        Ok(verdict(Some(false), None, None))
    }));
    let r = registry(&[&high, &guard, &allow]);
    assert_eq!(
        r.before_tool_call(&ctx(), tool_event()).await,
        ToolCallDecision::Block {
            reason: "destructive command".into(),
            hook: "guard".into(),
        }
    );
    assert_eq!(allow.calls(), 0);

    // Without any reason the default one is used; `block: false` alone allows.
    let r = registry(&[&guard]);
    assert_eq!(
        r.before_tool_call(&ctx(), tool_event()).await,
        ToolCallDecision::Block {
            reason: DEFAULT_TOOL_BLOCK_REASON.into(),
            hook: "guard".into(),
        }
    );
    let r = registry(&[&high, &allow]);
    assert_eq!(
        r.before_tool_call(&ctx(), tool_event()).await,
        ToolCallDecision::Allow { params: None }
    );
}

#[tokio::test]
async fn tool_call_params_last_defined_wins_and_every_hook_sees_the_original() {
    let first = Arc::new(Scripted::new(
        "first",
        10,
        HookPoint::BeforeToolCall,
        |_| Ok(verdict(None, None, Some(json!({"v": 1})))),
    ));
    let silent = Arc::new(Scripted::new(
        "silent",
        5,
        HookPoint::BeforeToolCall,
        |_| Ok(verdict(None, None, None)),
    ));
    let last = Arc::new(Scripted::new("last", 1, HookPoint::BeforeToolCall, |_| {
        Ok(verdict(Some(false), None, Some(json!({"v": 3}))))
    }));

    let r = registry(&[&first, &silent, &last]);
    assert_eq!(
        r.before_tool_call(&ctx(), tool_event()).await,
        ToolCallDecision::Allow {
            params: Some(json!({"v": 3}))
        }
    );
    for h in [&first, &silent, &last] {
        assert_eq!(h.seen(), vec![HookEvent::BeforeToolCall(tool_event())]);
    }

    let r = registry(&[&first, &silent]);
    assert_eq!(
        r.before_tool_call(&ctx(), tool_event()).await,
        ToolCallDecision::Allow {
            params: Some(json!({"v": 1}))
        }
    );
}

#[tokio::test]
async fn prompt_additions_merge_across_hooks_and_a_failing_hook_is_skipped() {
    let a = Arc::new(Scripted::new("a", 10, HookPoint::BeforePromptBuild, |_| {
        Ok(HookOutcome::Prompt(PromptAdditions {
            prepend_context: vec!["memory: likes tea".into()],
            system_prompt: Some("You are A.".into()),
            prepend_system_context: vec![],
            append_system_context: vec!["Answer in French.".into()],
        }))
    }));
    let broken = Arc::new(Scripted::new(
        "broken",
        7,
        HookPoint::BeforePromptBuild,
        fails,
    ));
    let b = Arc::new(Scripted::new("b", 5, HookPoint::BeforePromptBuild, |_| {
        Ok(HookOutcome::Prompt(PromptAdditions {
            prepend_context: vec!["today: monday".into()],
            system_prompt: Some("You are B.".into()),
            prepend_system_context: vec!["Policy first.".into()],
            append_system_context: vec!["Be brief.".into()],
        }))
    }));
    let r = registry(&[&a, &broken, &b]);

    let merged = r.before_prompt_build(&ctx(), prompt_event()).await;

    assert_eq!(
        merged,
        PromptAdditions {
            prepend_context: vec!["memory: likes tea".into(), "today: monday".into()],
            system_prompt: Some("You are B.".into()),
            prepend_system_context: vec!["Policy first.".into()],
            append_system_context: vec!["Answer in French.".into(), "Be brief.".into()],
        }
    );
    assert_eq!(
        merged.system_prompt("base"),
        "Policy first.\n\nYou are B.\n\nAnswer in French.\n\nBe brief."
    );
    assert_eq!(
        merged.prompt("hi"),
        "memory: likes tea\n\ntoday: monday\n\nhi"
    );
    assert_eq!(broken.calls(), 1);
}

#[tokio::test]
async fn finalize_first_revise_wins_and_failures_keep_the_answer() {
    let fin = Arc::new(Scripted::new(
        "ok",
        10,
        HookPoint::BeforeAgentFinalize,
        |_| Ok(HookOutcome::Finalize(FinalizeAction::Finalize)),
    ));
    let blank = Arc::new(Scripted::new(
        "blank",
        7,
        HookPoint::BeforeAgentFinalize,
        |_| {
            Ok(HookOutcome::Finalize(FinalizeAction::Revise {
                instruction: "  ".into(),
            }))
        },
    ));
    let first = Arc::new(Scripted::new(
        "first",
        5,
        HookPoint::BeforeAgentFinalize,
        |_| {
            Ok(HookOutcome::Finalize(FinalizeAction::Revise {
                instruction: "shorter".into(),
            }))
        },
    ));
    let second = Arc::new(Scripted::new(
        "second",
        1,
        HookPoint::BeforeAgentFinalize,
        |_| {
            Ok(HookOutcome::Finalize(FinalizeAction::Revise {
                instruction: "longer".into(),
            }))
        },
    ));
    let event = || FinalizeEvent {
        text: "The answer.".into(),
        revisions: 0,
    };

    let r = registry(&[&second, &first, &blank, &fin]);
    assert_eq!(
        r.before_agent_finalize(&ctx(), event()).await,
        FinalizeAction::Revise {
            instruction: "shorter".into()
        }
    );
    assert_eq!(second.calls(), 0);

    let broken = Arc::new(Scripted::new(
        "broken",
        1,
        HookPoint::BeforeAgentFinalize,
        fails,
    ));
    let r = registry(&[&fin, &blank, &broken]);
    assert_eq!(
        r.before_agent_finalize(&ctx(), event()).await,
        FinalizeAction::Finalize
    );
    assert_eq!(MAX_FINALIZE_REVISIONS, 3);
}

#[tokio::test]
async fn message_sending_rewrites_flow_down_and_cancel_is_terminal() {
    let upper = Arc::new(Scripted::new(
        "upper",
        10,
        HookPoint::MessageSending,
        |ev| {
            Ok(HookOutcome::Sending(SendingVerdict {
                cancel: false,
                content: Some(sending(ev).to_uppercase()),
            }))
        },
    ));
    let bang = Arc::new(Scripted::new("bang", 5, HookPoint::MessageSending, |ev| {
        Ok(HookOutcome::Sending(SendingVerdict {
            cancel: false,
            content: Some(format!("{}!", sending(ev))),
        }))
    }));
    let noop = Arc::new(Scripted::new("noop", 1, HookPoint::MessageSending, |_| {
        Ok(HookOutcome::Sending(SendingVerdict::default()))
    }));
    let r = registry(&[&noop, &bang, &upper]);
    let msg = || MessageEvent {
        text: "hello".into(),
    };
    assert_eq!(
        r.message_sending(&ctx(), msg()).await,
        SendDecision::Send {
            content: "HELLO!".into()
        }
    );
    assert_eq!(
        bang.seen(),
        vec![HookEvent::MessageSending(MessageEvent {
            text: "HELLO".into()
        })]
    );

    let cancel = Arc::new(Scripted::new(
        "cancel",
        7,
        HookPoint::MessageSending,
        |_| {
            Ok(HookOutcome::Sending(SendingVerdict {
                cancel: true,
                content: None,
            }))
        },
    ));
    let r = registry(&[&upper, &cancel, &bang]);
    assert_eq!(
        r.message_sending(&ctx(), msg()).await,
        SendDecision::Cancel {
            hook: "cancel".into()
        }
    );
    assert_eq!(bang.calls(), 1, "bang ran only in the first dispatch");
}

#[tokio::test]
async fn tool_result_persist_chains_rewrites_and_skips_failures() {
    let upper = Arc::new(Scripted::new(
        "upper",
        10,
        HookPoint::ToolResultPersist,
        |ev| {
            let HookEvent::ToolResultPersist(p) = ev else {
                panic!("unexpected {ev:?}")
            };
            Ok(HookOutcome::Persist(PersistRewrite {
                content: Some(p.result.to_uppercase()),
            }))
        },
    ));
    let broken = Arc::new(Scripted::new(
        "broken",
        7,
        HookPoint::ToolResultPersist,
        fails,
    ));
    let tag = Arc::new(Scripted::new(
        "tag",
        5,
        HookPoint::ToolResultPersist,
        |ev| {
            let HookEvent::ToolResultPersist(p) = ev else {
                panic!("unexpected {ev:?}")
            };
            Ok(HookOutcome::Persist(PersistRewrite {
                content: Some(format!("{} [checked]", p.result)),
            }))
        },
    ));
    let r = registry(&[&tag, &broken, &upper]);
    let text = r
        .tool_result_persist(
            &ctx(),
            PersistEvent {
                tool_name: "shell".into(),
                tool_call_id: "call_1".into(),
                result: "secret=abc".into(),
                is_error: false,
            },
        )
        .await;
    assert_eq!(text, "SECRET=ABC [checked]");
}

#[tokio::test]
async fn before_agent_reply_first_claim_wins_and_errors_skip() {
    let broken = Arc::new(Scripted::new(
        "broken",
        10,
        HookPoint::BeforeAgentReply,
        fails,
    ));
    let pass = Arc::new(Scripted::new(
        "pass",
        7,
        HookPoint::BeforeAgentReply,
        |_| Ok(HookOutcome::Reply(ReplyClaim::default())),
    ));
    let claim = Arc::new(Scripted::new(
        "pong",
        5,
        HookPoint::BeforeAgentReply,
        |_| {
            Ok(HookOutcome::Reply(ReplyClaim {
                handled: true,
                reply: Some("pong".into()),
            }))
        },
    ));
    let late = Arc::new(Scripted::new(
        "late",
        1,
        HookPoint::BeforeAgentReply,
        |_| {
            Ok(HookOutcome::Reply(ReplyClaim {
                handled: true,
                reply: None,
            }))
        },
    ));
    let r = registry(&[&late, &claim, &pass, &broken]);
    let claimed = r
        .before_agent_reply(
            &ctx(),
            AgentReplyEvent {
                trigger: ReplyTrigger::Cron,
                prompt: "ping".into(),
            },
        )
        .await;
    assert_eq!(
        claimed,
        Some(ReplyClaimed {
            hook: "pong".into(),
            reply: Some("pong".into()),
        })
    );
    assert_eq!(late.calls(), 0);
}

#[tokio::test]
async fn model_override_comes_from_the_highest_priority_hook_that_gives_one() {
    let none = Arc::new(Scripted::new(
        "none",
        10,
        HookPoint::BeforeModelResolve,
        cont,
    ));
    let broken = Arc::new(Scripted::new(
        "broken",
        8,
        HookPoint::BeforeModelResolve,
        fails,
    ));
    let pick = |name: &str, priority, model: &'static str| {
        Arc::new(Scripted::new(
            name,
            priority,
            HookPoint::BeforeModelResolve,
            move |_| {
                Ok(HookOutcome::ModelOverride(ModelOverride {
                    model: Some(model.into()),
                }))
            },
        ))
    };
    let (a, b) = (
        pick("a", 5, "openai/gpt-small"),
        pick("b", 1, "anthropic/big"),
    );
    let r = registry(&[&b, &none, &a, &broken]);
    let event = ModelResolveEvent {
        prompt: "hi".into(),
        requested_model: None,
    };
    assert_eq!(
        r.before_model_resolve(&ctx(), event).await.as_deref(),
        Some("openai/gpt-small")
    );
    assert_eq!(b.calls(), 1, "observers all run");
}
