//! SPEC §11 hook failures: observers fail open, policies fail closed, timeouts per registry and per
//! hook, wrong answers.

use crate::hook_support::*;
use agentlane_agent::hooks::*;
use agentlane_core::{RunStatus, Usage};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

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
