//! The config file's auth profiles reach the model router under their configured names, in
//! order, so the runner's attempts record them.

use agentlane_host::{DEMO_MODEL, Settings, model_router};

#[test]
fn profiles_from_the_file_reach_the_router_in_order_with_their_names() {
    let toml = r#"
model = "openai/gpt-4o-mini"
[providers.openai]
base_url = "http://127.0.0.1:9/v1"
[[providers.openai.profiles]]
name = "main"
api_key_env = "TEAM_KEY"
[[providers.openai.profiles]]
name = "backup"
api_key = "sk-backup"
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
[models."openai/gpt-4o-mini"]
context_window = 64000
"#;
    let env = |name: &str| match name {
        "TEAM_KEY" => Some("sk-team".to_owned()),
        "OPENAI_API_KEYS" => Some("sk-team,sk-extra".to_owned()),
        _ => None,
    };
    let settings = Settings::from_sources(Some(toml), env).unwrap();
    let router = model_router(&settings.models).unwrap();

    let openai = router.resolve(None).unwrap();
    let names: Vec<&str> = openai.profiles.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["main", "backup", "openai#3"]);
    assert_eq!(openai.context_window, 64_000);

    let local = router.resolve(Some("local/llama3.2")).unwrap();
    let names: Vec<&str> = local.profiles.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["local#1"]);
    assert!(local.profiles[0].provider.self_hosted());

    // The demo model stays available next to real providers.
    assert!(router.resolve(Some(DEMO_MODEL)).is_ok());
}
