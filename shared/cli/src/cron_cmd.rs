//! `agentlane cron add|list|show|edit|rm|run|enable|disable`: cron jobs over the HTTP API.

use crate::api_client::ApiClient;
use crate::args::ClientArgs;
use crate::client::{api, print};
use anyhow::Context;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};
use std::process::ExitCode;

/// `agentlane cron …`.
#[derive(Args, Debug)]
pub(crate) struct CronArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: CronCommand,
}

/// The cron subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum CronCommand {
    /// Create a job (exactly one of --cron, --every, --at).
    Add(Box<AddArgs>),
    /// List the jobs.
    List,
    /// Show one job with its recent runs.
    Show {
        /// The job's id (`job_…`) or its name.
        job_id: String,
    },
    /// Change a job: only the fields given change (a new schedule replaces the old one).
    Edit(Box<EditArgs>),
    /// Delete a job.
    Rm {
        /// The job's id (`job_…`) or its name.
        job_id: String,
    },
    /// Fire a job now (prints the run id).
    Run {
        /// The job's id (`job_…`) or its name.
        job_id: String,
    },
    /// Enable a job (missed slots are not replayed).
    Enable {
        /// The job's id (`job_…`) or its name.
        job_id: String,
    },
    /// Disable a job.
    Disable {
        /// The job's id (`job_…`) or its name.
        job_id: String,
    },
}

/// When a job fires: at most one of `--cron` (with `--tz`), `--every`, `--at`.
#[derive(Args, Debug)]
pub(crate) struct ScheduleFlags {
    /// A cron expression: 5 fields, or 6 with seconds first (e.g. "0 9 * * 1-5").
    #[arg(long, group = "when")]
    pub cron: Option<String>,
    /// The IANA time zone of --cron (default UTC).
    #[arg(long, requires = "cron")]
    pub tz: Option<String>,
    /// Fire every N seconds.
    #[arg(long, group = "when")]
    pub every: Option<u64>,
    /// Fire once at an RFC 3339 time.
    #[arg(long, group = "when")]
    pub at: Option<String>,
}

impl ScheduleFlags {
    /// The schedule the flags name: `None` when none of them is given.
    fn schedule(&self) -> anyhow::Result<Option<Value>> {
        Ok(match (&self.cron, self.every, &self.at) {
            (Some(cron), None, None) => Some(match &self.tz {
                Some(tz) => json!({"cron": cron, "tz": tz}),
                None => json!({"cron": cron}),
            }),
            (None, Some(every), None) => Some(json!({"everySeconds": every})),
            (None, None, Some(at)) => Some(json!({"at": at})),
            (None, None, None) => None,
            _ => anyhow::bail!("give at most one of --cron, --every or --at"),
        })
    }
}

/// How a fire runs and where its answer goes: the flags `add` and `edit` share.
#[derive(Args, Debug)]
pub(crate) struct RunFlags {
    /// Model as provider/model.
    #[arg(long)]
    pub model: Option<String>,
    /// Run timeout in seconds from the fire (default 3600; 0 = none, where the server allows it).
    #[arg(long)]
    pub timeout_seconds: Option<u64>,
    /// POST each run's final payloads to this URL.
    #[arg(long)]
    pub webhook: Option<String>,
    /// Bearer token for --webhook.
    #[arg(long, requires = "webhook")]
    pub webhook_token: Option<String>,
}

impl RunFlags {
    /// Sets the given fields on a job body.
    fn apply(&self, body: &mut serde_json::Map<String, Value>) {
        if let Some(model) = &self.model {
            body.insert("model".into(), json!(model));
        }
        if let Some(t) = self.timeout_seconds {
            body.insert("timeoutSeconds".into(), json!(t));
        }
        if let Some(url) = &self.webhook {
            let mut webhook = json!({"url": url});
            if let Some(token) = &self.webhook_token {
                webhook["token"] = json!(token);
            }
            body.insert("delivery".into(), json!({"webhook": webhook}));
        }
    }
}

/// `agentlane cron add`.
#[derive(Args, Debug)]
pub(crate) struct AddArgs {
    /// The job's name.
    #[arg(long)]
    pub name: String,
    /// The message each fire sends.
    #[arg(long)]
    pub message: String,
    #[command(flatten)]
    pub when: ScheduleFlags,
    #[command(flatten)]
    pub run: RunFlags,
    /// Create it disabled.
    #[arg(long)]
    pub disabled: bool,
    /// Delete a one-shot job after its run succeeds.
    #[arg(long)]
    pub delete_after_run: bool,
}

