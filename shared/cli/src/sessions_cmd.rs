//! `agentlane sessions list|show|set|reset|delete` and `agentlane runs list --session K`: the
//! tenant's sessions and a session's runs as tables (local times), a session's default queue
//! mode and a new session id for its key (OpenClaw's `/new`), or with `--json` the API's answer.

use crate::args::ClientArgs;
use crate::client::{api, print};
use crate::human;
use agentlane_core::validate::path_segment;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};
use std::process::ExitCode;

/// `agentlane sessions …`.
#[derive(Args, Debug)]
pub(crate) struct SessionsArgs {
    #[command(subcommand)]
    pub command: SessionsCommand,
}

/// The sessions subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum SessionsCommand {
    /// List the tenant's sessions, newest activity first.
    List {
        #[command(flatten)]
        client: ClientArgs,
        /// Only the sessions of this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only the sessions in this status: idle or processing.
        #[arg(long)]
        status: Option<String>,
        /// Sessions per page (1-1000, default 100).
        #[arg(long)]
        limit: Option<usize>,
        /// Where to go on: the `next` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Show a session: its id, status, agent, counters and lock.
    Show {
        #[command(flatten)]
        client: ClientArgs,
        /// The session key.
        session: String,
    },
    /// Set the session's default queue mode (the mode of a turn sent without one).
    Set {
        #[command(flatten)]
        client: ClientArgs,
        /// The session key.
        session: String,
        /// followup, collect, steer or interrupt (or an alias the API accepts).
        #[arg(
            long,
            value_name = "MODE",
            required_unless_present = "clear_queue_mode"
        )]
        queue_mode: Option<String>,
        /// Clear the default (turns without a mode are `followup` again).
        #[arg(long, conflicts_with = "queue_mode")]
        clear_queue_mode: bool,
    },
    /// Give the key a new session id: the next turn starts an empty transcript. Waits for a
    /// running turn to release the session (the server answers `session_busy` if it does not).
    Reset {
        #[command(flatten)]
        client: ClientArgs,
        /// The session key.
        session: String,
    },
    /// Delete a session with its transcript, runs and events (a running turn is aborted first).
    Delete {
        #[command(flatten)]
        client: ClientArgs,
        /// The session key.
        session: String,
    },
}

/// Runs `agentlane sessions …`.
pub(crate) async fn run(a: SessionsArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        SessionsCommand::List {
            client,
            agent,
            status,
            limit,
            cursor,
        } => {
            let mut query = Vec::new();
            push(&mut query, "agentId", agent);
            push(&mut query, "status", status);
            push(&mut query, "limit", limit.map(|l| l.to_string()));
            push(&mut query, "cursor", cursor);
            let path = with_query("/v1/sessions", &query);
            let page = api(&client)?.call(Method::GET, &path, None).await?;
            if client.json {
                print(&page);
            } else {
                print!("{}", sessions_table(&page));
                more(&page, "cursor");
            }
        }
        SessionsCommand::Show { client, session } => {
            let path = format!("/v1/sessions/{}", path_segment(&session));
            let shown = api(&client)?.call(Method::GET, &path, None).await?;
            shown_as(&shown, client.json);
        }
        SessionsCommand::Set {
            client,
            session,
            queue_mode,
            clear_queue_mode,
        } => {
            let path = format!("/v1/sessions/{}", path_segment(&session));
            let body = patch_body(queue_mode.as_deref(), clear_queue_mode);
            let shown = api(&client)?.call(Method::PATCH, &path, Some(body)).await?;
            shown_as(&shown, client.json);
        }
        SessionsCommand::Reset { client, session } => {
            let path = format!("/v1/sessions/{}/reset", path_segment(&session));
            let shown = api(&client)?
                .call(Method::POST, &path, Some(json!({})))
                .await?;
            shown_as(&shown, client.json);
        }
        SessionsCommand::Delete { client, session } => {
            let path = format!("/v1/sessions/{}", path_segment(&session));
            api(&client)?.call(Method::DELETE, &path, None).await?;
            if client.json {
                print(&serde_json::json!({"sessionKey": session, "deleted": true}));
            } else {
                println!("session {session} deleted, with its transcript, runs and events");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a session: the API's JSON, or named lines.
fn shown_as(session: &Value, as_json: bool) {
    if as_json {
        print(session);
    } else {
        print!("{}", session_text(session));
    }
}

/// The `PATCH /v1/sessions/{key}` body of `set`.
fn patch_body(queue_mode: Option<&str>, clear: bool) -> Value {
    match (queue_mode, clear) {
        (_, true) => json!({ "queueMode": null }),
        (mode, false) => json!({ "queueMode": mode }),
    }
}

/// `agentlane runs list --session K`: one page of the session's runs.
pub(crate) async fn list_runs(
    client: &ClientArgs,
    session: &str,
    status: Option<String>,
    limit: Option<usize>,
    before: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let mut query = vec![("sessionKey", session.to_owned())];
    push(&mut query, "status", status);
    push(&mut query, "limit", limit.map(|l| l.to_string()));
    push(&mut query, "before", before.map(|b| b.to_string()));
    let page = api(client)?
        .call(Method::GET, &with_query("/v1/runs", &query), None)
        .await?;
    if client.json {
        print(&page);
    } else {
        print!("{}", runs_table(&page));
        more(&page, "before");
    }
    Ok(ExitCode::SUCCESS)
}

fn push(query: &mut Vec<(&'static str, String)>, name: &'static str, value: Option<String>) {
    if let Some(value) = value {
        query.push((name, value));
    }
}

/// `path?name=value&…`, each value percent-encoded.
fn with_query(path: &str, query: &[(&str, String)]) -> String {
    let pairs: Vec<String> = query
        .iter()
        .map(|(name, value)| format!("{name}={}", path_segment(value)))
        .collect();
    if pairs.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", pairs.join("&"))
    }
}

/// Tells on stderr how to get the next page, when there is one.
fn more(page: &Value, flag: &str) {
    match &page["next"] {
        Value::Null => {}
        Value::String(next) => eprintln!("more: --{flag} {next}"),
        next => eprintln!("more: --{flag} {next}"),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// A page of `GET /v1/sessions` as a table.
fn sessions_table(page: &Value) -> String {
    let sessions = page["sessions"].as_array().cloned().unwrap_or_default();
    if sessions.is_empty() {
        return "no sessions\n".to_owned();
    }
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                text(&s["sessionKey"]),
                text(&s["status"]),
                text(&s["agentId"]),
                format!("{}/{}", text(&s["runsFinished"]), text(&s["runsAccepted"])),
                human::time(s["updatedAt"].as_u64()),
            ]
        })
        .collect();
    human::table(
        &["SESSION", "STATUS", "AGENT", "RUNS DONE", "LAST ACTIVITY"],
        &rows,
    )
}

/// A page of `GET /v1/runs?sessionKey=` as a table.
fn runs_table(page: &Value) -> String {
    let runs = page["runs"].as_array().cloned().unwrap_or_default();
    if runs.is_empty() {
        return "no runs\n".to_owned();
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                text(&r["sessionSeq"]),
                text(&r["runId"]),
                text(&r["status"]),
                human::time(r["acceptedAt"].as_u64()),
                text(&r["model"]),
            ]
        })
        .collect();
    human::table(&["SEQ", "RUN", "STATUS", "ACCEPTED", "MODEL"], &rows)
}

