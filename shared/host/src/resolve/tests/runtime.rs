//! What the runner and the edge read besides models: bootstrap files, hooks, limits, queue
//! modes, tool execution.

use super::*;

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
