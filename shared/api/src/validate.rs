//! Validation of `POST /v1/agent` bodies: pure functions from the decoded body to the domain's
//! [`TurnRequest`], each failure a 400 (or 413 for sizes) with a message that says what to fix.

use crate::ApiConfig;
use crate::error::ApiError;
use agentlane_core::validate::validate_session_key;
use agentlane_core::{
    QueueMode, SessionKey, TenantId, ThinkingLevel, ThinkingSupport, TurnRequest, thinking_support,
};
use serde::Deserialize;

/// Longest accepted `idempotencyKey`, in characters.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 256;
/// Longest accepted `model` (`provider/name`).
pub const MAX_MODEL_LEN: usize = 256;
/// Longest `thinking` value quoted back in an error.
pub const MAX_THINKING_LEN: usize = 32;

/// The body of `POST /v1/agent`, as sent.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentBody {
    /// The conversation: 1-256 characters of `[A-Za-z0-9:._@/-]`.
    #[schema(min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9:._@/-]+$")]
    pub session_key: String,
    /// The user's message (at most `max_message_bytes` bytes, 256 KiB by default: 413 beyond).
    #[schema(min_length = 1)]
    pub message: String,
    /// Same key within 24 h (same request) → the same run, nothing enqueued twice; the same key
    /// with a different request → 409 `conflict`.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]+$"
    )]
    pub idempotency_key: Option<String>,
    /// What the message does while a turn of its session runs: `followup` runs after it,
    /// `steer` joins it at its next model boundary, `collect` folds the messages sent meanwhile
    /// into one turn, `interrupt` ends it `aborted` (`interrupted`) and runs next; OpenClaw's
    /// aliases are accepted too. Absent: the session's default mode, else the agent's, else the
    /// deployment's (`followup` unless configured).
    #[serde(default)]
    #[schema(value_type = Option<QueueMode>)]
    pub queue_mode: Option<String>,
    /// `provider/model`, one the tenant may use (the default model when absent).
    #[serde(default)]
    #[schema(
        max_length = 256,
        pattern = r"^[A-Za-z0-9_.-]+/[^\s\x00-\x1f\x7f-\x9f]+$"
    )]
    pub model: Option<String>,
    /// How hard the model thinks before it answers; mapped to the provider (OpenAI reasoning
    /// effort, Anthropic extended thinking budget). A model known to have no reasoning mode
    /// refuses any level but `off` with 400 `invalid_request`.
    #[serde(default)]
    #[schema(value_type = Option<agentlane_core::ThinkingLevel>)]
    pub thinking: Option<String>,
    /// Run timeout: 0 = no limit (where allowed), at most `max_run_timeout_seconds` (7 days by
    /// default); the deployment default (48 h) when absent.
    /// `timeout` (OpenClaw's name) is accepted as an alias.
    #[serde(default, alias = "timeout")]
    #[schema(minimum = 0, maximum = 604800)]
    pub timeout_seconds: Option<u64>,
    /// Added to the system prompt of this turn (same size limit as `message`).
    #[serde(default)]
    pub extra_system_prompt: Option<String>,
    /// The agent that runs the turn (`main` when absent). A session belongs to the agent of
    /// its first turn: naming another one for it is 409 `conflict`; an unknown agent is 404.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[a-z0-9][a-z0-9-]{0,63}$"
    )]
    pub agent_id: Option<String>,
    /// Client tools for this turn only (they join the agent's): a call of one pauses the run
    /// (`requires_action`) until its output is posted to `/v1/runs/{runId}/actions`. At most
    /// 64; a name another tool has is 400.
    #[serde(default)]
    #[schema(max_items = 64)]
    pub tools: Option<Vec<agentlane_core::ClientTool>>,
    /// The turn's spend limits over all its model calls (retries, fallbacks, tool rounds):
    /// before each call its worst case (prompt estimate + the most it may write) must fit, or
    /// the run ends `error` `budget_exceeded`. The agent's budget fills what is unset.
    #[serde(default)]
    pub budget: Option<agentlane_core::spend::RunBudget>,
    /// The most one model call of the turn may write (1–128,000 tokens): sent to the provider
    /// as its output cap (`max_tokens` / `max_completion_tokens`) and what each call reserves
    /// against budgets. Absent: the agent's, else the model's usual answer size.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 128000)]
    pub max_output_tokens: Option<u32>,
}

