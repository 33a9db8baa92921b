//! The agentlane server under test as a child process (`agentlane serve`), on a data directory
//! of its own that survives restarts.

use crate::aimock::Aimock;
use crate::client::Client;
use crate::error::{HarnessError, HarnessResult};
use crate::process::{LogFiles, kill_and_reap, spawn_logged, wait_for_url};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;
use tempfile::TempDir;

/// A tenant and its API key, as configured through `AGENTLANE_API_KEYS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenant {
    /// Tenant name.
    pub name: &'static str,
    /// Its API key (≥ 16 characters).
    pub key: &'static str,
}

/// The first tenant every test server knows.
pub const TENANT_A: Tenant = Tenant {
    name: "tenant-a",
    key: "key-a-0123456789abcdef",
};

/// The second tenant, to check isolation.
pub const TENANT_B: Tenant = Tenant {
    name: "tenant-b",
    key: "key-b-fedcba9876543210",
};

/// The operator's key every test server reads `GET /metrics` with (`AGENTLANE_METRICS_KEY`).
pub const METRICS_KEY: &str = "metrics-0123456789abcdef";

/// The model every test server is configured with.
pub const MODEL: &str = "openai/gpt-4o-mini";

/// The provider key the server sends to the model server.
pub const OPENAI_TEST_KEY: &str = "test-key";

/// How long a server may take to print its ready line (a cold, busy 2-core box).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How to start the server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    binary: PathBuf,
    env: BTreeMap<String, String>,
    workers: Option<u32>,
    /// Another server's data directory (a sibling on the embedded backend).
    shared_data_dir: Option<PathBuf>,
    /// DynamoDB + SQS on the emulator whatever `AGENTLANE_E2E_BACKEND` says.
    force_aws: bool,
    /// Keep the server's default receive wait on AWS (see [`Self::deployed_receive_wait`]).
    deployed_receive_wait: bool,
}

impl ServerOptions {
    /// The server at `binary` (pass `env!("CARGO_BIN_EXE_agentlane-under-test")`), with
    /// [`TENANT_A`] and [`TENANT_B`] and [`MODEL`]. Call [`ServerOptions::model_server`] to
    /// point it at aimock.
    pub fn new(binary: impl Into<PathBuf>) -> Self {
        let mut env = BTreeMap::new();
        env.insert(
            "AGENTLANE_API_KEYS".to_owned(),
            format!(
                "{}:{},{}:{}",
                TENANT_A.name, TENANT_A.key, TENANT_B.name, TENANT_B.key
            ),
        );
        env.insert("AGENTLANE_MODEL".to_owned(), MODEL.to_owned());
        env.insert("AGENTLANE_METRICS_KEY".to_owned(), METRICS_KEY.to_owned());
        ServerOptions {
            binary: binary.into(),
            env,
            workers: None,
            shared_data_dir: None,
            force_aws: false,
            deployed_receive_wait: false,
        }
    }

    /// Runs this server on DynamoDB + SQS FIFO (the emulator) even when the suite runs on the
    /// embedded backend: for scenarios only AWS has (another process reading the same table).
    pub fn on_aws_backend(mut self) -> Self {
        self.force_aws = true;
        self
    }

    /// Sends model calls to `mock` (`OPENAI_BASE_URL`, `OPENAI_API_KEY`).
    pub fn model_server(self, mock: &Aimock) -> Self {
        self.env("OPENAI_BASE_URL", mock.base_url())
            .env("OPENAI_API_KEY", OPENAI_TEST_KEY)
    }

    /// Sets one environment variable (e.g. a timing knob such as `AGENTLANE_LOCK_LEASE_MS`).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Runs on DynamoDB + SQS FIFO on the emulator (a table and queue of its own) even when
    /// `AGENTLANE_E2E_BACKEND` is not `aws`: for scenarios about the AWS deployment itself.
    pub fn aws_backend(mut self) -> Self {
        self.force_aws = true;
        self
    }

    /// On AWS, lane workers poll SQS as a deployment's do (long polls), not with the short
    /// polls the scenarios use to stay fast.
    pub fn deployed_receive_wait(mut self) -> Self {
        self.deployed_receive_wait = true;
        self
    }

    /// `--workers N`.
    pub fn workers(mut self, workers: u32) -> Self {
        self.workers = Some(workers);
        self
    }
}

