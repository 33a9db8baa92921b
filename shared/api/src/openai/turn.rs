//! From an OpenAI-shaped conversation to one agentlane turn, and from the run back to the text
//! and usage a client sees. Pure: the routes do the I/O.
//!
//! The rules, the same for Chat Completions and Responses:
//! - the model names the agent ([`super::models::agent_of`]);
//! - system (and developer) messages join the turn's system prompt (`extraSystemPrompt`),
//!   wherever they stand;
//! - the last other message must be the user's: it is the turn's message;
//! - with a session (the `X-Agentlane-Session-Key` header, else `user`; for Responses also the
//!   session of `previous_response_id`), the server's transcript is the context and the earlier
//!   messages of the request are not replayed;
//! - without one, the turn runs on a fresh session whose transcript is seeded with the earlier
//!   user and assistant messages (`TurnRequest::history`), so a stateless client gets a
//!   stateless answer;
//! - turns are `followup` whatever the session's default mode: each request gets its own reply;
//! - the request's tools are client tools of the turn: when the model calls one, the run pauses
//!   and the answer carries the calls, their ids naming the run ([`client_call_id`]); the
//!   client's next request carrying the tools' results ([`ToolResults`]) answers the paused run
//!   and waits for it to go on, instead of starting a turn.

use super::error::OpenAiError;
use super::models::agent_of;
use crate::ApiConfig;
use crate::validate::{AgentBody, ValidTurn, validate_agent_body};
use agentlane_core::validate::validate_session_key;
use agentlane_core::{
    ActionAnswer, ClientTool, Event, EventStream, Message, PendingKind, Run, RunId, TenantId,
    ToolOutputAnswer,
};
use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

/// The header naming the session of an OpenAI-compatible request (wins over `user`).
pub(crate) const SESSION_HEADER: &str = "x-agentlane-session-key";
/// The header whose value becomes the turn's idempotency key.
pub(crate) const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// The response header naming the run of the turn (also the answer's `id`).
pub(crate) const RUN_HEADER: &str = "x-agentlane-run-id";

/// Who said a message of the client's conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Speaker {
    /// `system` or `developer`: instructions.
    System,
    User,
    Assistant,
}

/// One message of the client's conversation, reduced to its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Said {
    pub speaker: Speaker,
    pub text: String,
}

impl Said {
    pub(crate) fn new(speaker: Speaker, text: impl Into<String>) -> Self {
        Self {
            speaker,
            text: text.into(),
        }
    }
}

/// The text of a message's content parts; `param` names the content (`messages[2].content`).
/// Text parts (`text`, `input_text`, `output_text`) join; a `refusal` part says nothing; any
/// other part (images, audio, files) is refused: only text reaches the agent.
pub(crate) fn parts_text<'a>(
    parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    param: &str,
) -> Result<String, OpenAiError> {
    let mut text = String::new();
    for (index, (kind, part_text)) in parts.into_iter().enumerate() {
        match kind {
            "text" | "input_text" | "output_text" => text.push_str(part_text.unwrap_or_default()),
            "refusal" => {}
            other => {
                return Err(OpenAiError::unsupported(
                    &format!("{param}[{index}]"),
                    "unsupported_content",
                    format!(
                        "content parts of type {other:?} are not supported: only text reaches \
                         the agent"
                    ),
                ));
            }
        }
    }
    Ok(text)
}

/// Where a request's turn runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionChoice {
    /// A session the client named; `param` is where (for errors).
    Named { key: String, param: String },
    /// A fresh session of its own.
    Fresh,
}

/// The session a request names: the [`SESSION_HEADER`] header, else `user`.
pub(crate) fn session_choice(
    headers: &HeaderMap,
    user: Option<&str>,
) -> Result<SessionChoice, OpenAiError> {
    let named = |key: &str, param: &str| SessionChoice::Named {
        key: key.to_owned(),
        param: param.to_owned(),
    };
    match headers.get(SESSION_HEADER) {
        Some(value) => match value.to_str() {
            Ok(key) => Ok(named(key.trim(), SESSION_HEADER)),
            Err(_) => Err(OpenAiError::invalid(
                SESSION_HEADER,
                format!("the {SESSION_HEADER} header must be visible ASCII"),
            )),
        },
        None => Ok(user.map_or(SessionChoice::Fresh, |user| named(user, "user"))),
    }
}