/// A body that passed every rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidTurn {
    /// The session the turn goes to (validated key).
    pub session_key: SessionKey,
    /// The turn as the run will record it.
    pub request: TurnRequest,
    /// The client's idempotency key, validated; `None` when the request sent none.
    pub idempotency_key: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::InvalidRequest(message.into())
}

/// Checks every field of an agent body sent by `tenant` (its model allow-list applies).
pub fn validate_agent_body(
    body: AgentBody,
    config: &ApiConfig,
    tenant: &TenantId,
) -> Result<ValidTurn, ApiError> {
    validate_session_key(&body.session_key).map_err(invalid)?;
    check_text_size("message", &body.message, config.max_message_bytes)?;
    if let Some(prompt) = &body.extra_system_prompt
        && prompt.len() > config.max_message_bytes
    {
        return Err(ApiError::PayloadTooLarge(format!(
            "extraSystemPrompt is {} bytes; at most {} are allowed",
            prompt.len(),
            config.max_message_bytes
        )));
    }
    if let Some(key) = &body.idempotency_key {
        validate_idempotency_key(key)?;
    }
    let queue_mode = parse_queue_mode(body.queue_mode.as_deref())?;
    let agent_id = match body.agent_id {
        Some(id) => {
            agentlane_core::agent::validate_agent_id(&id).map_err(invalid)?;
            Some(id).filter(|id| id != agentlane_core::MAIN_AGENT)
        }
        None => None,
    };
    if let Some(model) = &body.model {
        validate_model(model, config)?;
        check_model_allowed(model, config, tenant)?;
    }
    if let Some(thinking) = &body.thinking {
        validate_thinking(thinking, body.model.as_deref(), config)?;
    }
    if let Some(seconds) = body.timeout_seconds {
        check_run_timeout(seconds, config)?;
    }
    let tools = body.tools.unwrap_or_default();
    let builtins = config.builtin_tools.iter().cloned().collect();
    check_client_tools(&tools, "tools", &builtins, &Default::default())?;
    if let Some(problem) = body.budget.as_ref().and_then(|b| b.problem("budget")) {
        return Err(invalid(problem));
    }
    if let Some(problem) = body
        .max_output_tokens
        .and_then(|cap| agentlane_core::spend::output_tokens_problem("maxOutputTokens", cap))
    {
        return Err(invalid(problem));
    }
    if body.budget.is_some_and(|b| b.max_cost_usd.is_some()) {
        // The model the turn names, else (for `main`) the deployment's default.
        let main = agent_id.is_none();
        let model = body.model.as_deref().or(config
            .configured_models
            .first()
            .map(String::as_str)
            .filter(|_| main));
        if let Some(model) = model
            && config.prices.price(model).is_none()
        {
            return Err(invalid(format!(
                "budget.maxCostUsd: the model {model} has no price, so a USD budget cannot \
                 hold; set [prices.\"{model}\"] or use budget.maxTokens"
            )));
        }
    }
    Ok(ValidTurn {
        session_key: SessionKey::new(body.session_key),
        request: TurnRequest {
            message: body.message,
            queue_mode,
            model: body.model,
            thinking: body.thinking,
            timeout_seconds: body.timeout_seconds,
            extra_system_prompt: body.extra_system_prompt,
            history: Vec::new(),
            deadline_at: None,
            model_idle_timeout_ms: None,
            agent_id,
            agent_version: None,
            tools,
            budget: body.budget.filter(|b| !b.is_unlimited()),
            max_output_tokens: body.max_output_tokens,
            output_tokens_ceiling: None,
        },
        idempotency_key: body.idempotency_key,
    })
}

