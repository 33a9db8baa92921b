//! aimock (`@copilotkit/aimock`, pinned in `tools/aimock`) as a child process: a real
//! OpenAI-protocol server that answers from JSON fixtures and records every request it gets.

use crate::error::{HarnessError, HarnessResult, truncate};
use crate::pairing::{PairingViolation, check_pairing, openai_items};
use crate::plain_http;
use crate::process::{LogFiles, kill_and_reap, spawn_logged, wait_for_url};
use serde::Deserialize;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;
use tempfile::TempDir;

/// The repository root (this package lives in `<root>/tests`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// aimock's CLI script inside `tools/aimock/node_modules`.
pub fn aimock_cli() -> PathBuf {
    repo_root().join("tools/aimock/node_modules/@copilotkit/aimock/dist/cli.js")
}

/// The fixtures aimock starts with.
#[derive(Debug, Clone)]
pub enum Fixtures {
    /// A fixture file (`{"fixtures": [...]}`).
    File(PathBuf),
    /// Fixtures given inline, as `{"fixtures": [...]}` or a bare array.
    Inline(Value),
}

impl Fixtures {
    /// `tests/fixtures/scenarios.json`: the fixtures every scenario shares (see that file).
    pub fn scenarios() -> Self {
        Fixtures::File(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/scenarios.json"))
    }

    fn load(&self) -> HarnessResult<Vec<Value>> {
        let (what, value) = match self {
            Fixtures::File(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| HarnessError::io(format!("read {}", path.display()), e))?;
                let value = serde_json::from_str(&text)
                    .map_err(|e| HarnessError::decode(path.display().to_string(), &text, e))?;
                (path.display().to_string(), value)
            }
            Fixtures::Inline(value) => ("inline fixtures".to_owned(), value.clone()),
        };
        let list = match &value {
            Value::Array(list) => list.clone(),
            Value::Object(map) => match map.get("fixtures") {
                Some(Value::Array(list)) => list.clone(),
                _ => return Err(bad_fixtures(&what)),
            },
            _ => return Err(bad_fixtures(&what)),
        };
        Ok(list)
    }
}

fn bad_fixtures(what: &str) -> HarnessError {
    HarnessError::Control {
        request: "load fixtures".to_owned(),
        message: format!("{what} is neither {{\"fixtures\": [...]}} nor an array"),
    }
}

/// One request aimock received, as its journal records it.
#[derive(Debug, Clone, Deserialize)]
pub struct JournalEntry {
    /// HTTP method.
    pub method: String,
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Request headers (aimock redacts `authorization`).
    #[serde(default)]
    pub headers: serde_json::Map<String, Value>,
    /// The parsed request body.
    #[serde(default)]
    pub body: Value,
    /// What aimock answered.
    pub response: JournalResponse,
}

/// The answer recorded with a journal entry.
#[derive(Debug, Clone, Deserialize)]
pub struct JournalResponse {
    /// HTTP status sent (404 = no fixture matched).
    pub status: u16,
}

/// A chat-completions request the server under test sent to the model.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The request body as sent.
    pub body: Value,
    /// The status aimock answered with.
    pub status: u16,
}

impl ModelRequest {
    /// The `messages` array (empty if absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The `model` field.
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(Value::as_str)
    }

    /// The names of the tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The text of the last user message (string or text parts).
    pub fn last_user_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(message_text)
    }

    /// `(role, text)` of every message, for whole-history assertions.
    pub fn roles_and_texts(&self) -> Vec<(String, String)> {
        self.messages()
            .iter()
            .map(|m| {
                let role = m.get("role").and_then(Value::as_str).unwrap_or("?");
                (role.to_owned(), message_text(m).unwrap_or_default())
            })
            .collect()
    }

    /// Checks the tool-call pairing invariant on this request's history.
    pub fn check_pairing(&self) -> Result<(), PairingViolation> {
        check_pairing(&openai_items(self.messages())?)
    }
}

/// The text of a chat message whose content is a string or an array of text parts.
pub fn message_text(message: &Value) -> Option<String> {
    match message.get("content")? {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<String>(),
        ),
        _ => None,
    }
}

/// A running aimock. Dropping it checks the pairing invariant on every model request it
/// received (failing the test on a violation), then kills the process.
pub struct Aimock {
    child: Child,
    url: String,
    addr: SocketAddr,
    logs: LogFiles,
    /// The starting fixtures, in order (the catch-all is last).
    base: Vec<Value>,
    /// Fixtures added by the test; they take priority over `base`.
    added: Mutex<Vec<Value>>,
    _dir: TempDir,
}

