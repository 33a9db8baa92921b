//! SPEC §11 hooks: priority order, merge rules, fail-open / fail-closed, and webhooks against an
//! in-process HTTP server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentlane_agent::hooks::*;
use agentlane_core::{RunId, RunStatus, SessionId, SessionKey, TenantId, Usage};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

type Answer = Box<dyn Fn(&HookEvent) -> Result<HookOutcome, HookError> + Send + Sync>;

/// A hook that answers with a closure, optionally after a delay, and records what it saw.
struct Scripted {
    name: String,
    priority: i32,
    points: Vec<HookPoint>,
    delay: Duration,
    timeout: Option<Duration>,
    answer: Answer,
    calls: AtomicUsize,
    seen: Mutex<Vec<HookEvent>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    fn new(
        name: &str,
        priority: i32,
        point: HookPoint,
        answer: impl Fn(&HookEvent) -> Result<HookOutcome, HookError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_owned(),
            priority,
            points: vec![point],
            delay: Duration::ZERO,
            timeout: None,
            answer: Box::new(answer),
            calls: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
            log: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    fn log(mut self, log: &Arc<Mutex<Vec<String>>>) -> Self {
        self.log = log.clone();
        self
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn seen(&self) -> Vec<HookEvent> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Hook for Scripted {
    fn name(&self) -> &str {
        &self.name
    }
    fn priority(&self) -> i32 {
        self.priority
    }
    fn points(&self) -> &[HookPoint] {
        &self.points
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    async fn call(&self, _ctx: &HookContext, event: &HookEvent) -> Result<HookOutcome, HookError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.log.lock().unwrap().push(self.name.clone());
        self.seen.lock().unwrap().push(event.clone());
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        (self.answer)(event)
    }
}

fn registry(hooks: &[&Arc<Scripted>]) -> HookRegistry {
    let mut r = HookRegistry::new();
    for h in hooks {
        r.register((*h).clone());
    }
    r
}

fn ctx() -> HookContext {
    HookContext {
        tenant: TenantId::new("t1"),
        session_key: SessionKey::new("main"),
        session_id: SessionId::new("s1"),
        run_id: Some(RunId::new("run_1")),
    }
}

fn tool_event() -> ToolCallEvent {
    ToolCallEvent {
        tool_name: "shell".into(),
        tool_call_id: "call_1".into(),
        arguments: json!({"cmd": "rm -rf /"}),
    }
}

fn verdict(block: Option<bool>, reason: Option<&str>, params: Option<Value>) -> HookOutcome {
    HookOutcome::ToolCall(ToolCallVerdict {
        block,
        block_reason: reason.map(str::to_owned),
        params,
    })
}

fn prompt_event() -> PromptBuildEvent {
    PromptBuildEvent {
        prompt: "hi".into(),
        system_prompt: "base".into(),
    }
}

fn fails(_: &HookEvent) -> Result<HookOutcome, HookError> {
    Err(HookError::Failed("boom".into()))
}

fn cont(_: &HookEvent) -> Result<HookOutcome, HookError> {
    Ok(HookOutcome::Continue)
}

fn sending(ev: &HookEvent) -> String {
    match ev {
        HookEvent::MessageSending(m) => m.text.clone(),
        other => panic!("unexpected event {other:?}"),
    }
}

// ---------------------------------------------------------------- order and merges

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

// ---------------------------------------------------------------- failure modes

#[tokio::test(start_paused = true)]
async fn observers_run_concurrently_and_fail_open() {
    let slow = |name: &str| {
        Arc::new(Scripted::new(name, 0, HookPoint::AgentEnd, cont).delay(Duration::from_secs(10)))
    };
    let (s1, s2) = (slow("slow-1"), slow("slow-2"));
    let broken = Arc::new(Scripted::new("broken", 5, HookPoint::AgentEnd, fails));
    let panics = Arc::new(Scripted::new("panics", 3, HookPoint::AgentEnd, |_| {
        panic!("observer bug")
    }));
    let hung = Arc::new(
        Scripted::new("hung", 1, HookPoint::AgentEnd, cont).delay(Duration::from_secs(3600)),
    );
    let r = registry(&[&s1, &broken, &panics, &s2, &hung]);

    let started = Instant::now();
    r.agent_end(
        &ctx(),
        AgentEndEvent {
            status: RunStatus::Ok,
            text: Some("done".into()),
            error: None,
            usage: Usage::default(),
            duration_ms: 5,
        },
    )
    .await;

    // Concurrent: bounded by the 30 s observer timeout of the hung hook, not the sum.
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    for h in [&s1, &s2, &broken, &panics, &hung] {
        assert_eq!(h.calls(), 1, "{} ran", h.name);
    }
}

#[tokio::test(start_paused = true)]
async fn a_policy_hook_that_times_out_blocks_the_tool_call() {
    let slow = Arc::new(
        Scripted::new("slow-guard", 5, HookPoint::BeforeToolCall, cont)
            .delay(Duration::from_secs(60)),
    );
    let low = Arc::new(Scripted::new("low", 1, HookPoint::BeforeToolCall, cont));
    let r = registry(&[&slow, &low]);

    let started = Instant::now();
    let decision = r.before_tool_call(&ctx(), tool_event()).await;

    assert_eq!(started.elapsed(), Duration::from_secs(15));
    assert_eq!(
        decision,
        ToolCallDecision::Block {
            reason: "before_tool_call hook \"slow-guard\" failed: timed out after 15s".into(),
            hook: "slow-guard".into(),
        }
    );
    assert_eq!(low.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn timeouts_are_configurable_per_registry_and_per_hook() {
    let slow = Arc::new(
        Scripted::new("slow", 5, HookPoint::BeforeAgentRun, cont).delay(Duration::from_secs(3)),
    );
    let r = registry(&[&slow]).with_timeouts(HookTimeouts {
        sequential: Duration::from_secs(2),
        observer: Duration::from_secs(30),
    });
    let event = || AgentRunEvent {
        prompt: "hi".into(),
        model: None,
    };
    assert_eq!(
        r.before_agent_run(&ctx(), event()).await,
        RunGate::Block {
            reason: "before_agent_run hook \"slow\" failed: timed out after 2s".into(),
            message: None,
        }
    );

    // The hook's own limit overrides the registry's.
    let patient = Arc::new(
        Scripted::new("patient", 5, HookPoint::BeforeAgentRun, cont)
            .delay(Duration::from_secs(3))
            .timeout(Duration::from_secs(5)),
    );
    let r = registry(&[&patient]).with_timeouts(HookTimeouts {
        sequential: Duration::from_secs(2),
        observer: Duration::from_secs(30),
    });
    assert_eq!(r.before_agent_run(&ctx(), event()).await, RunGate::Pass);
}

#[tokio::test]
async fn run_gate_blocks_on_block_error_panic_or_wrong_answer() {
    let event = || AgentRunEvent {
        prompt: "hi".into(),
        model: Some("openai/gpt".into()),
    };
    let pass = Arc::new(Scripted::new("pass", 10, HookPoint::BeforeAgentRun, |_| {
        Ok(HookOutcome::RunGate(RunGate::Pass))
    }));
    let block = Arc::new(Scripted::new("maint", 5, HookPoint::BeforeAgentRun, |_| {
        Ok(HookOutcome::RunGate(RunGate::Block {
            reason: "maintenance".into(),
            message: Some("Back soon.".into()),
        }))
    }));
    let after = Arc::new(Scripted::new("after", 1, HookPoint::BeforeAgentRun, cont));
    let r = registry(&[&pass, &block, &after]);
    assert_eq!(
        r.before_agent_run(&ctx(), event()).await,
        RunGate::Block {
            reason: "maintenance".into(),
            message: Some("Back soon.".into()),
        }
    );
    assert_eq!(after.calls(), 0);
    assert_eq!(
        registry(&[&pass, &after])
            .before_agent_run(&ctx(), event())
            .await,
        RunGate::Pass
    );

    let cases: Vec<(Arc<Scripted>, &str)> = vec![
        (
            Arc::new(Scripted::new("err", 1, HookPoint::BeforeAgentRun, fails)),
            "before_agent_run hook \"err\" failed: boom",
        ),
        (
            Arc::new(Scripted::new(
                "panics",
                1,
                HookPoint::BeforeAgentRun,
                |_| panic!("policy bug"),
            )),
            "before_agent_run hook \"panics\" failed: panicked",
        ),
        (
            Arc::new(Scripted::new(
                "confused",
                1,
                HookPoint::BeforeAgentRun,
                |_| Ok(verdict(Some(false), None, None)),
            )),
            "before_agent_run hook \"confused\" failed: answered a tool call verdict to before_agent_run",
        ),
    ];
    for (hook, reason) in cases {
        assert_eq!(
            registry(&[&pass, &hook])
                .before_agent_run(&ctx(), event())
                .await,
            RunGate::Block {
                reason: reason.into(),
                message: None,
            }
        );
    }
}

#[tokio::test]
async fn a_wrong_answer_on_a_modifying_point_is_ignored() {
    let confused = Arc::new(Scripted::new(
        "confused",
        10,
        HookPoint::MessageSending,
        |_| {
            Ok(HookOutcome::RunGate(RunGate::Block {
                reason: "x".into(),
                message: None,
            }))
        },
    ));
    let r = registry(&[&confused]);
    assert_eq!(
        r.message_sending(&ctx(), MessageEvent { text: "hi".into() })
            .await,
        SendDecision::Send {
            content: "hi".into()
        }
    );
}

#[tokio::test]
async fn empty_registry_and_point_lookup() {
    let empty = HookRegistry::new();
    assert!(empty.is_empty());
    assert_eq!(
        empty.before_tool_call(&ctx(), tool_event()).await,
        ToolCallDecision::Allow { params: None }
    );
    assert_eq!(
        empty
            .before_agent_finalize(
                &ctx(),
                FinalizeEvent {
                    text: "x".into(),
                    revisions: 0
                }
            )
            .await,
        FinalizeAction::Finalize
    );

    let mut multi = Scripted::new("multi", 0, HookPoint::MessageSent, cont);
    multi.points = vec![
        HookPoint::MessageSent,
        HookPoint::SessionEnd,
        HookPoint::MessageSent,
    ];
    let multi = Arc::new(multi);
    let r = registry(&[&multi]);
    let clone_before = empty.clone();
    assert!(!r.is_empty());
    assert!(r.has(HookPoint::MessageSent) && r.has(HookPoint::SessionEnd));
    assert!(!r.has(HookPoint::BeforeToolCall));
    assert_eq!(
        r.hooks(HookPoint::MessageSent).count(),
        1,
        "a point listed twice registers once"
    );
    assert!(clone_before.is_empty());
    r.session_end(
        &ctx(),
        SessionEndEvent {
            reason: SessionEndReason::Reset,
        },
    )
    .await;
    r.message_sent(&ctx(), MessageEvent { text: "hi".into() })
        .await;
    assert_eq!(multi.calls(), 2);
}

// ---------------------------------------------------------------- webhooks

mod webhook {
    use super::*;
    use axum::Router;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::post;

    type Seen = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

    async fn serve() -> (String, Seen) {
        let seen: Seen = Arc::default();
        let json = |body: &'static str| {
            move |State(seen): State<Seen>, headers: HeaderMap, axum::Json(v): axum::Json<Value>| async move {
                seen.lock().unwrap().push((headers, v));
                ([(header::CONTENT_TYPE, "application/json")], body).into_response()
            }
        };
        let app = Router::new()
            .route("/allow", post(json("{}")))
            .route("/params", post(json(r#"{"params":{"cmd":"ls -la"}}"#)))
            .route(
                "/block",
                post(json(r#"{"block":true,"blockReason":"rm is not allowed"}"#)),
            )
            .route("/typo", post(json(r#"{"blocked":true}"#)))
            .route("/invalid", post(json("this is not json")))
            .route(
                "/gate",
                post(json(
                    r#"{"outcome":"block","reason":"maintenance","message":"Back soon."}"#,
                )),
            )
            .route("/rewrite", post(json(r#"{"content":"rewritten"}"#)))
            .route(
                "/fail",
                post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "secret stack trace") }),
            )
            .route(
                "/redirect",
                post(|| async {
                    (
                        StatusCode::TEMPORARY_REDIRECT,
                        [(header::LOCATION, "/allow")],
                    )
                }),
            )
            .route(
                "/big",
                post(|| async { format!("{{}}{}", " ".repeat(100 * 1024)) }),
            )
            .route(
                "/slow",
                post(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "{}"
                }),
            )
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), seen)
    }

    fn hook(name: &str, url: String, points: &[HookPoint], timeout: Duration) -> Arc<WebhookHook> {
        Arc::new(
            WebhookHook::new(WebhookConfig {
                name: name.into(),
                url,
                points: points.to_vec(),
                priority: 0,
                timeout,
                secret_header: Some(("x-hook-secret".into(), "s3cret-value".into())),
            })
            .unwrap(),
        )
    }

    fn guard(url: String) -> HookRegistry {
        HookRegistry::new().with(hook(
            "guard",
            url,
            &[HookPoint::BeforeToolCall],
            Duration::from_millis(500),
        ))
    }

    #[tokio::test]
    async fn allow_and_params_round_trip_with_the_documented_request() {
        let (base, seen) = serve().await;
        assert_eq!(
            guard(format!("{base}/allow"))
                .before_tool_call(&ctx(), tool_event())
                .await,
            ToolCallDecision::Allow { params: None }
        );
        assert_eq!(
            guard(format!("{base}/params"))
                .before_tool_call(&ctx(), tool_event())
                .await,
            ToolCallDecision::Allow {
                params: Some(json!({"cmd": "ls -la"}))
            }
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        let (headers, body) = &seen[0];
        assert_eq!(headers["x-hook-secret"], "s3cret-value");
        assert_eq!(
            body,
            &json!({
                "hook": "before_tool_call",
                "context": {"tenant": "t1", "sessionKey": "main", "sessionId": "s1", "runId": "run_1"},
                "event": {"toolName": "shell", "toolCallId": "call_1", "arguments": {"cmd": "rm -rf /"}}
            })
        );
    }

    #[tokio::test]
    async fn a_block_answer_blocks() {
        let (base, _) = serve().await;
        assert_eq!(
            guard(format!("{base}/block"))
                .before_tool_call(&ctx(), tool_event())
                .await,
            ToolCallDecision::Block {
                reason: "rm is not allowed".into(),
                hook: "guard".into(),
            }
        );
        let gate = HookRegistry::new().with(hook(
            "gate",
            format!("{base}/gate"),
            &[HookPoint::BeforeAgentRun],
            Duration::from_secs(5),
        ));
        let event = AgentRunEvent {
            prompt: "hi".into(),
            model: None,
        };
        assert_eq!(
            gate.before_agent_run(&ctx(), event).await,
            RunGate::Block {
                reason: "maintenance".into(),
                message: Some("Back soon.".into()),
            }
        );
    }

    #[tokio::test]
    async fn every_webhook_failure_fails_closed_at_a_policy_point() {
        let (base, _) = serve().await;
        // A port nobody listens on: bind, read the port, close.
        let refused = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/x", l.local_addr().unwrap())
        };
        let cases = [
            (format!("{base}/fail"), "answered HTTP 500"),
            (format!("{base}/redirect"), "answered HTTP 307"),
            (format!("{base}/invalid"), "unreadable answer: "),
            (
                format!("{base}/typo"),
                "unreadable answer: unknown field `blocked`",
            ),
            (format!("{base}/big"), "answer larger than 65536 bytes"),
            (format!("{base}/slow"), "timed out after 500ms"),
            (refused.clone(), "request failed: "),
        ];
        for (url, expected) in cases {
            let started = std::time::Instant::now();
            let decision = guard(url.clone())
                .before_tool_call(&ctx(), tool_event())
                .await;
            let ToolCallDecision::Block { reason, hook } = decision else {
                panic!("{url}: expected a block, got {decision:?}");
            };
            assert_eq!(hook, "guard");
            let prefix = "before_tool_call hook \"guard\" failed: ";
            assert!(
                reason.starts_with(prefix) && reason[prefix.len()..].starts_with(expected),
                "{url}: reason {reason:?} should start with {expected:?}"
            );
            let port = url.rsplit(':').next().unwrap().split('/').next().unwrap();
            assert!(!reason.contains(port), "{reason:?} leaks the URL");
            assert!(!reason.contains("s3cret") && !reason.contains("stack trace"));
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{url}: not bounded by the timeout"
            );
        }
    }

    #[tokio::test]
    async fn a_failing_webhook_at_a_non_policy_point_fails_open() {
        let (base, seen) = serve().await;
        let msg = || MessageEvent {
            text: "hello".into(),
        };
        let sending = |path: &str| {
            HookRegistry::new().with(hook(
                path,
                format!("{base}{path}"),
                &[HookPoint::MessageSending],
                Duration::from_millis(300),
            ))
        };
        assert_eq!(
            sending("/rewrite").message_sending(&ctx(), msg()).await,
            SendDecision::Send {
                content: "rewritten".into()
            }
        );
        for broken in ["/fail", "/invalid", "/slow"] {
            assert_eq!(
                sending(broken).message_sending(&ctx(), msg()).await,
                SendDecision::Send {
                    content: "hello".into()
                },
                "{broken} must fail open"
            );
        }
        // Observers ignore the answer body entirely.
        let observer = HookRegistry::new().with(hook(
            "observer",
            format!("{base}/invalid"),
            &[HookPoint::MessageSent],
            Duration::from_secs(5),
        ));
        observer.message_sent(&ctx(), msg()).await;
        let bodies: Vec<Value> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b["hook"].clone())
            .collect();
        assert_eq!(
            bodies,
            vec![
                json!("message_sending"),
                json!("message_sending"),
                json!("message_sent")
            ]
        );
    }
}
