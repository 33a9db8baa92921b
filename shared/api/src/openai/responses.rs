//! `POST /v1/responses`: OpenAI's Responses API over one turn. The response id is the run id;
//! `previous_response_id` continues the session of that run (the run's transcript is the
//! context), so a chain of responses is one conversation.
//!
//! Honoured: `model`, `input` (a string, or message items with text content), `instructions`
//! (joins the system prompt), `previous_response_id`, `user`, `stream`, `reasoning.effort`.
//! Refused with 400: non-empty `tools` and tool items in `input` (`tools_not_supported`: client
//! tools are served by Chat Completions),
//! `background: true`, `conversation`, a `text.format` other than `text`, content other than
//! text. `max_output_tokens` (1-128,000) caps each model call of the turn, never above the
//! agent's own cap. Every other parameter (`temperature`, `top_p`, `store`, `metadata`,
//! `truncation`, `include`, ...) is accepted and ignored.

use super::chat::{MessageContent, TypeOnly, idempotency_key};
use super::error::OpenAiError;
use super::stream::{Frame, Frames};
use super::turn::{
    Said, SessionChoice, Speaker, StreamedText, TurnAsk, output_ceiling, plan_turn, reply_text,
    session_choice,
};
use crate::ApiConfig;
use crate::follow::Followed;
use crate::validate::ValidTurn;
use agentlane_core::{Event, Run, RunStatus, TenantId};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The body of `POST /v1/responses` (OpenAI's; unknown fields are ignored).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(example = json!({"model": "agentlane", "instructions": "Be brief.", "input": "hello"}))]
pub(crate) struct ResponseRequest {
    /// The agent: `agentlane` (`main`) or `agentlane/<agentId>` (see `GET /v1/models`).
    #[schema(
        example = "agentlane",
        pattern = r"^agentlane(/[a-z0-9][a-z0-9-]{0,63})?$"
    )]
    pub model: String,
    /// The user's message, or message items (the last one other than system ones must be the
    /// user's).
    pub input: ResponseInput,
    /// Joins the turn's system prompt.
    #[serde(default)]
    pub instructions: Option<String>,
    /// The id of an earlier response of this API key's tenant: the turn continues its session.
    #[serde(default)]
    #[schema(max_length = 128)]
    pub previous_response_id: Option<String>,
    /// Stream the Responses events as Server-Sent Events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// The session (its transcript is the context) when there is no `previous_response_id`;
    /// the `X-Agentlane-Session-Key` header wins over it.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9:._@/-]+$")]
    pub user: Option<String>,
    /// Refused when not empty (`tools_not_supported`).
    #[serde(default)]
    #[schema(max_items = 0)]
    pub tools: Option<Vec<Value>>,
    /// `reasoning.effort` is the turn's thinking level.
    #[serde(default)]
    pub reasoning: Option<Reasoning>,
    /// Only a `text` format.
    #[serde(default)]
    pub text: Option<TextOptions>,
    /// Only `false`.
    #[serde(default)]
    pub background: Option<bool>,
    /// Refused: chain turns with `previous_response_id`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub conversation: Option<Value>,
    /// Ignored.
    #[serde(default)]
    #[allow(dead_code)] // documented, accepted and ignored
    pub temperature: Option<f64>,
    /// The most each model call of the turn may write, 1-128,000: sent to the model (and
    /// reserved against budgets) unless the agent's own cap is smaller.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 128000)]
    pub max_output_tokens: Option<u64>,
}

/// `input`: a string (one user message) or message items.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum ResponseInput {
    Text(String),
    Items(Vec<InputItem>),
}

/// One input item: a message (`type` `message` or absent). Other item types are refused.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub(crate) struct InputItem {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub role: Option<InputRole>,
    #[serde(default)]
    pub content: Option<MessageContent>,
}

/// The role of an input message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum InputRole {
    System,
    Developer,
    User,
    Assistant,
}

/// `reasoning`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub(crate) struct Reasoning {
    /// `none`, `minimal`, `low`, `medium` or `high`.
    #[serde(default)]
    #[schema(pattern = r"^(none|minimal|low|medium|high)$")]
    pub effort: Option<String>,
}

/// `text`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub(crate) struct TextOptions {
    #[serde(default)]
    pub format: Option<TypeOnly>,
}

