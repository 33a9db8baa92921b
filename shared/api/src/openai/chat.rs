//! `POST /v1/chat/completions`: the request as OpenAI's SDKs send it, its turn, and the
//! answer (`chat.completion`, or `chat.completion.chunk`s then `[DONE]`).
//!
//! Parameters: `model`, `messages`, `user`, `stream`, `stream_options.include_usage`,
//! `reasoning_effort` (a thinking level) and `tools` (client tools of the turn) are honoured.
//! `n` must be 1. `max_completion_tokens` and `max_tokens` (1-128,000; the smaller of the two)
//! cap each model call of the turn, never above the agent's own cap: the smaller is sent to the
//! model and reserved against budgets. Refused with 400: tools of a type other than
//! `function`, the legacy `functions` and `role: "function"`, `logprobs: true`, a
//! `response_format` other than `text`, audio output, and content parts other than text. Every
//! other parameter (`temperature`, `top_p`, `stop`, `seed`, penalties, `metadata`, `store`,
//! `tool_choice`, `parallel_tool_calls`, ...) is accepted and ignored: the agent's
//! configuration decides how its model is called.
//!
//! Client tools: when the model calls one of the request's `tools`, the turn pauses and the
//! answer is the calls (`finish_reason: "tool_calls"`); a request whose messages end with the
//! `role: "tool"` results of those calls answers the paused turn, and its answer is the turn's
//! continuation (the reply, or more calls). Earlier tool calls and results in `messages` are
//! not replayed into a fresh session's history (their assistant text is).

use super::error::OpenAiError;
use super::stream::{Frame, Frames};
use super::turn::{
    IDEMPOTENCY_HEADER, Said, Speaker, StreamedText, ToolResults, TurnAsk, awaits_approval,
    client_calls, client_tool, output_ceiling, parts_text, plan_turn, reply_text, session_choice,
};
use crate::ApiConfig;
use crate::follow::Followed;
use crate::validate::ValidTurn;
use agentlane_core::{ClientTool, Event, Run, RunStatus, TenantId};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The body of `POST /v1/chat/completions` (OpenAI's; unknown fields are ignored).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(example = json!({"model": "agentlane", "user": "ada",
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]}))]
pub(crate) struct ChatCompletionRequest {
    /// The agent: `agentlane` (`main`) or `agentlane/<agentId>` (see `GET /v1/models`).
    #[schema(
        example = "agentlane",
        pattern = r"^agentlane(/[a-z0-9][a-z0-9-]{0,63})?$"
    )]
    pub model: String,
    /// The conversation. The last message other than system ones must be the user's; see the
    /// README for what reaches the agent.
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessage>,
    /// Stream `chat.completion.chunk`s as Server-Sent Events, then `data: [DONE]`.
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// The session (its transcript is the context); the `X-Agentlane-Session-Key` header wins
    /// over it. 1-256 characters of `[A-Za-z0-9:._@/-]`.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9:._@/-]+$")]
    pub user: Option<String>,
    /// Only 1.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1)]
    pub n: Option<u64>,
    /// Client tools of this turn (`type: "function"` only): a call of one pauses the turn and
    /// the answer carries the calls (`finish_reason: "tool_calls"`).
    #[serde(default)]
    #[schema(max_items = 64)]
    pub tools: Option<Vec<ChatTool>>,
    /// The legacy form of `tools`: refused when not empty.
    #[serde(default)]
    #[schema(max_items = 0)]
    pub functions: Option<Vec<Value>>,
    /// `none`, `minimal`, `low`, `medium` or `high`: the turn's thinking level (`none` is off).
    #[serde(default)]
    #[schema(pattern = r"^(none|minimal|low|medium|high)$")]
    pub reasoning_effort: Option<String>,
    /// Only `false`.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// Only `{"type": "text"}`.
    #[serde(default)]
    pub response_format: Option<TypeOnly>,
    /// Only `["text"]`.
    #[serde(default)]
    pub modalities: Option<Vec<String>>,
    /// Ignored.
    #[serde(default)]
    #[allow(dead_code)] // documented, accepted and ignored
    pub temperature: Option<f64>,
    /// Ignored.
    #[serde(default)]
    #[allow(dead_code)] // documented, accepted and ignored
    pub top_p: Option<f64>,
    /// The most each model call of the turn may write, 1-128,000 (deprecated by OpenAI for
    /// `max_completion_tokens`; with both, the smaller). Never above the agent's own cap.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 128000)]
    pub max_tokens: Option<u64>,
    /// The most each model call of the turn may write, 1-128,000: sent to the model (and
    /// reserved against budgets) unless the agent's own cap is smaller.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 128000)]
    pub max_completion_tokens: Option<u64>,
}

