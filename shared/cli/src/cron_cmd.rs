//! `agentlane cron add|list|show|rm|run|enable|disable`: cron jobs over the HTTP API.

use crate::api_client::ApiClient;
use crate::args::ClientArgs;
use crate::client::{api, print};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};
use std::process::ExitCode;

/// `agentlane cron …`.
#[derive(Args, Debug)]
pub struct CronArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: CronCommand,
}

/// The cron subcommands.
#[derive(Subcommand, Debug)]
pub enum CronCommand {
    /// Create a job (exactly one of --cron, --every, --at).
    Add(Box<AddArgs>),
    /// List the jobs.
    List,
    /// Show one job with its recent runs.
    Show {
        /// The job's id (`job_…`) or its name.
        job_id: String,
    },
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

/// `agentlane cron add`.
#[derive(Args, Debug)]
pub struct AddArgs {
    /// The job's name.
    #[arg(long)]
    pub name: String,
    /// The message each fire sends.
    #[arg(long)]
    pub message: String,
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
    /// Model as provider/model.
    #[arg(long)]
    pub model: Option<String>,
    /// Run timeout in seconds from the fire (default 3600; 0 = none).
    #[arg(long)]
    pub timeout_seconds: Option<u64>,
    /// Create it disabled.
    #[arg(long)]
    pub disabled: bool,
    /// Delete a one-shot job after its run succeeds.
    #[arg(long)]
    pub delete_after_run: bool,
    /// POST each run's final payloads to this URL.
    #[arg(long)]
    pub webhook: Option<String>,
    /// Bearer token for --webhook.
    #[arg(long, requires = "webhook")]
    pub webhook_token: Option<String>,
}

/// The JSON body of `POST /v1/cron/jobs` for `args`.
pub fn job_body(args: &AddArgs) -> anyhow::Result<Value> {
    let schedule = match (&args.cron, args.every, &args.at) {
        (Some(cron), None, None) => match &args.tz {
            Some(tz) => json!({"cron": cron, "tz": tz}),
            None => json!({"cron": cron}),
        },
        (None, Some(every), None) => json!({"everySeconds": every}),
        (None, None, Some(at)) => json!({"at": at}),
        _ => anyhow::bail!("give exactly one of --cron, --every or --at"),
    };
    let mut body = json!({
        "name": args.name,
        "schedule": schedule,
        "message": args.message,
        "enabled": !args.disabled,
    });
    if let Some(model) = &args.model {
        body["model"] = json!(model);
    }
    if let Some(t) = args.timeout_seconds {
        body["timeoutSeconds"] = json!(t);
    }
    if args.delete_after_run {
        body["deleteAfterRun"] = json!(true);
    }
    if let Some(url) = &args.webhook {
        let mut webhook = json!({"url": url});
        if let Some(token) = &args.webhook_token {
            webhook["token"] = json!(token);
        }
        body["delivery"] = json!({"webhook": webhook});
    }
    Ok(body)
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
pub async fn run(args: CronArgs) -> anyhow::Result<ExitCode> {
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
    let mut out = format!(
        "{:<38} {:<20} {:<24} {:<8} {:<26} {}\n",
        "ID", "NAME", "SCHEDULE", "ENABLED", "NEXT RUN", "LAST"
    );
    for job in jobs {
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
        out.push_str(&format!(
            "{:<38} {:<20} {:<24} {:<8} {:<26} {}\n",
            job["jobId"].as_str().unwrap_or("?"),
            job["name"].as_str().unwrap_or(""),
            when,
            if job["enabled"] == Value::Bool(true) {
                "yes"
            } else {
                "no"
            },
            crate::human::time(job["nextRunAt"].as_u64()),
            last,
        ));
    }
    out
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
}
