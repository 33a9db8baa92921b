//! `agentlane secrets set|list|rm`: the tenant's secrets over the HTTP API (`/v1/secrets`), the
//! values its agents' tools send as `{"secret": "name"}`.
//!
//! A value is never a command-line argument (it would land in the shell's history and in `ps`)
//! and never printed: `set` reads it from stdin, or from the environment variable
//! `--from-env` names, and shows only the name, the version and whether it was created or
//! replaced.

use crate::api_client::{ApiClient, ApiError, RawBody};
use crate::args::ClientArgs;
use crate::client::{api, print};
use crate::human;
use agentlane_core::tenant_secret::{
    MAX_SECRET_VALUE_BYTES, validate_secret_name, validate_secret_value,
};
use agentlane_core::validate::path_segment;
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::io::{IsTerminal, Read};
use std::process::ExitCode;

/// `agentlane secrets …`.
#[derive(Args, Debug)]
pub(crate) struct SecretsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: SecretsCommand,
}

/// The secrets subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum SecretsCommand {
    /// Write a secret's value, read from stdin (one trailing newline dropped) or from
    /// --from-env VAR: creates it (version 1) or replaces it (the version goes up).
    #[command(long_about = SET_LONG_ABOUT)]
    Set(SetArgs),
    /// List the secrets (names, versions, times; never a value), one page at a time (--limit,
    /// --cursor).
    List(ListArgs),
    /// Delete a secret: runs that start afterwards no longer send it.
    Rm(RmArgs),
}

const SET_LONG_ABOUT: &str = "\
Write a secret's value: creates the secret (version 1) or replaces its value (the version goes
up by one; runs that start from then on, on every process within a minute, send the new one).

The value is read from standard input, all of it up to its end, and one trailing newline
(\\n or \\r\\n) is dropped, once: `printf '%s\\n' \"$TOKEN\" | agentlane secrets set api-token`
stores the token alone, and a value that ends in two newlines keeps one. With --from-env VAR it
is the value of that environment variable of this command, taken as it is. An empty value is
refused; at most 16384 bytes of UTF-8.

The value is never taken as an argument (it would land in the shell's history and in `ps`),
and it is never printed: `set` prints whether the secret was created or replaced, and its
version.";

/// `agentlane secrets set`.
#[derive(Args, Debug)]
pub(crate) struct SetArgs {
    /// The secret's name (1-64 characters of A-Z, a-z, 0-9, _ and -), as agents reference it:
    /// {"secret": "NAME"}.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,
    /// Take the value from this environment variable instead of stdin (as it is, no newline
    /// dropped).
    #[arg(long, value_name = "VAR")]
    pub from_env: Option<String>,
}

/// `agentlane secrets list`.
#[derive(Args, Debug)]
pub(crate) struct ListArgs {
    /// The most secrets to list (1-100, default 50).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Where to go on: the `nextCursor` of the previous page.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// `agentlane secrets rm`.
#[derive(Args, Debug)]
pub(crate) struct RmArgs {
    /// The secret to delete.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,
}

fn parse_name(value: &str) -> Result<String, String> {
    validate_secret_name(value)?;
    Ok(value.to_owned())
}

/// `text` without one trailing newline (`\n` or `\r\n`), if it has one.
fn strip_one_newline(text: &str) -> &str {
    text.strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text)
}

/// The value on `input`, up to its end, one trailing newline dropped.
fn value_from_reader(input: impl Read) -> anyhow::Result<String> {
    // Two bytes more than a value may hold, for a trailing `\r\n`, and one to tell "too long".
    let limit = MAX_SECRET_VALUE_BYTES + 3;
    let mut bytes = Vec::new();
    input
        .take(u64::try_from(limit).unwrap_or(u64::MAX))
        .read_to_end(&mut bytes)
        .context("cannot read the value from stdin")?;
    let text = String::from_utf8(bytes).map_err(|_| {
        anyhow::anyhow!("the value on stdin is not UTF-8 text (a secret value is a string)")
    })?;
    let value = strip_one_newline(&text);
    if value.is_empty() {
        bail!(
            "the value on stdin is empty: pipe the value in (`printf '%s' \"$TOKEN\" | agentlane \
             secrets set NAME`) or use --from-env VAR"
        );
    }
    Ok(value.to_owned())
}

/// The value of the environment variable `var`, as `lookup` finds it.
fn value_from_env(
    var: &str,
    lookup: impl FnOnce(&str) -> Option<std::ffi::OsString>,
) -> anyhow::Result<String> {
    let Some(raw) = lookup(var) else {
        bail!("--from-env {var}: the environment variable {var} is not set");
    };
    let Ok(value) = raw.into_string() else {
        bail!("--from-env {var}: the value of {var} is not UTF-8 text");
    };
    if value.is_empty() {
        bail!("--from-env {var}: {var} is empty; a secret needs a value");
    }
    Ok(value)
}

/// The value `set` stores: from `--from-env`, else stdin.
fn read_value(args: &SetArgs) -> anyhow::Result<String> {
    let value = match &args.from_env {
        Some(var) => value_from_env(var, |name| std::env::var_os(name))?,
        None => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                eprintln!(
                    "agentlane: type the value of {}, then Enter and Ctrl-D (it shows as you \
                     type; pipe it in or use --from-env VAR to avoid that)",
                    args.name
                );
            }
            value_from_reader(stdin.lock())?
        }
    };
    validate_secret_value(&value).map_err(|why| anyhow::anyhow!("the secret's {why}"))?;
    Ok(value)
}

