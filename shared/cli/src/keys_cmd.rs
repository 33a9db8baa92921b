//! `agentlane keys create|list|revoke --tenant T`: store-backed API keys, managed directly on
//! the backend `serve` and the functions use (the embedded database under `--data-dir` by
//! default, DynamoDB with `AGENTLANE_BACKEND=aws` and the AWS settings). `create` prints the
//! key once; nothing else ever prints it, and only its SHA-256 is stored.

use agentlane_core::Clock;
use agentlane_core::api_key::{MAX_LABEL_LEN, NewApiKey, is_key_id};
use agentlane_core::validate::validate_tenant;
use agentlane_core::{KeyStore, SystemClock, TenantId};
use agentlane_host::{self as host, BackendKind};
use anyhow::bail;
use clap::{Args, Subcommand};
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;

/// `agentlane keys …`.
#[derive(Args, Debug)]
pub(crate) struct KeysArgs {
    /// The tenant whose keys to manage.
    #[arg(long, global = true)]
    pub tenant: Option<String>,
    #[command(flatten)]
    pub store: crate::args::StoreArgs,
    #[command(subcommand)]
    pub command: KeysCommand,
}

/// The keys subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum KeysCommand {
    /// Create a key; prints it once (as `key`), with its id.
    Create {
        /// A note on who or what uses the key.
        #[arg(long)]
        label: Option<String>,
    },
    /// List the tenant's keys (ids, labels, times; never a key).
    List,
    /// Revoke a key by id: servers refuse it within their key cache TTL.
    Revoke {
        /// The key's id (32 hex digits, as `keys list` shows; never the key itself).
        key_id: String,
    },
}

async fn key_store(args: &KeysArgs) -> anyhow::Result<Arc<dyn KeyStore>> {
    Ok(match BackendKind::from_env()? {
        BackendKind::Embedded => host::open_embedded(&args.store.data_dir)?.keys,
        BackendKind::Aws => host::open_aws_keys().await?,
    })
}

/// Runs `agentlane keys …`.
pub(crate) async fn run(args: KeysArgs) -> anyhow::Result<ExitCode> {
    let Some(tenant) = args.tenant.as_deref() else {
        bail!("--tenant is required");
    };
    validate_tenant(tenant).map_err(anyhow::Error::msg)?;
    let tenant = TenantId::new(tenant);
    let store = key_store(&args).await?;
    let now = SystemClock.now_ms();
    match &args.command {
        KeysCommand::Create { label } => {
            if let Some(label) = label
                && label.len() > MAX_LABEL_LEN
            {
                bail!("--label is longer than {MAX_LABEL_LEN} bytes");
            }
            let new = NewApiKey::generate(tenant, label.clone(), now);
            store.create_key(&new.record).await?;
            let mut shown = serde_json::to_value(&new.record)?;
            shown["key"] = json!(new.key);
            println!("{}", serde_json::to_string_pretty(&shown)?);
            eprintln!("agentlane: this is the only time the key is shown; store it now");
            Ok(ExitCode::SUCCESS)
        }
        KeysCommand::List => {
            let keys = store.list_keys(&tenant).await?;
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({ "keys": keys }))?
            );
            Ok(ExitCode::SUCCESS)
        }
        KeysCommand::Revoke { key_id } => {
            if !is_key_id(key_id) {
                bail!("{key_id:?} is not a key id (32 hex digits, as `keys list` shows)");
            }
            if !store.revoke_key(&tenant, key_id, now).await? {
                eprintln!("agentlane: tenant {tenant} has no key {key_id}");
                return Ok(ExitCode::FAILURE);
            }
            let revoked_at = store
                .find_key(key_id)
                .await?
                .and_then(|k| k.revoked_at)
                .unwrap_or(now);
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({ "keyId": key_id, "revokedAt": revoked_at }))?
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
