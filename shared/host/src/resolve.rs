//! Merging the config file with the environment: the file first, then every environment
//! variable that is set replaces the single value it names. Pure: the environment comes in as a
//! lookup function, the file as text, so tests need neither the process environment nor disk.

mod providers;
#[cfg(test)]
mod tests;

use crate::error::ConfigError;
use crate::file::{ApiEntry, ConfigFile, RunnerEntry};
use crate::settings::{
    ApiSettings, DEMO_MODEL, ModelSettings, ProviderKind, RunnerSettings, Settings, ToolSettings,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// The variable naming the config file.
pub const CONFIG_ENV: &str = "AGENTLANE_CONFIG";

/// How errors about the file name it when no path is known.
const FILE_LABEL: &str = "config file";

impl Settings {
    /// Settings from `env` and the config file `env("AGENTLANE_CONFIG")` names, if any.
    pub fn load_with(env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env(&env);
        let Some(path) = env.get(CONFIG_ENV).map(PathBuf::from) else {
            return resolve(FILE_LABEL, None, env, None);
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let label = path.display().to_string();
        resolve(&label, Some(&text), env, Some(path))
    }

    /// Settings from the TOML text of a config file (`None`: no file) and `env`.
    pub fn from_sources(
        toml: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        resolve(FILE_LABEL, toml, Env(&env), None)
    }
}

fn resolve(
    label: &str,
    toml: Option<&str>,
    env: Env<'_>,
    config_path: Option<PathBuf>,
) -> Result<Settings, ConfigError> {
    let file = match toml {
        Some(text) => ConfigFile::parse(label, text)?,
        None => ConfigFile::default(),
    };
    let config_dir = config_path
        .as_ref()
        .and_then(|p| p.parent().map(PathBuf::from));
    let ctx = Ctx {
        file: label,
        env,
        config_dir,
    };
    let models = ctx.models(&file)?;
    let agent_env_allow = ctx.agent_env_allow(&file, &models)?;
    Ok(Settings {
        config_path,
        models,
        runner: RunnerSettings {
            collect_window: ctx
                .env
                .ms("AGENTLANE_COLLECT_WINDOW_MS")?
                .or(file.queue.collect_window_ms.map(Duration::from_millis)),
            sequential_tools: ctx.sequential_tools(&file.tools)?,
            prices: ctx.prices(&file.prices)?,
            ..ctx.runner(&file.runner)?
        },
        api: ctx.api(&file.api, &file.limits, &file.queue)?,
        tools: ToolSettings {
            http_fetch_allow: env
                .list("AGENTLANE_HTTP_FETCH_ALLOW")
                .or(file.tools.http_fetch_allow)
                .unwrap_or_default(),
            agent_env_allow,
        },
        hooks: file.hooks,
    })
}

/// The environment: unset and blank variables read as `None`.
#[derive(Clone, Copy)]
struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Env<'_> {
    fn get(self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// A comma-separated list, blanks dropped.
    fn list(self, name: &str) -> Option<Vec<String>> {
        self.get(name).map(|v| {
            v.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        })
    }

    fn ms(self, name: &str) -> Result<Option<Duration>, ConfigError> {
        self.get(name)
            .map(|v| {
                v.trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| ConfigError::Env {
                        var: name.to_owned(),
                        message: format!("must be a number of milliseconds, got {v:?}"),
                    })
            })
            .transpose()
    }
}

/// Where values come from, for error messages.
struct Ctx<'a> {
    file: &'a str,
    env: Env<'a>,
    /// The config file's folder: relative bootstrap files are read from there.
    config_dir: Option<PathBuf>,
}