/// What a request asks of its turn, once its shape is read.
#[derive(Debug, Clone)]
pub(crate) struct TurnAsk {
    /// The request's `model`.
    pub model: String,
    /// The whole conversation, in order.
    pub conversation: Vec<Said>,
    /// Where the conversation is (`messages`, `input`), for errors.
    pub conversation_param: &'static str,
    /// Instructions besides the system messages (Responses' `instructions`), first.
    pub instructions: Option<String>,
    pub session: SessionChoice,
    /// OpenAI's reasoning effort, and where it was given.
    pub reasoning_effort: Option<(String, &'static str)>,
    /// The `Idempotency-Key` header.
    pub idempotency_key: Option<String>,
    /// The request's tools: client tools of this turn.
    pub tools: Vec<ClientTool>,
    /// The most one model call may write (`max_tokens` and the like; see [`output_ceiling`]).
    pub output_ceiling: Option<u32>,
}

/// The output-token ceiling of a request's `(param, value)` caps (`max_tokens`,
/// `max_completion_tokens`, `max_output_tokens`): each one given must be from 1 to
/// [`MAX_OUTPUT_TOKENS`](agentlane_core::spend::MAX_OUTPUT_TOKENS), and the smallest wins. The
/// run then sends (and reserves) the smaller of it and the agent's own cap.
pub(crate) fn output_ceiling(caps: &[(&str, Option<u64>)]) -> Result<Option<u32>, OpenAiError> {
    let most = agentlane_core::spend::MAX_OUTPUT_TOKENS;
    let mut ceiling: Option<u32> = None;
    for (param, value) in caps {
        let Some(value) = *value else { continue };
        let checked = u32::try_from(value).ok().filter(|v| (1..=most).contains(v));
        let Some(cap) = checked else {
            let (code, bound) = if value < 1 {
                (
                    "integer_below_min_value",
                    "below minimum value. Expected a value >= 1".to_owned(),
                )
            } else {
                (
                    "integer_above_max_value",
                    format!("above maximum value. Expected a value <= {most}"),
                )
            };
            return Err(OpenAiError::invalid(
                param,
                format!("Invalid '{param}': integer {bound}, but got {value} instead."),
            )
            .code(code));
        };
        ceiling = Some(ceiling.map_or(cap, |c| c.min(cap)));
    }
    Ok(ceiling)
}

/// The turn `ask` describes, checked by the rules of `POST /v1/agent` (sizes, the thinking
/// level, the agent id, the idempotency key). `404 model_not_found` when the model names no
/// agent.
pub(crate) fn plan_turn(
    ask: TurnAsk,
    config: &ApiConfig,
    tenant: &TenantId,
) -> Result<ValidTurn, OpenAiError> {
    let agent = agent_of(&ask.model).ok_or_else(|| OpenAiError::model_not_found(&ask.model))?;
    let thinking = match &ask.reasoning_effort {
        Some((effort, param)) => Some(thinking_of(effort, param)?),
        None => None,
    };
    let mut system: Vec<String> = ask.instructions.into_iter().collect();
    let mut said = Vec::new();
    for message in ask.conversation {
        match message.speaker {
            Speaker::System => system.push(message.text),
            Speaker::User | Speaker::Assistant => said.push(message),
        }
    }
    let param = ask.conversation_param;
    let Some(last) = said.pop() else {
        return Err(OpenAiError::invalid(
            param,
            format!("{param} has no user message: the last message (role user) is the turn's"),
        ));
    };
    if last.speaker != Speaker::User {
        return Err(OpenAiError::invalid(
            param,
            format!(
                "the last message of {param} must be the user's (role user): it is the turn's message"
            ),
        ));
    }
    if last.text.is_empty() {
        return Err(OpenAiError::invalid(
            param,
            "the last user message has no text",
        ));
    }
    let (session_key, history) = match ask.session {
        SessionChoice::Named { key, param } => {
            validate_session_key(&key).map_err(|why| {
                OpenAiError::invalid(
                    &param,
                    format!(
                        "{param} names the session: {}",
                        why.replacen("sessionKey", &param, 1)
                    ),
                )
            })?;
            // The session's transcript is the context: earlier messages are not replayed.
            (key, Vec::new())
        }
        SessionChoice::Fresh => (
            fresh_session_key(ask.idempotency_key.as_deref()),
            said.into_iter()
                .filter(|m| !m.text.is_empty())
                .map(to_message)
                .collect(),
        ),
    };
    let system = system
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    let body = AgentBody {
        session_key,
        message: last.text,
        idempotency_key: ask.idempotency_key,
        queue_mode: Some("followup".to_owned()),
        model: None,
        thinking,
        timeout_seconds: None,
        extra_system_prompt: Some(system).filter(|s| !s.is_empty()),
        agent_id: Some(agent.to_owned()),
        tools: Some(ask.tools).filter(|t| !t.is_empty()),
        budget: None,
        max_output_tokens: None,
    };
    let mut turn = validate_agent_body(body, config, tenant)?;
    turn.request.history = history;
    turn.request.output_tokens_ceiling = ask.output_ceiling;
    Ok(turn)
}

/// A stateless request's own session: random, or derived from its idempotency key so that a
/// retry of the request is the same turn.
fn fresh_session_key(idempotency_key: Option<&str>) -> String {
    let id = match idempotency_key {
        Some(key) => {
            let digest = Sha256::digest(key.as_bytes());
            digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
        }
        None => uuid::Uuid::new_v4().simple().to_string(),
    };
    format!("openai-{id}")
}

fn to_message(said: Said) -> Message {
    match said.speaker {
        Speaker::Assistant => Message::Assistant {
            content: said.text,
            reasoning: None,
            tool_calls: Vec::new(),
            model: None,
        },
        Speaker::User | Speaker::System => Message::user(said.text),
    }
}

/// OpenAI's reasoning effort as an agentlane thinking level (`none` is `off`).
fn thinking_of(effort: &str, param: &str) -> Result<String, OpenAiError> {
    match effort {
        "none" => Ok("off".to_owned()),
        "minimal" | "low" | "medium" | "high" => Ok(effort.to_owned()),
        other => Err(OpenAiError::invalid(
            param,
            format!("{param} {other:?} is not supported; use none, minimal, low, medium or high"),
        )),
    }
}

/// The id a client sees for the tool call `call_id` of run `run_id`: `<runId>.<callId>`, so
/// that the tool result the client sends back names the paused run (run ids hold no `.`).
pub(crate) fn client_call_id(run_id: &RunId, call_id: &str) -> String {
    format!("{run_id}.{call_id}")
}

/// The run and the model's call id of a client's `tool_call_id` (see [`client_call_id`]).
pub(crate) fn parse_client_call_id(id: &str) -> Option<(RunId, &str)> {
    let (run, call) = id.split_once('.')?;
    let run_id = crate::routes::run_id(run.to_owned()).ok()?;
    (!call.is_empty()).then_some((run_id, call))
}

/// The client-tool calls of a paused run, as the client sees them: `(id, name, arguments
/// as JSON text)`. Empty when the run is not paused or waits on approvals only.
pub(crate) fn client_calls(run: &Run) -> Vec<(String, String, String)> {
    run.required_action
        .iter()
        .flat_map(|a| a.tool_calls.iter())
        .filter(|c| c.kind == PendingKind::Client)
        .map(|c| {
            let arguments = match &c.arguments {
                serde_json::Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            (
                client_call_id(&run.run_id, &c.id),
                c.name.clone(),
                arguments,
            )
        })
        .collect()
}

/// Whether a paused run also waits on approvals (which the client cannot give here).
pub(crate) fn awaits_approval(run: &Run) -> bool {
    run.required_action
        .iter()
        .flat_map(|a| a.tool_calls.iter())
        .any(|c| c.kind == PendingKind::Approval)
}

/// The tool results a request ends with (`role: "tool"` messages, `function_call_output`
/// items): the answer to a paused run, not a new turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolResults {
    /// `(tool_call_id as the client sent it, output)`, in order.
    pub outputs: Vec<(String, String)>,
    /// Where the results are (`messages`, `input`), for errors.
    pub param: &'static str,
    /// The session the request names, if any: the run must be one of its.
    pub session: SessionChoice,
}

impl ToolResults {
    /// The paused run the results answer and the answer: every id must name one run.
    pub(crate) fn answer(&self) -> Result<(RunId, ActionAnswer), OpenAiError> {
        let param = self.param;
        let mut run: Option<RunId> = None;
        let mut tool_outputs = Vec::with_capacity(self.outputs.len());
        for (id, output) in &self.outputs {
            let Some((run_id, call)) = parse_client_call_id(id) else {
                return Err(OpenAiError::invalid(
                    param,
                    format!(
                        "tool_call_id {id:?} names no call of a paused turn: send back the ids \
                         of the tool calls the previous answer carried"
                    ),
                ));
            };
            match &run {
                Some(seen) if *seen != run_id => {
                    return Err(OpenAiError::invalid(
                        param,
                        "the tool results answer calls of different turns: send the results \
                         of one answer's tool calls together",
                    ));
                }
                Some(_) => {}
                None => run = Some(run_id.clone()),
            }
            tool_outputs.push(ToolOutputAnswer {
                tool_call_id: call.to_owned(),
                output: output.clone(),
                is_error: false,
            });
        }
        let run = run.ok_or_else(|| OpenAiError::invalid(param, "no tool results"))?;
        Ok((
            run,
            ActionAnswer {
                tool_outputs,
                approvals: Vec::new(),
            },
        ))
    }

