//! `agentlane agents create|list|show|edit|rm`: stored agents (instructions, model, tools) over
//! the HTTP API, which a turn names with `agentlane agent --agent ID`.
//!
//! `create` and `edit` take the agent from flags, from `--file` (the agent JSON, or TOML with
//! the same keys), or both: a flag replaces the file's field, except `--metadata KEY=VALUE`,
//! which sets one key, and `--builtin`/`--no-builtin`, which set `tools.builtin` only. `edit`
//! sends only what was given, as a PATCH; when it changes part of a field (`--metadata`,
//! `--builtin`, `--no-builtin`, `--clear tools.builtin`) that the file does not give whole, it
//! reads the agent first and sends that field whole, since a PATCH replaces a field.

use crate::agents_view::{agent_view, list_view};
use crate::api_client::ApiClient;
use crate::args::ClientArgs;
use crate::client::api;
use agentlane_core::{QueueMode, ThinkingLevel};
use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The fields the server owns: never sent, even when a file (e.g. `show --json`) has them.
const SERVER_FIELDS: [&str; 3] = ["version", "createdAt", "updatedAt"];

/// `agentlane agents …`.
#[derive(Args, Debug)]
pub(crate) struct AgentsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: AgentsCommand,
}

/// The agents subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum AgentsCommand {
    /// Create an agent from flags, a file (--file agent.json|agent.toml), or both (flags win).
    Create(Box<CreateArgs>),
    /// List the agents, one page at a time (--limit, --cursor).
    List(ListArgs),
    /// Show an agent: its latest version, or --version N.
    Show(ShowArgs),
    /// Change an agent: sends only the fields given, as a PATCH (--clear FIELD removes one).
    Edit(Box<EditArgs>),
    /// Delete an agent.
    Rm(RmArgs),
}

