//! Each Lambda function links only what it calls (issue 23.1): its normal dependency graph,
//! resolved for the package alone as `cargo build -p agentlane-<fn>` resolves it (so feature
//! unification across the workspace hides nothing), holds none of the crates it must not link.
//! A crate that comes back (a feature turned on, a new `use`) fails this test in CI long
//! before a size budget would notice; `scripts/lambda-budget` measures the zips themselves.
//!
//! The lists hold what is true today. The functions still reach the agent, providers and tools
//! crates through `agentlane-host` (settings and hooks) and the API's tool-definition check;
//! with fat LTO those crates cost the ingress under 100 KiB of code (`cargo bloat`), so the
//! bytes are cut elsewhere (the API's `openapi` feature). The API crate itself no longer links
//! the agent runtime (the supervisor's `sweep` and the scheduler's `ticker` features).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// What no function links: the embedded backend, and a second crypto provider beside the AWS
/// SDK's `aws-lc-rs` (reqwest and the SDK share one rustls).
const NEVER: &[&str] = &["agentlane-store-sqlite", "rusqlite", "ring"];

/// Per package, what it must not link beyond [`NEVER`].
const RULES: &[(&str, &[&str])] = &[
    // The HTTP API: no MCP client (only the runner runs turns).
    ("agentlane-ingress", &["rmcp"]),
    // Lane turns: MCP servers are tool sources here.
    ("agentlane-runner", &[]),
    // Cron ticks and the sweep: no MCP client.
    ("agentlane-cron", &["rmcp"]),
    // The router the ingress serves: no agent runtime (runner, recovery) and no MCP client.
    ("agentlane-api", &["agentlane-agent", "rmcp"]),
];

/// The crates of `links` named in `forbidden` or [`NEVER`], sorted.
fn unwanted(links: &BTreeSet<String>, forbidden: &[&str]) -> Vec<String> {
    NEVER
        .iter()
        .chain(forbidden)
        .filter(|name| links.contains(**name))
        .map(|name| (*name).to_owned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The crate names in `cargo tree --prefix none --format {p}` output (`name vX.Y.Z (...)`).
fn crate_names(tree: &str) -> BTreeSet<String> {
    tree.lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The normal (non-dev, non-build) dependencies of `package` built alone, for this host.
fn normal_links(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(cargo)
        .current_dir(workspace)
        .args(["tree", "--locked", "-p", package, "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    crate_names(&String::from_utf8_lossy(&out.stdout))
}

#[test]
fn each_function_links_none_of_the_crates_it_must_not() {
    let mut failures = Vec::new();
    for (package, forbidden) in RULES {
        let links = normal_links(package);
        assert!(links.contains(*package), "{package}: not in its own tree");
        let found = unwanted(&links, forbidden);
        if !found.is_empty() {
            failures.push(format!("{package} links {}", found.join(", ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("; "));
}

#[test]
fn unwanted_names_the_forbidden_crates_a_graph_holds() {
    let set = |names: &[&str]| {
        names
            .iter()
            .map(|n| (*n).to_owned())
            .collect::<BTreeSet<_>>()
    };
    let cases: &[(&[&str], &[&str], &[&str])] = &[
        // (graph, forbidden, expected)
        (&["tokio", "serde"], &["axum"], &[]),
        (&["tokio", "axum"], &["axum"], &["axum"]),
        (&["rusqlite"], &[], &["rusqlite"]),
        (
            &["utoipa", "axum", "ring"],
            &["utoipa", "axum"],
            &["axum", "ring", "utoipa"],
        ),
        (&["axum-core"], &["axum"], &[]),
    ];
    for (graph, forbidden, expected) in cases {
        assert_eq!(
            unwanted(&set(graph), forbidden),
            expected.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
            "graph {graph:?}, forbidden {forbidden:?}"
        );
    }
}

#[test]
fn crate_names_reads_cargo_tree_lines() {
    let tree = "agentlane-ingress v0.1.0 (/w/functions/ingress)\naxum v0.8.4\n\naxum v0.8.4 (*)\n";
    assert_eq!(
        crate_names(tree),
        ["agentlane-ingress", "axum"]
            .iter()
            .map(|n| (*n).to_owned())
            .collect::<BTreeSet<_>>()
    );
}
