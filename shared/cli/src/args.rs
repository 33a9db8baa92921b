//! Command-line arguments.

use crate::{
    agents_cmd, bench, bench_abuse, client, cron_cmd, keys_cmd, runs_cmd, secrets_cmd, serve,
    sessions_cmd, tenants_cmd, usage_cmd,
};
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "agentlane",
    version,
    about = "Serverless runtime for conversational agents"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run the API and the lane workers in one process (embedded store, or AWS with AGENTLANE_BACKEND=aws).
    Serve(ServeArgs),
    /// Send a message to a session.
    Agent(AgentArgs),
    /// Wait for a run to end.
    Wait(WaitArgs),
    /// Print a run's events.
    Events(EventsArgs),
    /// Print a session's transcript.
    Transcript(TranscriptArgs),
    /// Measure per-turn overhead of the embedded path with a zero-latency model.
    Bench(bench::BenchArgs),
    /// Tenant B's turn latency idle, while tenant A holds 5,000 SSE streams, and while it
    /// holds 1,000 slow-loris sockets (issue 12 §4); prints the ratios as JSON.
    BenchAbuse(bench_abuse::AbuseArgs),
    /// Create the DynamoDB table and the SQS FIFO queues when absent (idempotent).
    SetupAws(crate::serve::SetupAwsArgs),
    /// Manage cron jobs: add, list, show, rm, run, enable, disable.
    Cron(cron_cmd::CronArgs),
    /// Print the OpenAPI 3.1 document of the HTTP API (`agentlane openapi > docs/openapi.json`).
    Openapi,
    /// Manage store-backed API keys of a tenant: create (shown once), list, revoke.
    Keys(keys_cmd::KeysArgs),
    /// Manage stored agents (instructions, model, tools) a turn names with `agent --agent`:
    /// create, list, show, edit, rm.
    Agents(agents_cmd::AgentsArgs),
    /// The tenant's secrets, the values its agents' tools send as {"secret": "NAME"}: set
    /// (from stdin or --from-env; never shown back), list, rm.
    Secrets(secrets_cmd::SecretsArgs),
    /// A session's runs, a run's record, abort, and answers to a paused run: list, show,
    /// abort, approve, answer.
    Runs(runs_cmd::RunsArgs),
    /// The tenant's sessions: list, show, set (default queue mode), reset (a new id), delete.
    Sessions(sessions_cmd::SessionsArgs),
    /// What the API key's tenant spent today and this month against its budget.
    Usage(usage_cmd::UsageArgs),
    /// Operator commands on a whole tenant, on the backend directly: erase (every record, its
    /// API keys included).
    Tenants(tenants_cmd::TenantsArgs),
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8787", env = "AGENTLANE_LISTEN")]
    pub listen: SocketAddr,
    /// Where the embedded database lives.
    #[arg(long, default_value = ".agentlane", env = "AGENTLANE_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Concurrent runs (lane workers).
    #[arg(long, default_value_t = 4, env = "AGENTLANE_WORKERS")]
    pub workers: usize,
}

/// How a client finds and authenticates to the server, and how it prints. Every flag is
/// global: it may come after any subcommand (`agentlane cron list --url …`).
#[derive(Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    /// Server URL.
    #[arg(
        long,
        global = true,
        default_value = "http://127.0.0.1:8787",
        env = "AGENTLANE_URL"
    )]
    pub url: String,
    /// API key (default: the key `serve` generated in <data-dir>/api-key).
    #[arg(long, global = true, env = "AGENTLANE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Data directory of a local `serve`, to find its generated API key.
    #[arg(
        long,
        global = true,
        default_value = ".agentlane",
        env = "AGENTLANE_DATA_DIR"
    )]
    pub data_dir: PathBuf,
    /// Print the API's JSON (one document; JSON Lines for `events --follow`) instead of the
    /// human form.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Where the operator commands (`keys`, `tenants`), which go to the backend directly, find the