/// A Responses request's turn and how to answer it.
#[derive(Debug, Clone)]
pub(crate) struct ResponsePlan {
    pub turn: ValidTurn,
    pub model: String,
    pub stream: bool,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
}

/// The turn of `request`. `previous` is the run `previous_response_id` names (read by the
/// route, which answers 404 when the tenant has none): its session is the turn's.
pub(crate) fn plan(
    request: ResponseRequest,
    previous: Option<&Run>,
    headers: &HeaderMap,
    config: &ApiConfig,
    tenant: &TenantId,
) -> Result<ResponsePlan, OpenAiError> {
    refuse_unsupported(&request)?;
    let conversation = match &request.input {
        ResponseInput::Text(text) => vec![Said::new(Speaker::User, text.clone())],
        ResponseInput::Items(items) => items
            .iter()
            .enumerate()
            .map(|(index, item)| said(item, index))
            .collect::<Result<_, _>>()?,
    };
    let named = session_choice(headers, request.user.as_deref())?;
    let session = match previous {
        Some(previous) => {
            if let SessionChoice::Named { key, param } = &named
                && key != previous.session_key.as_str()
            {
                return Err(OpenAiError::invalid(
                    param,
                    format!(
                        "{param} names another session than previous_response_id's; send one \
                         of them"
                    ),
                ));
            }
            SessionChoice::Named {
                key: previous.session_key.to_string(),
                param: "previous_response_id".to_owned(),
            }
        }
        None => named,
    };
    let ask = TurnAsk {
        model: request.model.clone(),
        conversation,
        conversation_param: "input",
        instructions: request.instructions.clone(),
        session,
        reasoning_effort: request
            .reasoning
            .as_ref()
            .and_then(|r| r.effort.clone())
            .map(|effort| (effort, "reasoning.effort")),
        idempotency_key: idempotency_key(headers)?,
        tools: Vec::new(),
        output_ceiling: output_ceiling(&[("max_output_tokens", request.max_output_tokens)])?,
    };
    Ok(ResponsePlan {
        turn: plan_turn(ask, config, tenant)?,
        model: request.model,
        stream: request.stream.unwrap_or(false),
        instructions: request.instructions,
        previous_response_id: request.previous_response_id,
    })
}

/// The refusal of client tools here: Chat Completions serves them (`tools`, then the
/// `role: "tool"` results answer the paused turn); the Responses API does not yet.
fn client_tools_refused(param: &str) -> OpenAiError {
    OpenAiError::unsupported(
        param,
        "tools_not_supported",
        "client tools are not supported by the Responses API here: use POST \
         /v1/chat/completions with tools (the turn pauses and its answer carries the calls), \
         or give the agent its own tools (built-ins, MCP servers, HTTP tools), which run on the \
         server",
    )
}

fn refuse_unsupported(request: &ResponseRequest) -> Result<(), OpenAiError> {
    if request.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(client_tools_refused("tools"));
    }
    if request.background == Some(true) {
        return Err(OpenAiError::unsupported(
            "background",
            "background_not_supported",
            "background responses are not supported: every turn is already durable; poll its \
             run with GET /v1/runs/{id}",
        ));
    }
    if request.conversation.is_some() {
        return Err(OpenAiError::unsupported(
            "conversation",
            "conversation_not_supported",
            "conversation objects are not supported: chain turns with previous_response_id, or \
             name a session with user",
        ));
    }
    if let Some(format) = request.text.as_ref().and_then(|t| t.format.as_ref())
        && format.kind != "text"
    {
        return Err(OpenAiError::unsupported(
            "text.format",
            "text_format_not_supported",
            format!(
                "text.format {:?} is not supported: the agent answers in text",
                format.kind
            ),
        ));
    }
    Ok(())
}

