//! Durable pauses (issue 20): tools the caller's own application runs (client tools) and calls a
//! person must approve. When a model answer's tool batch holds such calls, the run commits its
//! state and stops `requires_action`; nothing runs or polls until the answer
//! (`POST /v1/runs/{id}/actions`) schedules its resume.
//!
//! Everything here is a pure rule: which calls pause ([`pending_kind`]), whether an answer is
//! complete ([`check_answers`]), and what each pending call's result is on resume
//! ([`resolve`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// How long a pause waits for its answer unless the agent says otherwise (a day).
pub const DEFAULT_ACTION_TIMEOUT_SECONDS: u64 = 86_400;

/// Longest pause an agent may ask for (30 days).
pub const MAX_ACTION_TIMEOUT_SECONDS: u64 = 30 * 86_400;

/// Client tools one turn may bring at most.
pub const MAX_TURN_TOOLS: usize = 64;

/// Longest output of one client tool (256 KiB); longer outputs are refused, not cut.
pub const MAX_TOOL_OUTPUT_BYTES: usize = 256 * 1024;

/// The result of a pending call that was not approved.
pub fn denied_result(reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(reason) => format!("Denied: {reason}"),
        None => "Denied: the call was not approved".to_owned(),
    }
}

/// The result of a pending call nobody answered before the pause expired.
pub const EXPIRED_RESULT: &str = "Expired: no answer came before the pause expired";

/// The result of a pending call of a run aborted while it waited.
pub const ABORTED_RESULT: &str = "Aborted: the run was aborted while it waited for this call";

/// The result of an approved call whose run crashed after it was started and before its
/// result was written: it is never run a second time.
pub const INTERRUPTED_RESULT: &str =
    "Interrupted: the call was started, but its result was lost; it was not run again";

/// A tool the caller's application runs: offered to the model like any other; a call of it
/// pauses the run until the caller posts its output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ClientTool {
    /// `[a-zA-Z0-9_-]{1,64}`.
    #[cfg_attr(
        feature = "utoipa",
        schema(min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9_-]{1,64}$")
    )]
    pub name: String,
    /// What the tool does, as the model is told (at most 4096 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(max_length = 4096))]
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema; `{"type":"object"}` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Object>))]
    pub parameters: Option<Value>,
}

impl ClientTool {
    /// The tool's problem, if any, as a message naming the field under `at`.
    pub fn problem(&self, at: &str) -> Option<String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
        if !name_ok {
            return Some(format!(
                "{at}.name {:?} must be 1-64 characters of a-z, A-Z, 0-9, _ and -",
                self.name
            ));
        }
        if self.description.as_ref().is_some_and(|d| d.len() > 4096) {
            return Some(format!("{at}.description is longer than 4096 bytes"));
        }
        match &self.parameters {
            None => None,
            Some(Value::Object(schema)) if schema.get("type").is_none_or(|t| t == "object") => None,
            Some(_) => Some(format!(
                "{at}.parameters must be a JSON Schema of an object (\"type\": \"object\")"
            )),
        }
    }

    /// The argument schema offered to the model.
    pub fn schema(&self) -> Value {
        self.parameters
            .clone()
            .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}))
    }
}

/// Which calls need a person's yes before they run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ApprovalPolicy {
    /// Tool names; a trailing `*` matches any name with that prefix (`files__*`), `*` alone
    /// every tool.
    pub tools: Vec<String>,
    /// How long a pause waits for its answer (default 86400, at most 30 days); client tools'
    /// pauses too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 2592000))]
    pub timeout_seconds: Option<u64>,
}

impl ApprovalPolicy {
    /// Whether a call of `tool` needs approval.
    pub fn gates(&self, tool: &str) -> bool {
        self.tools
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => tool.starts_with(prefix),
                None => pattern == tool,
            })
    }

    /// The policy's problem, if any, naming the field.
    pub fn problem(&self) -> Option<String> {
        if let Some(bad) = self
            .tools
            .iter()
            .find(|p| p.is_empty() || p.len() > 100 || p.trim_end_matches('*').contains('*'))
        {
            return Some(format!(
                "approval.tools: {bad:?} must be a tool name, optionally ending with one *"
            ));
        }
        match self.timeout_seconds {
            Some(0) => Some("approval.timeoutSeconds must be at least 1".into()),
            Some(s) if s > MAX_ACTION_TIMEOUT_SECONDS => Some(format!(
                "approval.timeoutSeconds must be at most {MAX_ACTION_TIMEOUT_SECONDS}"
            )),
            _ => None,
        }
    }
}