/// A running server. Dropping it kills it (and prints its stderr when the test is failing).
pub struct Server {
    options: ServerOptions,
    child: Option<Child>,
    url: String,
    logs: LogFiles,
    incarnation: u32,
    dir: TempDir,
}

impl Server {
    /// Starts `serve --listen 127.0.0.1:0 --data-dir <fresh temp dir>` and waits for
    /// `agentlane listening on http://127.0.0.1:PORT`.
    pub fn start(options: ServerOptions) -> HarnessResult<Self> {
        let dir = tempfile::Builder::new()
            .prefix("agentlane-e2e-")
            .tempdir()
            .map_err(|e| HarnessError::io("create server temp dir", e))?;
        let mut options = options;
        if backend_is_aws() || options.force_aws {
            options = on_aws(options, dir.path())?;
        }
        let (child, url, logs) = spawn(&options, dir.path(), 0)?;
        Ok(Server {
            options,
            child: Some(child),
            url,
            logs,
            incarnation: 0,
            dir,
        })
    }

    /// `http://127.0.0.1:PORT` of the current process.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client authenticated as `tenant`.
    pub fn client(&self, tenant: Tenant) -> Client {
        Client::new(&self.url, tenant.key)
    }

    /// A client with the operator's metrics key ([`METRICS_KEY`]).
    pub fn operator(&self) -> Client {
        Client::new(&self.url, METRICS_KEY)
    }

    /// A client sending no credentials.
    pub fn anonymous(&self) -> Client {
        Client::anonymous(&self.url)
    }

    /// The data directory (kept across restarts).
    pub fn data_dir(&self) -> PathBuf {
        data_dir(self.dir.path())
    }

    /// The server's binary as a command-line tool (`agentlane keys …`) with the server's
    /// environment (backend, table, queue; nothing from the developer's shell) and
    /// `AGENTLANE_DATA_DIR` set to its data directory. Add the arguments and run it.
    pub fn cli(&self) -> Command {
        let mut command = Command::new(&self.options.binary);
        clear_shell_env(&mut command);
        command
            .envs(&self.options.env)
            .env("AGENTLANE_DATA_DIR", self.data_dir());
        command
    }

    /// `kill -9`: no graceful stop, nothing flushed.
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// Starts a new process on the same data directory (killing the current one hard if it
    /// still runs). The URL changes: take new clients afterwards.
    pub fn restart(&mut self) -> HarnessResult<()> {
        self.kill_hard();
        self.incarnation += 1;
        let (child, url, logs) = spawn(&self.options, self.dir.path(), self.incarnation)?;
        self.child = Some(child);
        self.url = url;
        self.logs = logs;
        Ok(())
    }

    /// The environment that points another process at this server's backend and tenants:
    /// `AGENTLANE_API_KEYS`, and on AWS the table, queue, endpoint and credentials.
    pub fn backend_env(&self) -> Vec<(String, String)> {
        self.options
            .env
            .iter()
            .filter(|(name, _)| {
                name.starts_with("AWS_")
                    || [
                        "AGENTLANE_TABLE",
                        "AGENTLANE_QUEUE_NAME",
                        "AGENTLANE_BACKEND",
                        "AGENTLANE_SECRETS_KMS_KEY",
                    ]
                    .contains(&name.as_str())
                    || name.as_str() == "AGENTLANE_API_KEYS"
            })
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect()
    }

    /// The end of the current process's stderr.
    pub fn stderr_tail(&self, max: usize) -> String {
        self.logs.stderr_tail(max)
    }