/// Client tools (an agent's `tools.client`, a turn's `tools`): each well formed, at most
/// [`MAX_TURN_TOOLS`](agentlane_core::action::MAX_TURN_TOOLS), no two with one name, none
/// named like a tool in `taken` or an MCP server's tools (`<prefix>__…`).
pub fn check_client_tools(
    tools: &[agentlane_core::ClientTool],
    field: &str,
    taken: &std::collections::BTreeSet<String>,
    prefixes: &std::collections::BTreeSet<String>,
) -> Result<(), ApiError> {
    use agentlane_core::action::MAX_TURN_TOOLS;
    if tools.len() > MAX_TURN_TOOLS {
        return Err(invalid(format!(
            "{field}: {} tools; at most {MAX_TURN_TOOLS} are allowed",
            tools.len()
        )));
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("{field}[{i}]");
        if let Some(problem) = tool.problem(&at) {
            return Err(invalid(problem));
        }
        let mcp = tool
            .name
            .split_once("__")
            .is_some_and(|(prefix, _)| prefixes.contains(prefix));
        if taken.contains(&tool.name) || mcp || !names.insert(tool.name.as_str()) {
            return Err(invalid(format!(
                "{at}.name: another tool is named {:?}",
                tool.name
            )));
        }
    }
    Ok(())
}

fn check_text_size(field: &str, text: &str, max: usize) -> Result<(), ApiError> {
    if text.is_empty() {
        return Err(invalid(format!("{field} must not be empty")));
    }
    if text.len() > max {
        return Err(ApiError::PayloadTooLarge(format!(
            "{field} is {} bytes; at most {max} are allowed",
            text.len()
        )));
    }
    Ok(())
}