/// embedded database.
#[derive(Args, Debug, Clone)]
pub(crate) struct StoreArgs {
    /// Where the embedded database lives (the embedded backend only).
    #[arg(
        long,
        default_value = ".agentlane",
        env = "AGENTLANE_DATA_DIR",
        global = true
    )]
    pub(crate) data_dir: PathBuf,
}

#[derive(Args, Debug)]
pub(crate) struct AgentArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Session key.
    #[arg(long)]
    pub session: String,
    /// The message.
    #[arg(long)]
    pub message: String,
    /// Wait for the run and print the reply (with --json: the wait's answer).
    #[arg(long)]
    pub wait: bool,
    /// The same key within 24 h names the same run (a retry sends nothing twice).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Model as provider/model.
    #[arg(long)]
    pub model: Option<String>,
    /// Run timeout in seconds (0 = unlimited).
    #[arg(long)]
    pub timeout_seconds: Option<u64>,
    /// The stored agent that runs the turn (see `agentlane agents`; the server's default is
    /// `main`, the deployment's own agent).
    #[arg(long, value_name = "ID")]
    pub agent: Option<String>,
    /// How hard the model thinks: off, minimal, low, medium, high, xhigh, adaptive.
    #[arg(long, value_name = "LEVEL")]
    pub thinking: Option<String>,
    /// What happens while the session is busy: followup, collect, steer, interrupt.
    #[arg(long, value_name = "MODE")]
    pub queue_mode: Option<String>,
    /// Added to the system prompt of this turn.
    #[arg(long, value_name = "TEXT")]
    pub extra_system_prompt: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct WaitArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The run (`run_…`).
    pub run_id: String,
    /// How long to wait, in ms.
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
}

#[derive(Args, Debug)]
pub(crate) struct EventsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The run (`run_…`).
    pub run_id: String,
    /// Stream events until the run ends.
    #[arg(long)]
    pub follow: bool,
}

#[derive(Args, Debug)]
pub(crate) struct TranscriptArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The session key.
    pub session: String,
}

pub(crate) async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(a) => serve::serve(a).await.map(|()| ExitCode::SUCCESS),
        Command::Agent(a) => client::agent(a).await,
        Command::Wait(a) => client::wait(a).await,
        Command::Events(a) => client::events(a).await,
        Command::Transcript(a) => client::transcript(a).await,
        Command::Bench(a) => bench::run(a).await.map(|()| ExitCode::SUCCESS),
        Command::BenchAbuse(a) => bench_abuse::run(a).await.map(|()| ExitCode::SUCCESS),
        Command::SetupAws(a) => serve::setup_aws(a).await.map(|()| ExitCode::SUCCESS),
        Command::Cron(a) => cron_cmd::run(a).await,
        Command::Openapi => {
            print!("{}", agentlane_api::openapi_json());
            Ok(ExitCode::SUCCESS)
        }
        Command::Keys(a) => keys_cmd::run(a).await,
        Command::Agents(a) => agents_cmd::run(a).await,
        Command::Secrets(a) => secrets_cmd::run(a).await,
        Command::Runs(a) => runs_cmd::run(a).await,
        Command::Sessions(a) => sessions_cmd::run(a).await,
        Command::Usage(a) => usage_cmd::run(a).await,
        Command::Tenants(a) => tenants_cmd::run(a).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every command and every argument of every command, with its path (`cron add --tz`).
    fn undocumented(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        let here = format!("{path} {}", cmd.get_name()).trim().to_owned();
        if cmd.get_about().is_none() && !path.is_empty() {
            out.push(here.clone());
        }
        for arg in cmd.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                out.push(format!("{here} <{}>", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_name() != "help" {
                undocumented(sub, &here, out);
            }
        }
    }

    #[test]
    fn every_command_and_argument_has_help_text() {
        let mut missing = Vec::new();
        undocumented(&Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