/// `agentlane cron edit`.
#[derive(Args, Debug)]
pub(crate) struct EditArgs {
    /// The job's id (`job_…`) or its name.
    pub job_id: String,
    /// A new name.
    #[arg(long)]
    pub name: Option<String>,
    /// The message each fire sends.
    #[arg(long)]
    pub message: Option<String>,
    #[command(flatten)]
    pub when: ScheduleFlags,
    #[command(flatten)]
    pub run: RunFlags,
}

/// The JSON body of `PATCH /v1/cron/jobs/{id}` for `args`: the fields given, and an error
/// when none is.
pub(crate) fn edit_body(args: &EditArgs) -> anyhow::Result<Value> {
    let mut body = serde_json::Map::new();
    if let Some(name) = &args.name {
        body.insert("name".into(), json!(name));
    }
    if let Some(message) = &args.message {
        body.insert("message".into(), json!(message));
    }
    if let Some(schedule) = args.when.schedule()? {
        body.insert("schedule".into(), schedule);
    }
    args.run.apply(&mut body);
    anyhow::ensure!(
        !body.is_empty(),
        "nothing to change: give at least one of --name, --message, --cron, --every, --at, \
         --model, --timeout-seconds, --webhook"
    );
    Ok(Value::Object(body))
}

/// The JSON body of `POST /v1/cron/jobs` for `args`.
pub(crate) fn job_body(args: &AddArgs) -> anyhow::Result<Value> {
    let schedule = args
        .when
        .schedule()?
        .context("give exactly one of --cron, --every or --at")?;
    let mut body = serde_json::Map::new();
    body.insert("name".into(), json!(args.name));
    body.insert("schedule".into(), schedule);
    body.insert("message".into(), json!(args.message));
    body.insert("enabled".into(), json!(!args.disabled));
    args.run.apply(&mut body);
    if args.delete_after_run {
        body.insert("deleteAfterRun".into(), json!(true));
    }
    Ok(Value::Object(body))
}

