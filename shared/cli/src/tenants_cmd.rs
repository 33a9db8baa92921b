//! `agentlane tenants erase T --yes`: deletes every record of a tenant (sessions, runs, events,
//! transcripts, cron jobs, agents, spend, its API keys, ...) directly on the backend `serve`
//! and the functions use (the embedded database under `--data-dir` by default, DynamoDB with
//! `AGENTLANE_BACKEND=aws`), and reports what it removed.

use agentlane_core::validate::validate_tenant;
use agentlane_core::{TenantEraser, TenantErasure, TenantId};
use agentlane_host::{self as host, BackendKind};
use anyhow::bail;
use clap::{Args, Subcommand};
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;

/// `agentlane tenants …`.
#[derive(Args, Debug)]
pub(crate) struct TenantsArgs {
    #[command(flatten)]
    pub store: crate::args::StoreArgs,
    #[command(subcommand)]
    pub command: TenantsCommand,
}

/// The tenants subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum TenantsCommand {
    /// Delete every record of a tenant, its API keys included, and report what was removed.
    /// Cannot be undone.
    Erase {
        /// The tenant to erase.
        tenant: String,
        /// Confirms the erasure (nothing is deleted without it).
        #[arg(long)]
        yes: bool,
        /// Print the report as one JSON document.
        #[arg(long)]
        json: bool,
    },
}

async fn eraser(args: &TenantsArgs) -> anyhow::Result<Arc<dyn TenantEraser>> {
    Ok(match BackendKind::from_env()? {
        BackendKind::Embedded => Arc::new(host::open_embedded_backend(&args.store.data_dir)?.1),
        BackendKind::Aws => host::open_aws_eraser().await?,
    })
}

/// Runs `agentlane tenants …`.
pub(crate) async fn run(args: TenantsArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        TenantsCommand::Erase { tenant, yes, json } => {
            validate_tenant(tenant).map_err(anyhow::Error::msg)?;
            if !yes {
                bail!(
                    "erasing tenant {tenant} deletes all its sessions, runs, transcripts, cron \
                     jobs, agents and API keys for good; add --yes to confirm"
                );
            }
            let tenant = TenantId::new(tenant.as_str());
            let erasure = eraser(&args).await?.erase_tenant(&tenant).await?;
            if *json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report_json(&tenant, &erasure))?
                );
            } else {
                print!("{}", report_text(&tenant, &erasure));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The report as JSON: `{"tenant", "removed": {kind: count}, "total"}`.
fn report_json(tenant: &TenantId, erasure: &TenantErasure) -> serde_json::Value {
    json!({
        "tenant": tenant.as_str(),
        "removed": erasure.removed,
        "total": erasure.total(),
    })
}

/// The report for people: a line saying what happened, then one line per kind.
fn report_text(tenant: &TenantId, erasure: &TenantErasure) -> String {
    if erasure.removed.is_empty() {
        return format!("tenant {tenant}: nothing stored, nothing removed\n");
    }
    let width = erasure.removed.keys().map(String::len).max().unwrap_or(0);
    let mut text = format!(
        "tenant {tenant} erased: {} records removed\n",
        erasure.total()
    );
    for (kind, count) in &erasure.removed {
        text.push_str(&format!("  {kind:<width$}  {count:>8}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_lists_each_kind_removed_and_the_total() {
        let mut erasure = TenantErasure::default();
        erasure.add("runs", 3);
        erasure.add("apiKeys", 1);
        let tenant = TenantId::new("acme");
        assert_eq!(
            report_text(&tenant, &erasure),
            "tenant acme erased: 4 records removed\n  apiKeys         1\n  runs            3\n"
        );
        assert_eq!(
            report_json(&tenant, &erasure),
            json!({"tenant": "acme", "removed": {"apiKeys": 1, "runs": 3}, "total": 4})
        );
        assert_eq!(
            report_text(&tenant, &TenantErasure::default()),
            "tenant acme: nothing stored, nothing removed\n"
        );
    }
}