/// Why a pending call waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum PendingKind {
    /// A client tool: the caller runs it and posts its output.
    Client,
    /// A gated tool: it runs here once someone approves it.
    Approval,
}

/// Whether a call of `tool` pauses the run, and why: a client tool's call always does (even if
/// a policy also names it); a gated tool's call needs approval; anything else runs at once.
pub fn pending_kind(
    tool: &str,
    client_tools: &BTreeSet<String>,
    approval: Option<&ApprovalPolicy>,
) -> Option<PendingKind> {
    if client_tools.contains(tool) {
        Some(PendingKind::Client)
    } else if approval.is_some_and(|p| p.gates(tool)) {
        Some(PendingKind::Approval)
    } else {
        None
    }
}

/// One call the paused run waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PendingCall {
    /// The tool call id (answer with it).
    pub id: String,
    /// The tool the model called.
    pub name: String,
    /// The call's arguments (the JSON the model sent; a string when it was not JSON).
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub arguments: Value,
    /// Whether the caller runs it (`client`) or approves it to run here (`approval`).
    pub kind: PendingKind,
}

/// What a paused run waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RequiredAction {
    /// 1 for the run's first pause, one more for each later one: an answer is for one pause.
    pub id: u32,
    /// The calls to answer, in the order the model made them.
    pub tool_calls: Vec<PendingCall>,
    /// When the run paused (ms since the epoch).
    pub paused_at: u64,
    /// When the pause ends without an answer (ms since epoch): every pending call is then
    /// answered [`EXPIRED_RESULT`] and the run goes on.
    pub expires_at: u64,
    /// Set by the pickup that resumed the run, in the commit before any approved call starts:
    /// a later pickup that finds it set never starts those calls again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
    /// The `seq` of the pause's `requires_action` lifecycle event: a client following the run
    /// from its answer reads the events after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_seq: Option<u64>,
}

/// The output of one client tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ToolOutputAnswer {
    /// The [`PendingCall::id`] of the client tool call this answers.
    pub tool_call_id: String,
    /// The tool's output, passed to the model as the call's result (at most 256 KiB).
    #[cfg_attr(feature = "utoipa", schema(max_length = 262144))]
    pub output: String,
    /// The call failed: the model is told its output is an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// A yes or no for one gated call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ApprovalAnswer {
    /// The [`PendingCall::id`] of the gated call this answers.
    pub tool_call_id: String,
    /// `true` runs the call; `false` denies it (the model gets `Denied: <reason>`).
    pub approve: bool,
    /// Why it was denied, passed to the model; ignored on an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The body of `POST /v1/runs/{runId}/actions`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ActionAnswer {
    /// Outputs of the pause's client tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_outputs: Vec<ToolOutputAnswer>,
    /// Decisions on the pause's gated calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalAnswer>,
}

/// The answer recorded for a pause: owned by the API (and the supervisor's expiry), stored
/// beside the run record, never written by a runner commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RecordedAnswer {
    /// The [`RequiredAction::id`] it answers.
    pub action_id: u32,
    /// What was posted (empty when the pause expired).
    pub answer: ActionAnswer,
    /// When it was recorded (ms since the epoch).
    pub answered_at: u64,
    /// The pause expired: every call is answered [`EXPIRED_RESULT`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
}

impl RecordedAnswer {
    /// Whether `other` is the same answer (the same body posted again).
    pub fn same_as(&self, action_id: u32, other: &ActionAnswer) -> bool {
        self.action_id == action_id
            && !self.expired
            && normalized(&self.answer) == normalized(other)
    }
}

