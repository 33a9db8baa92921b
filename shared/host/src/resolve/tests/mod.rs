//! The merge of the config file and the environment, with an injected environment.

use crate::error::ConfigError;
use crate::secret::Secret;
use crate::settings::{
    ApiSettings, AuthProfile, DEMO_MODEL, ProviderKind, ProviderSettings, RunnerSettings, Settings,
    ToolSettings,
};
use std::collections::HashMap;
use std::time::Duration;

const EXAMPLE: &str = include_str!("../../../agentlane.example.toml");

/// An environment holding exactly `vars`.
fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

fn settings(toml: &str, vars: &[(&str, &str)]) -> Settings {
    Settings::from_sources(Some(toml), env(vars)).unwrap()
}

fn error(toml: Option<&str>, vars: &[(&str, &str)]) -> String {
    Settings::from_sources(toml, env(vars))
        .expect_err("the configuration must be refused")
        .to_string()
}

fn profile(name: &str, key: &str) -> AuthProfile {
    AuthProfile {
        name: name.to_owned(),
        api_key: Secret::new(key),
    }
}

fn provider<'a>(s: &'a Settings, name: &str) -> &'a ProviderSettings {
    s.models
        .providers
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("provider {name} missing"))
}

fn profile_names(p: &ProviderSettings) -> Vec<&str> {
    p.profiles.iter().map(|p| p.name.as_str()).collect()
}

const EXAMPLE_ENV: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-main"),
    ("OPENAI_API_KEY_BACKUP", "sk-backup"),
    ("ANTHROPIC_API_KEY", "ak-main"),
];

#[test]
fn the_shipped_example_parses_into_every_setting() {
    let s = settings(EXAMPLE, EXAMPLE_ENV);

    // the example's retentions: 90 days, 7 for acme
    let day = agentlane_core::store::DAY;
    let retention = s.api.limits.retention(day);
    assert_eq!(
        (
            retention.for_tenant(&agentlane_core::TenantId::new("beta")),
            retention.for_tenant(&agentlane_core::TenantId::new("acme"))
        ),
        (Some(day * 90), Some(day * 7))
    );

    // the example's webhook hook, with every key it shows
    assert_eq!(s.hooks.len(), 1, "{:?}", s.hooks);
    let hook = &s.hooks[0];
    assert_eq!(hook.name, "audit");
    assert_eq!(hook.url, "https://hooks.example.com/agentlane");
    assert_eq!(hook.priority, 10);
    assert_eq!(hook.timeout, Duration::from_millis(15_000));
    assert_eq!(hook.points.len(), 3);
    assert_eq!(
        hook.secret_header.as_ref().map(|(n, _)| n.as_str()),
        Some("X-Hook-Secret")
    );

    assert_eq!(
        s.models.providers,
        vec![
            ProviderSettings {
                kind: ProviderKind::Anthropic,
                name: "anthropic".into(),
                base_url: None,
                profiles: vec![profile("main", "ak-main")],
                self_hosted: false,
                timeout: None,
            },
            ProviderSettings {
                kind: ProviderKind::OpenAi,
                name: "local".into(),
                base_url: Some("http://127.0.0.1:11434/v1".into()),
                profiles: vec![],
                self_hosted: true,
                timeout: None,
            },
            ProviderSettings {
                kind: ProviderKind::OpenAi,
                name: "openai".into(),
                base_url: Some("https://api.openai.com/v1".into()),
                profiles: vec![profile("main", "sk-main"), profile("backup", "sk-backup")],
                self_hosted: false,
                timeout: Some(Duration::from_secs(600)),
            },
        ]
    );
    assert_eq!(s.models.default_model, "openai/gpt-4o-mini");
    assert_eq!(
        s.models.fallback_models,
        ["anthropic/claude-3-5-haiku-latest"]
    );
    assert_eq!(
        s.models.context_windows,
        [
            ("local/llama3.2".to_owned(), 8192),
            ("openai/gpt-4o-mini".to_owned(), 128_000)
        ]
    );
    assert!(!s.models.demo);
    assert_eq!(
        s.runner,
        RunnerSettings {
            lock_lease: Some(Duration::from_millis(30_000)),
            lock_acquire_timeout: Some(Duration::from_millis(60_000)),
            visibility_timeout: Some(Duration::from_millis(30_000)),
            receive_wait: Some(Duration::from_millis(1000)),
            model_idle_timeout: Some(Duration::from_millis(120_000)),
            retry_delay_scale: Some(1.0),
            max_tool_rounds: Some(64),
            system_prompt: Some("You are a helpful assistant. Answer concisely.".into()),
            bootstrap_context: Vec::new(),
            history_max_turns: None,
            max_failed_pickups: None,
            transcript_cache_mb: None,
            start_hold: Some(Duration::from_millis(200)),
            collect_window: Some(Duration::from_millis(500)),
            sequential_tools: Some(false),
            prices: std::collections::BTreeMap::from([
                (
                    "local/llama3.2".to_owned(),
                    agentlane_core::spend::Price::default()
                ),
                (
                    "openai/gpt-4o-mini".to_owned(),
                    agentlane_core::spend::Price {
                        input: 0.15,
                        output: 0.60,
                        cache_read: 0.075,
                        cache_write: 0.0,
                    }
                ),
            ]),
        }
    );
    assert_eq!(
        s.api,
        ApiSettings {
            max_message_bytes: Some(262_144),
            max_wait: Some(Duration::from_millis(900_000)),
            limits: agentlane_api::Limits {
                tenant: agentlane_api::limits::TenantLimits {
                    retention_days: Some(90),
                    ..Default::default()
                },
                tenants: [(
                    "acme".to_owned(),
                    agentlane_api::limits::TenantOverride {
                        retention_days: Some(7),
                        ..Default::default()
                    }
                )]
                .into(),
                ..agentlane_api::Limits::default()
            },
            default_queue_mode: Some(agentlane_core::QueueMode::Followup),
            metrics_key: None,
        }
    );
    assert_eq!(
        s.tools,
        ToolSettings {
            http_fetch_allow: vec!["127.0.0.1".into()],
            agent_env_allow: Default::default(),
        }
    );
}