    /// A second server process on the same backend (the same data directory on the embedded
    /// backend, the same table and queue on AWS): two tickers, two sets of lane workers. It
    /// has its own URL; kill it or drop it independently.
    pub fn start_sibling(&self) -> HarnessResult<Server> {
        let dir = tempfile::Builder::new()
            .prefix("agentlane-e2e-sibling-")
            .tempdir()
            .map_err(|e| HarnessError::io("create server temp dir", e))?;
        let mut options = self.options.clone();
        if !(backend_is_aws() || options.force_aws) {
            options.shared_data_dir = Some(self.data_dir());
        }
        let (child, url, logs) = spawn(&options, dir.path(), 0)?;
        Ok(Server {
            options,
            child: Some(child),
            url,
            logs,
            incarnation: 0,
            dir,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill_hard();
        if std::thread::panicking() {
            eprintln!(
                "--- agentlane server stderr (incarnation {}, tail) ---\n{}",
                self.incarnation,
                self.logs.stderr_tail(8000)
            );
        }
    }
}

/// `AGENTLANE_E2E_BACKEND=aws` runs every scenario on DynamoDB + SQS FIFO (the emulator at
/// `AWS_ENDPOINT_URL`, default `http://127.0.0.1:4566`) instead of the embedded store.
pub fn backend_is_aws() -> bool {
    std::env::var("AGENTLANE_E2E_BACKEND").is_ok_and(|b| b == "aws")
}

/// Points `options` at a table, queue and KMS key of their own (named after the server's temp
/// dir) and creates them with `agentlane setup-aws`, the documented set-up command.
fn on_aws(options: ServerOptions, root: &Path) -> HarnessResult<ServerOptions> {
    let suffix = root
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "-")
        })
        .unwrap_or_else(|| "e2e".to_owned());
    let endpoint =
        std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned());
    let options = options
        .env("AGENTLANE_BACKEND", "aws")
        .env("AGENTLANE_TABLE", format!("t-{suffix}"))
        .env("AGENTLANE_QUEUE_NAME", format!("q-{suffix}.fifo"))
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        // moto's long poll can hand out a FIFO group's next message while the previous one is
        // in flight (moto/sqs/models.py `receive_message`). The store's per-session order check
        // makes that harmless (the later turn is handed back until the earlier one ends; see
        // the agent suite's misbehaving-queue test), but every hand-back costs a pause, which
        // made the scenarios several times slower on a busy CI machine. Short polls keep them
        // fast; correctness does not depend on this setting.
        .env("AGENTLANE_RECEIVE_WAIT_MS", "0");
    // `deployed_receive_wait`: the server's own default (SQS long polls) instead.
    let mut options = options;
    if options.deployed_receive_wait {
        options.env.remove("AGENTLANE_RECEIVE_WAIT_MS");
    }
    let logs = LogFiles::in_dir(root, "setup-aws");
    let mut command = Command::new(&options.binary);
    command.arg("setup-aws").envs(&options.env);
    let mut child = spawn_logged(&mut command, &logs, "agentlane setup-aws")?;
    let status = child
        .wait()
        .map_err(|e| HarnessError::io("wait for agentlane setup-aws", e))?;
    if !status.success() {
        return Err(HarnessError::NotReady {
            what: "agentlane setup-aws".into(),
            reason: format!(
                "exited with {status} (is the emulator running? localstack/start-emulator.sh)"
            ),
            stderr: logs.stderr_tail(4000),
            stdout: String::new(),
        });
    }
    // The KMS key setup-aws made for the table (`alias/<table>-secrets`), for tenant secrets.
    // Set only now: a configured key is one setup-aws checks rather than creates.
    Ok(options.env(
        "AGENTLANE_SECRETS_KMS_KEY",
        format!("alias/t-{suffix}-secrets"),
    ))
}

/// Nothing from the developer's shell may change what the server talks to.
fn clear_shell_env(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if ["AGENTLANE_", "OPENAI_", "ANTHROPIC_"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
        {
            command.env_remove(name.as_ref());
        }
    }
}

fn data_dir(root: &Path) -> PathBuf {
    root.join("data")
}

fn spawn(
    options: &ServerOptions,
    root: &Path,
    incarnation: u32,
) -> HarnessResult<(Child, String, LogFiles)> {
    let logs = LogFiles::in_dir(root, &format!("server-{incarnation}"));
    let mut command = Command::new(&options.binary);
    let data = match &options.shared_data_dir {
        Some(shared) => shared.clone(),
        None => data_dir(root),
    };
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data);
    if let Some(workers) = options.workers {
        command.args(["--workers", &workers.to_string()]);
    }
    clear_shell_env(&mut command);
    command.envs(&options.env);
    if std::env::var_os("RUST_LOG").is_none() && !options.env.contains_key("AGENTLANE_LOG") {
        command.env("AGENTLANE_LOG", "info");
    }
    let what = format!("agentlane serve ({})", options.binary.display());
    let mut child = spawn_logged(&mut command, &logs, &what)?;
    match wait_for_url(
        &mut child,
        &logs,
        "agentlane listening on ",
        READY_TIMEOUT,
        "agentlane serve",
    ) {
        Ok(url) => Ok((child, url, logs)),
        Err(e) => {
            kill_and_reap(&mut child);
            Err(e)
        }
    }
}
