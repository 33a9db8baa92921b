//! `GET /v1/usage?groupBy=` a page at a time (issue 49): more sessions spend than a page holds,
//! and `nextCursor` leads a client through every row once, in order, by each `groupBy`. Both
//! backends.

use crate::support::{LONG, scenario_with};
use agentlane_core::RunStatus;
use agentlane_tests::{Client, Scenario};
use reqwest::Method;
use serde_json::{Value, json};

/// A server charging $1 per million input tokens and $2 per million output tokens for the test
/// model, where tenant A has a daily budget (so its spend is counted by day and session).
fn budgeted() -> anyhow::Result<(Scenario, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentlane.toml");
    std::fs::write(
        &config,
        format!(
            "[prices.\"{}\"]\ninput = 1.0\noutput = 2.0\n\n[limits.tenants.{}]\ndaily_usd = 10.0\n",
            agentlane_tests::MODEL,
            agentlane_tests::TENANT_A.name
        ),
    )?;
    let scn = scenario_with(|o| o.env("AGENTLANE_CONFIG", config.display().to_string()))?;
    Ok((scn, dir))
}

/// Every page of `GET /v1/usage?{query}`, following `nextCursor`: the pages.
async fn walk(a: &Client, query: &str) -> anyhow::Result<Vec<Value>> {
    let mut pages: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/usage?{query}&cursor={c}"),
            None => format!("/v1/usage?{query}"),
        };
        let (status, page) = a.json(Method::GET, &path, None).await?;
        anyhow::ensure!(status == 200, "GET {path}: {status} {page}");
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        pages.push(page);
        if cursor.is_none() {
            return Ok(pages);
        }
        anyhow::ensure!(pages.len() < 50, "the pages never end");
    }
}

/// The `key`s of every row of `pages`, in order.
fn keys(pages: &[Value]) -> Vec<String> {
    pages
        .iter()
        .flat_map(|p| p["rows"].as_array().cloned().unwrap_or_default())
        .map(|r| r["key"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_by_session_pages_through_more_sessions_than_a_page_holds() -> anyhow::Result<()> {
    // GIVEN 12 sessions of tenant A that each spent $0.003 (1,000 tokens in, 1,000 out)
    let (scn, _dir) = budgeted()?;
    scn.mock
        .add_fixtures(vec![json!({"match": {"userMessage": "spend"},
        "response": {"content": "spent",
                     "usage": {"prompt_tokens": 1_000, "completion_tokens": 1_000}}})])?;
    let a = scn.a();
    let sessions: Vec<String> = (0..12).map(|i| format!("pager-{i:02}")).collect();
    let turns = sessions.iter().map(|s| {
        let a = a.clone();
        async move { a.agent(s, "spend a little").await }
    });
    let accepted: Vec<_> = futures::future::join_all(turns)
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    for turn in &accepted {
        let run = a.wait_done(&turn.run_id, LONG).await?;
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    }

    // WHEN a client reads its usage by session, 5 rows a page
    let pages = walk(&a, "groupBy=session&limit=5").await?;

    // THEN three pages hold every session once, in key order, each at most 5 rows
    assert_eq!(pages.len(), 3, "{pages:?}");
    let sizes: Vec<usize> = pages
        .iter()
        .map(|p| p["rows"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(sizes, vec![5, 5, 2]);
    assert_eq!(keys(&pages), sessions);
    // AND the rows add up to what the runs spent
    let spent: f64 = pages
        .iter()
        .flat_map(|p| p["rows"].as_array().cloned().unwrap_or_default())
        .map(|r| r["costUsd"].as_f64().unwrap_or(0.0))
        .sum();
    assert!((spent - 12.0 * 0.003).abs() < 1e-9, "{spent}");
    // AND each page still carries the day and the month, and the last no cursor
    assert!(pages.iter().all(|p| p["day"]["costUsd"].is_number()));
    assert!(pages[2].get("nextCursor").is_none(), "{}", pages[2]);
    // AND without a limit one page holds them all
    let whole = walk(&a, "groupBy=session").await?;
    assert_eq!((whole.len(), keys(&whole)), (1, sessions.clone()));
    // AND by agent, model and day the same walk gives one row each
    for group in ["agent", "model", "day"] {
        let pages = walk(&a, &format!("groupBy={group}&limit=1")).await?;
        let rows = keys(&pages).len();
        assert_eq!(rows, 1, "groupBy={group}: {pages:?}");
    }
    // AND a limit out of bounds, or a cursor this API never gave, is 400 invalid_request
    for bad in [
        "groupBy=session&limit=0",
        "groupBy=session&limit=1001",
        "groupBy=session&cursor=bm90LWEtY3Vyc29y",
    ] {
        let (status, body) = a
            .json(Method::GET, &format!("/v1/usage?{bad}"), None)
            .await?;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request", "{bad}: {body}");
    }
    // AND another tenant's pages hold none of them
    let theirs = walk(&scn.b(), "groupBy=session&limit=5").await?;
    assert!(keys(&theirs).is_empty(), "{theirs:?}");
    Ok(())
}