/// `agentlane agents create`.
#[derive(Args, Debug)]
pub(crate) struct CreateArgs {
    /// The agent's id, a slug ([a-z0-9][a-z0-9-]{0,63}); default: the file's `agentId`.
    #[arg(value_name = "ID", value_parser = parse_agent_id)]
    pub agent_id: Option<String>,
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// `agentlane agents edit`.
#[derive(Args, Debug)]
pub(crate) struct EditArgs {
    /// The agent to change.
    #[arg(value_name = "ID", value_parser = parse_agent_id)]
    pub agent_id: String,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Remove a field (sent as null; `tools.builtin` restores all built-ins); repeatable.
    #[arg(long, value_name = "FIELD")]
    pub clear: Vec<Field>,
}

/// `agentlane agents list`.
#[derive(Args, Debug)]
pub(crate) struct ListArgs {
    /// The most agents to list (the server's default and cap apply).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Where to go on: the `nextCursor` of the previous page.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// `agentlane agents show`.
#[derive(Args, Debug)]
pub(crate) struct ShowArgs {
    /// The agent to show.
    #[arg(value_name = "ID", value_parser = parse_agent_id)]
    pub agent_id: String,
    /// This version instead of the latest.
    #[arg(long, value_name = "N")]
    pub version: Option<u64>,
}

/// `agentlane agents rm`.
#[derive(Args, Debug)]
pub(crate) struct RmArgs {
    /// The agent to delete.
    #[arg(value_name = "ID", value_parser = parse_agent_id)]
    pub agent_id: String,
}

/// The agent's fields, as flags or a file, shared by `create` and `edit`.
#[derive(Args, Debug)]
pub(crate) struct SpecArgs {
    /// The agent as JSON, or as TOML with the same keys when PATH ends in `.toml` (e.g.
    /// `[[tools.mcpServers]]`); flags given too override its fields.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Display name (at most 256 characters).
    #[arg(long)]
    pub name: Option<String>,
    /// The base of the system prompt.
    #[arg(long, conflicts_with = "instructions_file")]
    pub instructions: Option<String>,
    /// Read the instructions from this file.
    #[arg(long, value_name = "PATH")]
    pub instructions_file: Option<PathBuf>,
    /// Model as provider/model (one of the deployment's allowed models).
    #[arg(long)]
    pub model: Option<String>,
    /// A model to fall back to, in order; repeatable (replaces the file's list).
    #[arg(long = "fallback-model", value_name = "MODEL")]
    pub fallback_models: Vec<String>,
    /// How hard the model reasons: off, minimal, low, medium or high.
    #[arg(long, value_name = "LEVEL", value_parser = parse_thinking)]
    pub thinking: Option<String>,
    /// A built-in tool the agent may use; repeatable (sets tools.builtin, its other tools
    /// kept; an agent without tools.builtin may use every built-in).
    #[arg(long, value_name = "TOOL", conflicts_with = "no_builtin")]
    pub builtin: Vec<String>,
    /// No built-in tool at all (tools.builtin = []).
    #[arg(long)]
    pub no_builtin: bool,
    /// What a message that arrives while the session is busy does: followup, collect, steer
    /// or interrupt.
    #[arg(long, value_name = "MODE", value_parser = parse_queue_mode)]
    pub queue_mode: Option<String>,
    /// How many earlier turns of the session the model sees.
    #[arg(long, value_name = "N")]
    pub history_max_turns: Option<u32>,
    /// Set one metadata key (a string value), keeping the others; repeatable.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub metadata: Vec<(String, String)>,
}

/// A field `edit --clear` removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Field {
    /// The display name.
    #[value(name = "name")]
    Name,
    /// The instructions.
    #[value(name = "instructions")]
    Instructions,
    /// The model: the deployment's default one runs the agent.
    #[value(name = "model")]
    Model,
    /// The fallback models.
    #[value(name = "fallbackModels", alias = "fallback-models")]
    FallbackModels,
    /// The thinking level: the model's default.
    #[value(name = "thinking")]
    Thinking,
    /// Every tool setting: all built-ins, no MCP server, no HTTP tool.
    #[value(name = "tools")]
    Tools,
    /// The built-in list only: all built-ins again, the other tools kept.
    #[value(name = "tools.builtin", alias = "builtin")]
    ToolsBuiltin,
    /// The queue mode: the deployment's default.
    #[value(name = "queueMode", alias = "queue-mode")]
    QueueMode,
    /// The history limit: the deployment's default.
    #[value(name = "historyMaxTurns", alias = "history-max-turns")]
    HistoryMaxTurns,
    /// All metadata.
    #[value(name = "metadata")]
    Metadata,
}

impl Field {
    /// The top-level JSON key the field lives in.
    fn key(self) -> &'static str {
        match self {
            Field::Name => "name",
            Field::Instructions => "instructions",
            Field::Model => "model",
            Field::FallbackModels => "fallbackModels",
            Field::Thinking => "thinking",
            Field::Tools | Field::ToolsBuiltin => "tools",
            Field::QueueMode => "queueMode",
            Field::HistoryMaxTurns => "historyMaxTurns",
            Field::Metadata => "metadata",
        }
    }
}

/// An agent id as a path segment: anything but what cannot be sent (the server judges the
/// rest, with its own message).
fn parse_agent_id(value: &str) -> Result<String, String> {
    if value.is_empty() || value == "." || value == ".." {
        return Err(format!(
            "{value:?} is not an agent id ([a-z0-9][a-z0-9-]{{0,63}})"
        ));
    }
    Ok(value.to_owned())
}

fn parse_thinking(value: &str) -> Result<String, String> {
    ThinkingLevel::parse(value)
        .map(|level| level.as_str().to_owned())
        .ok_or_else(|| {
            let all: Vec<_> = ThinkingLevel::ALL.iter().map(|l| l.as_str()).collect();
            format!("{value:?} is not one of {}", all.join(", "))
        })
}

fn parse_queue_mode(value: &str) -> Result<String, String> {
    QueueMode::parse(value)
        .map(|mode| mode.as_str().to_owned())
        .ok_or_else(|| format!("{value:?} is not one of followup, collect, steer, interrupt"))
}

fn parse_key_value(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((key, v)) if !key.is_empty() => Ok((key.to_owned(), v.to_owned())),
        _ => Err(format!("{value:?} is not KEY=VALUE")),
    }
}

