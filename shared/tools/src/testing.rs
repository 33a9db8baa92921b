//! Test helpers for this crate and others (feature `testing`): the pinned MCP reference server.
//!
//! ```ignore
//! // Cargo.toml: [dev-dependencies] agentlane-tools = { workspace = true, features = ["testing"] }
//! let server = agentlane_tools::testing::McpEverything::start().await.unwrap();
//! let config = server.config("everything"); // url http://127.0.0.1:<port>/mcp
//! let pool = agentlane_tools::mcp::McpPool::new(server.ssrf_policy()); // loopback allow-listed
//! ```

use crate::mcp::McpServerConfig;
use crate::ssrf::SsrfPolicy;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

/// Where the server is installed, relative to the repository root.
pub const MCP_EVERYTHING_DIR: &str = "tools/mcp-everything";
/// Its entry point, relative to [`MCP_EVERYTHING_DIR`].
pub const MCP_EVERYTHING_ENTRY: &str =
    "node_modules/@modelcontextprotocol/server-everything/dist/index.js";
/// What to run when it is missing.
pub const INSTALL_HINT: &str = "run `npm ci --prefix tools/mcp-everything` (needs Node.js >= 20)";

/// How long the server may take to listen.
const STARTUP: Duration = Duration::from_secs(20);

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `@modelcontextprotocol/server-everything` (pinned in `tools/mcp-everything`) in Streamable
/// HTTP mode on a free loopback port, endpoint `/mcp`. Killed when dropped.
pub struct McpEverything {
    child: Child,
    port: u16,
    output: Arc<Mutex<VecDeque<String>>>,
}

impl std::fmt::Debug for McpEverything {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpEverything")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// Keeps the last lines the server printed (for error messages) without letting a pipe fill.
fn drain(reader: impl AsyncRead + Unpin + Send + 'static, output: Arc<Mutex<VecDeque<String>>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut kept = output
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if kept.len() == 40 {
                kept.pop_front();
            }
            kept.push_back(line);
        }
    });
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("no free loopback port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

impl McpEverything {
    /// Starts it from this repository's `tools/mcp-everything`; fails (with [`INSTALL_HINT`])
    /// when node or the package is missing.
    pub async fn start() -> Result<Self, String> {
        Self::start_in(&repo_root()).await
    }

    /// Starts it from `<root>/tools/mcp-everything`.
    pub async fn start_in(root: &Path) -> Result<Self, String> {
        let entry = root.join(MCP_EVERYTHING_DIR).join(MCP_EVERYTHING_ENTRY);
        if !entry.is_file() {
            return Err(format!(
                "the MCP reference server is not installed ({} is missing): {INSTALL_HINT}",
                entry.display()
            ));
        }
        let mut last = String::new();
        // A port found free may be taken before node binds it: try a few.
        for _ in 0..3 {
            match Self::spawn(&entry).await {
                Ok(server) => return Ok(server),
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    async fn spawn(entry: &Path) -> Result<Self, String> {
        let port = free_port()?;
        let mut child = Command::new("node")
            .arg(entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("could not start node ({e}): {INSTALL_HINT}"))?;
        let output = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(stdout) = child.stdout.take() {
            drain(stdout, output.clone());
        }
        if let Some(stderr) = child.stderr.take() {
            drain(stderr, output.clone());
        }
        let mut server = Self {
            child,
            port,
            output,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    fn output(&self) -> String {
        let kept = self
            .output
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Until the port accepts connections (and the process is still there).
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "the MCP reference server exited ({status}) before listening: {}\n\
                     (if it is not installed: {INSTALL_HINT})",
                    self.output()
                ));
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the MCP reference server did not listen on port {} within {} s: {}",
                    self.port,
                    STARTUP.as_secs(),
                    self.output()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// A server entry named `name` for it.
    pub fn config(&self, name: &str) -> McpServerConfig {
        McpServerConfig::new(name, self.url())
    }

    /// An SSRF policy that admits it (127.0.0.1 allow-listed).
    pub fn ssrf_policy(&self) -> SsrfPolicy {
        SsrfPolicy {
            allow_hosts: vec!["127.0.0.1".to_owned()],
            ..SsrfPolicy::default()
        }
    }

    /// Stops it now (it is also killed on drop).
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