/// One of `tools`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub(crate) struct ChatTool {
    /// Only `function`.
    #[serde(rename = "type")]
    #[schema(example = "function", pattern = r"^function$")]
    pub kind: String,
    #[serde(default)]
    pub function: Option<FunctionDefinition>,
}

/// A function tool: its name, what it does, the JSON Schema of its arguments.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub(crate) struct FunctionDefinition {
    /// `[a-zA-Z0-9_-]{1,64}`.
    #[schema(min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    /// At most 4096 bytes.
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub description: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub(crate) struct StreamOptions {
    /// A last chunk (no choices) carries the turn's token usage.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// An object of which only its `type` matters here (`response_format`, `text.format`).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub(crate) struct TypeOnly {
    /// Only `text`.
    #[serde(rename = "type")]
    #[schema(pattern = r"^text$")]
    pub kind: String,
}

/// One message of `messages`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub(crate) struct ChatMessage {
    pub role: ChatRole,
    /// Text, or text parts (`{"type": "text", "text": …}`).
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// An assistant message's tool calls (an earlier answer's; not replayed).
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    #[allow(dead_code)] // documented, accepted and not replayed
    pub tool_calls: Option<Vec<Value>>,
    /// A `tool` message: the call it answers (an id from the answer's `tool_calls`).
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// The legacy form of `tool_calls`: refused.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub function_call: Option<Value>,
}

/// The role of a message. `tool` messages that end `messages` answer a paused turn; the legacy
/// `function` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ChatRole {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Function,
}

/// A message's content: a string, or parts.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One content part: `text` (`input_text`, `output_text`) parts only.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub(crate) struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

impl MessageContent {
    /// The text; `param` names the content for errors.
    pub(crate) fn text(&self, param: &str) -> Result<String, OpenAiError> {
        match self {
            MessageContent::Text(text) => Ok(text.clone()),
            MessageContent::Parts(parts) => parts_text(
                parts.iter().map(|p| (p.kind.as_str(), p.text.as_deref())),
                param,
            ),
        }
    }
}

/// What a chat request asks for.
#[derive(Debug, Clone)]
pub(crate) enum ChatAsk {
    /// A turn.
    Turn(Box<ValidTurn>),
    /// The results of a paused turn's client tools: its continuation.
    Results(ToolResults),
}

/// A chat request's turn (or answer) and how to answer it.
#[derive(Debug, Clone)]
pub(crate) struct ChatPlan {
    pub ask: ChatAsk,
    /// The `model` asked for, echoed in the answer.
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
}

/// The turn of `request` (`headers`: the session header, `Idempotency-Key`).
pub(crate) fn plan(
    request: ChatCompletionRequest,
    headers: &HeaderMap,
    config: &ApiConfig,
    tenant: &TenantId,
) -> Result<ChatPlan, OpenAiError> {
    refuse_unsupported(&request)?;
    let output_ceiling = output_ceiling(&[
        ("max_completion_tokens", request.max_completion_tokens),
        ("max_tokens", request.max_tokens),
    ])?;
    let tools = tools_of(&request)?;
    let session = session_choice(headers, request.user.as_deref())?;
    let stream = request.stream.unwrap_or(false);
    let include_usage = request
        .stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    if let Some(outputs) = trailing_results(&request.messages)? {
        // The model must still name an agent, even though the paused turn's agent answers.
        super::models::agent_of(&request.model)
            .ok_or_else(|| OpenAiError::model_not_found(&request.model))?;
        return Ok(ChatPlan {
            ask: ChatAsk::Results(ToolResults {
                outputs,
                param: "messages",
                session,
            }),
            model: request.model,
            stream,
            include_usage,
        });
    }
    let mut conversation = Vec::with_capacity(request.messages.len());
    for (index, message) in request.messages.iter().enumerate() {
        conversation.extend(said(message, index)?);
    }
    let ask = TurnAsk {
        model: request.model.clone(),
        conversation,
        conversation_param: "messages",
        instructions: None,
        session,
        reasoning_effort: request
            .reasoning_effort
            .clone()
            .map(|effort| (effort, "reasoning_effort")),
        idempotency_key: idempotency_key(headers)?,
        tools,
        output_ceiling,
    };
    Ok(ChatPlan {
        ask: ChatAsk::Turn(Box::new(plan_turn(ask, config, tenant)?)),
        model: request.model,
        stream,
        include_usage,
    })
}

