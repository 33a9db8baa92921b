//! `agentlane runs`: a session's runs (`list`), a run's record (`show`), `abort`, and the
//! answers to a paused run
//! (issue 20): `approve` (approve every pending approval, `--deny` some with a reason) and
//! `answer` (client tools' outputs).

use crate::args::ClientArgs;
use crate::client::{api, print};
use crate::human;
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub(crate) struct RunsArgs {
    #[command(subcommand)]
    pub command: RunsCommand,
}

#[derive(Subcommand, Debug)]
pub(crate) enum RunsCommand {
    /// List a session's runs, newest first.
    List {
        #[command(flatten)]
        client: ClientArgs,
        /// The session whose runs to list.
        #[arg(long)]
        session: String,
        /// Only the runs in this status (queued, running, requires_action, ok, error, aborted,
        /// timeout).
        #[arg(long)]
        status: Option<String>,
        /// Runs per page (1-1000, default 100).
        #[arg(long)]
        limit: Option<usize>,
        /// Where to go on: the `next` of the previous page (runs numbered below it).
        #[arg(long)]
        before: Option<u64>,
    },
    /// Print a run: status, times, usage, error or pending calls, and the reply (with
    /// `--json`: the record, with its `requiredAction` while it is paused).
    Show {
        #[command(flatten)]
        client: ClientArgs,
        /// The run (`run_…`).
        run_id: String,
    },
    /// Ask a live run to stop at its next check (it ends `aborted`).
    Abort {
        #[command(flatten)]
        client: ClientArgs,
        /// The run (`run_…`).
        run_id: String,
    },
    /// Approve the paused run's gated calls (all of them but those given with `--deny`).
    Approve {
        #[command(flatten)]
        client: ClientArgs,
        /// The paused run (`run_…`).
        run_id: String,
        /// A call to deny (repeatable).
        #[arg(long = "deny", value_name = "CALL_ID")]
        deny: Vec<String>,
        /// The reason the model sees for the denied calls.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Post client tools' outputs: `--output CALL_ID=TEXT` for each pending client call.
    Answer {
        #[command(flatten)]
        client: ClientArgs,
        /// The paused run (`run_…`).
        run_id: String,
        /// A client call's output (repeatable, one per pending client call).
        #[arg(long = "output", value_name = "CALL_ID=TEXT", required = true)]
        outputs: Vec<String>,
        /// Mark the outputs as errors.
        #[arg(long)]
        error: bool,
    },
}

pub(crate) async fn run(a: RunsArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        RunsCommand::List {
            client,
            session,
            status,
            limit,
            before,
        } => {
            return crate::sessions_cmd::list_runs(&client, &session, status, limit, before).await;
        }
        RunsCommand::Show { client, run_id } => {
            let api = api(&client)?;
            let run = api
                .call(Method::GET, &format!("/v1/runs/{run_id}"), None)
                .await?;
            if client.json {
                print(&run);
            } else {
                print!("{}", human::run(&run));
            }
        }
        RunsCommand::Abort { client, run_id } => {
            let api = api(&client)?;
            let path = format!("/v1/runs/{run_id}/abort");
            let answer = api.call(Method::POST, &path, Some(json!({}))).await?;
            if client.json {
                print(&answer);
            } else {
                println!("abort requested: {run_id} stops at its next check");
            }
        }
        RunsCommand::Approve {
            client,
            run_id,
            deny,
            reason,
        } => {
            let api = api(&client)?;
            let run = api
                .call(Method::GET, &format!("/v1/runs/{run_id}"), None)
                .await?;
            let body = approvals(&run, &deny, reason.as_deref())?;
            let path = format!("/v1/runs/{run_id}/actions");
            answered(
                &api.call(Method::POST, &path, Some(body)).await?,
                client.json,
            );
        }
        RunsCommand::Answer {
            client,
            run_id,
            outputs,
            error,
        } => {
            let api = api(&client)?;
            let body = tool_outputs(&outputs, error)?;
            let path = format!("/v1/runs/{run_id}/actions");
            answered(
                &api.call(Method::POST, &path, Some(body)).await?,
                client.json,
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints what `POST /v1/runs/{id}/actions` answered: the JSON, or a line saying the run
/// goes on (or that the same answer had been recorded before).
fn answered(answer: &Value, as_json: bool) {
    if as_json {
        print(answer);
    } else if answer["repeated"] == Value::Bool(true) {
        println!(
            "{}: this answer was recorded before; nothing new",
            answer["runId"].as_str().unwrap_or("?")
        );
    } else {
        println!(
            "{}: answer recorded at {}; the run goes on",
            answer["runId"].as_str().unwrap_or("?"),
            human::time(answer["answeredAt"].as_u64())
        );
    }
}

/// The approvals for every gated call of `run`'s required action: `deny`'s denied with
/// `reason`, the others approved.
fn approvals(run: &Value, deny: &[String], reason: Option<&str>) -> anyhow::Result<Value> {
    let calls = run
        .pointer("/requiredAction/toolCalls")
        .and_then(Value::as_array)
        .context("the run is not waiting for an answer (no requiredAction)")?;
    let gated: Vec<&str> = calls
        .iter()
        .filter(|c| c["kind"] == "approval")
        .filter_map(|c| c["id"].as_str())
        .collect();
    if let Some(unknown) = deny.iter().find(|d| !gated.contains(&d.as_str())) {
        bail!("--deny {unknown}: the run waits for no approval of that call");
    }
    let approvals: Vec<Value> = gated
        .iter()
        .map(|id| {
            let denied = deny.iter().any(|d| d == id);
            let mut a = json!({"toolCallId": id, "approve": !denied});
            if let (true, Some(r)) = (denied, reason) {
                a["reason"] = json!(r);
            }
            a
        })
        .collect();
    Ok(json!({ "approvals": approvals }))
}

/// `CALL_ID=TEXT` pairs as `toolOutputs`.
fn tool_outputs(outputs: &[String], error: bool) -> anyhow::Result<Value> {
    let outputs = outputs
        .iter()
        .map(|o| {
            let (id, text) = o
                .split_once('=')
                .with_context(|| format!("--output {o:?}: expected CALL_ID=TEXT"))?;
            let mut out = json!({"toolCallId": id, "output": text});
            if error {
                out["isError"] = json!(true);
            }
            Ok(out)
        })
        .collect::<anyhow::Result<Vec<Value>>>()?;
    Ok(json!({ "toolOutputs": outputs }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn approve_approves_every_gated_call_but_the_denied_ones() {
        let run = json!({"requiredAction": {"toolCalls": [
            {"id": "a", "kind": "approval"}, {"id": "b", "kind": "approval"},
            {"id": "c", "kind": "client"}]}});
        assert_eq!(
            approvals(&run, &["b".into()], Some("no")).unwrap(),
            json!({"approvals": [{"toolCallId": "a", "approve": true},
                                 {"toolCallId": "b", "approve": false, "reason": "no"}]})
        );
        assert!(
            approvals(&run, &["c".into()], None).is_err(),
            "c is a client call"
        );
        assert!(approvals(&json!({}), &[], None).is_err(), "not paused");
    }

    #[test]
    fn outputs_are_call_id_equals_text() {
        assert_eq!(
            tool_outputs(&["c1=order 42: shipped".into()], false).unwrap(),
            json!({"toolOutputs": [{"toolCallId": "c1", "output": "order 42: shipped"}]})
        );
        assert!(tool_outputs(&["no-equals".into()], false).is_err());
    }
}