/// The agent definition in the file at `path`: a JSON object, or TOML (`.toml`) converted to
/// the same JSON.
pub(crate) fn read_definition(path: &Path) -> anyhow::Result<Map<String, Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let is_toml = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("toml"));
    let value = if is_toml {
        let table: toml::Table =
            toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
        toml_to_json(toml::Value::Table(table)).with_context(|| format!("in {}", path.display()))?
    } else {
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?
    };
    match value {
        Value::Object(map) => Ok(map),
        _ => bail!("{} is not an object of agent fields", path.display()),
    }
}

/// A TOML value as the JSON it stands for (dates have no JSON form and are refused).
fn toml_to_json(value: toml::Value) -> anyhow::Result<Value> {
    Ok(match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => json!(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .with_context(|| format!("{f} has no JSON form"))?,
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => bail!("the date {d} is not an agent field value"),
        toml::Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(toml_to_json)
                .collect::<anyhow::Result<_>>()?,
        ),
        toml::Value::Table(table) => Value::Object(
            table
                .into_iter()
                .map(|(k, v)| Ok((k, toml_to_json(v)?)))
                .collect::<anyhow::Result<_>>()?,
        ),
    })
}

impl SpecArgs {
    /// The file's fields (none without `--file`), without the server's own.
    fn file_fields(&self) -> anyhow::Result<Map<String, Value>> {
        let mut fields = match &self.file {
            Some(path) => read_definition(path)?,
            None => Map::new(),
        };
        for key in SERVER_FIELDS {
            fields.remove(key);
        }
        Ok(fields)
    }

    /// The top-level fields the flags replace whole.
    fn whole_fields(&self) -> anyhow::Result<Vec<(&'static str, Value)>> {
        let mut fields = Vec::new();
        if let Some(name) = &self.name {
            fields.push(("name", json!(name)));
        }
        if let Some(text) = &self.instructions {
            fields.push(("instructions", json!(text)));
        }
        if let Some(path) = &self.instructions_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            fields.push(("instructions", json!(text)));
        }
        if let Some(model) = &self.model {
            fields.push(("model", json!(model)));
        }
        if !self.fallback_models.is_empty() {
            fields.push(("fallbackModels", json!(self.fallback_models)));
        }
        if let Some(level) = &self.thinking {
            fields.push(("thinking", json!(level)));
        }
        if let Some(mode) = &self.queue_mode {
            fields.push(("queueMode", json!(mode)));
        }
        if let Some(turns) = self.history_max_turns {
            fields.push(("historyMaxTurns", json!(turns)));
        }
        Ok(fields)
    }

    /// What the flags make of `tools.builtin`: `Some(list)`, or `None` when not given.
    fn builtin(&self) -> Option<Value> {
        if self.no_builtin {
            Some(json!([]))
        } else if !self.builtin.is_empty() {
            Some(json!(self.builtin))
        } else {
            None
        }
    }
}

/// A change to part of a field: the field it lives in and what it does to it.
enum PartChange<'a> {
    /// `tools.builtin` set (`Some`) or removed (`None`).
    Builtin(Option<Value>),
    /// `metadata` keys set.
    Metadata(&'a [(String, String)]),
}

impl PartChange<'_> {
    fn key(&self) -> &'static str {
        match self {
            PartChange::Builtin(_) => "tools",
            PartChange::Metadata(_) => "metadata",
        }
    }

    /// Applies the change to `field` (the whole field as it is, `Null` when absent).
    fn apply(&self, field: Value) -> anyhow::Result<Value> {
        let mut object = match field {
            Value::Object(object) => object,
            Value::Null => Map::new(),
            _ => bail!("{} is not an object", self.key()),
        };
        match self {
            PartChange::Builtin(Some(list)) => {
                object.insert("builtin".to_owned(), list.clone());
            }
            PartChange::Builtin(None) => {
                object.remove("builtin");
            }
            PartChange::Metadata(pairs) => {
                for (key, value) in pairs.iter() {
                    object.insert(key.clone(), json!(value));
                }
            }
        }
        Ok(Value::Object(object))
    }
}

/// The partial changes of `spec` (and of `clear`, for `edit`).
fn part_changes<'a>(spec: &'a SpecArgs, clear: &[Field]) -> Vec<PartChange<'a>> {
    let mut changes = Vec::new();
    if let Some(list) = spec.builtin() {
        changes.push(PartChange::Builtin(Some(list)));
    } else if clear.contains(&Field::ToolsBuiltin) {
        changes.push(PartChange::Builtin(None));
    }
    if !spec.metadata.is_empty() {
        changes.push(PartChange::Metadata(&spec.metadata));
    }
    changes
}

