//! A Python client generated from `docs/openapi.json` by openapi-python-client (pinned in
//! `tools/generated-client/requirements.txt`, in a venv under `~/.cache/agentlane/openapi-py`
//! or `AGENTLANE_OPENAPI_PY`; `scripts/test` installs it): it generates every operation without
//! a warning, and a user's first turn through it (submit, wait, run, events, transcript with
//! its typed messages) works against the real server.

use crate::support::{GREETING, scenario};
use agentlane_tests::TENANT_A;
use agentlane_tests::aimock::repo_root;
use std::path::PathBuf;
use std::process::Command;

fn venv() -> PathBuf {
    if let Some(path) = std::env::var_os("AGENTLANE_OPENAPI_PY") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache/agentlane/openapi-py")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_python_client_runs_a_turn_and_reads_typed_messages() -> anyhow::Result<()> {
    // GIVEN the pinned generator, and a client generated from the committed document
    let venv = venv();
    let generator = venv.join("bin/openapi-python-client");
    assert!(
        generator.is_file(),
        "{} is missing: run scripts/test (it installs tools/generated-client/requirements.txt)",
        generator.display()
    );
    let out = tempfile::tempdir()?;
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let generated = Command::new(&generator)
        .args(["generate", "--meta", "none", "--path"])
        .arg(repo_root().join("docs/openapi.json"))
        .arg("--output-path")
        .arg(out.path().join("agentlane_client"))
        .env("PATH", &path)
        .output()?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&generated.stdout),
        String::from_utf8_lossy(&generated.stderr)
    );
    assert!(generated.status.success(), "generation failed: {log}");
    assert!(
        !log.contains("WARNING") && !log.contains("will not be generated"),
        "the generator skipped part of the document: {log}"
    );

    // WHEN a user runs a first turn through it, on a session key holding `/`
    let scn = scenario()?;
    let run = Command::new(venv.join("bin/python"))
        .arg(repo_root().join("tools/generated-client/scenario.py"))
        .arg(scn.server.url())
        .arg(TENANT_A.key)
        .arg("py/gen/1")
        .env("PYTHONPATH", out.path())
        .output()?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "scenario.py failed: {stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let seen: serde_json::Value = serde_json::from_str(stdout.trim())?;

    // THEN it saw the run end ok, its events, and typed user and assistant messages
    assert_eq!(seen["waitStatus"], "ok", "{seen}");
    assert_eq!(seen["runStatus"], "ok", "{seen}");
    assert_eq!(seen["liveness"], "working", "{seen}");
    assert!(
        seen["eventStreams"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s == "lifecycle")),
        "{seen}"
    );
    assert_eq!(
        seen["messageClasses"],
        serde_json::json!(["UserMessage", "AssistantMessage"]),
        "{seen}"
    );
    assert_eq!(
        seen["texts"],
        serde_json::json!(["hello there", GREETING]),
        "{seen}"
    );
    Ok(())
}