/// The request's `tools` as client tools.
fn tools_of(request: &ChatCompletionRequest) -> Result<Vec<ClientTool>, OpenAiError> {
    let mut tools = Vec::new();
    for (index, tool) in request.tools.iter().flatten().enumerate() {
        let param = format!("tools[{index}]");
        if tool.kind != "function" {
            return Err(OpenAiError::unsupported(
                &param,
                "tool_type_not_supported",
                format!(
                    "tools of type {:?} are not supported: only function tools, which the \
                     client runs",
                    tool.kind
                ),
            ));
        }
        let function = tool.function.as_ref();
        tools.push(client_tool(
            function.map(|f| f.name.as_str()),
            function.and_then(|f| f.description.as_deref()),
            function.and_then(|f| f.parameters.as_ref()),
            &format!("{param}.function"),
        )?);
    }
    Ok(tools)
}

/// The `role: "tool"` messages `messages` ends with (system messages aside): `(tool_call_id,
/// output)` each. `None` when the last message is not a tool result.
fn trailing_results(
    messages: &[ChatMessage],
) -> Result<Option<Vec<(String, String)>>, OpenAiError> {
    let mut outputs = Vec::new();
    for (index, message) in messages.iter().enumerate().rev() {
        match message.role {
            ChatRole::System | ChatRole::Developer => continue,
            ChatRole::Tool => {}
            _ => break,
        }
        let param = format!("messages[{index}]");
        let Some(id) = message.tool_call_id.clone() else {
            return Err(OpenAiError::invalid(
                &format!("{param}.tool_call_id"),
                format!("{param} (role tool) has no tool_call_id"),
            ));
        };
        let output = match &message.content {
            Some(content) => content.text(&format!("{param}.content"))?,
            None => String::new(),
        };
        outputs.push((id, output));
    }
    if outputs.is_empty() {
        return Ok(None);
    }
    outputs.reverse();
    Ok(Some(outputs))
}

/// The `Idempotency-Key` header, when sent.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, OpenAiError> {
    match headers.get(IDEMPOTENCY_HEADER) {
        None => Ok(None),
        Some(value) => value.to_str().map(|v| Some(v.to_owned())).map_err(|_| {
            OpenAiError::invalid(
                IDEMPOTENCY_HEADER,
                "the Idempotency-Key header must be visible ASCII",
            )
        }),
    }
}

fn refuse_unsupported(request: &ChatCompletionRequest) -> Result<(), OpenAiError> {
    if request.functions.as_ref().is_some_and(|f| !f.is_empty()) {
        return Err(legacy_functions("functions"));
    }
    if let Some(n) = request.n
        && n != 1
    {
        return Err(OpenAiError::unsupported(
            "n",
            "n_not_supported",
            format!("n is {n}: one turn gives one answer, so only n = 1 is supported"),
        ));
    }
    if request.logprobs == Some(true) {
        return Err(OpenAiError::unsupported(
            "logprobs",
            "logprobs_not_supported",
            "logprobs are not supported: the agent's reply has none",
        ));
    }
    if let Some(format) = &request.response_format
        && format.kind != "text"
    {
        return Err(OpenAiError::unsupported(
            "response_format",
            "response_format_not_supported",
            format!(
                "response_format {:?} is not supported: the agent answers in text",
                format.kind
            ),
        ));
    }
    if let Some(modalities) = &request.modalities
        && modalities.iter().any(|m| m != "text")
    {
        return Err(OpenAiError::unsupported(
            "modalities",
            "modalities_not_supported",
            "only the text modality is supported",
        ));
    }
    Ok(())
}

