//! Providers and their auth profiles: from the file, the environment, or both.

use super::*;

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