fn normalized(answer: &ActionAnswer) -> ActionAnswer {
    let mut a = answer.clone();
    a.tool_outputs
        .sort_by(|x, y| x.tool_call_id.cmp(&y.tool_call_id));
    a.approvals
        .sort_by(|x, y| x.tool_call_id.cmp(&y.tool_call_id));
    a
}

/// What is wrong with an answer, every id named.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnswerProblem {
    /// Pending calls the answer leaves out.
    pub missing: Vec<String>,
    /// Ids the pause does not wait on.
    pub unknown: Vec<String>,
    /// Ids answered more than once.
    pub duplicate: Vec<String>,
    /// Answered the wrong way: a client call given an approval, or a gated call an output.
    pub wrong_kind: Vec<String>,
    /// Outputs longer than [`MAX_TOOL_OUTPUT_BYTES`].
    pub too_long: Vec<String>,
}

impl AnswerProblem {
    /// One sentence naming every id.
    pub fn message(&self) -> String {
        let mut parts = Vec::new();
        let mut add = |what: &str, ids: &[String]| {
            if !ids.is_empty() {
                parts.push(format!("{what}: {}", ids.join(", ")));
            }
        };
        add("missing answers for", &self.missing);
        add("unknown tool call ids", &self.unknown);
        add("answered more than once", &self.duplicate);
        add(
            "answered the wrong way (client tools take toolOutputs, gated tools approvals)",
            &self.wrong_kind,
        );
        add(
            &format!("outputs longer than {MAX_TOOL_OUTPUT_BYTES} bytes"),
            &self.too_long,
        );
        parts.join("; ")
    }
}

/// Whether `answer` answers every call of `action` exactly once, the right way.
pub fn check_answers(action: &RequiredAction, answer: &ActionAnswer) -> Result<(), AnswerProblem> {
    let kinds: BTreeMap<&str, PendingKind> = action
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.kind))
        .collect();
    let mut problem = AnswerProblem::default();
    let mut seen = BTreeSet::new();
    let given = answer
        .tool_outputs
        .iter()
        .map(|o| (o.tool_call_id.as_str(), PendingKind::Client))
        .chain(
            answer
                .approvals
                .iter()
                .map(|a| (a.tool_call_id.as_str(), PendingKind::Approval)),
        );
    for (id, kind) in given {
        if !seen.insert(id) {
            problem.duplicate.push(id.to_owned());
            continue;
        }
        match kinds.get(id) {
            None => problem.unknown.push(id.to_owned()),
            Some(k) if *k != kind => problem.wrong_kind.push(id.to_owned()),
            Some(_) => {}
        }
    }
    problem.missing = kinds
        .keys()
        .filter(|id| !seen.contains(*id))
        .map(|id| (*id).to_owned())
        .collect();
    problem.too_long = answer
        .tool_outputs
        .iter()
        .filter(|o| o.output.len() > MAX_TOOL_OUTPUT_BYTES)
        .map(|o| o.tool_call_id.clone())
        .collect();
    if problem == AnswerProblem::default() {
        Ok(())
    } else {
        Err(problem)
    }
}

/// What becomes of one pending call when the run resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Its result is known: a client's output, a denial, an expiry, an abort.
    Result {
        /// The text the model gets as the call's result.
        content: String,
        /// The model is told the call failed (a denial, an expiry, an abort, a client error).
        is_error: bool,
    },
    /// Approved: run it now.
    Run,
}