/// `GET /v1/sessions/{key}` as `name: value` lines.
fn session_text(session: &Value) -> String {
    let mut text_out = String::new();
    let mut line = |name: &str, value: String| text_out.push_str(&format!("{name:<14}{value}\n"));
    line("session", text(&session["sessionKey"]));
    line("session id", text(&session["sessionId"]));
    line("agent", text(&session["agentId"]));
    line("status", text(&session["status"]));
    if let Some(run) = session["activeRunId"].as_str() {
        line("active run", run.to_owned());
    }
    line(
        "runs",
        format!(
            "{} accepted, {} finished",
            text(&session["runsAccepted"]),
            text(&session["runsFinished"])
        ),
    );
    line("locked", text(&session["locked"]));
    line("created", human::time(session["createdAt"].as_u64()));
    line("last activity", human::time(session["updatedAt"].as_u64()));
    line(
        "queue mode",
        session["queueMode"]
            .as_str()
            .unwrap_or("followup")
            .to_owned(),
    );
    if let Some(class) = session.pointer("/diagnostic/class").and_then(Value::as_str) {
        let reason = session
            .pointer("/diagnostic/reason")
            .and_then(Value::as_str);
        line("diagnostic", format!("{class}: {}", reason.unwrap_or("")));
    }
    text_out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sessions_show_as_a_table_with_one_row_each() {
        let page = json!({"sessions": [
            {"sessionKey": "user/1", "status": "idle", "agentId": "main",
             "runsAccepted": 3, "runsFinished": 2, "updatedAt": null},
            {"sessionKey": "b", "status": "processing", "agentId": "helper",
             "runsAccepted": 1, "runsFinished": 0}
        ], "next": null});
        assert_eq!(
            sessions_table(&page),
            "SESSION  STATUS      AGENT   RUNS DONE  LAST ACTIVITY\n\
             user/1   idle        main    2/3        -\n\
             b        processing  helper  0/1        -\n"
        );
        assert_eq!(sessions_table(&json!({"sessions": []})), "no sessions\n");
    }

    #[test]
    fn runs_show_as_a_table_newest_first_as_the_api_sends_them() {
        let page = json!({"runs": [
            {"sessionSeq": 1, "runId": "run_b", "status": "queued"},
            {"sessionSeq": 0, "runId": "run_a", "status": "ok", "model": "openai/gpt-4o-mini"}
        ]});
        assert_eq!(
            runs_table(&page),
            "SEQ  RUN    STATUS  ACCEPTED  MODEL\n\
             1    run_b  queued  -         -\n\
             0    run_a  ok      -         openai/gpt-4o-mini\n"
        );
    }

    #[test]
    fn set_sends_the_mode_or_clears_it() {
        assert_eq!(
            patch_body(Some("steer"), false),
            json!({"queueMode": "steer"})
        );
        assert_eq!(patch_body(None, true), json!({"queueMode": null}));
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            with_query(
                "/v1/runs",
                &[("sessionKey", "a/b c".into()), ("limit", "5".into())]
            ),
            "/v1/runs?sessionKey=a%2Fb%20c&limit=5"
        );
        assert_eq!(with_query("/v1/sessions", &[]), "/v1/sessions");
    }

    #[test]
    fn a_session_shows_as_named_lines() {
        let shown = json!({"sessionKey": "k", "sessionId": "s1", "agentId": "main",
            "status": "idle", "runsAccepted": 2, "runsFinished": 2, "locked": false});
        let text = session_text(&shown);
        assert!(
            text.starts_with("session       k\nsession id    s1\n"),
            "{text}"
        );
        assert!(
            text.contains("runs          2 accepted, 2 finished\n"),
            "{text}"
        );
    }
}