fn said(item: &InputItem, index: usize) -> Result<Said, OpenAiError> {
    let param = format!("input[{index}]");
    match item.kind.as_deref() {
        None | Some("message") => {}
        Some(kind) if kind.contains("call") || kind.contains("tool") => {
            return Err(client_tools_refused(&param));
        }
        Some(other) => {
            return Err(OpenAiError::unsupported(
                &param,
                "unsupported_input",
                format!("input items of type {other:?} are not supported; send messages"),
            ));
        }
    }
    let speaker = match item.role {
        Some(InputRole::System | InputRole::Developer) => Speaker::System,
        Some(InputRole::User) => Speaker::User,
        Some(InputRole::Assistant) => Speaker::Assistant,
        None => {
            return Err(OpenAiError::invalid(
                &param,
                format!(
                    "{param} has no role: input messages need user, assistant, system or developer"
                ),
            ));
        }
    };
    let text = match &item.content {
        Some(content) => content.text(&format!("{param}.content"))?,
        None => String::new(),
    };
    Ok(Said::new(speaker, text))
}

/// A response: the turn's answer in OpenAI's Responses shape.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct ResponseObject {
    /// The run id of the turn (`run_…`): pass it as `previous_response_id` to go on.
    pub id: String,
    /// Always `response`.
    #[schema(example = "response")]
    pub object: String,
    /// When the turn was accepted (seconds since the epoch).
    pub created_at: u64,
    /// `in_progress`, `completed` or `failed`.
    #[schema(example = "completed")]
    pub status: String,
    /// When the turn ended (seconds since the epoch).
    pub completed_at: Option<u64>,
    /// The `model` asked for.
    pub model: String,
    pub output: Vec<OutputMessage>,
    pub usage: Option<ResponseUsage>,
    pub error: Option<ResponseError>,
    /// Always null.
    #[schema(value_type = Option<Object>)]
    pub incomplete_details: Option<Value>,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
    /// Always `{}`.
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// Always true.
    pub parallel_tool_calls: bool,
    /// Always `auto`.
    pub tool_choice: String,
    /// Always empty: the agent's own tools are not listed.
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    /// Always null.
    pub temperature: Option<f64>,
    /// Always null.
    pub top_p: Option<f64>,
}

/// The reply as an output message.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct OutputMessage {
    /// `msg_` + the run id.
    pub id: String,
    /// Always `message`.
    #[serde(rename = "type")]
    #[schema(example = "message")]
    pub kind: String,
    /// `in_progress` or `completed`.
    pub status: String,
    /// Always `assistant`.
    pub role: String,
    pub content: Vec<OutputText>,
}

/// The text of the reply.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct OutputText {
    /// Always `output_text`.
    #[serde(rename = "type")]
    #[schema(example = "output_text")]
    pub kind: String,
    pub text: String,
    /// Always empty.
    #[schema(value_type = Vec<Object>)]
    pub annotations: Vec<Value>,
}

/// Tokens of every model call of the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct ResponseUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
}

/// Why a streamed turn failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct ResponseError {
    pub code: String,
    pub message: String,
}

/// What the answer says of the request, besides the run.
#[derive(Debug, Clone)]
pub(crate) struct Echo {
    pub model: String,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
}

impl Echo {
    pub(crate) fn of(plan: &ResponsePlan) -> Self {
        Self {
            model: plan.model.clone(),
            instructions: plan.instructions.clone(),
            previous_response_id: plan.previous_response_id.clone(),
        }
    }
}

fn message_id(run: &Run) -> String {
    format!("msg_{}", run.run_id)
}

fn output_text(text: &str) -> OutputText {
    OutputText {
        kind: "output_text".to_owned(),
        text: text.to_owned(),
        annotations: Vec::new(),
    }
}

fn output_message(run: &Run, status: &str, content: Vec<OutputText>) -> OutputMessage {
    OutputMessage {
        id: message_id(run),
        kind: "message".to_owned(),
        status: status.to_owned(),
        role: "assistant".to_owned(),
        content,
    }
}