/// The refusal of the legacy `functions` / `function_call` / `role: "function"` forms.
fn legacy_functions(param: &str) -> OpenAiError {
    OpenAiError::unsupported(
        param,
        "functions_not_supported",
        "the legacy functions form is not supported: send tools, and answer tool calls with \
         role \"tool\" messages carrying their tool_call_id",
    )
}

/// One message as text, its speaker from its role; `None` for an earlier tool result (not
/// replayed).
fn said(message: &ChatMessage, index: usize) -> Result<Option<Said>, OpenAiError> {
    let param = format!("messages[{index}]");
    let speaker = match message.role {
        ChatRole::System | ChatRole::Developer => Speaker::System,
        ChatRole::User => Speaker::User,
        ChatRole::Assistant => Speaker::Assistant,
        ChatRole::Tool => return Ok(None),
        ChatRole::Function => return Err(legacy_functions(&param)),
    };
    if message.function_call.is_some() {
        return Err(legacy_functions(&format!("{param}.function_call")));
    }
    let text = match &message.content {
        Some(content) => content.text(&format!("{param}.content"))?,
        None => String::new(),
    };
    Ok(Some(Said::new(speaker, text)))
}

/// `chat.completion`: a finished turn's answer.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct ChatCompletion {
    /// The run id of the turn (`run_…`).
    pub id: String,
    /// Always `chat.completion`.
    #[schema(example = "chat.completion")]
    pub object: String,
    /// When the turn was accepted (seconds since the epoch).
    pub created: u64,
    /// The `model` asked for.
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: CompletionUsage,
}

/// The one choice of a completion.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    /// `stop`: the turn ended with its reply; `tool_calls`: it paused for the client tools'
    /// calls in `message.tool_calls`.
    #[schema(example = "stop")]
    pub finish_reason: String,
    /// Always null.
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<Value>,
}

/// The reply.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct AssistantMessage {
    /// Always `assistant`.
    #[schema(example = "assistant")]
    pub role: String,
    /// The reply (null with tool calls).
    pub content: Option<String>,
    /// Always null.
    pub refusal: Option<String>,
    /// The client tools' calls the turn paused for; answer each with a `role: "tool"` message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ChatToolCall>>,
}

/// A call of a client tool.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct ChatToolCall {
    /// `<runId>.<callId>`: the `tool_call_id` of its result.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    #[schema(example = "function")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The function called and its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct FunctionCall {
    pub name: String,
    /// The arguments, as JSON text.
    pub arguments: String,
}

fn tool_calls_of(run: &Run) -> Vec<ChatToolCall> {
    client_calls(run)
        .into_iter()
        .map(|(id, name, arguments)| ChatToolCall {
            id,
            kind: "function".to_owned(),
            function: FunctionCall { name, arguments },
        })
        .collect()
}

/// Tokens of every model call of the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct CompletionUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl CompletionUsage {
    fn of(run: &Run) -> Self {
        Self {
            prompt_tokens: run.usage.input_tokens,
            completion_tokens: run.usage.output_tokens,
            total_tokens: run.usage.input_tokens + run.usage.output_tokens,
        }
    }
}

/// The answer of a run that ended `ok`, or paused for client tools (`tool_calls`).
pub(crate) fn completion(run: &Run, model: &str) -> ChatCompletion {
    let paused = run.status == RunStatus::RequiresAction;
    let message = if paused {
        AssistantMessage {
            role: "assistant".to_owned(),
            content: None,
            refusal: None,
            tool_calls: Some(tool_calls_of(run)),
        }
    } else {
        AssistantMessage {
            role: "assistant".to_owned(),
            content: Some(reply_text(run)),
            refusal: None,
            tool_calls: None,
        }
    };
    ChatCompletion {
        id: run.run_id.to_string(),
        object: "chat.completion".to_owned(),
        created: run.accepted_at / 1000,
        model: model.to_owned(),
        choices: vec![ChatChoice {
            index: 0,
            message,
            finish_reason: if paused { "tool_calls" } else { "stop" }.to_owned(),
            logprobs: None,
        }],
        usage: CompletionUsage::of(run),
    }
}

/// The chunks of a streamed completion, from the run's events.
#[derive(Debug, Clone)]
pub(crate) struct ChatChunks {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    text: StreamedText,
}

