//! The client commands run as a user runs them: the real binary against a real `agentlane
//! serve` (embedded store, demo model) in a temp directory, each command in its human form
//! and with `--json` (parsed), and the README's "Talk to it" block run as written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_agentlane");

/// `agentlane serve` on a free port in a temp data dir; killed on drop.
struct Serve {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start() -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(BIN)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .current_dir(dir.path())
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("AGENTLANE_CONFIG")
            .env_remove("AGENTLANE_BACKEND")
            .env("AGENTLANE_DEMO_DELAY_MS", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
            || !dir.path().join(".agentlane/api-key").is_file()
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "serve did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Serve { child, url, dir }
    }

    /// Runs `agentlane args` in the serve's directory (so it finds the generated key).
    fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .current_dir(self.dir.path())
            .env("AGENTLANE_URL", &self.url)
            .env_remove("AGENTLANE_API_KEY")
            .env_remove("AGENTLANE_DATA_DIR")
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "agentlane {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?} --json: {e}: {text}"))
    }
}

#[test]
fn each_client_command_speaks_human_by_default_and_json_when_asked() {
    let serve = Serve::start();

    // agent --wait: the reply as prose, nothing else on stdout
    let reply = serve.ok(&["agent", "--session", "demo", "--message", "hello", "--wait"]);
    assert!(
        reply.starts_with("[demo model] You said: hello."),
        "{reply}"
    );
    assert!(!reply.contains('{'), "no JSON in the human form: {reply}");

    // agent --json: one JSON document, the acceptance; wait --json: the wait's answer
    let accepted = serve.json(&[
        "agent",
        "--session",
        "demo",
        "--message",
        "what time is it?",
    ]);
    let run_id = accepted["runId"].as_str().unwrap().to_owned();
    let waited = serve.json(&["wait", &run_id]);
    assert_eq!(waited["status"], "ok", "{waited}");
    assert_eq!(waited["livenessState"], "working", "{waited}");
    let human = serve.ok(&["wait", &run_id]);
    assert!(human.starts_with("The current time is"), "{human}");

    // transcript: a line per entry with local RFC 3339 times; --json the page
    let lines = serve.ok(&["transcript", "demo"]);
    let roles: Vec<&str> = lines
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap_or(""))
        .map(|word| word.trim_end_matches(':'))
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant"
        ],
        "{lines}"
    );
    let time = lines
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(time).is_ok(), "{time}");
    let page = serve.json(&["transcript", "demo"]);
    assert_eq!(page["entries"].as_array().unwrap().len(), 6, "{page}");

    // events --follow: the reply as prose, a line per tool call; --json: JSON Lines
    let followed = serve.ok(&["events", &run_id, "--follow"]);
    assert!(
        followed.contains("[tool] current_time start\n"),
        "{followed}"
    );
    assert!(followed.contains("\nThe current time is"), "{followed}");
    assert!(followed.ends_with("[end] ok\n"), "{followed}");
    let frames = serve.ok(&["events", &run_id, "--follow", "--json"]);
    let frames: Vec<Value> = frames
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(frames.last().unwrap()["event"], "end", "{frames:?}");
    assert!(frames.iter().any(|f| f["event"] == "tool"), "{frames:?}");

    // cron: names where ids go, a table by default; connection flags after the subcommand
    let job = serve.json(&[
        "cron",
        "add",
        "--name",
        "standup",
        "--message",
        "hi",
        "--every",
        "3600",
    ]);
    let job_id = job["jobId"].as_str().unwrap();
    let table = serve.ok(&["cron", "list", "--url", &serve.url]);
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table.contains(job_id) && table.contains("every 3600s"),
        "{table}"
    );
    let shown = serve.json(&["cron", "show", "standup"]);
    assert_eq!(shown["jobId"], job_id);
    let edited = serve.ok(&["cron", "edit", "standup", "--every", "7200"]);
    assert!(edited.contains("every 7200s"), "{edited}");
    let fired = serve.ok(&["cron", "run", "standup"]);
    assert!(
        fired.starts_with(&format!("fired {job_id}: run run_")),
        "{fired}"
    );
    assert_eq!(
        serve.ok(&["cron", "rm", "standup"]),
        format!("deleted {job_id}\n")
    );
    let fired_run = fired.split_whitespace().nth(3).unwrap().to_owned();

    // runs show: status, usage and the reply as prose; --json the record without internals
    serve.ok(&["wait", &fired_run]);
    let shown = serve.ok(&["runs", "show", &fired_run]);
    assert!(shown.starts_with(&format!("{fired_run} ok\n")), "{shown}");
    assert!(shown.contains("1 attempt(s)"), "{shown}");
    assert!(shown.contains("[demo model] You said: hi"), "{shown}");
    let record = serve.json(&["runs", "show", &fired_run]);
    assert_eq!(record["status"], "ok");
    assert!(record.get("checkpoint").is_none(), "{record}");
    // runs abort of an ended run: a clear refusal
    let late = serve.run(&["runs", "abort", &fired_run]);
    assert!(!late.status.success());
    assert!(
        String::from_utf8_lossy(&late.stderr).contains("already ended"),
        "{late:?}"
    );

    // sessions show|set|reset: human lines, --json the session
    let session = serve.ok(&["sessions", "show", "demo"]);
    assert!(session.starts_with("session       demo\n"), "{session}");
    assert!(session.contains("status        idle\n"), "{session}");
    assert!(session.contains("queue mode    followup\n"), "{session}");
    let set = serve.json(&["sessions", "set", "demo", "--queue-mode", "steer"]);
    assert_eq!(set["queueMode"], "steer", "{set}");
    let before = set["sessionId"].as_str().unwrap().to_owned();
    let reset = serve.json(&["sessions", "reset", "demo"]);
    assert_ne!(reset["sessionId"], before.as_str(), "{reset}");
    let cleared = serve.ok(&["sessions", "set", "demo", "--clear-queue-mode"]);
    assert!(cleared.contains("queue mode    followup\n"), "{cleared}");

    let missing = serve.run(&["cron", "show", "standup"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no cron job named \"standup\""),
        "{missing:?}"
    );
}

