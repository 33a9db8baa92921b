//! The documentation's maps stay true to the source tree: `docs/architecture.md` names every
//! crate of the workspace and every module of the agent crate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every module declared out of line (`mod name;`, any visibility, any attributes) under
/// `src`, as the path of its file relative to `src` (`runner/pickup.rs`, `hooks/mod.rs`),
/// with `lib.rs`, the crate root.
fn declared_modules(src: &Path) -> BTreeSet<String> {
    let declaration = Regex::new(
        r"(?m)^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;",
    )
    .unwrap();
    let mut found = BTreeSet::from(["lib.rs".to_owned()]);
    let mut todo = vec![src.join("lib.rs")];
    while let Some(file) = todo.pop() {
        let text = read(&file);
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        // `lib.rs` and `mod.rs` declare their siblings; `x.rs` declares modules in `x/`.
        let dir = if stem == "lib" || stem == "mod" {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for name in declaration.captures_iter(&text).map(|c| c[1].to_owned()) {
            let flat = dir.join(format!("{name}.rs"));
            let nested = dir.join(&name).join("mod.rs");
            let path = if flat.exists() {
                flat
            } else if nested.exists() {
                nested
            } else {
                panic!(
                    "{} declares `mod {name};` but neither {} nor {} exists",
                    file.display(),
                    flat.display(),
                    nested.display()
                );
            };
            let relative = path.strip_prefix(src).unwrap();
            found.insert(relative.to_string_lossy().replace('\\', "/"));
            todo.push(path);
        }
    }
    found
}

/// The workspace's members as (path, package name), from the root `Cargo.toml`.
fn workspace_crates(root: &Path) -> Vec<(String, String)> {
    let manifest: toml::Table = read(&root.join("Cargo.toml")).parse().unwrap();
    let members = manifest["workspace"]["members"].as_array().unwrap();
    members
        .iter()
        .map(|m| {
            let path = m.as_str().unwrap().to_owned();
            let own: toml::Table = read(&root.join(&path).join("Cargo.toml")).parse().unwrap();
            let name = own["package"]["name"].as_str().unwrap().to_owned();
            (path, name)
        })
        .collect()
}

/// The part of `doc` under the `## heading` line, up to the next `## ` heading.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("docs/architecture.md has no `## {heading}` section"));
    let rest = &doc[start + 1..];
    let body = &rest[rest.find('\n').unwrap()..];
    match body.find("\n## ") {
        Some(end) => &body[..end],
        None => body,
    }
}

#[test]
fn the_architecture_map_names_every_workspace_crate() {
    let root = repo_root();
    let doc = read(&root.join("docs/architecture.md"));
    let crates = section(&doc, "Crates");
    let missing: Vec<String> = workspace_crates(&root)
        .into_iter()
        .filter(|(path, name)| {
            !crates.contains(&format!("`{path}`")) || !crates.contains(&format!("`{name}`"))
        })
        .map(|(path, name)| format!("{path} ({name})"))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md, section \"Crates\", does not name these workspace crates \
         (a row with `path` and `package name` each): {}",
        missing.join(", ")
    );
}

#[test]
fn the_architecture_map_names_every_module_of_the_agent_crate_and_no_other() {
    let root = repo_root();
    let doc = read(&root.join("docs/architecture.md"));
    let map = section(&doc, "The agent crate's modules");
    let modules = declared_modules(&root.join("shared/agent/src"));
    assert!(
        modules.contains("runner/pickup.rs") && modules.contains("answer/normalize/mod.rs"),
        "the module walk finds nested modules: {modules:?}"
    );

    let missing: Vec<&String> = modules
        .iter()
        .filter(|m| !map.contains(&format!("`{m}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md, section \"The agent crate's modules\", does not name these \
         modules of shared/agent/src (add a row `path` | what it is for): {missing:?}"
    );

    let named = Regex::new(r"`([a-z_/]+\.rs)`").unwrap();
    let stale: Vec<String> = named
        .captures_iter(map)
        .map(|c| c[1].to_owned())
        .filter(|m| !modules.contains(m))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/architecture.md, section \"The agent crate's modules\", names modules that \
         shared/agent/src does not declare: {stale:?}"
    );
}
