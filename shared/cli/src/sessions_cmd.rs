//! `agentlane sessions show|set|reset`: a session's state, its default queue mode, and a new
//! session id for its key (OpenClaw's `/new`), over the HTTP API.

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
pub struct SessionsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: SessionsCommand,
}

/// The sessions subcommands.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// Print a session: status, active run, counts, times, default queue mode, diagnostic.
    Show {
        /// The session key.
        session: String,
    },
    /// Set the session's default queue mode (the mode of a turn sent without one).
    Set {
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
        /// The session key.
        session: String,
    },
}

/// The `PATCH /v1/sessions/{key}` body of `set`.
fn patch_body(queue_mode: Option<&str>, clear: bool) -> Value {
    match (queue_mode, clear) {
        (_, true) => json!({ "queueMode": null }),
        (mode, false) => json!({ "queueMode": mode }),
    }
}

/// Runs a sessions subcommand and prints the session (`--json`: the API's answer).
pub async fn run(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let api = api(&args.client)?;
    let path = |key: &str| format!("/v1/sessions/{}", path_segment(key));
    let session = match &args.command {
        SessionsCommand::Show { session } => api.call(Method::GET, &path(session), None).await?,
        SessionsCommand::Set {
            session,
            queue_mode,
            clear_queue_mode,
        } => {
            let body = patch_body(queue_mode.as_deref(), *clear_queue_mode);
            api.call(Method::PATCH, &path(session), Some(body)).await?
        }
        SessionsCommand::Reset { session } => {
            let reset = format!("{}/reset", path(session));
            api.call(Method::POST, &reset, Some(json!({}))).await?
        }
    };
    if args.client.json {
        print(&session);
    } else {
        print!("{}", human::session(&session));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_sends_the_mode_or_clears_it() {
        assert_eq!(
            patch_body(Some("steer"), false),
            json!({"queueMode": "steer"})
        );
        assert_eq!(patch_body(None, true), json!({"queueMode": null}));
    }
}