impl Ctx<'_> {
    /// The variables granted to tenants' agents; a grant of the server's own (cloud
    /// credentials, agentlane settings, the configured providers' key variables) stops start-up.
    fn agent_env_allow(
        &self,
        file: &ConfigFile,
        models: &ModelSettings,
    ) -> Result<agentlane_core::EnvGrants, ConfigError> {
        let mut provider_vars = Vec::new();
        for provider in &models.providers {
            let base = provider.name.to_ascii_uppercase().replace('-', "_");
            provider_vars.push(format!("{base}_API_KEY"));
            provider_vars.push(format!("{base}_API_KEYS"));
        }
        for entry in file.providers.values() {
            provider_vars.extend(entry.profiles.iter().filter_map(|p| p.api_key_env.clone()));
        }
        const VAR: &str = "AGENTLANE_AGENT_ENV_ALLOW";
        match self.env.list(VAR) {
            Some(names) => agentlane_core::EnvGrants::new(names, &provider_vars)
                .map_err(|why| Self::env_error(VAR, why)),
            None => agentlane_core::EnvGrants::new(
                file.agents.env_allow.clone().unwrap_or_default(),
                &provider_vars,
            )
            .map_err(|why| self.invalid("agents.env_allow", why)),
        }
    }

    fn invalid(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.to_owned(),
            key: key.into(),
            message: message.into(),
        }
    }

    fn env_error(var: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Env {
            var: var.to_owned(),
            message: message.into(),
        }
    }

    /// The environment's value of `var` when set, else the file's value at `key`; either must
    /// parse and pass `ok`, or the error names where the bad value came from.
    fn checked<T: FromStr + Copy>(
        &self,
        (var, key): (&str, &str),
        file: Option<T>,
        what: &str,
        ok: impl Fn(&T) -> bool,
    ) -> Result<Option<T>, ConfigError> {
        if let Some(v) = self.env.get(var) {
            return match v.trim().parse::<T>() {
                Ok(x) if ok(&x) => Ok(Some(x)),
                _ => Err(Self::env_error(var, format!("must be {what}, got {v:?}"))),
            };
        }
        match file {
            Some(x) if !ok(&x) => Err(self.invalid(key, format!("must be {what}"))),
            other => Ok(other),
        }
    }

    fn models(&self, file: &ConfigFile) -> Result<ModelSettings, ConfigError> {
        let providers = providers::resolve(self, &file.providers)?;
        let demo = providers.is_empty();

        let default_model = match (self.env.get("AGENTLANE_MODEL"), &file.model) {
            (Some(m), _) => check_model(&m).map_err(|e| Self::env_error("AGENTLANE_MODEL", e))?,
            (None, Some(m)) => check_model(m).map_err(|e| self.invalid("model", e))?,
            (None, None) => default_model(&providers).ok_or_else(|| {
                self.invalid(
                    "model",
                    "no default model: set `model` in the config file or AGENTLANE_MODEL",
                )
            })?,
        };

        let fallback_models = match self.env.list("AGENTLANE_FALLBACK_MODELS") {
            Some(list) => list
                .iter()
                .map(|m| check_model(m))
                .collect::<Result<_, _>>()
                .map_err(|e| Self::env_error("AGENTLANE_FALLBACK_MODELS", e))?,
            None => file
                .fallback_models
                .iter()
                .flatten()
                .map(|m| check_model(m))
                .collect::<Result<_, _>>()
                .map_err(|e| self.invalid("fallback_models", e))?,
        };

        let mut windows = BTreeMap::new();
        for (model, entry) in &file.models {
            check_model(model).map_err(|e| self.invalid(format!("models.{model:?}"), e))?;
            windows.insert(model.clone(), entry.context_window);
        }
        for (model, tokens) in self.env_context_windows()? {
            windows.insert(model, tokens);
        }

        Ok(ModelSettings {
            providers,
            default_model,
            fallback_models,
            context_windows: windows.into_iter().collect(),
            demo,
            demo_chunk_delay: self
                .env
                .ms("AGENTLANE_DEMO_DELAY_MS")?
                .unwrap_or(Duration::from_millis(30)),
            key_refresh: None,
        })
    }

    /// `AGENTLANE_CONTEXT_WINDOWS`: `provider/model=tokens` pairs.
    fn env_context_windows(&self) -> Result<Vec<(String, u64)>, ConfigError> {
        const VAR: &str = "AGENTLANE_CONTEXT_WINDOWS";
        let mut out = Vec::new();
        for pair in self.env.list(VAR).unwrap_or_default() {
            let (model, tokens) = pair
                .split_once('=')
                .ok_or_else(|| Self::env_error(VAR, "entries are provider/model=tokens"))?;
            let model = check_model(model.trim()).map_err(|e| Self::env_error(VAR, e))?;
            let tokens = tokens
                .trim()
                .parse::<u64>()
                .map_err(|_| Self::env_error(VAR, format!("{tokens:?} is not a number")))?;
            out.push((model, tokens));
        }
        Ok(out)
    }

    /// `[prices]`, each price checked.
    fn prices(
        &self,
        prices: &BTreeMap<String, agentlane_core::spend::Price>,
    ) -> Result<BTreeMap<String, agentlane_core::spend::Price>, ConfigError> {
        for (model, price) in prices {
            if let Some(message) = price.problem() {
                return Err(ConfigError::Invalid {
                    file: self.file.to_owned(),
                    key: format!("prices.\"{model}\""),
                    message,
                });
            }
            if !model.contains('/') {
                return Err(ConfigError::Invalid {
                    file: self.file.to_owned(),
                    key: format!("prices.\"{model}\""),
                    message: "prices are keyed by provider/model".to_owned(),
                });
            }
        }
        Ok(prices.clone())
    }

    fn runner(&self, file: &RunnerEntry) -> Result<RunnerSettings, ConfigError> {
        let ms = |var: &str, value: Option<u64>| -> Result<Option<Duration>, ConfigError> {
            Ok(self.env.ms(var)?.or(value.map(Duration::from_millis)))
        };
        let retry_delay_scale = self.checked(
            ("AGENTLANE_RETRY_DELAY_SCALE", "runner.retry_delay_scale"),
            file.retry_delay_scale,
            "a number >= 0",
            |s: &f64| s.is_finite() && *s >= 0.0,
        )?;
        let max_tool_rounds = self.checked(
            ("AGENTLANE_MAX_TOOL_ROUNDS", "runner.max_tool_rounds"),
            file.max_tool_rounds,
            "a whole number >= 1",
            |n: &u32| *n >= 1,
        )?;
        Ok(RunnerSettings {
            lock_lease: ms("AGENTLANE_LOCK_LEASE_MS", file.lock_lease_ms)?,
            lock_acquire_timeout: ms(
                "AGENTLANE_LOCK_ACQUIRE_TIMEOUT_MS",
                file.lock_acquire_timeout_ms,
            )?,
            visibility_timeout: ms(
                "AGENTLANE_VISIBILITY_TIMEOUT_MS",
                file.visibility_timeout_ms,
            )?,
            receive_wait: ms("AGENTLANE_RECEIVE_WAIT_MS", file.receive_wait_ms)?,
            start_hold: ms("AGENTLANE_START_HOLD_MS", file.start_hold_ms)?,
            model_idle_timeout: ms(
                "AGENTLANE_MODEL_IDLE_TIMEOUT_MS",
                file.model_idle_timeout_ms,
            )?,
            retry_delay_scale,
            max_tool_rounds,
            system_prompt: self
                .env
                .get("AGENTLANE_SYSTEM_PROMPT")
                .or_else(|| file.system_prompt.clone()),
            bootstrap_context: self.bootstrap_context(file)?,
            history_max_turns: self.checked(
                ("AGENTLANE_HISTORY_MAX_TURNS", "runner.history_max_turns"),
                file.history_max_turns,
                "a whole number >= 1",
                |n: &u32| *n >= 1,
            )?,
            max_failed_pickups: self.checked(
                ("AGENTLANE_MAX_FAILED_PICKUPS", "runner.max_failed_pickups"),
                file.max_failed_pickups,
                "a whole number",
                |_: &u32| true,
            )?,
            transcript_cache_mb: self.checked(
                (
                    "AGENTLANE_TRANSCRIPT_CACHE_MB",
                    "runner.transcript_cache_mb",
                ),
                file.transcript_cache_mb,
                "a whole number of MiB",
                |_: &u32| true,
            )?,
            // From `[queue]` and `[tools]`: set by the caller.
            collect_window: None,
            sequential_tools: None,
            prices: BTreeMap::new(),
        })
    }

    /// `AGENTLANE_BOOTSTRAP_FILES` (comma-separated) or `runner.bootstrap_files`, read now;
    /// relative paths are relative to the config file's folder (else the working directory).
    /// Each file is cut to 20 000 characters.
    fn bootstrap_context(&self, file: &RunnerEntry) -> Result<Vec<(String, String)>, ConfigError> {
        const MAX_CHARS: usize = 20_000;
        let paths: Vec<String> = match self.env.get("AGENTLANE_BOOTSTRAP_FILES") {
            Some(list) => list
                .split(',')
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
                .collect(),
            None => file.bootstrap_files.clone().unwrap_or_default(),
        };
        let base = self
            .config_dir
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from("."));
        paths
            .into_iter()
            .map(|p| {
                let full = base.join(&p);
                let text = std::fs::read_to_string(&full).map_err(|e| {
                    self.invalid(
                        "runner.bootstrap_files",
                        format!("cannot read {}: {e}", full.display()),
                    )
                })?;
                Ok((p, text.chars().take(MAX_CHARS).collect()))
            })
            .collect()
    }

    fn api(
        &self,
        file: &ApiEntry,
        limits: &agentlane_api::Limits,
        queue: &crate::file::QueueEntry,
    ) -> Result<ApiSettings, ConfigError> {
        let max_message_bytes = self.checked(
            ("AGENTLANE_MAX_MESSAGE_BYTES", "api.max_message_bytes"),
            file.max_message_bytes,
            "a number of bytes >= 1",
            |n: &usize| *n >= 1,
        )?;
        let mut limits = limits.clone();
        if let Some(message) = limits.budget_problem() {
            return Err(ConfigError::Invalid {
                file: self.file.to_owned(),
                key: "limits.tenant".to_owned(),
                message,
            });
        }
        if let Some(message) = limits.retention_problem() {
            return Err(ConfigError::Invalid {
                file: self.file.to_owned(),
                key: "limits.retention_days".to_owned(),
                message,
            });
        }
        if let Some(models) = self.env.list("AGENTLANE_ALLOWED_MODELS") {
            limits.allowed_models = models
                .iter()
                .map(|m| check_model(m))
                .collect::<Result<_, _>>()
                .map_err(|e| Self::env_error("AGENTLANE_ALLOWED_MODELS", e))?;
        }
        Ok(ApiSettings {
            max_message_bytes,
            max_wait: self
                .env
                .ms("AGENTLANE_MAX_WAIT_MS")?
                .or(file.max_wait_ms.map(Duration::from_millis)),
            limits,
            default_queue_mode: self.default_queue_mode(queue)?,
            metrics_key: self.metrics_key(file)?,
        })
    }

    /// `AGENTLANE_METRICS_KEY`, else `[api] metrics_key`.
    fn metrics_key(
        &self,
        file: &ApiEntry,
    ) -> Result<Option<agentlane_api::OperatorKey>, ConfigError> {
        if let Some(key) = self.env.get("AGENTLANE_METRICS_KEY") {
            return agentlane_api::OperatorKey::new(key.trim())
                .map(Some)
                .map_err(|e| Self::env_error("AGENTLANE_METRICS_KEY", e));
        }
        file.metrics_key
            .as_deref()
            .map(|key| {
                agentlane_api::OperatorKey::new(key.trim())
                    .map_err(|message| self.invalid("api.metrics_key", message))
            })
            .transpose()
    }

    /// `AGENTLANE_DEFAULT_QUEUE_MODE`, else `[queue] default_mode`: a mode name or alias.
    fn default_queue_mode(
        &self,
        queue: &crate::file::QueueEntry,
    ) -> Result<Option<agentlane_core::QueueMode>, ConfigError> {
        const EXPECTED: &str = "followup, collect, steer or interrupt (or an OpenClaw alias)";
        if let Some(name) = self.env.get("AGENTLANE_DEFAULT_QUEUE_MODE") {
            return agentlane_core::QueueMode::parse(&name)
                .map(Some)
                .ok_or_else(|| {
                    Self::env_error(
                        "AGENTLANE_DEFAULT_QUEUE_MODE",
                        format!("expected {EXPECTED}, got {name:?}"),
                    )
                });
        }
        queue
            .default_mode
            .as_deref()
            .map(|name| {
                agentlane_core::QueueMode::parse(name).ok_or_else(|| {
                    self.invalid(
                        "queue.default_mode",
                        format!("expected {EXPECTED}, got {name:?}"),
                    )
                })
            })
            .transpose()
    }

    /// `AGENTLANE_TOOL_EXECUTION`, else `[tools] execution`: `parallel` or `sequential`.
    fn sequential_tools(
        &self,
        tools: &crate::file::ToolsEntry,
    ) -> Result<Option<bool>, ConfigError> {
        fn parse(name: &str) -> Result<bool, String> {
            match name.trim().to_ascii_lowercase().as_str() {
                "sequential" => Ok(true),
                "parallel" => Ok(false),
                _ => Err(format!("expected parallel or sequential, got {name:?}")),
            }
        }
        if let Some(name) = self.env.get("AGENTLANE_TOOL_EXECUTION") {
            return parse(&name)
                .map(Some)
                .map_err(|e| Self::env_error("AGENTLANE_TOOL_EXECUTION", e));
        }
        tools
            .execution
            .as_deref()
            .map(|name| parse(name).map_err(|e| self.invalid("tools.execution", e)))
            .transpose()
    }
}

/// `provider/model` with both parts non-empty; the message says what is wrong.
fn check_model(name: &str) -> Result<String, String> {
    match name.split_once('/') {
        Some((p, m)) if !p.is_empty() && !m.is_empty() => Ok(name.to_owned()),
        _ => Err(format!("must be provider/model, got {name:?}")),
    }
}

/// The default model when none is configured: the demo model without providers, a small model
/// of the well-known provider otherwise; `None` when only custom providers are configured.
fn default_model(providers: &[crate::ProviderSettings]) -> Option<String> {
    if providers.is_empty() {
        return Some(DEMO_MODEL.to_owned());
    }
    let has =
        |name: &str, kind: ProviderKind| providers.iter().any(|p| p.name == name && p.kind == kind);
    if has("openai", ProviderKind::OpenAi) {
        Some("openai/gpt-4o-mini".to_owned())
    } else if has("anthropic", ProviderKind::Anthropic) {
        Some("anthropic/claude-3-5-haiku-latest".to_owned())
    } else {
        None
    }
}
