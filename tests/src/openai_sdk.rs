//! The official OpenAI SDKs as clients of the server under test: the Python SDK (`openai`,
//! pinned in `tools/openai-clients/requirements.txt`, in a venv under
//! `~/.cache/agentlane/openai-py` or `AGENTLANE_OPENAI_PY`) and the Node SDK (`openai`, pinned
//! in `tools/openai-clients/package.json`). Each runs one scenario of `client.py` /
//! `client.mjs` against a base URL and prints what the SDK returned as one JSON object.
//! `scripts/test` installs both; a missing one fails the test.

use crate::aimock::repo_root;
use crate::error::{HarnessError, HarnessResult, truncate};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// One of the two official SDKs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sdk {
    /// PyPI `openai`.
    Python,
    /// npm `openai`.
    Node,
}

/// Both SDKs, Python first.
pub const SDKS: [Sdk; 2] = [Sdk::Python, Sdk::Node];

impl Sdk {
    /// `python` or `node`.
    pub fn name(self) -> &'static str {
        match self {
            Sdk::Python => "python",
            Sdk::Node => "node",
        }
    }

    fn tools() -> PathBuf {
        repo_root().join("tools/openai-clients")
    }

    /// The interpreter and the client script; fails when the SDK is not installed.
    fn command(self) -> HarnessResult<Command> {
        let missing = |missing: String| HarnessError::SdkNotInstalled {
            sdk: self.name(),
            missing,
        };
        match self {
            Sdk::Python => {
                let python = python();
                if !python.is_file() {
                    return Err(missing(python.display().to_string()));
                }
                let mut command = Command::new(python);
                command.arg(Self::tools().join("client.py"));
                Ok(command)
            }
            Sdk::Node => {
                let package = Self::tools().join("node_modules/openai/package.json");
                if !package.is_file() {
                    return Err(missing(package.display().to_string()));
                }
                let mut command = Command::new("node");
                command.arg(Self::tools().join("client.mjs"));
                Ok(command)
            }
        }
    }

    /// Runs `scenario` with `args` against `base_url` (`http://127.0.0.1:PORT/v1`) as the
    /// holder of `api_key`, and returns what the client printed.
    pub async fn run(
        self,
        base_url: &str,
        api_key: &str,
        scenario: &str,
        args: Value,
    ) -> HarnessResult<Value> {
        let mut command = self.command()?;
        command
            .arg(scenario)
            .arg(args.to_string())
            .env("AGENTLANE_BASE_URL", base_url)
            .env("AGENTLANE_API_KEY", api_key)
            // Nothing from the developer's shell may change what the SDK talks to.
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        let sdk = self.name();
        let what = format!("the OpenAI {sdk} client");
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .map_err(|e| HarnessError::Protocol(format!("{what} did not run: {e}")))?
            .map_err(|source| HarnessError::Spawn {
                what: format!("the OpenAI {sdk} client"),
                source,
            })?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let failed = |status: String| HarnessError::Sdk {
            sdk,
            scenario: scenario.to_owned(),
            status,
            stderr: truncate(&String::from_utf8_lossy(&output.stderr), 6000),
            stdout: truncate(&stdout, 2000),
        };
        if !output.status.success() {
            return Err(failed(output.status.to_string()));
        }
        serde_json::from_str(stdout.trim()).map_err(|e| failed(format!("no JSON on stdout: {e}")))
    }
}

/// The Python of the SDK's venv.
fn python() -> PathBuf {
    if let Some(path) = std::env::var_os("AGENTLANE_OPENAI_PY") {
        return PathBuf::from(path).join("bin/python");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache/agentlane/openai-py/bin/python")
}