#[test]
fn the_brief_design_with_an_inline_key_parses() {
    let s = settings(
        r#"
model = "openai/gpt-4o-mini"
[providers.openai]
kind = "openai"
[[providers.openai.profiles]]
name = "main"
api_key_env = "OPENAI_API_KEY"
[[providers.openai.profiles]]
name = "backup"
api_key = "sk-inline"
[[providers.openai.profiles]]
api_key = "sk-unnamed"
"#,
        &[("OPENAI_API_KEY", "sk-main")],
    );
    assert_eq!(
        provider(&s, "openai").profiles,
        [
            profile("main", "sk-main"),
            profile("backup", "sk-inline"),
            profile("openai#3", "sk-unnamed")
        ]
    );
}

#[test]
fn the_metrics_key_comes_from_the_environment_else_the_file_and_is_never_echoed() {
    let file = "[api]\nmetrics_key = \"from-the-file-0123456789\"\n";
    let key = |s: &Settings| s.api.metrics_key.clone().expect("a metrics key");
    assert!(key(&settings(file, &[])).accepts("from-the-file-0123456789"));
    let both = settings(
        file,
        &[("AGENTLANE_METRICS_KEY", "from-the-env-0123456789")],
    );
    assert!(key(&both).accepts("from-the-env-0123456789"));
    assert!(!key(&both).accepts("from-the-file-0123456789"));
    assert_eq!(settings("", &[]).api.metrics_key, None);
    for (toml, vars) in [
        (Some("[api]\nmetrics_key = \"short-secret\"\n"), vec![]),
        (None, vec![("AGENTLANE_METRICS_KEY", "short-secret")]),
    ] {
        let refused = error(toml, &vars);
        assert!(refused.contains("at least 16"), "{refused}");
        assert!(!refused.contains("short-secret"), "{refused}");
    }
}