impl Aimock {
    /// Starts `node <aimock>/dist/cli.js -p 0 -h 127.0.0.1 -f <fixtures>` and waits for its
    /// "listening on" line.
    pub fn start(fixtures: Fixtures) -> HarnessResult<Self> {
        let cli = aimock_cli();
        if !cli.is_file() {
            return Err(HarnessError::AimockNotInstalled { path: cli });
        }
        let base = fixtures.load()?;
        let dir = tempfile::Builder::new()
            .prefix("aimock-")
            .tempdir()
            .map_err(|e| HarnessError::io("create aimock temp dir", e))?;
        let file = dir.path().join("fixtures.json");
        std::fs::write(&file, json!({ "fixtures": base }).to_string())
            .map_err(|e| HarnessError::io(format!("write {}", file.display()), e))?;
        let logs = LogFiles::in_dir(dir.path(), "aimock");
        let mut command = Command::new("node");
        command
            .arg(&cli)
            .args(["-p", "0", "-h", "127.0.0.1", "--journal-max", "0", "-f"])
            .arg(&file);
        let mut child = spawn_logged(&mut command, &logs, "aimock (node)")?;
        let url = match wait_for_url(
            &mut child,
            &logs,
            "aimock server listening on ",
            Duration::from_secs(30),
            "aimock",
        ) {
            Ok(url) => url,
            Err(e) => {
                kill_and_reap(&mut child);
                return Err(e);
            }
        };
        let addr = match url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse::<SocketAddr>()
        {
            Ok(addr) => addr,
            Err(e) => {
                kill_and_reap(&mut child);
                return Err(HarnessError::Protocol(format!(
                    "aimock printed {url}, not http://IP:PORT: {e}"
                )));
            }
        };
        Ok(Aimock {
            child,
            url,
            addr,
            logs,
            base,
            added: Mutex::new(Vec::new()),
            _dir: dir,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The OpenAI base URL to give a client: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// Every request aimock received, oldest first.
    pub fn journal(&self) -> HarnessResult<Vec<JournalEntry>> {
        let (status, body) = plain_http::request(self.addr, "GET", "/__aimock/journal", None)?;
        if status != 200 {
            return Err(self.control_error("GET /__aimock/journal", status, &body));
        }
        serde_json::from_str(&body).map_err(|e| HarnessError::decode("aimock journal", &body, e))
    }

    /// The chat-completions requests among them: one per model call the server made.
    pub fn model_requests(&self) -> HarnessResult<Vec<ModelRequest>> {
        Ok(self
            .journal()?
            .into_iter()
            .filter(|e| e.method == "POST" && e.path.ends_with("/chat/completions"))
            .map(|e| ModelRequest {
                body: e.body,
                status: e.response.status,
            })
            .collect())
    }

    /// The model requests whose last user message contains `needle`.
    pub fn model_requests_for(&self, needle: &str) -> HarnessResult<Vec<ModelRequest>> {
        Ok(self
            .model_requests()?
            .into_iter()
            .filter(|r| r.last_user_text().is_some_and(|t| t.contains(needle)))
            .collect())
    }

    /// Adds fixtures that take priority over every fixture already there (so a test's own
    /// fixtures win over the shared ones and the catch-all stays last).
    pub fn add_fixtures(&self, fixtures: Vec<Value>) -> HarnessResult<()> {
        let mut added = self
            .added
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = fixtures;
        next.extend(added.iter().cloned());
        self.replace_fixtures(&next)?;
        *added = next;
        Ok(())
    }

    /// Back to the starting fixtures, and an empty journal.
    pub fn reset(&self) -> HarnessResult<()> {
        let mut added = self
            .added
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.replace_fixtures(&[])?;
        added.clear();
        self.reset_journal()
    }

    /// Forgets the recorded requests, keeping the fixtures.
    pub fn reset_journal(&self) -> HarnessResult<()> {
        let (status, body) =
            plain_http::request(self.addr, "POST", "/__aimock/reset/journal", Some("{}"))?;
        if status != 200 {
            return Err(self.control_error("POST /__aimock/reset/journal", status, &body));
        }
        Ok(())
    }

    /// Checks the pairing invariant on every model request received so far.
    pub fn check_every_request(&self) -> HarnessResult<()> {
        for (n, request) in self.model_requests()?.iter().enumerate() {
            if let Err(violation) = request.check_pairing() {
                return Err(HarnessError::Protocol(format!(
                    "model request #{n} breaks tool-call pairing: {violation}\nmessages: {}",
                    truncate(&Value::from(request.messages().to_vec()).to_string(), 4000)
                )));
            }
        }
        Ok(())
    }

    /// What aimock printed, for diagnostics.
    pub fn log_tail(&self) -> String {
        format!(
            "{}{}",
            self.logs.stdout_tail(3000),
            self.logs.stderr_tail(3000)
        )
    }

    /// The fixture list becomes `first` followed by the starting fixtures.
    fn replace_fixtures(&self, first: &[Value]) -> HarnessResult<()> {
        let (status, body) = plain_http::request(self.addr, "DELETE", "/__aimock/fixtures", None)?;
        if status != 200 {
            return Err(self.control_error("DELETE /__aimock/fixtures", status, &body));
        }
        let all: Vec<Value> = first.iter().chain(self.base.iter()).cloned().collect();
        let payload = json!({ "fixtures": all }).to_string();
        let (status, body) =
            plain_http::request(self.addr, "POST", "/__aimock/fixtures", Some(&payload))?;
        if status != 200 {
            return Err(self.control_error("POST /__aimock/fixtures", status, &body));
        }
        Ok(())
    }

    fn control_error(&self, request: &str, status: u16, body: &str) -> HarnessError {
        HarnessError::Control {
            request: request.to_owned(),
            message: format!("HTTP {status}: {}", truncate(body, 1000)),
        }
    }
}

impl Drop for Aimock {
    fn drop(&mut self) {
        let verdict = if std::thread::panicking() {
            Ok(())
        } else {
            self.check_every_request()
        };
        kill_and_reap(&mut self.child);
        if let Err(problem) = verdict {
            panic!("end-of-test check on every model request failed: {problem}");
        }
    }
}