/// The response of `run` as it stands: `in_progress` with no output while it runs,
/// `completed` with `text` (the reply, when it ended `ok`), or `failed` with the run's error.
pub(crate) fn response_object(run: &Run, echo: &Echo, text: Option<&str>) -> ResponseObject {
    let (status, output, error) = match run.status {
        RunStatus::Queued | RunStatus::Running | RunStatus::RequiresAction => {
            ("in_progress", Vec::new(), None)
        }
        RunStatus::Ok => {
            let text = text.map_or_else(|| reply_text(run), str::to_owned);
            let message = output_message(run, "completed", vec![output_text(&text)]);
            ("completed", vec![message], None)
        }
        RunStatus::Error | RunStatus::Aborted | RunStatus::Timeout => {
            let failure = OpenAiError::turn_failed(run);
            let error = ResponseError {
                code: failure.code.unwrap_or_default(),
                message: failure.message,
            };
            ("failed", Vec::new(), Some(error))
        }
    };
    let ended = run.status.is_terminal();
    ResponseObject {
        id: run.run_id.to_string(),
        object: "response".to_owned(),
        created_at: run.accepted_at / 1000,
        status: status.to_owned(),
        completed_at: run.ended_at.filter(|_| ended).map(|t| t / 1000),
        model: echo.model.clone(),
        output,
        usage: ended.then_some(ResponseUsage {
            input_tokens: run.usage.input_tokens,
            output_tokens: run.usage.output_tokens,
            total_tokens: run.usage.input_tokens + run.usage.output_tokens,
        }),
        error,
        incomplete_details: None,
        instructions: echo.instructions.clone(),
        previous_response_id: echo.previous_response_id.clone(),
        metadata: json!({}),
        parallel_tool_calls: true,
        tool_choice: "auto".to_owned(),
        tools: Vec::new(),
        temperature: None,
        top_p: None,
    }
}

/// The events of a streamed response, from the run's events: `response.created`,
/// `response.in_progress`, the output item and its text part opened, one
/// `response.output_text.delta` per piece of the reply, the text, part and item done, then
/// `response.completed` (or `response.failed`, or an `error` event when the stream is cut).
#[derive(Debug, Clone)]
pub(crate) struct ResponseEvents {
    run: Run,
    echo: Echo,
    text: StreamedText,
    sequence: u64,
}

impl ResponseEvents {
    /// The events of `run` (just accepted).
    pub(crate) fn new(run: &Run, echo: Echo) -> Self {
        Self {
            run: run.clone(),
            echo,
            text: StreamedText::default(),
            sequence: 0,
        }
    }

    fn frame(&mut self, kind: &'static str, mut data: Value) -> Frame {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        Frame::named(kind, data)
    }

    fn part(&mut self, kind: &'static str, extra: Value) -> Frame {
        let mut data = json!({
            "item_id": message_id(&self.run),
            "output_index": 0,
            "content_index": 0,
        });
        for (key, value) in extra.as_object().into_iter().flatten() {
            data[key] = value.clone();
        }
        self.frame(kind, data)
    }

    fn delta(&mut self, delta: &str) -> Frame {
        self.part(
            "response.output_text.delta",
            json!({"delta": delta, "logprobs": []}),
        )
    }

    fn error(&mut self, error: OpenAiError) -> Vec<Frame> {
        let frame = self.frame(
            "error",
            json!({"code": error.code, "message": error.message, "param": null}),
        );
        vec![frame]
    }
}

impl Frames for ResponseEvents {
    fn opening(&mut self) -> Vec<Frame> {
        let response = json!(response_object(&self.run, &self.echo, None));
        let in_progress = output_message(&self.run, "in_progress", Vec::new());
        vec![
            self.frame("response.created", json!({"response": response})),
            self.frame("response.in_progress", json!({"response": response})),
            self.frame(
                "response.output_item.added",
                json!({"output_index": 0, "item": in_progress}),
            ),
            self.part(
                "response.content_part.added",
                json!({"part": output_text("")}),
            ),
        ]
    }

    fn event(&mut self, event: &Event) -> Vec<Frame> {
        match self.text.delta(event) {
            Some(delta) => vec![self.delta(&delta)],
            None => Vec::new(),
        }
    }