fn secret_path(name: &str) -> String {
    format!("/v1/secrets/{}", path_segment(name))
}

/// `PUT /v1/secrets/{name}`: whether it was created (`201`) rather than replaced, and the
/// answer (name, times, version).
async fn put(api: &ApiClient, name: &str, value: &str) -> Result<(bool, Value), ApiError> {
    let path = secret_path(name);
    let response = api
        .send(
            Method::PUT,
            &path,
            Some(RawBody::Json(json!({ "value": value }))),
        )
        .await?;
    if !response.status.is_success() {
        return Err(ApiError::Status {
            request: format!("PUT {path}"),
            response,
        });
    }
    Ok((response.status == StatusCode::CREATED, response.json()))
}

/// The `GET /v1/secrets` path for a page.
fn list_path(limit: Option<u32>, cursor: Option<&str>) -> String {
    let mut query = Vec::new();
    if let Some(limit) = limit {
        query.push(format!("limit={limit}"));
    }
    if let Some(cursor) = cursor {
        query.push(format!("cursor={}", path_segment(cursor)));
    }
    if query.is_empty() {
        "/v1/secrets".to_owned()
    } else {
        format!("/v1/secrets?{}", query.join("&"))
    }
}

/// What `set` prints: created or replaced, and the version.
fn set_line(created: bool, answer: &Value) -> String {
    let name = answer["name"].as_str().unwrap_or("?");
    let version = answer
        .get("version")
        .map_or_else(|| "?".to_owned(), Value::to_string);
    let what = if created { "created" } else { "replaced" };
    format!("{what} secret {name} (version {version})\n")
}

