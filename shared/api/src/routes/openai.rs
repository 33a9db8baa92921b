//! The OpenAI-compatible routes (see [`crate::openai`]): `GET /v1/models`,
//! `POST /v1/chat/completions`, `POST /v1/responses`. A turn is accepted as `POST /v1/agent`
//! accepts one ([`super::agent::accept`]); the answer waits for the run as `agent.wait` does, or
//! follows its events as the SSE event stream does.

use super::actions::{Answered, record_answer};
use super::agent::{AcceptedTurn, accept};
use crate::Shared;
use crate::admission::Slot;
use crate::deadline::ResponseDeadline;
use crate::error::ApiError;
use crate::extract::{EmptyBody, read_json};
use crate::follow::RunFollower;
use crate::openai::chat::{self, ChatAsk, ChatChunks, ChatCompletion, ChatCompletionRequest};
use crate::openai::models::{ModelList, model_list};
#[allow(unused_imports)] // the documented answer
use crate::openai::responses::ResponseObject;
use crate::openai::responses::{self, Echo, ResponseEvents, ResponseRequest};
use crate::openai::stream::{Frames, frame_stream};
use crate::openai::turn::{RUN_HEADER, SESSION_HEADER, ToolResults, awaits_approval};
use crate::openai::{OpenAiError, OpenAiErrorBody, OpenAiTenant};
use crate::validate::ValidTurn;
use crate::wait::{RunWatch, WaitFor, wait_past_pause};
use agentlane_core::{Agent, Run, RunStatus, TenantId};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use std::sync::Arc;
use std::time::Duration;

/// Agents read per store call when listing models.
const AGENTS_PAGE: usize = 100;

/// The models of this API key's tenant: `agentlane` (the agent `main`, always there) and
/// `agentlane/<agentId>` for each of its other agents.
#[utoipa::path(get, path = "/v1/models", operation_id = "listModels", tag = "openai",
    responses((status = 200, description = "OpenAI's model list: one model per agent", body = ModelList)))]
pub(crate) async fn list_models(
    State(state): State<Arc<Shared>>,
    OpenAiTenant(tenant): OpenAiTenant,
) -> Result<Json<ModelList>, OpenAiError> {
    let mut agents: Vec<Agent> = Vec::new();
    loop {
        let after = agents.last().map(|a| a.agent_id.clone());
        let page = state
            .agents
            .list_agents(&tenant, after.as_deref(), AGENTS_PAGE)
            .await
            .map_err(ApiError::from)?;
        let done = page.len() < AGENTS_PAGE;
        agents.extend(page);
        if done {
            return Ok(Json(model_list(&tenant, &agents)));
        }
    }
}

/// One turn as an OpenAI chat completion: the answer once the turn ended (waiting at most the
/// server's longest wait: 25 s behind API Gateway), or with `"stream": true` the reply's
/// `chat.completion.chunk`s as the model writes it, then `data: [DONE]`. With a session (the
/// `X-Agentlane-Session-Key` header, else `user`) only the last user message is sent: the
/// session's transcript is the context. Without one, a fresh session is seeded with the
/// earlier messages. `tools` are client tools of the turn: when the model calls one, the turn
/// pauses and the answer carries the calls (`finish_reason: "tool_calls"`); a request whose
/// messages end with their `role: "tool"` results answers the paused turn, and its answer is
/// the turn's continuation. Errors are OpenAI's.
#[utoipa::path(post, path = "/v1/chat/completions", operation_id = "createChatCompletion", tag = "openai",
    request_body = ChatCompletionRequest,
    params(
        ("X-Agentlane-Session-Key" = Option<String>, Header, description = "The session (wins over `user`)"),
        ("Idempotency-Key" = Option<String>, Header, description = "The turn's idempotency key: a retry with it is the same turn"),
    ),
    responses(
        (status = 200, description = "A `chat.completion` (JSON), or with `\"stream\": true` `chat.completion.chunk`s as SSE `data:` frames ending with `data: [DONE]` (an error ends a stream with a `data: {\"error\": …}` frame instead)",
            content((ChatCompletion = "application/json"), (String = "text/event-stream")),
            links(
                ("GetRun" = (operation_id = "getRun", parameters(("runId" = "$response.header.x-agentlane-run-id")))),
                ("RunEvents" = (operation_id = "runEvents", parameters(("runId" = "$response.header.x-agentlane-run-id")))),
                ("GetTranscript" = (operation_id = "getTranscript", parameters(("sessionKey" = "$response.header.x-agentlane-session-key")))),
            ),
            headers(
                ("x-agentlane-run-id" = String, description = "The turn's run (also the answer's `id`)"),
                ("x-agentlane-session-key" = String, description = "The turn's session"),
            )),
        (status = 409, description = "`conflict`: the session belongs to another agent, the Idempotency-Key names another turn, or the tool results answer a turn that is not waiting for them; `requires_approval`: the turn paused for the agent's gated calls (answer them with POST /v1/runs/{id}/actions)", body = OpenAiErrorBody),
        (status = 504, description = "`turn_still_running`: the turn did not end within the longest wait; it goes on (its run is named)", body = OpenAiErrorBody),
    ))]