#[test]
fn unknown_keys_are_errors_that_name_the_key_and_its_line() {
    let top = error(Some("modle = \"openai/gpt-4o\"\n"), &[]);
    assert!(top.contains("`modle`") && top.contains(":1:1:"), "{top}");

    let runner = error(Some("[runner]\nlock_leas_ms = 5\n"), &[]);
    assert!(
        runner.contains("`lock_leas_ms`") && runner.contains(":2:1:"),
        "{runner}"
    );

    let profile = error(
        Some("[providers.openai]\n[[providers.openai.profiles]]\napi_kye = \"sk-secret\"\n"),
        &[],
    );
    assert!(profile.contains("`api_kye`"), "{profile}");
    assert!(
        !profile.contains("sk-secret"),
        "a parse error must not echo the line holding a key: {profile}"
    );

    let model = error(Some("[models.\"openai/x\"]\ncontext_windw = 1\n"), &[]);
    assert!(model.contains("`context_windw`"), "{model}");
}

#[test]
fn environment_overrides_model_fallbacks_and_runner_values() {
    let s = settings(
        EXAMPLE,
        &[
            ("OPENAI_API_KEY", "sk-main"),
            ("OPENAI_API_KEY_BACKUP", "sk-backup"),
            ("ANTHROPIC_API_KEY", "ak-main"),
            ("AGENTLANE_MODEL", "local/llama3.2"),
            (
                "AGENTLANE_FALLBACK_MODELS",
                "openai/gpt-4o, anthropic/claude",
            ),
            ("AGENTLANE_LOCK_LEASE_MS", "2000"),
            ("AGENTLANE_RETRY_DELAY_SCALE", "0.01"),
            ("AGENTLANE_MAX_TOOL_ROUNDS", "3"),
            ("AGENTLANE_SYSTEM_PROMPT", "Be terse."),
            ("AGENTLANE_MAX_WAIT_MS", "25000"),
            ("AGENTLANE_CONTEXT_WINDOWS", "local/llama3.2=32768"),
            ("AGENTLANE_HTTP_FETCH_ALLOW", "10.0.0.0/8"),
        ],
    );
    assert_eq!(s.models.default_model, "local/llama3.2");
    assert_eq!(
        s.models.fallback_models,
        ["openai/gpt-4o", "anthropic/claude"]
    );
    assert_eq!(s.runner.lock_lease, Some(Duration::from_millis(2000)));
    assert_eq!(s.runner.retry_delay_scale, Some(0.01));
    assert_eq!(s.runner.max_tool_rounds, Some(3));
    assert_eq!(s.runner.system_prompt.as_deref(), Some("Be terse."));
    // Values the environment does not name stay as the file has them.
    assert_eq!(
        s.runner.lock_acquire_timeout,
        Some(Duration::from_millis(60_000))
    );
    assert_eq!(s.api.max_wait, Some(Duration::from_millis(25_000)));
    assert_eq!(s.api.max_message_bytes, Some(262_144));
    assert_eq!(
        s.models.context_windows,
        [
            ("local/llama3.2".to_owned(), 32_768),
            ("openai/gpt-4o-mini".to_owned(), 128_000)
        ]
    );
    assert_eq!(s.tools.http_fetch_allow, ["10.0.0.0/8"]);

    // The default model's provider is self-hosted, so the runner gets the longer idle timeout
    // unless one is configured; here the file configures 120 s for both.
    let config = s.runner_config();
    assert_eq!(config.model_idle_timeout, Duration::from_secs(120));
    assert_eq!(config.lock_lease, Duration::from_secs(2));
    assert_eq!(config.system_prompt, "Be terse.");
}

#[test]
fn load_with_reads_the_file_named_by_agentlane_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentlane.toml");
    std::fs::write(&path, "model = \"openai/gpt-4o\"\n[providers.openai]\n").unwrap();
    let path_str = path.to_str().unwrap();

    let s = Settings::load_with(env(&[("AGENTLANE_CONFIG", path_str)])).unwrap();
    assert_eq!(s.models.default_model, "openai/gpt-4o");
    assert_eq!(s.config_path.as_deref(), Some(path.as_path()));

    std::fs::write(&path, "[runner]\nbogus = 1\n").unwrap();
    let err = Settings::load_with(env(&[("AGENTLANE_CONFIG", path_str)]))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with(&format!("{path_str}:2:1:")), "{err}");

    let missing = dir.path().join("nope.toml");
    let err =
        Settings::load_with(env(&[("AGENTLANE_CONFIG", missing.to_str().unwrap())])).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.toml"), "{err}");

    let none = Settings::load_with(env(&[])).unwrap();
    assert_eq!(none.config_path, None);
}

mod providers;
mod runtime;
