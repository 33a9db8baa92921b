//! The merge of the config file and the environment, with an injected environment.

use crate::error::ConfigError;
use crate::secret::Secret;
use crate::settings::{
    ApiSettings, AuthProfile, DEMO_MODEL, ProviderKind, ProviderSettings, RunnerSettings, Settings,
    ToolSettings,
};
use std::collections::HashMap;
use std::time::Duration;

const EXAMPLE: &str = include_str!("../../agentlane.example.toml");

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
            collect_window: Some(Duration::from_millis(500)),
            sequential_tools: Some(false),
        }
    );
    assert_eq!(
        s.api,
        ApiSettings {
            max_message_bytes: Some(262_144),
            max_wait: Some(Duration::from_millis(900_000)),
            limits: agentlane_api::Limits::default(),
            default_queue_mode: Some(agentlane_core::QueueMode::Followup),
        }
    );
    assert_eq!(
        s.tools,
        ToolSettings {
            http_fetch_allow: vec!["127.0.0.1".into()]
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
fn environment_keys_join_the_file_profiles_once_each() {
    let toml = r#"
[providers.openai]
base_url = "https://api.openai.com/v1"
[[providers.openai.profiles]]
name = "main"
api_key_env = "OPENAI_API_KEY"
[[providers.openai.profiles]]
name = "backup"
api_key = "sk-backup"
"#;
    let s = settings(
        toml,
        &[
            ("OPENAI_API_KEY", "sk-main"),
            (
                "OPENAI_API_KEYS",
                "sk-main, sk-backup, sk-extra, sk-extra,sk-more",
            ),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9999/v1"),
        ],
    );
    let openai = provider(&s, "openai");
    assert_eq!(
        openai.profiles,
        [
            profile("main", "sk-main"),
            profile("backup", "sk-backup"),
            profile("openai#3", "sk-extra"),
            profile("openai#4", "sk-more"),
        ]
    );
    assert_eq!(openai.base_url.as_deref(), Some("http://127.0.0.1:9999/v1"));
    assert!(openai.self_hosted, "the env base URL is loopback");
    assert_eq!(s.models.providers.len(), 1);
}

#[test]
fn environment_alone_configures_the_well_known_providers() {
    let s = Settings::from_sources(
        None,
        env(&[
            ("OPENAI_API_KEY", "k1"),
            ("OPENAI_API_KEYS", "k1,k2"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:8080"),
        ]),
    )
    .unwrap();
    assert_eq!(
        profile_names(provider(&s, "openai")),
        ["openai#1", "openai#2"]
    );
    let anthropic = provider(&s, "anthropic");
    assert_eq!(anthropic.kind, ProviderKind::Anthropic);
    assert!(anthropic.profiles.is_empty() && anthropic.self_hosted);
    assert_eq!(s.models.default_model, "openai/gpt-4o-mini");
    assert!(!s.models.demo);
    assert_eq!(s.config_path, None);
}

#[test]
fn without_any_provider_the_demo_model_answers() {
    let s = Settings::from_sources(None, env(&[])).unwrap();
    assert!(s.models.demo);
    assert_eq!(s.models.default_model, DEMO_MODEL);
    assert_eq!(s.runner, RunnerSettings::default());

    let only_tuning = settings("[runner]\nmax_tool_rounds = 8\n", &[]);
    assert!(only_tuning.models.demo);
    assert_eq!(only_tuning.runner.max_tool_rounds, Some(8));
}

#[test]
fn an_unset_api_key_env_is_a_start_up_error_naming_the_variable() {
    let toml = r#"
[providers.openai]
[[providers.openai.profiles]]
name = "team"
api_key_env = "TEAM_OPENAI_KEY"
"#;
    let err = Settings::from_sources(Some(toml), env(&[("OPENAI_API_KEY", "sk-x")])).unwrap_err();
    assert!(
        matches!(&err, ConfigError::UnsetKeyEnv { var, profile, .. }
            if var == "TEAM_OPENAI_KEY" && profile == "team"),
        "{err:?}"
    );
    assert!(err.to_string().contains("TEAM_OPENAI_KEY"), "{err}");
    // Set but blank counts as unset.
    assert!(error(Some(toml), &[("TEAM_OPENAI_KEY", " ")]).contains("TEAM_OPENAI_KEY"));
}

#[test]
fn provider_kind_is_inferred_from_well_known_names_only() {
    let s = settings(
        "[providers.openai]\n[providers.anthropic]\n[providers.proxy]\nkind = \"anthropic\"\n",
        &[],
    );
    assert_eq!(provider(&s, "openai").kind, ProviderKind::OpenAi);
    assert_eq!(provider(&s, "anthropic").kind, ProviderKind::Anthropic);
    assert_eq!(provider(&s, "proxy").kind, ProviderKind::Anthropic);

    let missing = error(
        Some("[providers.local]\nbase_url = \"http://127.0.0.1:1/v1\"\n"),
        &[],
    );
    assert!(missing.contains("providers.local.kind"), "{missing}");

    let wrong = error(Some("[providers.local]\nkind = \"gemini\"\n"), &[]);
    assert!(
        wrong.contains("gemini") && wrong.contains("`openai`") && wrong.contains("`anthropic`"),
        "{wrong}"
    );

    let clash = error(
        Some("[providers.openai]\nkind = \"anthropic\"\n"),
        &[("OPENAI_API_KEY", "sk-x")],
    );
    assert!(clash.contains("providers.openai.kind"), "{clash}");
}

#[test]
fn debug_output_never_shows_a_key() {
    let s = settings(
        EXAMPLE,
        &[
            ("OPENAI_API_KEY", "sk-main-SECRET"),
            ("OPENAI_API_KEY_BACKUP", "sk-backup-SECRET"),
            ("ANTHROPIC_API_KEY", "ak-SECRET"),
            ("OPENAI_API_KEYS", "sk-env-SECRET"),
        ],
    );
    let debug = format!("{s:?} {s:#?}");
    assert!(!debug.contains("SECRET"), "{debug}");
    assert!(debug.contains("<redacted>"));
    assert!(debug.contains("backup"), "profile names stay visible");
}

#[test]
fn bad_values_name_their_source() {
    let env_err = error(None, &[("AGENTLANE_RETRY_DELAY_SCALE", "-1")]);
    assert!(
        env_err.starts_with("AGENTLANE_RETRY_DELAY_SCALE:"),
        "{env_err}"
    );

    let file_err = error(Some("[runner]\nretry_delay_scale = -1.0\n"), &[]);
    assert!(file_err.contains("runner.retry_delay_scale"), "{file_err}");

    let rounds = error(Some("[runner]\nmax_tool_rounds = 0\n"), &[]);
    assert!(rounds.contains("runner.max_tool_rounds"), "{rounds}");

    let model = error(Some("model = \"gpt-4o\"\n"), &[]);
    assert!(model.contains("model: must be provider/model"), "{model}");

    let env_model = error(None, &[("AGENTLANE_MODEL", "gpt-4o")]);
    assert!(env_model.starts_with("AGENTLANE_MODEL:"), "{env_model}");

    let lease = error(None, &[("AGENTLANE_LOCK_LEASE_MS", "soon")]);
    assert!(lease.starts_with("AGENTLANE_LOCK_LEASE_MS:"), "{lease}");

    let reserved = error(Some("[providers.demo]\nkind = \"openai\"\n"), &[]);
    assert!(reserved.contains("providers.demo"), "{reserved}");

    let both = error(
        Some(
            "[providers.openai]\n[[providers.openai.profiles]]\napi_key = \"k\"\napi_key_env = \"K\"\n",
        ),
        &[("K", "k")],
    );
    assert!(both.contains("providers.openai.profiles[0]"), "{both}");

    let twice = error(
        Some(
            "[providers.openai]\n[[providers.openai.profiles]]\nname = \"a\"\napi_key = \"k1\"\n\
             [[providers.openai.profiles]]\nname = \"a\"\napi_key = \"k2\"\n",
        ),
        &[],
    );
    assert!(twice.contains("two profiles are named \"a\""), "{twice}");
}

#[test]
fn only_custom_providers_need_an_explicit_model() {
    let toml = "[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n";
    let err = error(Some(toml), &[]);
    assert!(err.contains("no default model"), "{err}");
    let s = settings(toml, &[("AGENTLANE_MODEL", "local/qwen")]);
    assert_eq!(s.models.default_model, "local/qwen");
    assert!(s.models.self_hosted_default());
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

#[test]
fn bootstrap_files_are_read_relative_to_the_config_file_and_missing_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "Always answer in French.").unwrap();
    let config = dir.path().join("agentlane.toml");
    std::fs::write(
        &config,
        "[runner]\nbootstrap_files = [\"AGENTS.md\"]\nhistory_max_turns = 20\n",
    )
    .unwrap();
    let path = config.display().to_string();
    let s = Settings::load_with(|k| (k == "AGENTLANE_CONFIG").then(|| path.clone())).unwrap();
    assert_eq!(
        s.runner.bootstrap_context,
        vec![(
            "AGENTS.md".to_owned(),
            "Always answer in French.".to_owned()
        )]
    );
    assert_eq!(s.runner.history_max_turns, Some(20));
    let err = Settings::from_sources(None, |k| {
        (k == "AGENTLANE_BOOTSTRAP_FILES").then(|| "/nonexistent/CONTEXT.md".to_owned())
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("runner.bootstrap_files") && err.contains("CONTEXT.md"),
        "{err}"
    );
}

#[test]
fn webhook_hooks_are_read_from_the_file() {
    let s = settings(
        "[[hooks]]\nname = \"guard\"\nurl = \"https://hooks.example.test/guard\"\npoints = [\"before_tool_call\"]\npriority = 10\ntimeoutMs = 5000\n",
        &[],
    );
    assert_eq!(s.hooks.len(), 1);
    assert_eq!(s.hooks[0].name, "guard");
    assert_eq!(s.hooks[0].timeout, Duration::from_millis(5000));
    let bad = error(
        Some(
            "[[hooks]]\nname = \"x\"\nurl = \"https://h.test\"\npoints = [\"before_everything\"]\n",
        ),
        &[],
    );
    assert!(
        bad.contains("before_everything") || bad.contains("unknown"),
        "{bad}"
    );
}

#[test]
fn edge_limits_come_from_the_file_and_the_allowed_models_from_the_environment() {
    let toml = r#"
model = "openai/gpt-4o-mini"
fallback_models = ["openai/gpt-4o"]

[limits]
max_connections = 64
max_run_timeout_seconds = 3600
allowed_models = ["openai/gpt-4o-mini"]

[limits.tenant]
requests_per_second = 7
"#;
    let s = settings(toml, &[("OPENAI_API_KEY", "sk-main")]);
    let api = s.api_config(Duration::from_secs(25));
    assert_eq!(api.limits.max_connections, 64);
    assert_eq!(api.limits.max_run_timeout_seconds, 3600);
    assert_eq!(api.limits.allowed_models, ["openai/gpt-4o-mini"]);
    assert_eq!(api.limits.tenant.requests_per_second, 7);
    assert_eq!(
        api.configured_models,
        ["openai/gpt-4o-mini", "openai/gpt-4o"]
    );

    let s = settings(
        toml,
        &[
            ("OPENAI_API_KEY", "sk-main"),
            ("AGENTLANE_ALLOWED_MODELS", "openai/a, openai/b"),
        ],
    );
    assert_eq!(s.api.limits.allowed_models, ["openai/a", "openai/b"]);
    let bad = error(
        Some(toml),
        &[
            ("OPENAI_API_KEY", "sk-main"),
            ("AGENTLANE_ALLOWED_MODELS", "no-slash"),
        ],
    );
    assert!(bad.contains("AGENTLANE_ALLOWED_MODELS"), "{bad}");
    let unknown = error(Some("[limits]\nmax_sockets = 3\n"), &[]);
    assert!(unknown.contains("max_sockets"), "{unknown}");
}

#[test]
fn the_default_queue_mode_comes_from_the_file_or_the_environment() {
    use agentlane_core::QueueMode;
    let s = settings("[queue]\ndefault_mode = \"coalesce\"\n", &[]);
    assert_eq!(s.api.default_queue_mode, Some(QueueMode::Collect));
    assert_eq!(
        s.api_config(Duration::from_secs(25)).default_queue_mode,
        Some(QueueMode::Collect)
    );
    let s = settings(
        "[queue]\ndefault_mode = \"collect\"\n",
        &[("AGENTLANE_DEFAULT_QUEUE_MODE", "steer")],
    );
    assert_eq!(s.api.default_queue_mode, Some(QueueMode::Steer));
    assert_eq!(settings("", &[]).api.default_queue_mode, None);
    let s = settings("[queue]\ncollect_window_ms = 250\n", &[]);
    assert_eq!(s.runner_config().collect_window, Duration::from_millis(250));
    let s = settings("", &[("AGENTLANE_COLLECT_WINDOW_MS", "40")]);
    assert_eq!(s.runner_config().collect_window, Duration::from_millis(40));
    let file = error(Some("[queue]\ndefault_mode = \"sideways\"\n"), &[]);
    assert!(
        file.contains("queue.default_mode") && file.contains("sideways"),
        "{file}"
    );
    let env = error(None, &[("AGENTLANE_DEFAULT_QUEUE_MODE", "later")]);
    assert!(env.contains("AGENTLANE_DEFAULT_QUEUE_MODE"), "{env}");
}

#[test]
fn tool_execution_comes_from_the_file_or_the_environment_and_a_bad_value_is_named() {
    assert!(!settings("", &[]).runner_config().sequential_tools);
    let s = settings("[tools]\nexecution = \"sequential\"\n", &[]);
    assert!(s.runner_config().sequential_tools);
    let s = settings(
        "[tools]\nexecution = \"sequential\"\n",
        &[("AGENTLANE_TOOL_EXECUTION", "parallel")],
    );
    assert!(!s.runner_config().sequential_tools);
    let file = error(Some("[tools]\nexecution = \"sometimes\"\n"), &[]);
    assert!(
        file.contains("tools.execution") && file.contains("sometimes"),
        "{file}"
    );
    let env = error(None, &[("AGENTLANE_TOOL_EXECUTION", "both")]);
    assert!(env.contains("AGENTLANE_TOOL_EXECUTION"), "{env}");
}
