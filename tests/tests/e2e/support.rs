//! Shared helpers of the scenarios.

use agentlane_core::{Event, EventStream};
use agentlane_tests::{Aimock, Fixtures, Scenario, ServerOptions, phase};
use std::path::Path;
use std::time::Duration;

/// The server under test, built by cargo with these tests.
pub const SERVER_BIN: &str = env!("CARGO_BIN_EXE_agentlane-under-test");

/// How long a turn may take on a busy 2-core box before we call it stuck.
pub const LONG: Duration = Duration::from_secs(90);

/// The "hello" fixture's reply.
pub const GREETING: &str = "Hi there! How can I help you today?";
/// The "slow" fixture's reply (about 3.5 s: 250 ms before each of ~14 chunks).
pub const SLOW_REPLY: &str = "A slow reply, streamed in many small pieces.";
/// The "glacial" fixture's reply (about 8 s).
pub const GLACIAL_REPLY: &str = "This reply trickles out very slowly, a few letters at a time, so there is plenty of time to abort it.";
/// The first reply of the "what time is it" fixture (with two `current_time` calls).
pub const TOOL_PREAMBLE: &str = "Let me check both clocks.";
/// The reply after the tool results.
pub const TOOL_ANSWER: &str = "It is noon in UTC and 1 pm in Paris.";

/// aimock with the shared fixtures + a default server.
pub fn scenario() -> anyhow::Result<Scenario> {
    Ok(Scenario::start(SERVER_BIN)?)
}

/// aimock + a server with extra options.
pub fn scenario_with(
    configure: impl FnOnce(ServerOptions) -> ServerOptions,
) -> anyhow::Result<Scenario> {
    Ok(Scenario::start_with(SERVER_BIN, configure)?)
}

/// aimock with the retry-loop fixtures (`tests/fixtures/retry_loop.json`).
pub fn retry_loop_mock() -> anyhow::Result<Aimock> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/retry_loop.json");
    Ok(Aimock::start(Fixtures::File(fixtures))?)
}

/// Seqs go up by exactly one.
pub fn assert_dense(seqs: &[u64], what: &str) {
    for pair in seqs.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "{what}: seqs are not dense: {seqs:?}");
    }
}

/// A finished run's events: lifecycle start first, a terminal lifecycle event (phase end or
/// error) last carrying `status`, dense seqs, and nothing after the end.
pub fn assert_run_frame(events: &[Event], status: &str) {
    assert!(!events.is_empty(), "a finished run has events");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_dense(&seqs, "events");
    let first = &events[0];
    assert_eq!(
        (first.stream, phase(first)),
        (EventStream::Lifecycle, Some("start")),
        "the first event is lifecycle start: {first:?}"
    );
    let last = &events[events.len() - 1];
    assert_eq!(
        last.stream,
        EventStream::Lifecycle,
        "the last event is lifecycle: {last:?}"
    );
    assert!(
        matches!(phase(last), Some("end" | "error")),
        "the last event ends the run: {last:?}"
    );
    assert_eq!(
        last.data.get("status").and_then(|s| s.as_str()),
        Some(status),
        "the terminal lifecycle event carries the run's status: {last:?}"
    );
    let terminal = events
        .iter()
        .filter(|e| e.stream == EventStream::Lifecycle && matches!(phase(e), Some("end" | "error")))
        .count();
    assert_eq!(
        terminal, 1,
        "exactly one terminal lifecycle event: {events:?}"
    );
    let starts = events
        .iter()
        .filter(|e| e.stream == EventStream::Lifecycle && phase(e) == Some("start"))
        .count();
    assert_eq!(starts, 1, "exactly one lifecycle start: {events:?}");
}

/// The concatenated `delta`s of the assistant events.
pub fn assistant_deltas(events: &[Event]) -> String {
    events
        .iter()
        .filter(|e| e.stream == EventStream::Assistant)
        .filter_map(|e| e.data.get("delta").and_then(|d| d.as_str()))
        .collect()
}

/// Every AWS request of this test process's servers, logged by `scripts/aws-request-log.py`
/// (a proxy in front of the emulator): `AWS_ENDPOINT_URL` points at it while this lives.
pub struct AwsRequestLog {
    _dir: tempfile::TempDir,
    log: std::path::PathBuf,
    proxy: std::process::Child,
}

impl AwsRequestLog {
    /// Starts the proxy and points `AWS_ENDPOINT_URL` at it. Only for a test that runs in its
    /// own process (nextest does so) and starts its servers after this.
    pub async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("aws.log");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let upstream =
            std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "http://127.0.0.1:4566".into());
        let script = agentlane_tests::repo_root().join("scripts/aws-request-log.py");
        let proxy = std::process::Command::new("python3")
            .arg(&script)
            .args([
                "--listen",
                &port.to_string(),
                "--upstream",
                &upstream,
                "--log",
            ])
            .arg(&log)
            // AGENTLANE_AWS_LOG_BODIES=N: the log also shows each request body's start.
            .args(
                std::env::var("AGENTLANE_AWS_LOG_BODIES")
                    .map_or_else(|_| Vec::new(), |n| vec!["--bodies".to_owned(), n]),
            )
            .spawn()?;
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // SAFETY: nextest runs each test in its own process; nothing else reads the variable now.
        unsafe { std::env::set_var("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")) };
        Ok(Self {
            _dir: dir,
            log,
            proxy,
        })
    }

    /// How many requests were logged so far.
    pub fn len(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// The log lines after the first `from`, as logged (for a failure's message).
    pub fn lines_since(&self, from: usize) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().skip(from).map(str::to_owned).collect()
    }

    /// The requests logged after the first `from`, counted by operation.
    pub fn since(&self, from: usize) -> std::collections::BTreeMap<String, u32> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut counts = std::collections::BTreeMap::new();
        for line in text.lines().skip(from) {
            let op = line.split_whitespace().nth(1).unwrap_or(line);
            let op = op.rsplit('.').next().unwrap_or(op).to_owned();
            *counts.entry(op).or_insert(0) += 1;
        }
        counts
    }
}

impl Drop for AwsRequestLog {
    fn drop(&mut self) {
        self.proxy.kill().ok();
        self.proxy.wait().ok();
    }
}

/// An AWS SDK configuration for the emulator `server` talks to (its `AWS_ENDPOINT_URL`, else
/// the default emulator address), for scenarios that look at the table or the queues directly.
pub async fn emulator_sdk_config(
    server: &agentlane_tests::Server,
) -> agentlane_aws::aws_config::SdkConfig {
    let endpoint = server
        .backend_env()
        .into_iter()
        .find(|(name, _)| name == "AWS_ENDPOINT_URL")
        .map_or_else(|| "http://127.0.0.1:4566".to_owned(), |(_, url)| url);
    agentlane_aws::aws_config::defaults(agentlane_aws::aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(agentlane_aws::aws_config::Region::new("us-east-1"))
        .load()
        .await
}