    /// Refuses a run of another session than the one the request names.
    pub(crate) fn check_session(&self, run: &Run) -> Result<(), OpenAiError> {
        match &self.session {
            SessionChoice::Named { key, param } if key != run.session_key.as_str() => {
                Err(OpenAiError::invalid(
                    param,
                    format!("the tool results answer a turn of another session than {param} names"),
                ))
            }
            _ => Ok(()),
        }
    }
}

/// A request's tool definition (`{name, description?, parameters?}`) as a client tool.
pub(crate) fn client_tool(
    name: Option<&str>,
    description: Option<&str>,
    parameters: Option<&serde_json::Value>,
    param: &str,
) -> Result<ClientTool, OpenAiError> {
    let Some(name) = name else {
        return Err(OpenAiError::invalid(param, format!("{param} has no name")));
    };
    let tool = ClientTool {
        name: name.to_owned(),
        description: description.map(str::to_owned),
        parameters: parameters.cloned(),
    };
    match tool.problem(param) {
        Some(problem) => Err(OpenAiError::invalid(param, problem)),
        None => Ok(tool),
    }
}

/// The reply of a run that ended `ok`: its payloads' text (several join as paragraphs).
pub(crate) fn reply_text(run: &Run) -> String {
    run.payloads
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The assistant text of a run's events, as a client sees it streamed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StreamedText {
    text: String,
}

impl StreamedText {
    /// The text `event` adds (`None`: not assistant text). The text of a new model attempt (the
    /// answer after a tool round, a retry) starts a new paragraph.
    pub(crate) fn delta(&mut self, event: &Event) -> Option<String> {
        if event.stream != EventStream::Assistant {
            return None;
        }
        let delta = event.data.get("delta").and_then(|d| d.as_str())?;
        if delta.is_empty() {
            return None;
        }
        // The first event of an attempt carries the attempt's text so far: its own delta.
        let new_attempt = event.data.get("text").and_then(|t| t.as_str()) == Some(delta);
        let shown = if new_attempt && !self.text.is_empty() {
            format!("\n\n{delta}")
        } else {
            delta.to_owned()
        };
        self.text.push_str(&shown);
        Some(shown)
    }

