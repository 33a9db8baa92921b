//! The human form of `agentlane agents`: one agent as lines of `label  value`, a page of them
//! as a table. Pure functions of the API's JSON, control characters blanked.

use serde_json::Value;
use std::fmt::Write as _;

/// `s` with its control characters (a terminal's escapes among them) made blanks; newlines
/// too unless `multiline`.
fn clean(s: &str, multiline: bool) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && !(multiline && (c == '\n' || c == '\t')) {
                ' '
            } else {
                c
            }
        })
        .collect()
}

fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// The strings of an array, joined with `, `.
fn joined(value: Option<&Value>) -> Option<String> {
    let items: Vec<String> = value?
        .as_array()?
        .iter()
        .map(|item| match item {
            Value::String(s) => clean(s, false),
            other => other.to_string(),
        })
        .collect();
    Some(items.join(", "))
}

/// The width of the labels of [`agent_view`] (the longest, `fallback models`).
const LABEL_WIDTH: usize = 15;

/// An agent as lines of `label  value`.
pub(crate) fn agent_view(agent: &Value) -> String {
    let mut rows: Vec<(&str, String)> = Vec::new();
    let id = text(agent, "agentId").unwrap_or("?");
    let version = agent
        .get("version")
        .map_or_else(|| "?".to_owned(), Value::to_string);
    let mut out = format!("agent {} (version {version})\n", clean(id, false));
    if let Some(name) = text(agent, "name") {
        rows.push(("name", clean(name, false)));
    }
    rows.push((
        "model",
        text(agent, "model").map_or_else(|| "(deployment default)".to_owned(), |m| clean(m, false)),
    ));
    if let Some(list) = joined(agent.get("fallbackModels")) {
        rows.push(("fallback models", list));
    }
    if let Some(level) = text(agent, "thinking") {
        rows.push(("thinking", clean(level, false)));
    }
    if let Some(mode) = text(agent, "queueMode") {
        rows.push(("queue mode", clean(mode, false)));
    }
    if let Some(turns) = agent.get("historyMaxTurns").filter(|v| !v.is_null()) {
        rows.push(("history", format!("{turns} turns")));
    }
    let tools = agent.get("tools").filter(|v| v.is_object());
    let builtin = match tools
        .and_then(|t| t.get("builtin"))
        .filter(|v| !v.is_null())
    {
        None => "all".to_owned(),
        Some(list) => match joined(Some(list)) {
            Some(names) if names.is_empty() => "none".to_owned(),
            Some(names) => names,
            None => list.to_string(),
        },
    };
    rows.push(("built-in tools", builtin));
    let servers = tools
        .and_then(|t| t.get("mcpServers"))
        .and_then(Value::as_array);
    for server in servers.into_iter().flatten() {
        let mut line = format!(
            "{}  {}",
            clean(text(server, "name").unwrap_or("?"), false),
            clean(text(server, "url").unwrap_or("?"), false)
        );
        if let Some(allowed) = joined(server.get("allowedTools")) {
            let _ = write!(line, "  (tools: {allowed})");
        }
        rows.push(("MCP server", line));
    }
    let http = tools.and_then(|t| t.get("http")).and_then(Value::as_array);
    for tool in http.into_iter().flatten() {
        rows.push((
            "HTTP tool",
            format!(
                "{}  {}",
                clean(text(tool, "name").unwrap_or("?"), false),
                clean(text(tool, "url").unwrap_or("?"), false)
            ),
        ));
    }
    if let Some(metadata) = agent.get("metadata").and_then(Value::as_object) {
        for (key, value) in metadata {
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            rows.push(("metadata", clean(&format!("{key}={value}"), false)));
        }
    }
    for (label, key) in [("created", "createdAt"), ("updated", "updatedAt")] {
        if let Some(ms) = agent.get(key).and_then(Value::as_u64) {
            rows.push((label, crate::human::time(Some(ms))));
        }
    }
    for (label, value) in rows {
        let _ = writeln!(out, "  {label:LABEL_WIDTH$}  {value}");
    }
    if let Some(instructions) = text(agent, "instructions") {
        out.push_str("  instructions:\n");
        for line in clean(instructions, true).lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    out
}

/// `s` cut to `max` characters (an ellipsis marks a cut).
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut short: String = s.chars().take(max.saturating_sub(1)).collect();
        short.push('…');
        short
    }
}

/// A page of `GET /v1/agents` as a table: id, version, name, model, updated.
pub(crate) fn list_view(page: &Value) -> String {
    let agents = page
        .get("agents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out = String::new();
    if agents.is_empty() {
        out.push_str("no agents\n");
    } else {
        let rows: Vec<Vec<String>> = agents
            .iter()
            .map(|agent| {
                let cell = |key: &str| {
                    text(agent, key).map_or_else(|| "-".to_owned(), |s| cut(&clean(s, false), 40))
                };
                vec![
                    cell("agentId"),
                    agent
                        .get("version")
                        .map_or_else(|| "-".to_owned(), Value::to_string),
                    cell("name"),
                    cell("model"),
                    agent
                        .get("updatedAt")
                        .and_then(Value::as_u64)
                        .map_or_else(|| "-".to_owned(), |ms| crate::human::time(Some(ms))),
                ]
            })
            .collect();
        out.push_str(&crate::human::table(
            &["ID", "VERSION", "NAME", "MODEL", "UPDATED"],
            &rows,
        ));
    }
    if let Some(cursor) = text(page, "nextCursor") {
        let _ = writeln!(
            out,
            "(more: agentlane agents list --cursor {})",
            clean(cursor, false)
        );
    }
    out
}
