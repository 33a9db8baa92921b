//! `agentlane secrets set|list|rm` as a user runs them: the real binary against a real
//! `agentlane serve` (embedded store) in a temp directory. What `set` stored is read back by
//! opening that store's vault, as the runner does, since nothing the API or the CLI answers
//! ever shows a value.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentlane_core::TenantId;
use serde_json::Value;
use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_agentlane");

/// `agentlane serve` on a free port in a temp data dir (tenant `local`, its generated key);
/// killed on drop.
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
            .env_remove("AGENTLANE_API_KEYS")
            .env_remove("AGENTLANE_DATA_DIR")
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

    /// `agentlane args` in the serve's directory (so it finds the generated key), with `stdin`
    /// piped in (closed when `None`) and `env` added.
    fn run(&self, args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("AGENTLANE_URL", &self.url)
            .env("NO_PROXY", "127.0.0.1")
            .env("TZ", "UTC")
            .env_remove("AGENTLANE_API_KEY")
            .env_remove("AGENTLANE_DATA_DIR")
            .envs(env.iter().copied())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        if let Some(bytes) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(bytes).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn ok(&self, args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> String {
        let out = self.run(args, stdin, env);
        assert!(
            out.status.success(),
            "agentlane {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// What the store holds for secret `name` of tenant `local`, opened as the runner does.
    fn stored(&self, name: &str) -> Option<String> {
        let backends = agentlane_host::open_embedded(&self.dir.path().join(".agentlane")).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime
            .block_on(backends.secrets.reveal(&TenantId::new("local"), name))
            .unwrap()
            .map(|v| v.expose().to_owned())
    }
}

/// A refused `set`: its arguments, its stdin, its environment, and what stderr must say.
type Refusal<'a> = (
    &'a [&'a str],
    Option<&'a [u8]>,
    &'a [(&'a str, &'a str)],
    &'a str,
);

fn all_output(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn set_list_and_rm_store_the_value_from_stdin_or_the_environment_and_never_print_it() {
    let serve = Serve::start();

    // GIVEN a token piped in with the newline `echo` adds
    let first = "tok-3f9a1c\twith a tab";
    let out = serve.run(
        &["secrets", "set", "api-token"],
        Some(format!("{first}\n").as_bytes()),
        &[],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    // THEN it is created, the newline dropped once, and never printed
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "created secret api-token (version 1)\n"
    );
    assert!(!all_output(&out).contains("tok-3f9a1c"), "{out:?}");
    assert_eq!(serve.stored("api-token").as_deref(), Some(first));

    // WHEN it is set again from an environment variable, taken as it is
    let second = "tok-second\n";
    let out = serve.run(
        &["secrets", "set", "api-token", "--from-env", "MY_TOKEN"],
        None,
        &[("MY_TOKEN", second)],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    // THEN it is replaced, version 2
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "replaced secret api-token (version 2)\n"
    );
    assert!(!all_output(&out).contains("tok-second"), "{out:?}");
    assert_eq!(serve.stored("api-token").as_deref(), Some(second));

    // AND a value that ends in two newlines keeps one; --json prints the API's answer
    let answer: Value = serde_json::from_str(&serve.ok(
        &["secrets", "set", "db-password", "--json"],
        Some(b"multi\nline\n\n"),
        &[],
    ))
    .unwrap();
    assert_eq!(answer["name"], "db-password");
    assert_eq!(answer["version"], 1);
    assert!(answer.get("value").is_none(), "{answer}");
    assert_eq!(
        serve.stored("db-password").as_deref(),
        Some("multi\nline\n")
    );

    // WHEN they are listed
    let table = serve.ok(&["secrets", "list"], None, &[]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{table}");
    assert!(
        lines[1].starts_with("api-token") && lines[1].contains(" 2 "),
        "{table}"
    );
    assert!(
        lines[2].starts_with("db-password") && lines[2].contains(" 1 "),
        "{table}"
    );
    assert!(!table.contains("tok-") && !table.contains("multi"));
    // AND a page at a time
    let page = serve.ok(&["secrets", "list", "--limit", "1"], None, &[]);
    assert!(
        page.ends_with("(more: agentlane secrets list --cursor api-token)\n"),
        "{page}"
    );
    let rest: Value = serde_json::from_str(&serve.ok(
        &[
            "secrets",
            "list",
            "--limit",
            "1",
            "--cursor",
            "api-token",
            "--json",
        ],
        None,
        &[],
    ))
    .unwrap();
    assert_eq!(rest["secrets"][0]["name"], "db-password", "{rest}");
    assert_eq!(rest["secrets"].as_array().unwrap().len(), 1, "{rest}");

    // WHEN one is removed
    assert_eq!(
        serve.ok(&["secrets", "rm", "api-token"], None, &[]),
        "deleted secret api-token\n"
    );
    // THEN it is gone from the list and the store
    let table = serve.ok(&["secrets", "list"], None, &[]);
    assert!(!table.contains("api-token"), "{table}");
    assert_eq!(serve.stored("api-token"), None);

    // AND removing it again fails, saying it does not exist
    let out = serve.run(&["secrets", "rm", "api-token"], None, &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("404") && stderr.contains("secret \"api-token\" does not exist"),
        "{stderr}"
    );
}

#[test]
fn a_missing_or_empty_value_is_refused_before_anything_is_sent() {
    let serve = Serve::start();
    let cases: [Refusal<'_>; 5] = [
        // An unset variable is named.
        (
            &[
                "secrets",
                "set",
                "x",
                "--from-env",
                "AGENTLANE_TEST_UNSET_VAR",
            ],
            None,
            &[],
            "the environment variable AGENTLANE_TEST_UNSET_VAR is not set",
        ),
        (
            &["secrets", "set", "x", "--from-env", "EMPTY_VAR"],
            None,
            &[("EMPTY_VAR", "")],
            "EMPTY_VAR is empty",
        ),
        // Nothing on stdin, or only its newline.
        (
            &["secrets", "set", "x"],
            None,
            &[],
            "the value on stdin is empty",
        ),
        (
            &["secrets", "set", "x"],
            Some(b"\n"),
            &[],
            "the value on stdin is empty",
        ),
        // A name the API could never hold.
        (
            &["secrets", "set", "bad/name"],
            Some(b"v"),
            &[],
            "a secret name is 1-64 characters",
        ),
    ];
    for (args, stdin, env, expected) in cases {
        let out = serve.run(args, stdin, env);
        assert!(!out.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // An oversized value is the server's clear 400... or refused here: either way nothing is
    // stored and the size is named.
    let out = serve.run(
        &["secrets", "set", "x"],
        Some("v".repeat(16 * 1024 + 1).as_bytes()),
        &[],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("16384"),
        "{out:?}"
    );
    assert_eq!(
        serve.ok(&["secrets", "list"], None, &[]),
        "no secrets\n",
        "nothing was stored"
    );
    // The value is no argument at all.
    let out = serve.run(&["secrets", "set", "x", "the-value"], None, &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unexpected argument"),
        "{out:?}"
    );
}

#[test]
fn set_help_says_where_the_value_comes_from() {
    let out = Command::new(BIN)
        .args(["secrets", "set", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(help.contains("standard input"), "{help}");
    assert!(help.contains("one trailing newline"), "{help}");
    assert!(help.contains("--from-env"), "{help}");
}