    /// At the end of a run that ended `ok`: its reply, when no event carried any text (a
    /// reply a hook gave instead of the model).
    pub(crate) fn missing(&mut self, run: &Run) -> Option<String> {
        if !self.text.is_empty() {
            return None;
        }
        let reply = reply_text(run);
        if reply.is_empty() {
            return None;
        }
        self.text.push_str(&reply);
        Some(reply)
    }

    /// Everything streamed so far.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::SessionKey;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn ask(conversation: Vec<Said>, session: SessionChoice) -> TurnAsk {
        TurnAsk {
            model: "agentlane".into(),
            conversation,
            conversation_param: "messages",
            instructions: None,
            session,
            reasoning_effort: None,
            idempotency_key: None,
            tools: Vec::new(),
            output_ceiling: None,
        }
    }

    fn plan(ask: TurnAsk) -> Result<ValidTurn, OpenAiError> {
        plan_turn(ask, &ApiConfig::default(), &TenantId::new("acme"))
    }

    fn named(key: &str) -> SessionChoice {
        SessionChoice::Named {
            key: key.into(),
            param: "user".into(),
        }
    }

    use Speaker::{Assistant, System, User};

    #[test]
    fn the_smallest_output_cap_given_is_the_turns_ceiling_and_one_out_of_range_is_refused() {
        let caps = |a: Option<u64>, b: Option<u64>| {
            output_ceiling(&[("max_completion_tokens", a), ("max_tokens", b)])
        };
        assert_eq!(caps(None, None).unwrap(), None);
        assert_eq!(caps(Some(300), None).unwrap(), Some(300));
        assert_eq!(caps(Some(300), Some(200)).unwrap(), Some(200));
        assert_eq!(caps(None, Some(128_000)).unwrap(), Some(128_000));
        for (a, b, param, code) in [
            (
                Some(0),
                None,
                "max_completion_tokens",
                "integer_below_min_value",
            ),
            (None, Some(128_001), "max_tokens", "integer_above_max_value"),
            (
                Some(10),
                Some(u64::MAX),
                "max_tokens",
                "integer_above_max_value",
            ),
        ] {
            let error = caps(a, b).unwrap_err();
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST);
            assert_eq!(error.param.as_deref(), Some(param));
            assert_eq!(error.code.as_deref(), Some(code));
            assert!(error.message.contains(param), "{}", error.message);
        }
        // The ceiling reaches the run's request.
        let turn = plan(TurnAsk {
            output_ceiling: Some(64),
            ..ask(vec![Said::new(User, "hi")], SessionChoice::Fresh)
        })
        .unwrap();
        assert_eq!(turn.request.output_tokens_ceiling, Some(64));
        assert_eq!(turn.request.max_output_tokens, None);
    }

    #[test]
    fn a_stateless_conversation_seeds_a_fresh_session_and_systems_join_the_prompt() {
        let turn = plan(ask(
            vec![
                Said::new(System, "Be brief."),
                Said::new(User, "my name is Ada"),
                Said::new(Assistant, "Hello Ada."),
                Said::new(System, "Answer in English."),
                Said::new(User, "what is my name?"),
            ],
            SessionChoice::Fresh,
        ))
        .unwrap();
        assert_eq!(turn.request.message, "what is my name?");
        assert_eq!(
            turn.request.extra_system_prompt.as_deref(),
            Some("Be brief.\n\nAnswer in English.")
        );
        assert_eq!(
            turn.request.history,
            vec![
                Message::user("my name is Ada"),
                Message::Assistant {
                    content: "Hello Ada.".into(),
                    reasoning: None,
                    tool_calls: Vec::new(),
                    model: None,
                },
            ]
        );
        assert!(turn.session_key.as_str().starts_with("openai-"));
        assert_eq!(
            turn.request.queue_mode,
            Some(agentlane_core::QueueMode::Followup)
        );
        assert_eq!(turn.request.agent_id, None, "main");
    }

    #[test]
    fn a_named_session_takes_the_last_user_message_only() {
        let turn = plan(ask(
            vec![
                Said::new(User, "earlier"),
                Said::new(Assistant, "reply"),
                Said::new(User, "now"),
            ],
            named("ada@example.com"),
        ))
        .unwrap();
        assert_eq!(turn.session_key, SessionKey::new("ada@example.com"));
        assert_eq!(turn.request.message, "now");
        assert_eq!(turn.request.history, Vec::new());
        assert_eq!(turn.request.extra_system_prompt, None);
    }

    #[test]
    fn conversation_rules() {
        let with = |conversation: Vec<Said>, session: SessionChoice| {
            plan(ask(conversation, session))
                .map(|_| "ok")
                .unwrap_or_else(|e| {
                    if e.code.as_deref() == Some("model_not_found") {
                        "model_not_found"
                    } else if e.status.as_u16() == 400 {
                        "400"
                    } else {
                        "other"
                    }
                })
        };
        let fresh = || SessionChoice::Fresh;
        let cases = [
            (with(vec![Said::new(User, "hi")], fresh()), "ok"),
            (with(vec![], fresh()), "400"),
            (with(vec![Said::new(System, "only rules")], fresh()), "400"),
            (
                with(
                    vec![Said::new(User, "hi"), Said::new(Assistant, "yo")],
                    fresh(),
                ),
                "400",
            ),
            (with(vec![Said::new(User, "")], fresh()), "400"),
            (
                with(
                    vec![Said::new(User, "hi"), Said::new(System, "late")],
                    fresh(),
                ),
                "ok",
            ),
            (with(vec![Said::new(User, "hi")], named("a?b")), "400"),
            (with(vec![Said::new(User, "hi")], named("")), "400"),
            (
                with(vec![Said::new(User, "hi")], named(&"k".repeat(257))),
                "400",
            ),
        ];
        for (index, (got, expected)) in cases.into_iter().enumerate() {
            assert_eq!(got, expected, "case #{index}");
        }
        let bad_key = plan(ask(vec![Said::new(User, "hi")], named("a b"))).unwrap_err();
        assert_eq!(bad_key.param.as_deref(), Some("user"));
        assert!(
            bad_key.message.contains("user contains ' '"),
            "{}",
            bad_key.message
        );
    }

    #[test]
    fn models_name_agents_and_reasoning_efforts_become_thinking_levels() {
        let turn_for = |model: &str, effort: Option<&str>| {
            let mut ask = ask(vec![Said::new(User, "hi")], SessionChoice::Fresh);
            ask.model = model.into();
            ask.reasoning_effort = effort.map(|e| (e.to_owned(), "reasoning_effort"));
            plan(ask)
        };
        assert_eq!(
            turn_for("agentlane/support", None)
                .unwrap()
                .request
                .agent_id
                .as_deref(),
            Some("support")
        );
        assert_eq!(
            turn_for("agentlane/main", None).unwrap().request.agent_id,
            None
        );
        let missing = turn_for("gpt-4o", None).unwrap_err();
        assert_eq!(
            (
                missing.status.as_u16(),
                missing.code.as_deref(),
                missing.param.as_deref()
            ),
            (404, Some("model_not_found"), Some("model"))
        );
        assert_eq!(
            turn_for("agentlane", Some("none"))
                .unwrap()
                .request
                .thinking
                .as_deref(),
            Some("off")
        );
        assert_eq!(
            turn_for("agentlane", Some("high"))
                .unwrap()
                .request
                .thinking
                .as_deref(),
            Some("high")
        );
        let unknown = turn_for("agentlane", Some("extreme")).unwrap_err();
        assert_eq!(unknown.param.as_deref(), Some("reasoning_effort"));
    }

    #[test]
    fn the_session_header_wins_over_user_and_a_retry_of_a_stateless_request_keeps_its_session() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            session_choice(&headers, None).unwrap(),
            SessionChoice::Fresh
        );
        assert_eq!(session_choice(&headers, Some("ada")).unwrap(), named("ada"));
        headers.insert(SESSION_HEADER, HeaderValue::from_static("desk-7"));
        assert_eq!(
            session_choice(&headers, Some("ada")).unwrap(),
            SessionChoice::Named {
                key: "desk-7".into(),
                param: SESSION_HEADER.into()
            }
        );
        let keyed = |key: &str| {
            let mut ask = ask(vec![Said::new(User, "hi")], SessionChoice::Fresh);
            ask.idempotency_key = Some(key.into());
            plan(ask).unwrap()
        };
        assert_eq!(keyed("k-1").session_key, keyed("k-1").session_key);
        assert_ne!(keyed("k-1").session_key, keyed("k-2").session_key);
        assert_eq!(keyed("k-1").idempotency_key.as_deref(), Some("k-1"));
    }

    #[test]
    fn only_text_parts_reach_the_agent() {
        assert_eq!(
            parts_text(
                [
                    ("text", Some("a")),
                    ("refusal", None),
                    ("input_text", Some("b"))
                ],
                "c"
            )
            .unwrap(),
            "ab"
        );
        let image = parts_text(
            [("text", Some("a")), ("image_url", None)],
            "messages[0].content",
        )
        .unwrap_err();
        assert_eq!(image.param.as_deref(), Some("messages[0].content[1]"));
        assert_eq!(image.code.as_deref(), Some("unsupported_content"));
    }

    fn event(stream: EventStream, data: serde_json::Value) -> Event {
        Event {
            seq: 0,
            stream,
            ts: 0,
            data,
        }
    }

    #[test]
    fn streamed_text_follows_the_assistant_deltas_and_parts_attempts() {
        let mut text = StreamedText::default();
        let deltas: Vec<Option<String>> = [
            event(EventStream::Lifecycle, json!({"phase": "start"})),
            event(
                EventStream::Assistant,
                json!({"delta": "Let me ", "text": "Let me "}),
            ),
            event(
                EventStream::Assistant,
                json!({"delta": "check.", "text": "Let me check."}),
            ),
            event(EventStream::Tool, json!({"phase": "start"})),
            event(
                EventStream::Assistant,
                json!({"delta": "It is ", "text": "It is "}),
            ),
            event(
                EventStream::Assistant,
                json!({"delta": "noon.", "text": "It is noon."}),
            ),
            event(
                EventStream::Assistant,
                json!({"delta": "", "text": "It is noon."}),
            ),
        ]
        .iter()
        .map(|e| text.delta(e))
        .collect();
        assert_eq!(
            deltas,
            [
                None,
                Some("Let me ".into()),
                Some("check.".into()),
                None,
                Some("\n\nIt is ".into()),
                Some("noon.".into()),
                None,
            ]
        );
        assert_eq!(text.text(), "Let me check.\n\nIt is noon.");
    }
}