/// Each pending call's fate, in the pause's order: from the recorded answer (`None`: none
/// came), whether the run was aborted, and whether an earlier pickup already resumed it (an
/// approved call it may have started is then never run again).
pub fn resolve(
    action: &RequiredAction,
    answer: Option<&RecordedAnswer>,
    aborted: bool,
) -> Vec<(PendingCall, Resolution)> {
    let answer = answer.filter(|a| a.action_id == action.id);
    action
        .tool_calls
        .iter()
        .map(|call| {
            let known = |content: &str| Resolution::Result {
                content: content.to_owned(),
                is_error: true,
            };
            let resolution = if aborted {
                known(ABORTED_RESULT)
            } else {
                match answer {
                    None => known(ABORTED_RESULT),
                    Some(a) if a.expired => known(EXPIRED_RESULT),
                    Some(a) => match call.kind {
                        PendingKind::Client => a
                            .answer
                            .tool_outputs
                            .iter()
                            .find(|o| o.tool_call_id == call.id)
                            .map_or_else(
                                || known(EXPIRED_RESULT),
                                |o| Resolution::Result {
                                    content: o.output.clone(),
                                    is_error: o.is_error,
                                },
                            ),
                        PendingKind::Approval => {
                            match a
                                .answer
                                .approvals
                                .iter()
                                .find(|x| x.tool_call_id == call.id)
                            {
                                Some(x) if x.approve && action.resumed => known(INTERRUPTED_RESULT),
                                Some(x) if x.approve => Resolution::Run,
                                Some(x) => known(&denied_result(x.reason.as_deref())),
                                None => known(EXPIRED_RESULT),
                            }
                        }
                    },
                }
            };
            (call.clone(), resolution)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn call(id: &str, kind: PendingKind) -> PendingCall {
        PendingCall {
            id: id.into(),
            name: format!("tool_{id}"),
            arguments: json!({}),
            kind,
        }
    }

    fn action(resumed: bool) -> RequiredAction {
        RequiredAction {
            event_seq: None,
            id: 1,
            tool_calls: vec![
                call("c1", PendingKind::Client),
                call("a1", PendingKind::Approval),
                call("a2", PendingKind::Approval),
            ],
            paused_at: 0,
            expires_at: 10,
            resumed,
        }
    }

    fn answer() -> ActionAnswer {
        ActionAnswer {
            tool_outputs: vec![ToolOutputAnswer {
                tool_call_id: "c1".into(),
                output: "42".into(),
                is_error: false,
            }],
            approvals: vec![
                ApprovalAnswer {
                    tool_call_id: "a1".into(),
                    approve: true,
                    reason: None,
                },
                ApprovalAnswer {
                    tool_call_id: "a2".into(),
                    approve: false,
                    reason: Some("too risky".into()),
                },
            ],
        }
    }

    #[test]
    fn which_calls_pause() {
        let client: BTreeSet<String> = ["browser".to_owned()].into();
        let policy = ApprovalPolicy {
            tools: vec!["send_email".into(), "files__*".into()],
            timeout_seconds: None,
        };
        let cases = [
            ("browser", Some(PendingKind::Client)),
            ("send_email", Some(PendingKind::Approval)),
            ("files__delete", Some(PendingKind::Approval)),
            ("files_delete", None),
            ("send_emails", None),
            ("current_time", None),
        ];
        for (tool, want) in cases {
            assert_eq!(pending_kind(tool, &client, Some(&policy)), want, "{tool}");
        }
        assert_eq!(pending_kind("send_email", &client, None), None);
        let all = ApprovalPolicy {
            tools: vec!["*".into()],
            timeout_seconds: None,
        };
        assert!(all.gates("anything"));
        // A client tool named by the policy is still the client's to run.
        let both = ApprovalPolicy {
            tools: vec!["browser".into()],
            timeout_seconds: None,
        };
        assert_eq!(
            pending_kind("browser", &client, Some(&both)),
            Some(PendingKind::Client)
        );
    }

    #[test]
    fn policies_and_client_tools_are_checked() {
        let bad = [
            ApprovalPolicy {
                tools: vec!["a*b".into()],
                timeout_seconds: None,
            },
            ApprovalPolicy {
                tools: vec!["".into()],
                timeout_seconds: None,
            },
            ApprovalPolicy {
                tools: vec!["x".into()],
                timeout_seconds: Some(0),
            },
            ApprovalPolicy {
                tools: vec!["x".into()],
                timeout_seconds: Some(MAX_ACTION_TIMEOUT_SECONDS + 1),
            },
        ];
        for p in bad {
            assert!(p.problem().is_some(), "{p:?}");
        }
        let tool = |name: &str, parameters: Option<Value>| ClientTool {
            name: name.into(),
            description: None,
            parameters,
        };
        assert_eq!(tool("open_url", None).problem("tools[0]"), None);
        assert_eq!(
            tool("open_url", Some(json!({"type": "object"}))).problem("tools[0]"),
            None
        );
        let problem = tool("open url", None).problem("tools[0]").unwrap();
        assert!(problem.contains("tools[0].name"), "{problem}");
        let problem = tool("x", Some(json!({"type": "string"})))
            .problem("tools[1]")
            .unwrap();
        assert!(problem.contains("tools[1].parameters"), "{problem}");
    }

    #[test]
    fn an_answer_must_cover_every_call_once_the_right_way() {
        assert_eq!(check_answers(&action(false), &answer()), Ok(()));

        let mut partial = answer();
        partial.approvals.pop();
        partial.approvals.push(ApprovalAnswer {
            tool_call_id: "zz".into(),
            approve: true,
            reason: None,
        });
        partial.tool_outputs.push(ToolOutputAnswer {
            tool_call_id: "a1".into(),
            output: "x".into(),
            is_error: false,
        });
        let problem = check_answers(&action(false), &partial).unwrap_err();
        assert_eq!(problem.missing, vec!["a2".to_owned()]);
        assert_eq!(problem.unknown, vec!["zz".to_owned()]);
        assert_eq!(problem.duplicate, vec!["a1".to_owned()]);
        let message = problem.message();
        assert!(
            message.contains("a2") && message.contains("zz"),
            "{message}"
        );

        let mut wrong = answer();
        wrong.tool_outputs[0].tool_call_id = "a1".into();
        wrong.approvals[0].tool_call_id = "c1".into();
        let problem = check_answers(&action(false), &wrong).unwrap_err();
        assert_eq!(problem.wrong_kind, vec!["a1".to_owned(), "c1".to_owned()]);

        let mut long = answer();
        long.tool_outputs[0].output = "x".repeat(MAX_TOOL_OUTPUT_BYTES + 1);
        assert_eq!(
            check_answers(&action(false), &long).unwrap_err().too_long,
            vec!["c1".to_owned()]
        );
    }

    #[test]
    fn the_same_answer_in_another_order_is_the_same() {
        let recorded = RecordedAnswer {
            action_id: 1,
            answer: answer(),
            answered_at: 5,
            expired: false,
        };
        let mut reordered = answer();
        reordered.approvals.reverse();
        assert!(recorded.same_as(1, &reordered));
        assert!(!recorded.same_as(2, &reordered), "another pause");
        let mut changed = answer();
        changed.approvals[1].approve = true;
        assert!(!recorded.same_as(1, &changed));
    }

    #[test]
    fn each_pending_call_resolves_from_the_answer() {
        let recorded = RecordedAnswer {
            action_id: 1,
            answer: answer(),
            answered_at: 5,
            expired: false,
        };
        let fates: Vec<Resolution> = resolve(&action(false), Some(&recorded), false)
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        assert_eq!(
            fates,
            vec![
                Resolution::Result {
                    content: "42".into(),
                    is_error: false
                },
                Resolution::Run,
                Resolution::Result {
                    content: "Denied: too risky".into(),
                    is_error: true
                },
            ]
        );
        // Resumed before: the approved call is never started again.
        let again = resolve(&action(true), Some(&recorded), false);
        assert_eq!(
            again[1].1,
            Resolution::Result {
                content: INTERRUPTED_RESULT.into(),
                is_error: true
            }
        );
        // Aborted, expired, or an answer for another pause.
        let aborted = resolve(&action(false), Some(&recorded), true);
        assert!(aborted.iter().all(|(_, r)| *r
            == Resolution::Result {
                content: ABORTED_RESULT.into(),
                is_error: true
            }));
        let expired = RecordedAnswer {
            expired: true,
            ..recorded.clone()
        };
        assert!(resolve(&action(false), Some(&expired), false).iter().all(
            |(_, r)| matches!(r, Resolution::Result { content, .. } if content == EXPIRED_RESULT)
        ));
        let other = RecordedAnswer {
            action_id: 2,
            ..recorded
        };
        assert!(resolve(&action(false), Some(&other), false).iter().all(
            |(_, r)| matches!(r, Resolution::Result { content, .. } if content == ABORTED_RESULT)
        ));
        assert_eq!(
            denied_result(Some("  ")),
            "Denied: the call was not approved"
        );
    }
}