/// Applies the flags of `spec` over `body` (the file's fields): whole fields replaced, partial
/// changes applied to the body's field, else to `current`'s (the agent as it is), else to an
/// empty one.
fn apply_spec(
    spec: &SpecArgs,
    clear: &[Field],
    body: &mut Map<String, Value>,
    current: Option<&Value>,
) -> anyhow::Result<()> {
    for (key, value) in spec.whole_fields()? {
        body.insert(key.to_owned(), value);
    }
    for change in part_changes(spec, clear) {
        let key = change.key();
        let field = match body.remove(key) {
            Some(field) => field,
            None => current
                .and_then(|agent| agent.get(key))
                .cloned()
                .unwrap_or(Value::Null),
        };
        body.insert(key.to_owned(), change.apply(field)?);
    }
    Ok(())
}

/// The body of `POST /v1/agents` for `args`.
pub(crate) fn create_body(args: &CreateArgs) -> anyhow::Result<Value> {
    let mut body = args.spec.file_fields()?;
    apply_spec(&args.spec, &[], &mut body, None)?;
    match &args.agent_id {
        Some(id) => {
            body.insert("agentId".to_owned(), json!(id));
        }
        None if body.get("agentId").is_some_and(Value::is_string) => {}
        None => bail!("give the agent's id: agentlane agents create ID, or agentId in --file"),
    }
    Ok(Value::Object(body))
}

/// Whether `edit` must read the agent first: a partial change to a field the file does not
/// give whole. `file` is [`SpecArgs::file_fields`].
pub(crate) fn edit_needs_current(args: &EditArgs, file: &Map<String, Value>) -> bool {
    part_changes(&args.spec, &args.clear)
        .iter()
        .any(|change| !file.contains_key(change.key()))
}

/// The body of `PATCH /v1/agents/{id}` for `args`, over the file's fields `file` and the agent
/// as it is (`current`, needed when [`edit_needs_current`]).
pub(crate) fn edit_body(
    args: &EditArgs,
    mut file: Map<String, Value>,
    current: Option<&Value>,
) -> anyhow::Result<Value> {
    match file.remove("agentId") {
        Some(Value::String(id)) if id != args.agent_id => {
            bail!(
                "the file is agent {id:?}, not {:?}: the id of an agent cannot change",
                args.agent_id
            )
        }
        _ => {}
    }
    if args.clear.contains(&Field::Tools) && args.clear.contains(&Field::ToolsBuiltin) {
        bail!("--clear tools already removes tools.builtin");
    }
    let mut set_by_flags = Map::new();
    apply_spec(&args.spec, &[], &mut set_by_flags, None)?;
    for field in &args.clear {
        let flagged = match field {
            Field::ToolsBuiltin => args.spec.builtin().is_some(),
            _ => set_by_flags.contains_key(field.key()),
        };
        if flagged {
            let name = field.to_possible_value().map(|v| v.get_name().to_owned());
            bail!(
                "--clear {} and a flag that sets it were both given",
                name.unwrap_or_default()
            );
        }
    }
    let mut body = file;
    apply_spec(&args.spec, &args.clear, &mut body, current)?;
    for field in &args.clear {
        if *field != Field::ToolsBuiltin {
            body.insert(field.key().to_owned(), Value::Null);
        }
    }
    if body.is_empty() {
        bail!("nothing to change: give a field's flag, --file or --clear");
    }
    Ok(Value::Object(body))
}

/// Runs `agentlane agents …` and prints the result.
pub(crate) async fn run(args: AgentsArgs) -> anyhow::Result<ExitCode> {
    let api = api(&args.client)?;
    print!("{}", execute(&api, &args.command, args.client.json).await?);
    Ok(ExitCode::SUCCESS)
}