pub(crate) async fn chat_completions(
    State(state): State<Arc<Shared>>,
    OpenAiTenant(tenant): OpenAiTenant,
    deadline: Option<Extension<ResponseDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, OpenAiError> {
    let request: ChatCompletionRequest = read_json(
        &headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::Reject,
    )
    .await?;
    let plan = chat::plan(request, &headers, &state.config, &tenant)?;
    let deadline = deadline.map(|Extension(deadline)| deadline);
    let (model, include_usage) = (plan.model.clone(), plan.include_usage);
    let chunks = |run: &Run| ChatChunks::new(run, &model, include_usage);
    let run = match plan.ask {
        ChatAsk::Turn(turn) if plan.stream => {
            return stream_turn(state, tenant, deadline, *turn, &plan.model, chunks).await;
        }
        ChatAsk::Turn(turn) => {
            complete_turn(&state, &tenant, deadline, *turn, &plan.model, true).await?
        }
        ChatAsk::Results(results) => {
            let answered = answer_results(&state, &tenant, &results).await?;
            if plan.stream {
                let slot = state.admission.stream_slot(&tenant).await?;
                let after = answered
                    .run
                    .required_action
                    .as_ref()
                    .and_then(|a| a.event_seq);
                let follow = Follow {
                    after,
                    past_pause: Some(answered.action_id),
                };
                let frames = chunks(&answered.run);
                return Ok(follow_run(
                    state,
                    tenant,
                    deadline,
                    slot,
                    &answered.run,
                    follow,
                    frames,
                ));
            }
            let mut slot = state.admission.wait_slot(&tenant)?;
            slot.hold_shared().await?;
            settle(
                &state,
                &tenant,
                deadline,
                &answered.run,
                answered.action_id,
                true,
                &mut slot,
            )
            .await?
        }
    };
    let answer: ChatCompletion = chat::completion(&run, &plan.model);
    Ok(with_turn_headers(Json(answer).into_response(), &run))
}

/// Records the client tools' results as the answer to the paused run they name; an error in
/// OpenAI's shape when they answer no waiting run of this tenant (and session, when named).
async fn answer_results(
    state: &Shared,
    tenant: &TenantId,
    results: &ToolResults,
) -> Result<Answered, OpenAiError> {
    let (run_id, answer) = results.answer()?;
    let not_found = || {
        OpenAiError::from(ApiError::NotFound(format!(
            "the tool results answer run {run_id}, which this API key's tenant does not have"
        )))
        .param(results.param)
        .code("tool_call_not_found")
    };
    let run = state
        .history()
        .get_run(tenant, &run_id)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(not_found)?;
    results.check_session(&run)?;
    record_answer(state, tenant, &run_id, answer)
        .await
        .map_err(|error| match error {
            ApiError::NotFound(_) => not_found(),
            ApiError::InvalidRequest(message) => OpenAiError::invalid(
                results.param,
                format!("the tool results do not answer the paused turn's calls: {message}"),
            ),
            other => OpenAiError::from(other).param(results.param),
        })
}

/// One turn as an OpenAI response (the Responses API): its id is the run id, and
/// `previous_response_id` continues that run's session. Answers once the turn ended, or with
/// `"stream": true` streams `response.created`, `response.output_text.delta`s and
/// `response.completed` (with the item and part events between) as SSE. Client `tools` are
/// refused (`tools_not_supported`: Chat Completions serves them). Errors are OpenAI's.
#[utoipa::path(post, path = "/v1/responses", operation_id = "createResponse", tag = "openai",
    request_body = ResponseRequest,
    params(
        ("X-Agentlane-Session-Key" = Option<String>, Header, description = "The session, without `previous_response_id` (wins over `user`)"),
        ("Idempotency-Key" = Option<String>, Header, description = "The turn's idempotency key: a retry with it is the same turn"),
    ),
    responses(
        (status = 200, description = "A response (JSON), or with `\"stream\": true` Responses events as SSE (`event: response.created` … `event: response.completed`, or `response.failed`)",
            content((ResponseObject = "application/json"), (String = "text/event-stream")),
            links(
                ("GetRun" = (operation_id = "getRun", parameters(("runId" = "$response.header.x-agentlane-run-id")))),
                ("RunEvents" = (operation_id = "runEvents", parameters(("runId" = "$response.header.x-agentlane-run-id")))),
                ("GetTranscript" = (operation_id = "getTranscript", parameters(("sessionKey" = "$response.header.x-agentlane-session-key")))),
            ),
            headers(
                ("x-agentlane-run-id" = String, description = "The turn's run (also the response's `id`)"),
                ("x-agentlane-session-key" = String, description = "The turn's session"),
            )),
        (status = 409, description = "`conflict`: the session belongs to another agent, or the Idempotency-Key names another turn", body = OpenAiErrorBody),
        (status = 504, description = "`turn_still_running`: the turn did not end within the longest wait; it goes on (its run is named)", body = OpenAiErrorBody),
    ))]
