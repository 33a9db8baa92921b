//! The `agentlane` command: `serve` runs the whole system in one process on the embedded
//! store; the other commands are clients of the HTTP API through [`api_client::ApiClient`]
//! (also the end-to-end harness's client).
#![warn(unreachable_pub)]
#![warn(missing_docs)]

mod agents_cmd;
mod agents_view;
pub mod api_client;
mod args;
pub mod bench;
pub mod bench_abuse;
pub mod bench_http;
mod client;
mod cron_cmd;
mod human;
mod keys_cmd;
pub mod proc_mem;
pub mod progress;
mod runs_cmd;
mod secrets_cmd;
pub mod serve;
mod sessions_cmd;
mod tenants_cmd;
mod usage_cmd;

use clap::Parser;
use std::process::ExitCode;

/// Entry point of the `agentlane` binary.
pub fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentlane: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(args::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agentlane: {e:#}");
            ExitCode::FAILURE
        }
    }
}