/// Runs an agents subcommand; what it prints.
async fn execute(
    api: &ApiClient,
    command: &AgentsCommand,
    as_json: bool,
) -> anyhow::Result<String> {
    let (answer, human) = match command {
        AgentsCommand::Create(args) => {
            let agent = api.create_agent(&create_body(args)?).await?;
            let human = agent_view(&agent);
            (agent, human)
        }
        AgentsCommand::List(args) => {
            let page = api.list_agents(args.limit, args.cursor.as_deref()).await?;
            let human = list_view(&page);
            (page, human)
        }
        AgentsCommand::Show(args) => {
            let agent = api.get_agent(&args.agent_id, args.version).await?;
            let human = agent_view(&agent);
            (agent, human)
        }
        AgentsCommand::Edit(args) => {
            let file = args.spec.file_fields()?;
            let current = if edit_needs_current(args, &file) {
                Some(api.get_agent(&args.agent_id, None).await?)
            } else {
                None
            };
            let patch = edit_body(args, file, current.as_ref())?;
            let agent = api.patch_agent(&args.agent_id, &patch).await?;
            let human = agent_view(&agent);
            (agent, human)
        }
        AgentsCommand::Rm(args) => {
            api.delete_agent(&args.agent_id).await?;
            let human = format!("deleted agent {}\n", args.agent_id);
            (json!({ "deleted": args.agent_id }), human)
        }
    };
    if as_json {
        Ok(format!("{}\n", serde_json::to_string_pretty(&answer)?))
    } else {
        Ok(human)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: AgentsCommand,
    }

    /// A TOML agent with an MCP server and an HTTP tool, secrets by reference.
    const AGENT_TOML: &str = r#"
agentId = "support-bot"
name = "Support bot"
instructions = """
You are the support bot.
"""
model = "openai/gpt-4o-mini"
fallbackModels = ["anthropic/claude-haiku-4-5"]
thinking = "low"
historyMaxTurns = 20

[tools]
builtin = ["current_time"]

[[tools.mcpServers]]
name = "everything"
url = "http://127.0.0.1:3917/mcp"
allowedTools = ["echo", "get-sum"]
timeoutMs = 30000
headers = { Authorization = { env = "MCP_TOKEN" } }

[[tools.http]]
name = "lookup_order"
description = "Looks an order up"
url = "https://orders.example/lookup"
timeoutMs = 10000
idempotent = false
signingSecret = { env = "ORDERS_SIGNING" }
headers = { X-Key = { secret = "prod/orders" } }
parameters = { type = "object", properties = { orderId = { type = "string" } }, required = ["orderId"] }

[metadata]
team = "cx"
"#;

    /// [`AGENT_TOML`] as the JSON it stands for.
    fn agent_json() -> Value {
        json!({
            "agentId": "support-bot",
            "name": "Support bot",
            "instructions": "You are the support bot.\n",
            "model": "openai/gpt-4o-mini",
            "fallbackModels": ["anthropic/claude-haiku-4-5"],
            "thinking": "low",
            "historyMaxTurns": 20,
            "tools": {
                "builtin": ["current_time"],
                "mcpServers": [{
                    "name": "everything", "url": "http://127.0.0.1:3917/mcp",
                    "allowedTools": ["echo", "get-sum"], "timeoutMs": 30000,
                    "headers": {"Authorization": {"env": "MCP_TOKEN"}}
                }],
                "http": [{
                    "name": "lookup_order", "description": "Looks an order up",
                    "url": "https://orders.example/lookup", "timeoutMs": 10000,
                    "idempotent": false, "signingSecret": {"env": "ORDERS_SIGNING"},
                    "headers": {"X-Key": {"secret": "prod/orders"}},
                    "parameters": {"type": "object",
                                   "properties": {"orderId": {"type": "string"}},
                                   "required": ["orderId"]}
                }]
            },
            "metadata": {"team": "cx"}
        })
    }

    /// What a case expects.
    enum Expect {
        /// This body; for `edit`, whether the agent had to be read first.
        Body(Value, bool),
        /// An error (of the arguments or of the body) containing this.
        Error(&'static str),
    }

    struct Case {
        name: &'static str,
        /// The arguments after `agents`; `{dir}` is the directory of the files.
        argv: &'static [&'static str],
        /// The agent as the server has it (for `edit`).
        current: Option<Value>,
        expect: Expect,
    }

    /// The body `argv` makes, and whether `edit` read the agent.
    fn body_of(
        argv: &[&str],
        dir: &Path,
        current: Option<&Value>,
    ) -> anyhow::Result<(Value, bool)> {
        let dir = dir.display().to_string();
        let mut full = vec!["agents".to_owned()];
        full.extend(argv.iter().map(|a| a.replace("{dir}", &dir)));
        let cli = Cli::try_parse_from(full)?;
        match cli.command {
            AgentsCommand::Create(args) => Ok((create_body(&args)?, false)),
            AgentsCommand::Edit(args) => {
                let file = args.spec.file_fields()?;
                let needs = edit_needs_current(&args, &file);
                let current = if needs { current } else { None };
                Ok((edit_body(&args, file, current)?, needs))
            }
            _ => bail!("not create or edit"),
        }
    }

    #[test]
    fn flags_and_files_become_the_api_body() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("agent.toml"), AGENT_TOML).unwrap();
        let mut shown = agent_json();
        shown["version"] = json!(3);
        shown["createdAt"] = json!(1_764_480_000_000u64);
        shown["updatedAt"] = json!(1_764_480_000_000u64);
        std::fs::write(dir.path().join("agent.json"), shown.to_string()).unwrap();
        std::fs::write(dir.path().join("prompt.txt"), "Be brief.\n").unwrap();
        std::fs::write(
            dir.path().join("dated.toml"),
            "when = 2026-01-01T00:00:00Z\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("list.json"), "[1, 2]").unwrap();
        std::fs::write(
            dir.path().join("other.json"),
            json!({"agentId": "other", "name": "N"}).to_string(),
        )
        .unwrap();
        let current = json!({
            "agentId": "support-bot", "version": 3,
            "tools": {"builtin": ["current_time"],
                      "mcpServers": [{"name": "everything", "url": "http://h/mcp"}]},
            "metadata": {"team": "cx", "tier": "1"}
        });
        let mut with_overrides = agent_json();
        with_overrides["agentId"] = json!("support-bot-2");
        with_overrides["model"] = json!("openai/gpt-4.1");
        with_overrides["instructions"] = json!("Be brief.\n");
        with_overrides["tools"]["builtin"] = json!([]);
        with_overrides["metadata"] = json!({"team": "ops", "tier": "2"});

        let cases = [
            Case {
                name: "create from flags only",
                argv: &[
                    "create",
                    "support-bot",
                    "--name",
                    "Support bot",
                    "--instructions",
                    "You are the support bot.",
                    "--model",
                    "openai/gpt-4o-mini",
                    "--fallback-model",
                    "a/one",
                    "--fallback-model",
                    "b/two",
                    "--thinking",
                    "low",
                    "--builtin",
                    "current_time",
                    "--builtin",
                    "http_fetch",
                    "--queue-mode",
                    "follow-up",
                    "--history-max-turns",
                    "20",
                    "--metadata",
                    "team=cx",
                    "--metadata",
                    "query=a=b",
                ],
                current: None,
                expect: Expect::Body(
                    json!({
                        "agentId": "support-bot", "name": "Support bot",
                        "instructions": "You are the support bot.",
                        "model": "openai/gpt-4o-mini", "fallbackModels": ["a/one", "b/two"],
                        "thinking": "low", "queueMode": "followup", "historyMaxTurns": 20,
                        "tools": {"builtin": ["current_time", "http_fetch"]},
                        "metadata": {"team": "cx", "query": "a=b"}
                    }),
                    false,
                ),
            },
            Case {
                name: "create with --no-builtin and --instructions-file",
                argv: &[
                    "create",
                    "bot",
                    "--no-builtin",
                    "--instructions-file",
                    "{dir}/prompt.txt",
                ],
                current: None,
                expect: Expect::Body(
                    json!({"agentId": "bot", "instructions": "Be brief.\n",
                           "tools": {"builtin": []}}),
                    false,
                ),
            },
            Case {
                name: "create from a JSON file (show --json's output), id from the file",
                argv: &["create", "--file", "{dir}/agent.json"],
                current: None,
                expect: Expect::Body(agent_json(), false),
            },
            Case {
                name: "create from a TOML file with an MCP server and an HTTP tool",
                argv: &["create", "--file", "{dir}/agent.toml"],
                current: None,
                expect: Expect::Body(agent_json(), false),
            },
            Case {
                name: "flags override the file's fields",
                argv: &[
                    "create",
                    "support-bot-2",
                    "--file",
                    "{dir}/agent.toml",
                    "--model",
                    "openai/gpt-4.1",
                    "--instructions-file",
                    "{dir}/prompt.txt",
                    "--no-builtin",
                    "--metadata",
                    "team=ops",
                    "--metadata",
                    "tier=2",
                ],
                current: None,
                expect: Expect::Body(with_overrides, false),
            },
            Case {
                name: "create without an id",
                argv: &["create", "--name", "x"],
                current: None,
                expect: Expect::Error("give the agent's id"),
            },
            Case {
                name: "a TOML date is refused",
                argv: &["create", "bot", "--file", "{dir}/dated.toml"],
                current: None,
                expect: Expect::Error("is not an agent field value"),
            },
            Case {
                name: "a file that is not an object is refused",
                argv: &["create", "bot", "--file", "{dir}/list.json"],
                current: None,
                expect: Expect::Error("is not an object"),
            },
            Case {
                name: "an unknown thinking level is refused",
                argv: &["create", "bot", "--thinking", "extreme"],
                current: None,
                expect: Expect::Error("is not one of off, minimal, low, medium, high"),
            },
            Case {
                name: "metadata without '=' is refused",
                argv: &["create", "bot", "--metadata", "team"],
                current: None,
                expect: Expect::Error("is not KEY=VALUE"),
            },
            Case {
                name: "--builtin and --no-builtin conflict",
                argv: &["create", "bot", "--builtin", "a", "--no-builtin"],
                current: None,
                expect: Expect::Error("cannot be used with"),
            },
            Case {
                name: "edit sends only the fields given",
                argv: &[
                    "edit",
                    "support-bot",
                    "--name",
                    "New name",
                    "--history-max-turns",
                    "5",
                ],
                current: None,
                expect: Expect::Body(json!({"name": "New name", "historyMaxTurns": 5}), false),
            },
            Case {
                name: "--clear sends null",
                argv: &[
                    "edit",
                    "support-bot",
                    "--clear",
                    "model",
                    "--clear",
                    "fallback-models",
                    "--clear",
                    "queueMode",
                    "--thinking",
                    "high",
                ],
                current: None,
                expect: Expect::Body(
                    json!({"model": null, "fallbackModels": null, "queueMode": null,
                           "thinking": "high"}),
                    false,
                ),
            },
            Case {
                name: "--clear overrides the file's field",
                argv: &[
                    "edit",
                    "support-bot",
                    "--file",
                    "{dir}/agent.json",
                    "--clear",
                    "tools",
                ],
                current: None,
                expect: Expect::Body(
                    {
                        let mut body = agent_json();
                        body.as_object_mut().unwrap().remove("agentId");
                        body["tools"] = Value::Null;
                        body
                    },
                    false,
                ),
            },
            Case {
                name: "edit --builtin keeps the agent's other tools",
                argv: &["edit", "support-bot", "--builtin", "http_fetch"],
                current: Some(current.clone()),
                expect: Expect::Body(
                    json!({"tools": {"builtin": ["http_fetch"],
                                     "mcpServers": [{"name": "everything", "url": "http://h/mcp"}]}}),
                    true,
                ),
            },
            Case {
                name: "edit --clear tools.builtin allows every built-in again",
                argv: &["edit", "support-bot", "--clear", "tools.builtin"],
                current: Some(current.clone()),
                expect: Expect::Body(
                    json!({"tools": {"mcpServers": [{"name": "everything", "url": "http://h/mcp"}]}}),
                    true,
                ),
            },
            Case {
                name: "edit --metadata sets a key, keeping the others",
                argv: &[
                    "edit",
                    "support-bot",
                    "--metadata",
                    "tier=2",
                    "--metadata",
                    "owner=ana",
                ],
                current: Some(current.clone()),
                expect: Expect::Body(
                    json!({"metadata": {"team": "cx", "tier": "2", "owner": "ana"}}),
                    true,
                ),
            },
            Case {
                name: "edit --builtin over a file's tools reads nothing",
                argv: &[
                    "edit",
                    "support-bot",
                    "--file",
                    "{dir}/agent.toml",
                    "--builtin",
                    "x",
                ],
                current: Some(current.clone()),
                expect: Expect::Body(
                    {
                        let mut body = agent_json();
                        body.as_object_mut().unwrap().remove("agentId");
                        body["tools"]["builtin"] = json!(["x"]);
                        body
                    },
                    false,
                ),
            },
            Case {
                name: "edit with another agent's file",
                argv: &["edit", "support-bot", "--file", "{dir}/other.json"],
                current: None,
                expect: Expect::Error("cannot change"),
            },
            Case {
                name: "--clear and a flag of the same field",
                argv: &["edit", "support-bot", "--clear", "name", "--name", "x"],
                current: None,
                expect: Expect::Error("--clear name and a flag"),
            },
            Case {
                name: "--clear tools.builtin and --builtin",
                argv: &[
                    "edit",
                    "support-bot",
                    "--clear",
                    "tools.builtin",
                    "--builtin",
                    "x",
                ],
                current: Some(current.clone()),
                expect: Expect::Error("--clear tools.builtin and a flag"),
            },
            Case {
                name: "an unknown --clear field",
                argv: &["edit", "support-bot", "--clear", "agentId"],
                current: None,
                expect: Expect::Error("invalid value"),
            },
            Case {
                name: "edit with nothing to change",
                argv: &["edit", "support-bot"],
                current: None,
                expect: Expect::Error("nothing to change"),
            },
            Case {
                name: "an id that is a dot segment",
                argv: &["edit", "..", "--name", "x"],
                current: None,
                expect: Expect::Error("is not an agent id"),
            },
        ];
        for case in cases {
            let got = body_of(case.argv, dir.path(), case.current.as_ref());
            match (case.expect, got) {
                (Expect::Body(body, needs), Ok(got)) => {
                    assert_eq!(got, (body, needs), "{}", case.name)
                }
                (Expect::Error(text), Err(e)) => assert!(
                    format!("{e:#}").contains(text),
                    "{}: {e:#} does not contain {text:?}",
                    case.name
                ),
                (Expect::Body(..), Err(e)) => panic!("{}: {e:#}", case.name),
                (Expect::Error(text), Ok(got)) => {
                    panic!("{}: {got:?} instead of an error with {text:?}", case.name)
                }
            }
        }
    }

    #[test]
    fn an_agent_is_shown_as_lines_and_a_page_as_a_table() {
        let mut agent = agent_json();
        agent["version"] = json!(3);
        agent["updatedAt"] = json!(1_764_480_000_000u64);
        agent["name"] = json!("Support\u{1b}[31m bot");
        let view = agent_view(&agent);
        assert!(
            view.starts_with("agent support-bot (version 3)\n"),
            "{view}"
        );
        let updated = format!(
            "  updated          {}\n",
            crate::human::time(Some(1_764_480_000_000))
        );
        for line in [
            "  name             Support [31m bot\n",
            "  built-in tools   current_time\n",
            "  MCP server       everything  http://127.0.0.1:3917/mcp  (tools: echo, get-sum)\n",
            "  HTTP tool        lookup_order  https://orders.example/lookup\n",
            "  metadata         team=cx\n",
            updated.as_str(),
            "  instructions:\n    You are the support bot.\n",
        ] {
            assert!(view.contains(line), "{line:?} not in\n{view}");
        }
        assert!(
            agent_view(&json!({"agentId": "a", "version": 1})).contains("  built-in tools   all\n")
        );

        let page = json!({
            "agents": [
                {"agentId": "support-bot", "version": 3, "name": "Support bot",
                 "model": "openai/gpt-4o-mini", "updatedAt": 1_764_480_000_000u64},
                {"agentId": "b", "version": 1}
            ],
            "nextCursor": "c2"
        });
        assert_eq!(
            list_view(&page),
            format!(
                "ID           VERSION  NAME         MODEL               UPDATED\n\
                 support-bot  3        Support bot  openai/gpt-4o-mini  {}\n\
                 b            1        -            -                   -\n\
                 (more: agentlane agents list --cursor c2)\n",
                crate::human::time(Some(1_764_480_000_000))
            )
        );
        assert_eq!(
            list_view(&json!({"agents": [], "nextCursor": null})),
            "no agents\n"
        );
    }
}