impl ChatChunks {
    /// The chunks of `run` (just accepted, or just answered), answering as `model`.
    pub(crate) fn new(run: &Run, model: &str, include_usage: bool) -> Self {
        Self {
            id: run.run_id.to_string(),
            created: run.accepted_at / 1000,
            model: model.to_owned(),
            include_usage,
            text: StreamedText::default(),
        }
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Frame {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "delta": delta,
                "finish_reason": finish_reason,
                "logprobs": null,
            }],
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        Frame::data(chunk)
    }

    /// The usage chunk, when asked for.
    fn usage(&self, run: &Run) -> Option<Frame> {
        self.include_usage.then(|| {
            Frame::data(json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": CompletionUsage::of(run),
            }))
        })
    }

    fn content(&self, text: &str) -> Frame {
        self.chunk(json!({"content": text}), None)
    }

    fn error(&self, error: OpenAiError) -> Vec<Frame> {
        // OpenAI's SDKs raise an APIError on a chunk carrying `error`; no `[DONE]` follows.
        vec![Frame::data(json!(error.body()))]
    }
}

impl Frames for ChatChunks {
    fn opening(&mut self) -> Vec<Frame> {
        vec![self.chunk(json!({"role": "assistant", "content": ""}), None)]
    }

    fn event(&mut self, event: &Event) -> Vec<Frame> {
        match self.text.delta(event) {
            Some(delta) => vec![self.content(&delta)],
            None => Vec::new(),
        }
    }