/// A page of `GET /v1/secrets` as a table: name, version, created, updated.
fn list_view(page: &Value) -> String {
    let secrets = page["secrets"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out = if secrets.is_empty() {
        "no secrets\n".to_owned()
    } else {
        let rows: Vec<Vec<String>> = secrets
            .iter()
            .map(|s| {
                vec![
                    s["name"].as_str().unwrap_or("-").to_owned(),
                    s.get("version")
                        .map_or_else(|| "-".to_owned(), Value::to_string),
                    human::time(s["createdAt"].as_u64()),
                    human::time(s["updatedAt"].as_u64()),
                ]
            })
            .collect();
        human::table(&["NAME", "VERSION", "CREATED", "UPDATED"], &rows)
    };
    if let Some(cursor) = page["nextCursor"].as_str() {
        out.push_str(&format!(
            "(more: agentlane secrets list --cursor {cursor})\n"
        ));
    }
    out
}

/// Runs `agentlane secrets …` and prints the result.
pub(crate) async fn run(args: SecretsArgs) -> anyhow::Result<ExitCode> {
    let api = api(&args.client)?;
    let as_json = args.client.json;
    match &args.command {
        SecretsCommand::Set(set) => {
            let value = read_value(set)?;
            let (created, answer) = put(&api, &set.name, &value).await?;
            if as_json {
                print(&answer);
            } else {
                print!("{}", set_line(created, &answer));
            }
        }
        SecretsCommand::List(list) => {
            let page = api
                .call(
                    Method::GET,
                    &list_path(list.limit, list.cursor.as_deref()),
                    None,
                )
                .await?;
            if as_json {
                print(&page);
            } else {
                print!("{}", list_view(&page));
            }
        }
        SecretsCommand::Rm(rm) => {
            api.call(Method::DELETE, &secret_path(&rm.name), None)
                .await?;
            if as_json {
                print(&json!({ "deleted": rm.name }));
            } else {
                println!("deleted secret {}", rm.name);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn one_trailing_newline_is_dropped_once() {
        assert_eq!(strip_one_newline("tok\n"), "tok");
        assert_eq!(strip_one_newline("tok\r\n"), "tok");
        assert_eq!(strip_one_newline("tok\n\n"), "tok\n");
        assert_eq!(strip_one_newline("tok"), "tok");
        assert_eq!(
            strip_one_newline(" tok \t"),
            " tok \t",
            "nothing else is trimmed"
        );
        assert_eq!(
            value_from_reader(&b"line1\nline2\n"[..]).unwrap(),
            "line1\nline2"
        );
    }

    #[test]
    fn an_empty_or_oversized_or_binary_stdin_is_refused() {
        for input in [&b""[..], b"\n", b"\r\n"] {
            let e = value_from_reader(input).unwrap_err().to_string();
            assert!(e.contains("empty"), "{e}");
        }
        let e = value_from_reader(&[0xff, 0xfe][..])
            .unwrap_err()
            .to_string();
        assert!(e.contains("UTF-8"), "{e}");
        // The most a value holds, with its newline, passes; a byte more is refused, however
        // much more stdin has.
        let max = "v".repeat(MAX_SECRET_VALUE_BYTES);
        let read = value_from_reader(format!("{max}\r\n").as_bytes()).unwrap();
        assert_eq!(read.len(), MAX_SECRET_VALUE_BYTES);
        let long = value_from_reader("v".repeat(1 << 20).as_bytes()).unwrap();
        let e = validate_secret_value(&long).unwrap_err();
        assert!(e.contains("16384"), "{e}");
    }

    #[test]
    fn from_env_takes_the_value_as_it_is_and_names_an_unset_variable() {
        let got = value_from_env("TOKEN", |_| Some("v1\n".into())).unwrap();
        assert_eq!(got, "v1\n");
        let e = value_from_env("NOPE_VAR", |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("NOPE_VAR") && e.contains("not set"), "{e}");
        let e = value_from_env("EMPTY", |_| Some("".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("EMPTY is empty"), "{e}");
    }

    #[test]
    fn pages_and_lines_read_as_a_user_expects() {
        assert_eq!(list_path(None, None), "/v1/secrets");
        assert_eq!(
            list_path(Some(2), Some("a b")),
            "/v1/secrets?limit=2&cursor=a%20b"
        );
        let answer = json!({"name": "api-token", "version": 2, "createdAt": 1, "updatedAt": 2});
        assert_eq!(
            set_line(false, &answer),
            "replaced secret api-token (version 2)\n"
        );
        let page = json!({"secrets": [], "nextCursor": null});
        assert_eq!(list_view(&page), "no secrets\n");
    }
}