/// The id of the job `name_or_id` names: a `job_…` id as it is, else the job of that name
/// (the tenant's names are looked up; none or two of that name is an error).
async fn resolve(api: &ApiClient, name_or_id: &str) -> anyhow::Result<String> {
    if name_or_id.starts_with("job_") {
        return Ok(name_or_id.to_owned());
    }
    let list = api.call(Method::GET, "/v1/cron/jobs", None).await?;
    let ids: Vec<&str> = list["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|job| job["name"].as_str() == Some(name_or_id))
        .filter_map(|job| job["jobId"].as_str())
        .collect();
    match ids.as_slice() {
        [id] => Ok((*id).to_owned()),
        [] => anyhow::bail!("no cron job named {name_or_id:?} (see `agentlane cron list`)"),
        _ => anyhow::bail!(
            "{} cron jobs are named {name_or_id:?}; name one by its id: {}",
            ids.len(),
            ids.join(", ")
        ),
    }
}

/// Runs a cron subcommand and prints the API's answer (`--json`) or its human form.
pub(crate) async fn run(args: CronArgs) -> anyhow::Result<ExitCode> {
    let api = api(&args.client)?;
    let path = |id: &str| format!("/v1/cron/jobs/{id}");
    let answer = match &args.command {
        CronCommand::Add(add) => {
            api.call(Method::POST, "/v1/cron/jobs", Some(job_body(add)?))
                .await?
        }
        CronCommand::List => api.call(Method::GET, "/v1/cron/jobs", None).await?,
        CronCommand::Show { job_id } => {
            let id = resolve(&api, job_id).await?;
            api.call(Method::GET, &path(&id), None).await?
        }
        CronCommand::Edit(edit) => {
            let body = edit_body(edit)?;
            let id = resolve(&api, &edit.job_id).await?;
            api.call(Method::PATCH, &path(&id), Some(body)).await?
        }
        CronCommand::Rm { job_id } => {
            let id = resolve(&api, job_id).await?;
            api.call(Method::DELETE, &path(&id), None).await?;
            json!({"deleted": id})
        }
        CronCommand::Run { job_id } => {
            let id = resolve(&api, job_id).await?;
            api.call(Method::POST, &format!("{}/run", path(&id)), Some(json!({})))
                .await?
        }
        CronCommand::Enable { job_id } | CronCommand::Disable { job_id } => {
            let enabled = matches!(args.command, CronCommand::Enable { .. });
            let id = resolve(&api, job_id).await?;
            api.call(Method::PATCH, &path(&id), Some(json!({"enabled": enabled})))
                .await?
        }
    };
    if args.client.json {
        print(&answer);
    } else if matches!(args.command, CronCommand::Run { .. }) {
        println!(
            "fired {}: run {} on session {}",
            answer["jobId"].as_str().unwrap_or("?"),
            answer["runId"].as_str().unwrap_or("-"),
            answer["sessionKey"].as_str().unwrap_or("-")
        );
    } else if let Some(id) = answer["deleted"].as_str() {
        println!("deleted {id}");
    } else if let Some(jobs) = answer["jobs"].as_array() {
        print!("{}", jobs_table(jobs));
    } else if answer["jobId"].is_string() {
        print!("{}", jobs_table(std::slice::from_ref(&answer)));
    } else {
        print(&answer);
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per job: id, name, schedule, enabled, next fire (local time), last outcome.
fn jobs_table(jobs: &[Value]) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            let schedule = &job["schedule"];
            let when = match (
                schedule["cron"].as_str(),
                schedule["everySeconds"].as_u64(),
                schedule["at"].as_str(),
            ) {
                (Some(cron), _, _) => match schedule["tz"].as_str() {
                    Some(tz) => format!("{cron} ({tz})"),
                    None => cron.to_owned(),
                },
                (_, Some(every), _) => format!("every {every}s"),
                (_, _, Some(at)) => format!("at {at}"),
                _ => schedule.to_string(),
            };
            let last = job["lastRuns"]
                .as_array()
                .and_then(|runs| runs.first())
                .and_then(|run| run["status"].as_str())
                .unwrap_or("-");
            vec![
                job["jobId"].as_str().unwrap_or("?").to_owned(),
                job["name"].as_str().unwrap_or("").to_owned(),
                when,
                if job["enabled"] == Value::Bool(true) {
                    "yes"
                } else {
                    "no"
                }
                .to_owned(),
                crate::human::time(job["nextRunAt"].as_u64()),
                last.to_owned(),
            ]
        })
        .collect();
    crate::human::table(
        &["ID", "NAME", "SCHEDULE", "ENABLED", "NEXT RUN", "LAST"],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        add: AddArgs,
    }

    fn body(args: &[&str]) -> anyhow::Result<Value> {
        let mut argv = vec!["add"];
        argv.extend_from_slice(args);
        job_body(&Cli::try_parse_from(argv)?.add)
    }

    #[test]
    fn add_flags_become_the_api_body() {
        assert_eq!(
            body(&[
                "--name",
                "n",
                "--message",
                "m",
                "--cron",
                "0 9 * * 1-5",
                "--tz",
                "Europe/Paris"
            ])
            .unwrap(),
            json!({"name": "n", "message": "m", "enabled": true,
                   "schedule": {"cron": "0 9 * * 1-5", "tz": "Europe/Paris"}})
        );
        assert_eq!(
            body(&[
                "--name",
                "n",
                "--message",
                "m",
                "--every",
                "30",
                "--timeout-seconds",
                "10",
                "--disabled",
                "--webhook",
                "https://h.example/x",
                "--webhook-token",
                "t"
            ])
            .unwrap(),
            json!({"name": "n", "message": "m", "enabled": false, "timeoutSeconds": 10,
                   "schedule": {"everySeconds": 30},
                   "delivery": {"webhook": {"url": "https://h.example/x", "token": "t"}}})
        );
        assert!(
            body(&["--name", "n", "--message", "m"]).is_err(),
            "no schedule"
        );
        assert!(body(&["--name", "n", "--message", "m", "--every", "3", "--at", "x"]).is_err());
    }

    #[derive(Parser)]
    struct EditCli {
        #[command(flatten)]
        edit: EditArgs,
    }

    fn edit(args: &[&str]) -> anyhow::Result<Value> {
        let mut argv = vec!["edit", "standup"];
        argv.extend_from_slice(args);
        edit_body(&EditCli::try_parse_from(argv)?.edit)
    }

    #[test]
    fn edit_sends_only_the_fields_given() {
        assert_eq!(
            edit(&["--message", "m2", "--cron", "0 9 * * *", "--tz", "UTC"]).unwrap(),
            json!({"message": "m2", "schedule": {"cron": "0 9 * * *", "tz": "UTC"}})
        );
        assert_eq!(
            edit(&["--timeout-seconds", "30"]).unwrap(),
            json!({"timeoutSeconds": 30})
        );
        assert!(edit(&[]).is_err(), "nothing to change");
        assert!(
            edit(&["--every", "3", "--at", "x"]).is_err(),
            "two schedules"
        );
    }
}