    fn end(&mut self, end: &Followed) -> Vec<Frame> {
        match end {
            Followed::Ended(run) if run.status == RunStatus::Ok => {
                let mut frames: Vec<Frame> = Vec::new();
                if let Some(text) = self.text.missing(run) {
                    frames.push(self.delta(&text));
                }
                let text = self.text.text().to_owned();
                let part = output_text(&text);
                let item = output_message(run, "completed", vec![part.clone()]);
                frames.push(self.part(
                    "response.output_text.done",
                    json!({"text": text, "logprobs": []}),
                ));
                frames.push(self.part("response.content_part.done", json!({"part": part})));
                frames.push(self.frame(
                    "response.output_item.done",
                    json!({"output_index": 0, "item": item}),
                ));
                let response = response_object(run, &self.echo, Some(&text));
                frames.push(self.frame("response.completed", json!({"response": response})));
                frames
            }
            Followed::Ended(run) => {
                let response = response_object(run, &self.echo, None);
                vec![self.frame("response.failed", json!({"response": response}))]
            }
            // Paused for the agent's own client tools or approvals: answered through
            // `POST /v1/runs/{id}/actions`, not here.
            Followed::Paused(run) => self.error(super::stream::paused(run)),
            Followed::Deadline { .. } => {
                let id = self.run.run_id.to_string();
                self.error(super::stream::cut_off(&id))
            }
            Followed::Failed { code, message } => {
                self.error(super::stream::store_failed(code, message))
            }
            Followed::Event(event) => self.event(event),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::{EventStream, Payload, RunError, SessionKey, Usage};

    fn request(body: Value) -> ResponseRequest {
        serde_json::from_value(body).unwrap()
    }

    fn planned(body: Value, previous: Option<&Run>) -> Result<ResponsePlan, OpenAiError> {
        plan(
            request(body),
            previous,
            &HeaderMap::new(),
            &ApiConfig::default(),
            &TenantId::new("acme"),
        )
    }

    fn run(status: RunStatus, key: &str) -> Run {
        let turn = agentlane_conformance::fixtures::turn(
            &TenantId::new("acme"),
            &SessionKey::new(key),
            1_764_480_000_123,
        );
        let mut run = turn.queued_run(
            agentlane_core::SessionId::new("sid"),
            0,
            None,
            &Default::default(),
        );
        run.status = status;
        run.ended_at = Some(1_764_480_002_999);
        run.usage = Usage {
            input_tokens: 3,
            output_tokens: 4,
            ..Default::default()
        };
        run.payloads = vec![Payload {
            text: "Hello Ada.".into(),
            is_error: false,
        }];
        run
    }

    #[test]
    fn input_instructions_and_previous_responses_make_the_turn() {
        let text = planned(
            json!({"model": "agentlane", "input": "hi", "instructions": "Be brief."}),
            None,
        )
        .unwrap();
        assert_eq!(text.turn.request.message, "hi");
        assert_eq!(
            text.turn.request.extra_system_prompt.as_deref(),
            Some("Be brief.")
        );
        assert!(text.turn.session_key.as_str().starts_with("openai-"));

        let items = planned(
            json!({"model": "agentlane", "input": [
                {"role": "system", "content": "Rules."},
                {"role": "user", "content": "my name is Ada"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi Ada."}]},
                {"role": "user", "content": [{"type": "input_text", "text": "my name?"}]}
            ]}),
            None,
        )
        .unwrap();
        assert_eq!(items.turn.request.message, "my name?");
        assert_eq!(items.turn.request.history.len(), 2);
        assert_eq!(
            items.turn.request.extra_system_prompt.as_deref(),
            Some("Rules.")
        );

        let previous = run(RunStatus::Ok, "openai-abc");
        let chained = planned(
            json!({"model": "agentlane", "input": "and then?", "previous_response_id": previous.run_id}),
            Some(&previous),
        )
        .unwrap();
        assert_eq!(chained.turn.session_key.as_str(), "openai-abc");
        assert_eq!(chained.turn.request.history, Vec::new());
        assert_eq!(
            chained.previous_response_id.as_deref(),
            Some(previous.run_id.as_str())
        );
        let clash = planned(
            json!({"model": "agentlane", "input": "x", "user": "other", "previous_response_id": previous.run_id}),
            Some(&previous),
        )
        .unwrap_err();
        assert_eq!(clash.param.as_deref(), Some("user"));
    }

    #[test]
    fn refusals() {
        let code = |body: Value| {
            planned(body, None)
                .map(|_| "ok".to_owned())
                .unwrap_or_else(|e| {
                    format!(
                        "{} {}",
                        e.code.unwrap_or_default(),
                        e.param.unwrap_or_default()
                    )
                })
        };
        let base = |extra: Value| {
            let mut body = json!({"model": "agentlane", "input": "hi"});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            body
        };
        let cases = [
            (
                base(
                    json!({"temperature": 0.5, "store": true, "metadata": {"a": "b"}, "truncation": "auto"}),
                ),
                "ok",
            ),
            (
                base(json!({"tools": [{"type": "function", "name": "f"}]})),
                "tools_not_supported tools",
            ),
            (
                base(json!({"background": true})),
                "background_not_supported background",
            ),
            (
                base(json!({"conversation": "conv_1"})),
                "conversation_not_supported conversation",
            ),
            (
                base(json!({"text": {"format": {"type": "json_schema"}}})),
                "text_format_not_supported text.format",
            ),
            (base(json!({"text": {"format": {"type": "text"}}})), "ok"),
            (
                base(
                    json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}),
                ),
                "tools_not_supported input[0]",
            ),
            (
                base(json!({"input": [{"type": "reasoning"}]})),
                "unsupported_input input[0]",
            ),
            (
                base(json!({"input": [{"content": "no role"}]})),
                " input[0]",
            ),
            (base(json!({"model": "other"})), "model_not_found model"),
            (
                base(json!({"reasoning": {"effort": "huge"}})),
                " reasoning.effort",
            ),
        ];
        for (index, (body, expected)) in cases.into_iter().enumerate() {
            assert_eq!(code(body.clone()), expected, "case #{index}: {body}");
        }
    }

    fn echo() -> Echo {
        Echo {
            model: "agentlane".into(),
            instructions: None,
            previous_response_id: None,
        }
    }

    #[test]
    fn a_finished_run_is_a_completed_response_and_a_failed_one_says_why() {
        let ok = run(RunStatus::Ok, "s");
        let answer = serde_json::to_value(response_object(&ok, &echo(), None)).unwrap();
        assert_eq!(answer["id"], json!(ok.run_id));
        assert_eq!(answer["object"], "response");
        assert_eq!(answer["status"], "completed");
        assert_eq!(answer["created_at"], 1_764_480_000u64);
        assert_eq!(answer["completed_at"], 1_764_480_002u64);
        assert_eq!(
            answer["output"],
            json!([{
                "id": format!("msg_{}", ok.run_id),
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello Ada.", "annotations": []}],
            }])
        );
        assert_eq!(
            answer["usage"],
            json!({"input_tokens": 3, "output_tokens": 4, "total_tokens": 7})
        );
        let mut failed = run(RunStatus::Error, "s");
        failed.error = Some(RunError::new("model_not_found", "no such model upstream"));
        let answer = serde_json::to_value(response_object(&failed, &echo(), None)).unwrap();
        assert_eq!(answer["status"], "failed");
        assert_eq!(answer["output"], json!([]));
        assert_eq!(answer["error"]["code"], "model_not_found");
    }

    #[test]
    fn a_streamed_response_is_the_full_event_sequence() {
        let mut queued = run(RunStatus::Queued, "s");
        queued.ended_at = None;
        let mut events = ResponseEvents::new(&queued, echo());
        let mut frames = events.opening();
        for (seq, data) in [
            json!({"delta": "Hello ", "text": "Hello "}),
            json!({"delta": "Ada.", "text": "Hello Ada."}),
        ]
        .into_iter()
        .enumerate()
        {
            frames.extend(events.event(&Event {
                seq: seq as u64,
                stream: EventStream::Assistant,
                ts: 0,
                data,
            }));
        }
        frames.extend(events.end(&Followed::Ended(Box::new(run(RunStatus::Ok, "s")))));
        let names: Vec<&str> = frames.iter().map(|f| f.event.unwrap_or("")).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let data: Vec<Value> = frames
            .iter()
            .map(|f| serde_json::from_str(&f.data).unwrap())
            .collect();
        for (index, d) in data.iter().enumerate() {
            assert_eq!(d["type"], names[index]);
            assert_eq!(d["sequence_number"], index as u64);
        }
        assert_eq!(data[0]["response"]["status"], "in_progress");
        assert_eq!(data[4]["delta"], "Hello ");
        assert_eq!(data[6]["text"], "Hello Ada.");
        assert_eq!(data[9]["response"]["status"], "completed");
        assert_eq!(
            data[9]["response"]["output"][0]["content"][0]["text"],
            "Hello Ada."
        );
    }
}