fn validate_idempotency_key(key: &str) -> Result<(), ApiError> {
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_IDEMPOTENCY_KEY_CHARS {
        return Err(invalid(format!(
            "idempotencyKey must be 1-{MAX_IDEMPOTENCY_KEY_CHARS} characters (got {chars})"
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(invalid(
            "idempotencyKey must not contain control characters",
        ));
    }
    Ok(())
}

/// A queue mode by name or OpenClaw alias ([`QueueMode::parse`]); `None` when none is given
/// (the session's default mode applies).
pub fn parse_queue_mode(value: Option<&str>) -> Result<Option<QueueMode>, ApiError> {
    value.map(parse_queue_mode_name).transpose()
}

/// One queue mode name or alias (see [`parse_queue_mode`]).
pub fn parse_queue_mode_name(name: &str) -> Result<QueueMode, ApiError> {
    match QueueMode::parse(name) {
        Some(mode) => Ok(mode),
        None => Err(invalid(format!(
            "queueMode {name:?} is unknown; use followup, collect, steer or interrupt (or an \
             alias: follow-ups, coalesce, steering, abort, ...)"
        ))),
    }
}

/// `provider/name`: a provider of `[A-Za-z0-9_.-]`, then a non-empty name without whitespace
/// (it may contain `/` and `:`, e.g. `ollama/llama3:8b`). With a non-empty provider list the
/// provider must be in it (`demo` too in demo mode).
pub fn validate_model(model: &str, config: &ApiConfig) -> Result<(), ApiError> {
    let format_error = || {
        invalid(format!(
            "model {model:?} is not of the form provider/model (e.g. openai/gpt-4o-mini)"
        ))
    };
    if model.len() > MAX_MODEL_LEN {
        return Err(invalid(format!(
            "model is longer than {MAX_MODEL_LEN} bytes"
        )));
    }
    let (provider, name) = model.split_once('/').ok_or_else(format_error)?;
    let provider_ok = !provider.is_empty()
        && provider
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    let name_ok = !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c.is_control());
    if !provider_ok || !name_ok {
        return Err(format_error());
    }
    let known = config.known_providers.iter().any(|p| p == provider)
        || (config.demo_mode && provider == "demo");
    if !config.known_providers.is_empty() && !known {
        let mut names = config.known_providers.clone();
        if config.demo_mode {
            names.push("demo".into());
        }
        return Err(invalid(format!(
            "model provider {provider:?} is not configured; known providers: {}",
            names.join(", ")
        )));
    }
    Ok(())
}

/// A tenant may ask only for the models of its allow-list (see
/// [`crate::Limits::models_for`]); an empty list allows any model of a known provider.
pub fn check_model_allowed(
    model: &str,
    config: &ApiConfig,
    tenant: &TenantId,
) -> Result<(), ApiError> {
    let allowed = config.limits.models_for(tenant, &config.configured_models);
    if allowed.is_empty() || allowed.iter().any(|m| m == model) {
        return Ok(());
    }
    Err(invalid(format!(
        "model {model:?} is not allowed for this tenant; allowed: {}",
        allowed.join(", ")
    )))
}

/// `timeoutSeconds` at most `max_run_timeout_seconds`; `0` (no limit) only when unlimited
/// runs are allowed. Turns (`POST /v1/agent`) and cron jobs (each fire's run) share it.
pub(crate) fn check_run_timeout(seconds: u64, config: &ApiConfig) -> Result<(), ApiError> {
    let max = config.limits.max_run_timeout_seconds;
    if seconds == 0 && !config.limits.allow_unlimited_runs {
        return Err(invalid(format!(
            "timeoutSeconds 0 (no limit) is not allowed here; give 1-{max} seconds"
        )));
    }
    if seconds > max {
        let zero = if config.limits.allow_unlimited_runs {
            ", or 0 for no limit"
        } else {
            ""
        };
        return Err(invalid(format!(
            "timeoutSeconds is {seconds}; at most {max}{} is allowed{zero}",
            in_words(max)
        )));
    }
    Ok(())
}

/// ` (7 days)`, ` (2 hours)`, or nothing for a number of seconds that is neither.
fn in_words(seconds: u64) -> String {
    let unit = |n: u64, name: &str| format!(" ({n} {name}{})", if n == 1 { "" } else { "s" });
    match seconds {
        0 => String::new(),
        s if s % 86_400 == 0 => unit(s / 86_400, "day"),
        s if s % 3600 == 0 => unit(s / 3600, "hour"),
        _ => String::new(),
    }
}

/// `thinking`: a known level; any level but `off` needs a model with a reasoning mode (the
/// request's model, else the deployment's default), so a level is never silently ignored.
pub(crate) fn validate_thinking(
    level: &str,
    model: Option<&str>,
    config: &ApiConfig,
) -> Result<(), ApiError> {
    let names = || {
        ThinkingLevel::ALL
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(parsed) = ThinkingLevel::parse(level) else {
        let shown: String = level.chars().take(MAX_THINKING_LEN).collect();
        return Err(invalid(format!(
            "thinking {shown:?} is not a level; use one of {}",
            names()
        )));
    };
    if parsed == ThinkingLevel::Off {
        return Ok(());
    }
    let model = model
        .or(config.configured_models.first().map(String::as_str))
        .or(config.demo_mode.then_some("demo/agentlane-demo"));
    match model {
        Some(model) if thinking_support(model) == ThinkingSupport::Unsupported => {
            Err(invalid(format!(
                "thinking {level:?} is not supported by model {model:?}, which has no reasoning \
                 mode; send thinking \"off\" (or none), or pick a reasoning model"
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(session_key: &str, message: &str) -> AgentBody {
        AgentBody {
            session_key: session_key.into(),
            message: message.into(),
            idempotency_key: None,
            queue_mode: None,
            model: None,
            thinking: None,
            timeout_seconds: None,
            extra_system_prompt: None,
            agent_id: None,
            tools: None,
            budget: None,
            max_output_tokens: None,
        }
    }

    fn tenant() -> TenantId {
        TenantId::new("acme")
    }

    fn code(result: Result<ValidTurn, ApiError>) -> &'static str {
        result.map(|_| "ok").unwrap_or_else(|e| e.code())
    }

    #[test]
    fn a_minimal_body_becomes_a_followup_turn() {
        let turn =
            validate_agent_body(body("main", "hi"), &ApiConfig::default(), &tenant()).unwrap();
        assert_eq!(
            turn,
            ValidTurn {
                session_key: SessionKey::new("main"),
                request: TurnRequest {
                    message: "hi".into(),
                    queue_mode: None,
                    model: None,
                    thinking: None,
                    timeout_seconds: None,
                    extra_system_prompt: None,
                    history: Vec::new(),
                    deadline_at: None,
                    model_idle_timeout_ms: None,
                    agent_id: None,
                    agent_version: None,
                    tools: Vec::new(),
                    budget: None,
                    max_output_tokens: None,
                    output_tokens_ceiling: None,
                },
                idempotency_key: None,
            }
        );
    }

    #[test]
    fn field_rules() {
        let config = ApiConfig {
            max_message_bytes: 10,
            ..ApiConfig::default()
        };
        let with = |f: fn(&mut AgentBody)| {
            let mut b = body("main", "hello");
            f(&mut b);
            code(validate_agent_body(b, &config, &tenant()))
        };
        let cases: Vec<(&str, &str)> = vec![
            (with(|_| {}), "ok"),
            (with(|b| b.session_key = "a b".into()), "invalid_request"),
            (with(|b| b.session_key = "agent:main/dm/42".into()), "ok"),
            (with(|b| b.session_key = String::new()), "invalid_request"),
            (with(|b| b.message = String::new()), "invalid_request"),
            (with(|b| b.message = "x".repeat(10)), "ok"),
            (with(|b| b.message = "x".repeat(11)), "payload_too_large"),
            (
                with(|b| b.extra_system_prompt = Some("y".repeat(11))),
                "payload_too_large",
            ),
            (
                with(|b| b.idempotency_key = Some(String::new())),
                "invalid_request",
            ),
            (with(|b| b.idempotency_key = Some("k".repeat(256))), "ok"),
            (
                with(|b| b.idempotency_key = Some("k".repeat(257))),
                "invalid_request",
            ),
            (with(|b| b.queue_mode = Some("followup".into())), "ok"),
            (with(|b| b.queue_mode = Some("steer".into())), "ok"),
            (with(|b| b.queue_mode = Some("steering".into())), "ok"),
            (with(|b| b.queue_mode = Some("collect".into())), "ok"),
            (with(|b| b.queue_mode = Some("coalesce".into())), "ok"),
            (with(|b| b.queue_mode = Some("interrupt".into())), "ok"),
            (
                with(|b| b.queue_mode = Some("later".into())),
                "invalid_request",
            ),
            (with(|b| b.model = Some("openai/gpt-4o-mini".into())), "ok"),
            (with(|b| b.model = Some("ollama/llama3:8b".into())), "ok"),
            (with(|b| b.model = Some("gpt-4o".into())), "invalid_request"),
            (
                with(|b| b.model = Some("/gpt-4o".into())),
                "invalid_request",
            ),
            (
                with(|b| b.model = Some("openai/".into())),
                "invalid_request",
            ),
            (
                with(|b| b.model = Some("openai/gpt 4o".into())),
                "invalid_request",
            ),
            (with(|b| b.thinking = Some("high".into())), "ok"),
            (
                with(|b| b.thinking = Some("HIGH!".into())),
                "invalid_request",
            ),
            (with(|b| b.timeout_seconds = Some(0)), "ok"),
            (with(|b| b.timeout_seconds = Some(7 * 24 * 3600)), "ok"),
            (
                with(|b| b.timeout_seconds = Some(7 * 24 * 3600 + 1)),
                "invalid_request",
            ),
        ];
        for (index, (got, expected)) in cases.into_iter().enumerate() {
            assert_eq!(got, expected, "case #{index}");
        }
    }

    #[test]
    fn run_timeouts_are_capped_by_configuration() {
        let config = ApiConfig {
            limits: crate::Limits {
                max_run_timeout_seconds: 600,
                allow_unlimited_runs: false,
                ..crate::Limits::default()
            },
            ..ApiConfig::default()
        };
        let with = |seconds| {
            let mut b = body("main", "hi");
            b.timeout_seconds = Some(seconds);
            validate_agent_body(b, &config, &tenant())
        };
        assert!(with(600).is_ok());
        let over = with(601).unwrap_err();
        assert_eq!(
            over.public_message(),
            "timeoutSeconds is 601; at most 600 is allowed"
        );
        let unlimited = with(0).unwrap_err();
        assert!(
            unlimited.public_message().contains("not allowed"),
            "{unlimited}"
        );
    }

    #[test]
    fn models_outside_the_allow_list_are_refused_per_tenant() {
        let mut limits = crate::Limits::default();
        limits.tenants.insert(
            "vip".into(),
            crate::TenantOverride {
                allowed_models: Some(vec!["openai/gpt-4o".into()]),
                ..crate::TenantOverride::default()
            },
        );
        let config = ApiConfig {
            limits,
            configured_models: vec!["openai/gpt-4o-mini".into(), "openai/gpt-4.1".into()],
            ..ApiConfig::default()
        };
        let ask = |tenant: &str, model: &str| {
            let mut b = body("main", "hi");
            b.model = Some(model.into());
            validate_agent_body(b, &config, &TenantId::new(tenant)).map(|_| ())
        };
        assert!(ask("acme", "openai/gpt-4o-mini").is_ok());
        assert!(ask("acme", "openai/gpt-4.1").is_ok());
        let refused = ask("acme", "openai/gpt-4o").unwrap_err();
        assert_eq!(refused.code(), "invalid_request");
        assert!(
            refused
                .public_message()
                .contains("allowed: openai/gpt-4o-mini, openai/gpt-4.1"),
            "{refused}"
        );
        assert!(ask("vip", "openai/gpt-4o").is_ok());
        assert!(ask("vip", "openai/gpt-4o-mini").is_err());
        // Without any list, any well-formed model passes.
        let open = ApiConfig::default();
        let mut b = body("main", "hi");
        b.model = Some("openai/anything".into());
        assert!(validate_agent_body(b, &open, &tenant()).is_ok());
    }

    #[test]
    fn every_queue_mode_is_accepted_by_name_or_alias() {
        for (name, mode) in [
            ("coalesce", QueueMode::Collect),
            ("abort", QueueMode::Interrupt),
            ("interrupt", QueueMode::Interrupt),
        ] {
            assert_eq!(parse_queue_mode(Some(name)).unwrap(), Some(mode));
        }
        let err = parse_queue_mode(Some("sideways")).unwrap_err();
        assert!(err.public_message().contains("unknown"), "{err}");
    }

    #[test]
    fn followup_and_steer_answer_to_their_aliases() {
        for name in ["followup", "followups", "follow-ups", "steer+backlog"] {
            assert_eq!(
                parse_queue_mode(Some(name)).unwrap(),
                Some(QueueMode::Followup)
            );
        }
        for name in ["steer", "steering", "queue", "Queued"] {
            assert_eq!(
                parse_queue_mode(Some(name)).unwrap(),
                Some(QueueMode::Steer)
            );
        }
        assert_eq!(parse_queue_mode(None).unwrap(), None);
    }

    #[test]
    fn known_providers_restrict_models() {
        let config = ApiConfig {
            known_providers: vec!["openai".into(), "anthropic".into()],
            ..ApiConfig::default()
        };
        assert!(validate_model("openai/gpt-4o", &config).is_ok());
        let err = validate_model("mistral/large", &config).unwrap_err();
        assert!(err.public_message().contains("openai, anthropic"), "{err}");
        assert!(validate_model("demo/echo", &config).is_err());
        let demo = ApiConfig {
            demo_mode: true,
            ..config
        };
        assert!(validate_model("demo/echo", &demo).is_ok());
    }
}