#[test]
fn a_stopped_server_gets_one_line_saying_where_the_client_looked() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args([
            "transcript",
            "demo",
            "--url",
            "http://127.0.0.1:9",
            "--api-key",
            &"k".repeat(20),
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot reach the agentlane server at http://127.0.0.1:9")
            && stderr.contains("agentlane serve"),
        "{stderr}"
    );
}

/// The first ```bash block after `heading` in the README.
fn readme_block(heading: &str) -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let section = &readme[readme.find(heading).expect("the heading")..];
    let start = section.find("```bash\n").expect("a bash block") + "```bash\n".len();
    let end = start + section[start..].find("```").unwrap();
    section[start..end].to_owned()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_readme_talk_to_it_block_runs_as_written() {
    if Command::new("jq").arg("--version").output().is_err() {
        panic!("jq is needed by the README's examples (apt-get install jq; .ci/run installs it)");
    }
    let serve = Serve::start();
    let block = readme_block("### Talk to it");
    // The block's alias builds and runs the CLI with cargo; here it is the binary under test.
    let script = block
        .lines()
        .map(|line| {
            if line.starts_with("alias agentlane=") {
                format!("agentlane() {{ {BIN} \"$@\"; }}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        script.contains("agentlane() {"),
        "the block starts with its alias: {block}"
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(serve.dir.path())
        .env("AGENTLANE_URL", &serve.url)
        .env_remove("AGENTLANE_API_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script}\n---\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("[demo model] You said: hello."), "{stdout}");
    assert!(stdout.contains("The current time is"), "{stdout}");
    assert!(stdout.contains("[end] ok"), "{stdout}");
}

#[test]
fn sessions_and_runs_list_show_and_delete_in_human_and_json_form() {
    let serve = Serve::start();
    serve.ok(&[
        "agent",
        "--session",
        "user/1",
        "--message",
        "hello",
        "--wait",
    ]);
    serve.ok(&[
        "agent",
        "--session",
        "other",
        "--message",
        "hello",
        "--wait",
    ]);

    // sessions list: a table, newest activity first; --json the API's page
    let table = serve.ok(&["sessions", "list"]);
    let keys: Vec<&str> = table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(keys, ["other", "user/1"], "{table}");
    assert!(table.starts_with("SESSION"), "{table}");
    let page = serve.json(&["sessions", "list", "--status", "idle"]);
    assert_eq!(page["sessions"].as_array().map(Vec::len), Some(2), "{page}");
    assert_eq!(page["next"], Value::Null);

    // sessions show: named lines; --json the session
    let shown = serve.ok(&["sessions", "show", "user/1"]);
    assert!(
        shown.contains("runs          1 accepted, 1 finished"),
        "{shown}"
    );
    assert_eq!(
        serve.json(&["sessions", "show", "user/1"])["agentId"],
        "main"
    );

    // runs list: a table of the session's runs; --json the page
    let runs = serve.ok(&["runs", "list", "--session", "user/1"]);
    assert!(
        runs.lines().nth(1).is_some_and(|l| l.contains(" ok ")),
        "{runs}"
    );
    let runs = serve.json(&["runs", "list", "--session", "user/1"]);
    assert_eq!(runs["runs"][0]["status"], "ok", "{runs}");

    // sessions delete: a line; the session is gone
    let deleted = serve.ok(&["sessions", "delete", "user/1"]);
    assert!(deleted.starts_with("session user/1 deleted"), "{deleted}");
    assert!(!serve.run(&["sessions", "show", "user/1"]).status.success());
    let left = serve.json(&["sessions", "list"]);
    assert_eq!(left["sessions"][0]["sessionKey"], "other", "{left}");
    assert_eq!(
        serve.json(&["sessions", "delete", "other"])["deleted"],
        true
    );
}