    fn end(&mut self, end: &Followed) -> Vec<Frame> {
        match end {
            Followed::Paused(run) if awaits_approval(run) => {
                self.error(OpenAiError::awaiting_approval(run))
            }
            Followed::Paused(run) => {
                let calls: Vec<Value> = tool_calls_of(run)
                    .into_iter()
                    .enumerate()
                    .map(|(index, call)| {
                        json!({
                            "index": index,
                            "id": call.id,
                            "type": call.kind,
                            "function": {"name": call.function.name, "arguments": call.function.arguments},
                        })
                    })
                    .collect();
                let mut frames = vec![
                    self.chunk(json!({"tool_calls": calls}), None),
                    self.chunk(json!({}), Some("tool_calls")),
                ];
                frames.extend(self.usage(run));
                frames.push(Frame::done());
                frames
            }
            Followed::Ended(run) if run.status == RunStatus::Ok => {
                let mut frames: Vec<Frame> = self
                    .text
                    .missing(run)
                    .map(|text| self.content(&text))
                    .into_iter()
                    .collect();
                frames.push(self.chunk(json!({}), Some("stop")));
                frames.extend(self.usage(run));
                frames.push(Frame::done());
                frames
            }
            Followed::Ended(run) => self.error(OpenAiError::turn_failed(run)),
            Followed::Deadline { .. } => self.error(super::stream::cut_off(&self.id)),
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
    use agentlane_core::{EventStream, Payload, RunError, RunStatus, Usage};

    fn request(body: Value) -> Result<ChatPlan, OpenAiError> {
        let request: ChatCompletionRequest = serde_json::from_value(body).unwrap();
        plan(
            request,
            &HeaderMap::new(),
            &ApiConfig::default(),
            &TenantId::new("acme"),
        )
    }

    fn code(result: Result<ChatPlan, OpenAiError>) -> String {
        match result {
            Ok(_) => "ok".into(),
            Err(e) => format!(
                "{} {} {}",
                e.status.as_u16(),
                e.code.unwrap_or_default(),
                e.param.unwrap_or_default()
            ),
        }
    }

    #[test]
    fn parameters_are_honoured_ignored_or_refused() {
        let with = |extra: Value| {
            let mut body =
                json!({"model": "agentlane", "messages": [{"role": "user", "content": "hi"}]});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            code(request(body))
        };
        let tool = json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
        let cases = [
            (json!({}), "ok"),
            (
                json!({"temperature": 0.2, "top_p": 1, "max_tokens": 5, "seed": 7, "stop": ["x"],
                       "presence_penalty": 0, "metadata": {"a": "b"}, "store": false,
                       "tool_choice": "auto", "parallel_tool_calls": true, "n": 1,
                       "stream_options": {"include_usage": true}, "logprobs": false,
                       "response_format": {"type": "text"}, "modalities": ["text"],
                       "something_new": {"x": 1}}),
                "ok",
            ),
            (json!({"tools": []}), "ok"),
            (json!({"tools": tool}), "ok"),
            (
                json!({"tools": [{"type": "code_interpreter"}]}),
                "400 tool_type_not_supported tools[0]",
            ),
            (
                json!({"tools": [{"type": "function"}]}),
                "400  tools[0].function",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "no spaces"}}]}),
                "400  tools[0].function",
            ),
            (
                json!({"functions": [{"name": "f"}]}),
                "400 functions_not_supported functions",
            ),
            (json!({"n": 2}), "400 n_not_supported n"),
            (
                json!({"logprobs": true}),
                "400 logprobs_not_supported logprobs",
            ),
            (
                json!({"response_format": {"type": "json_object"}}),
                "400 response_format_not_supported response_format",
            ),
            (
                json!({"modalities": ["text", "audio"]}),
                "400 modalities_not_supported modalities",
            ),
            (json!({"model": "gpt-4o"}), "404 model_not_found model"),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
                "400 unsupported_content messages[0].content[0]",
            ),
            (
                json!({"messages": [
                    {"role": "user", "content": "weather?"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function"}]},
                    {"role": "tool", "tool_call_id": "c", "content": "sunny"},
                    {"role": "user", "content": "thanks"}]}),
                "ok",
            ),
            (
                json!({"messages": [{"role": "tool", "tool_call_id": "c", "content": "x"}]}),
                "ok",
            ),
            (
                json!({"messages": [{"role": "tool", "content": "x"}]}),
                "400  messages[0].tool_call_id",
            ),
            (
                json!({"messages": [{"role": "function", "name": "f", "content": "x"}, {"role": "user", "content": "hi"}]}),
                "400 functions_not_supported messages[0]",
            ),
            (
                json!({"model": "gpt-4o", "messages": [{"role": "tool", "tool_call_id": "c", "content": "x"}]}),
                "404 model_not_found model",
            ),
            (json!({"messages": []}), "400  messages"),
            (json!({"user": "not a key"}), "400  user"),
        ];
        for (index, (extra, expected)) in cases.into_iter().enumerate() {
            assert_eq!(with(extra.clone()), expected, "case #{index}: {extra}");
        }
    }

    #[test]
    fn text_parts_and_system_messages_make_the_turn() {
        let plan = request(json!({
            "model": "agentlane/support",
            "user": "ada",
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [
                {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                {"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}
            ]
        }))
        .unwrap();
        let ChatAsk::Turn(turn) = &plan.ask else {
            panic!("a turn")
        };
        assert_eq!(turn.request.message, "Hello there");
        assert_eq!(
            turn.request.extra_system_prompt.as_deref(),
            Some("Be brief.")
        );
        assert_eq!(turn.request.agent_id.as_deref(), Some("support"));
        assert_eq!(turn.session_key.as_str(), "ada");
        assert_eq!(
            (plan.model.as_str(), plan.stream, plan.include_usage),
            ("agentlane/support", true, true)
        );
    }

    #[test]
    fn tools_join_the_turn_and_trailing_tool_messages_answer_a_pause() {
        let plan = request(json!({
            "model": "agentlane",
            "messages": [{"role": "user", "content": "weather in Paris?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "description": "The weather", "parameters": {"type": "object"}}}],
        }))
        .unwrap();
        let ChatAsk::Turn(turn) = &plan.ask else {
            panic!("a turn")
        };
        assert_eq!(
            turn.request.tools,
            vec![ClientTool {
                name: "get_weather".into(),
                description: Some("The weather".into()),
                parameters: Some(json!({"type": "object"})),
            }]
        );

        let run_id = agentlane_core::RunId::generate();
        let id = |call: &str| super::super::turn::client_call_id(&run_id, call);
        let plan = request(json!({
            "model": "agentlane",
            "user": "ada",
            "messages": [
                {"role": "user", "content": "weather in Paris and Rome?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": id("c1"), "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                    {"id": id("c2"), "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": id("c1"), "content": "sunny"},
                {"role": "system", "content": "ignored here"},
                {"role": "tool", "tool_call_id": id("c2"), "content": [{"type": "text", "text": "rain"}]},
            ],
        }))
        .unwrap();
        let ChatAsk::Results(results) = &plan.ask else {
            panic!("an answer")
        };
        let (answered, answer) = results.answer().unwrap();
        assert_eq!(answered, run_id);
        let outputs: Vec<(&str, &str)> = answer
            .tool_outputs
            .iter()
            .map(|o| (o.tool_call_id.as_str(), o.output.as_str()))
            .collect();
        assert_eq!(outputs, [("c1", "sunny"), ("c2", "rain")]);

        // ids that name no run, or two runs, are refused
        let bad = |ids: [&str; 2]| {
            let plan = request(json!({"model": "agentlane", "messages": [
                {"role": "tool", "tool_call_id": ids[0], "content": "a"},
                {"role": "tool", "tool_call_id": ids[1], "content": "b"}]}))
            .unwrap();
            let ChatAsk::Results(results) = plan.ask else {
                panic!("an answer")
            };
            results.answer().unwrap_err().message
        };
        assert!(bad(["call_1", "call_2"]).contains("names no call of a paused turn"));
        let other = super::super::turn::client_call_id(&agentlane_core::RunId::generate(), "c2");
        assert!(bad([&id("c1"), &other]).contains("different turns"));
    }

    #[test]
    fn a_run_paused_for_client_tools_is_a_tool_calls_completion() {
        let mut paused = run(RunStatus::RequiresAction);
        paused.payloads.clear();
        paused.required_action = Some(agentlane_core::RequiredAction {
            id: 1,
            tool_calls: vec![agentlane_core::PendingCall {
                id: "c1".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"}),
                kind: agentlane_core::PendingKind::Client,
            }],
            paused_at: 0,
            expires_at: 1,
            resumed: false,
            event_seq: Some(4),
        });
        let answer = serde_json::to_value(completion(&paused, "agentlane")).unwrap();
        let choice = &answer["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        assert_eq!(
            choice["message"]["tool_calls"],
            json!([{"id": format!("{}.c1", paused.run_id), "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}])
        );
        // streamed: the calls in one chunk, then finish_reason tool_calls and [DONE]
        let mut chunks = ChatChunks::new(&paused, "agentlane", false);
        let sent = frames(&mut chunks, &[], Followed::Paused(Box::new(paused.clone())));
        let parsed: Vec<Value> = sent[..sent.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let calls = &parsed[1]["choices"][0]["delta"]["tool_calls"];
        assert_eq!(calls[0]["index"], 0);
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        assert_eq!(parsed[2]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(sent.last().map(String::as_str), Some("[DONE]"));

        // a pause for the agent's approvals is an error: the client cannot give one here
        if let Some(action) = paused.required_action.as_mut() {
            action.tool_calls[0].kind = agentlane_core::PendingKind::Approval;
        }
        let mut chunks = ChatChunks::new(&paused, "agentlane", false);
        let sent = frames(&mut chunks, &[], Followed::Paused(Box::new(paused)));
        let last: Value = serde_json::from_str(sent.last().unwrap()).unwrap();
        assert_eq!(last["error"]["code"], "requires_approval");
    }

    fn run(status: RunStatus) -> Run {
        let turn = agentlane_conformance::fixtures::turn(
            &TenantId::new("acme"),
            &agentlane_core::SessionKey::new("s"),
            1_764_480_000_123,
        );
        let mut run = turn.queued_run(
            agentlane_core::SessionId::new("sid"),
            0,
            None,
            &Default::default(),
        );
        run.status = status;
        run.usage = Usage {
            input_tokens: 12,
            output_tokens: 5,
            ..Default::default()
        };
        run.payloads = vec![Payload {
            text: "Hi there!".into(),
            is_error: false,
        }];
        run
    }

    #[test]
    fn a_finished_run_is_a_chat_completion() {
        let run = run(RunStatus::Ok);
        let answer = serde_json::to_value(completion(&run, "agentlane")).unwrap();
        assert_eq!(
            answer,
            json!({
                "id": run.run_id,
                "object": "chat.completion",
                "created": 1_764_480_000u64,
                "model": "agentlane",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hi there!", "refusal": null},
                    "finish_reason": "stop",
                    "logprobs": null,
                }],
                "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
            })
        );
    }

    fn frames(chunks: &mut ChatChunks, events: &[Value], end: Followed) -> Vec<String> {
        let mut out = chunks.opening();
        for (seq, data) in events.iter().enumerate() {
            out.extend(chunks.event(&Event {
                seq: seq as u64,
                stream: EventStream::Assistant,
                ts: 0,
                data: data.clone(),
            }));
        }
        out.extend(chunks.end(&end));
        out.into_iter().map(|f| f.data).collect()
    }

    #[test]
    fn a_streamed_run_is_role_then_content_chunks_then_stop_usage_and_done() {
        let finished = run(RunStatus::Ok);
        let mut chunks = ChatChunks::new(&finished, "agentlane", true);
        let sent = frames(
            &mut chunks,
            &[
                json!({"delta": "Hi ", "text": "Hi "}),
                json!({"delta": "there!", "text": "Hi there!"}),
            ],
            Followed::Ended(Box::new(finished.clone())),
        );
        let parsed: Vec<Value> = sent[..sent.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let deltas: Vec<&Value> = parsed.iter().map(|c| &c["choices"][0]["delta"]).collect();
        assert_eq!(deltas[0], &json!({"role": "assistant", "content": ""}));
        assert_eq!(deltas[1], &json!({"content": "Hi "}));
        assert_eq!(deltas[2], &json!({"content": "there!"}));
        assert_eq!(deltas[3], &json!({}));
        assert_eq!(parsed[3]["choices"][0]["finish_reason"], "stop");
        assert!(parsed[..4].iter().all(|c| c["usage"].is_null()
            && c["object"] == "chat.completion.chunk"
            && c["id"] == json!(finished.run_id)));
        assert_eq!(parsed[4]["choices"], json!([]));
        assert_eq!(
            parsed[4]["usage"],
            json!({"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17})
        );
        assert_eq!(sent.last().map(String::as_str), Some("[DONE]"));

        // Without include_usage: no usage field, no usage chunk.
        let mut plain = ChatChunks::new(&finished, "agentlane", false);
        let sent = frames(&mut plain, &[], Followed::Ended(Box::new(finished.clone())));
        let parsed: Vec<Value> = sent[..sent.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert!(parsed.iter().all(|c| c.get("usage").is_none()));
        // a reply no event carried still arrives
        assert_eq!(
            parsed[1]["choices"][0]["delta"],
            json!({"content": "Hi there!"})
        );
        assert_eq!(parsed.len(), 3);
    }

    #[test]
    fn a_failed_or_cut_stream_ends_with_an_error_chunk_and_no_done() {
        let mut failed = run(RunStatus::Error);
        failed.error = Some(RunError::new("rate_limit", "the provider kept refusing"));
        let mut chunks = ChatChunks::new(&failed, "agentlane", false);
        let sent = frames(&mut chunks, &[], Followed::Ended(Box::new(failed.clone())));
        let last: Value = serde_json::from_str(sent.last().unwrap()).unwrap();
        assert_eq!(last["error"]["code"], "rate_limit");
        assert_eq!(last["error"]["type"], "server_error");
        assert!(!sent.iter().any(|d| d == "[DONE]"));
        let mut cut = ChatChunks::new(&failed, "agentlane", false);
        let sent = frames(&mut cut, &[], Followed::Deadline { last_seq: None });
        let last: Value = serde_json::from_str(sent.last().unwrap()).unwrap();
        assert_eq!(last["error"]["code"], "stream_deadline");
    }

    #[test]
    fn a_turn_a_budget_stopped_is_a_spent_quota() {
        let mut stopped = run(RunStatus::Error);
        stopped.error = Some(RunError::new(
            agentlane_core::spend::OverBudget::CODE,
            "the tenant's budget for the day 2026-12-04 (UTC) is spent",
        ));
        let failure = OpenAiError::turn_failed(&stopped);
        assert_eq!(failure.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(failure.code.as_deref(), Some("insufficient_quota"));
        let mut chunks = ChatChunks::new(&stopped, "agentlane", false);
        let sent = frames(&mut chunks, &[], Followed::Ended(Box::new(stopped.clone())));
        let last: Value = serde_json::from_str(sent.last().unwrap()).unwrap();
        assert_eq!(last["error"]["code"], "insufficient_quota");
        assert_eq!(last["error"]["type"], "rate_limit_error");
    }
}