pub(crate) async fn create_response(
    State(state): State<Arc<Shared>>,
    OpenAiTenant(tenant): OpenAiTenant,
    deadline: Option<Extension<ResponseDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, OpenAiError> {
    let request: ResponseRequest = read_json(
        &headers,
        body,
        state.config.max_body_bytes,
        EmptyBody::Reject,
    )
    .await?;
    let previous = match &request.previous_response_id {
        Some(id) => Some(previous_response(&state, &tenant, id).await?),
        None => None,
    };
    let plan = responses::plan(request, previous.as_ref(), &headers, &state.config, &tenant)?;
    let echo = Echo::of(&plan);
    let deadline = deadline.map(|Extension(deadline)| deadline);
    if plan.stream {
        return stream_turn(state, tenant, deadline, plan.turn, &plan.model, |run| {
            ResponseEvents::new(run, echo)
        })
        .await;
    }
    let run = complete_turn(&state, &tenant, deadline, plan.turn, &plan.model, false).await?;
    let answer = responses::response_object(&run, &echo, None);
    Ok(with_turn_headers(Json(answer).into_response(), &run))
}

/// The run `id` names for `tenant` (`404 previous_response_not_found` otherwise, another
/// tenant's runs included).
async fn previous_response(
    state: &Shared,
    tenant: &TenantId,
    id: &str,
) -> Result<Run, OpenAiError> {
    let not_found = || {
        OpenAiError::from(ApiError::NotFound(format!(
            "previous response {id:?} not found: previous_response_id takes the id of a \
             response (a run) of this API key's tenant"
        )))
        .param("previous_response_id")
        .code("previous_response_not_found")
    };
    let run_id = super::run_id(id.to_owned()).map_err(|_| not_found())?;
    state
        .history()
        .get_run(tenant, &run_id)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(not_found)
}

/// Accepts `turn`; an unknown agent is the request's unknown `model`.
async fn accept_as(
    state: &Shared,
    tenant: &TenantId,
    turn: ValidTurn,
    model: &str,
) -> Result<AcceptedTurn, OpenAiError> {
    accept(state, tenant, turn)
        .await
        .map_err(|error| match error {
            ApiError::NotFound(_) => OpenAiError::model_not_found(model),
            other => OpenAiError::from(other),
        })
}

/// Accepts `turn` and waits for its run to end (at most the longest wait, or the host's
/// deadline): see [`settle`]. Holds one of the tenant's wait slots meanwhile.
async fn complete_turn(
    state: &Shared,
    tenant: &TenantId,
    deadline: Option<ResponseDeadline>,
    turn: ValidTurn,
    model: &str,
    client_tools: bool,
) -> Result<Run, OpenAiError> {
    let mut slot = state.admission.wait_slot(tenant)?;
    // Counted across instances before the accept: a completion over the cap is not accepted.
    slot.hold_shared().await?;
    let accepted = accept_as(state, tenant, turn, model).await?;
    settle(
        state,
        tenant,
        deadline,
        &accepted.run,
        0,
        client_tools,
        &mut slot,
    )
    .await
}

/// Waits for `run` to end or pause again after pause `past` (0: any pause), holding `slot`:
/// the run when it ended `ok` or (with `client_tools`, the route answering them) paused for
/// client tools only, else the error that says how it ended, that it waits on approvals, or
/// that it goes on.
async fn settle(
    state: &Shared,
    tenant: &TenantId,
    deadline: Option<ResponseDeadline>,
    run: &Run,
    past: u32,
    client_tools: bool,
    slot: &mut Slot,
) -> Result<Run, OpenAiError> {
    let mut waited = Duration::from_millis(state.config.max_wait_ms);
    if let Some(deadline) = deadline {
        waited = waited.min(deadline.remaining());
    }
    let wait = WaitFor {
        tenant,
        run_id: &run.run_id,
        timeout: waited,
    };
    let run = wait_past_pause(state.history(), &state.notifier, wait, past, slot)
        .await
        .map_err(|error| OpenAiError::from(error).no_retry())?;
    let run = Arc::unwrap_or_clone(run);
    let paused_past = run.status == RunStatus::RequiresAction
        && run.required_action.as_ref().is_some_and(|a| a.id > past);
    match run.status {
        RunStatus::Ok => Ok(run),
        RunStatus::RequiresAction if paused_past => {
            if client_tools && !awaits_approval(&run) {
                Ok(run)
            } else {
                Err(crate::openai::stream::paused(&run))
            }
        }
        RunStatus::Error | RunStatus::Aborted | RunStatus::Timeout => {
            Err(OpenAiError::turn_failed(&run))
        }
        RunStatus::Queued | RunStatus::Running | RunStatus::RequiresAction => {
            Err(OpenAiError::still_running(&run, waited))
        }
    }
}

/// Where a stream starts and where it stops.
#[derive(Debug, Clone, Copy, Default)]
struct Follow {
    /// The last event already seen (the stream starts after it).
    after: Option<u64>,
    /// Stop at the run's next pause after this one (client tools), or follow through pauses.
    past_pause: Option<u32>,
}

/// Accepts `turn` and streams the frames `frames` writes for its run, from its first event to
/// its end or its first pause (or the host's deadline). Holds one of the tenant's stream slots
/// meanwhile; the turn goes on if the client goes away.
async fn stream_turn<F: Frames>(
    state: Arc<Shared>,
    tenant: TenantId,
    deadline: Option<ResponseDeadline>,
    turn: ValidTurn,
    model: &str,
    frames: impl FnOnce(&Run) -> F,
) -> Result<Response, OpenAiError> {
    let slot = state.admission.stream_slot(&tenant).await?;
    let run = accept_as(&state, &tenant, turn, model).await?.run;
    let follow = Follow {
        after: None,
        past_pause: Some(0),
    };
    let frames = frames(&run);
    Ok(follow_run(
        state, tenant, deadline, slot, &run, follow, frames,
    ))
}

/// Streams `frames` over `run`'s events as `follow` says.
fn follow_run<F: Frames>(
    state: Arc<Shared>,
    tenant: TenantId,
    deadline: Option<ResponseDeadline>,
    slot: Slot,
    run: &Run,
    follow: Follow,
    frames: F,
) -> Response {
    let max_poll = Duration::from_millis(state.config.sse_poll_ms);
    let watch = RunWatch::new(&state.notifier, &tenant, &run.run_id, max_poll);
    let mut follower = RunFollower::new(
        state.clone(),
        tenant,
        run.run_id.clone(),
        follow.after,
        deadline.map(|deadline| deadline.instant()),
        watch,
    );
    if let Some(past) = follow.past_pause {
        follower = follower.stop_at_pause(past);
    }
    let keep_alive = crate::sse::keep_alive(&state);
    let body = frame_stream(follower, frames, slot, keep_alive);
    with_turn_headers(body.into_response(), run)
}

/// `response` naming the turn's run and session.
fn with_turn_headers(mut response: Response, run: &Run) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (RUN_HEADER, run.run_id.as_str()),
        (SESSION_HEADER, run.session_key.as_str()),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    response
}
