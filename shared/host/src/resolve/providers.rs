//! Providers and their auth profiles: the file's `[providers.*]` tables, then the well-known
//! environment variables (`OPENAI_*`, `ANTHROPIC_*`) merged into the provider of that name.

use super::Ctx;
use crate::error::ConfigError;
use crate::file::{ProfileEntry, ProviderEntry};
use crate::secret::Secret;
use crate::settings::{AuthProfile, ProviderKind, ProviderSettings, is_self_hosted};
use std::collections::BTreeMap;
use std::time::Duration;

/// A provider configured by environment variables: its name and the variables' prefix.
const ENV_PROVIDERS: [(&str, ProviderKind, &str); 2] = [
    ("openai", ProviderKind::OpenAi, "OPENAI"),
    ("anthropic", ProviderKind::Anthropic, "ANTHROPIC"),
];

/// A provider while merging; `self_hosted` is decided once the base URL is final.
struct Draft {
    settings: ProviderSettings,
    explicit_self_hosted: Option<bool>,
}

/// Every configured provider: the file's (by name), then env-only ones.
pub(super) fn resolve(
    ctx: &Ctx<'_>,
    file: &BTreeMap<String, ProviderEntry>,
) -> Result<Vec<ProviderSettings>, ConfigError> {
    let mut drafts = file
        .iter()
        .map(|(name, entry)| from_file(ctx, name, entry))
        .collect::<Result<Vec<_>, _>>()?;
    for (name, kind, prefix) in ENV_PROVIDERS {
        merge_env(ctx, &mut drafts, name, kind, prefix)?;
    }
    Ok(drafts
        .into_iter()
        .map(|mut d| {
            d.settings.self_hosted = d
                .explicit_self_hosted
                .unwrap_or_else(|| d.settings.base_url.as_deref().is_some_and(is_self_hosted));
            d.settings
        })
        .collect())
}

fn from_file(ctx: &Ctx<'_>, name: &str, entry: &ProviderEntry) -> Result<Draft, ConfigError> {
    let key = format!("providers.{name}");
    if name.is_empty() || name.contains('/') || name.chars().any(char::is_whitespace) {
        return Err(ctx.invalid(
            key,
            "a provider name must be non-empty, without `/` or spaces",
        ));
    }
    if name == "demo" {
        return Err(ctx.invalid(key, "`demo` is the built-in demo model's provider"));
    }
    let kind = match (entry.kind, name) {
        (Some(kind), _) => kind,
        (None, "openai") => ProviderKind::OpenAi,
        (None, "anthropic") => ProviderKind::Anthropic,
        (None, _) => {
            return Err(ctx.invalid(
                format!("{key}.kind"),
                "missing: set kind = \"openai\" (any OpenAI-compatible server) or \"anthropic\"",
            ));
        }
    };
    let mut profiles: Vec<AuthProfile> = Vec::with_capacity(entry.profiles.len());
    for (i, p) in entry.profiles.iter().enumerate() {
        let profile = file_profile(ctx, name, i, p)?;
        if profiles.iter().any(|q| q.name == profile.name) {
            return Err(ctx.invalid(
                format!("{key}.profiles"),
                format!("two profiles are named {:?}", profile.name),
            ));
        }
        profiles.push(profile);
    }
    Ok(Draft {
        settings: ProviderSettings {
            kind,
            name: name.to_owned(),
            base_url: entry.base_url.clone(),
            profiles,
            self_hosted: false,
            timeout: entry
                .timeout_seconds
                .filter(|s| *s > 0)
                .map(Duration::from_secs),
        },
        explicit_self_hosted: entry.self_hosted,
    })
}

fn file_profile(
    ctx: &Ctx<'_>,
    provider: &str,
    index: usize,
    entry: &ProfileEntry,
) -> Result<AuthProfile, ConfigError> {
    let name = entry
        .name
        .clone()
        .unwrap_or_else(|| format!("{provider}#{}", index + 1));
    let key = format!("providers.{provider}.profiles[{index}]");
    if name.trim().is_empty() {
        return Err(ctx.invalid(format!("{key}.name"), "must not be empty"));
    }
    let api_key = match (&entry.api_key_env, &entry.api_key) {
        (Some(var), None) => {
            ctx.env
                .get(var)
                .map(Secret::new)
                .ok_or_else(|| ConfigError::UnsetKeyEnv {
                    file: ctx.file.to_owned(),
                    provider: provider.to_owned(),
                    profile: name.clone(),
                    var: var.clone(),
                })?
        }
        (None, Some(key)) if !key.expose().trim().is_empty() => key.clone(),
        (None, Some(_)) => return Err(ctx.invalid(format!("{key}.api_key"), "is empty")),
        (Some(_), Some(_)) => {
            return Err(ctx.invalid(key, "set api_key_env or api_key, not both"));
        }
        (None, None) => return Err(ctx.invalid(key, "needs api_key_env (or api_key)")),
    };
    Ok(AuthProfile { name, api_key })
}

/// `{PREFIX}_BASE_URL` replaces the provider's base URL; `{PREFIX}_API_KEY` and the
/// comma-separated `{PREFIX}_API_KEYS` are appended as profiles unless a profile already holds
/// that key. Creates the provider when the file does not define it.
fn merge_env(
    ctx: &Ctx<'_>,
    drafts: &mut Vec<Draft>,
    name: &str,
    kind: ProviderKind,
    prefix: &str,
) -> Result<(), ConfigError> {
    let base_url = ctx.env.get(&format!("{prefix}_BASE_URL"));
    let mut keys: Vec<String> = ctx
        .env
        .get(&format!("{prefix}_API_KEY"))
        .into_iter()
        .collect();
    keys.extend(
        ctx.env
            .list(&format!("{prefix}_API_KEYS"))
            .unwrap_or_default(),
    );
    if base_url.is_none() && keys.is_empty() {
        return Ok(());
    }
    let index = drafts
        .iter()
        .position(|d| d.settings.name == name)
        .unwrap_or_else(|| {
            drafts.push(Draft {
                settings: ProviderSettings {
                    kind,
                    name: name.to_owned(),
                    base_url: None,
                    profiles: Vec::new(),
                    self_hosted: false,
                    timeout: None,
                },
                explicit_self_hosted: None,
            });
            drafts.len() - 1
        });
    let p = &mut drafts[index].settings;
    if p.kind != kind {
        return Err(ctx.invalid(
            format!("providers.{name}.kind"),
            format!("{prefix}_* variables are set, but this provider is not of kind {name:?}"),
        ));
    }
    if base_url.is_some() {
        p.base_url = base_url;
    }
    for key in keys {
        if p.profiles.iter().any(|q| q.api_key.expose() == key) {
            continue;
        }
        let name = free_name(&p.name, &p.profiles);
        p.profiles.push(AuthProfile {
            name,
            api_key: Secret::new(key),
        });
    }
    Ok(())
}

/// `<provider>#<n>` for the next profile, `n` its position unless that name is taken.
fn free_name(provider: &str, profiles: &[AuthProfile]) -> String {
    (profiles.len() + 1..)
        .map(|n| format!("{provider}#{n}"))
        .find(|candidate| profiles.iter().all(|p| &p.name != candidate))
        .unwrap_or_else(|| format!("{provider}#env"))
}
