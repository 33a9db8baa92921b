//! `GET /v1/usage?groupBy=` a page at a time: `limit` rows at most, and never more than
//! 256 KiB an answer; `nextCursor` leads through every row once, in order.

use super::*;
use agentlane_core::spend::{Hold, PeriodCap, SpendTags, Spent};

/// Counts `micros` spent in session `session` on `day` (`D2026-12-01`) for acme.
async fn spend(server: &LiveServer, day: &str, session: &str, micros: u64) {
    let hold = Hold {
        id: format!("run_{session}.0"),
        micros,
        tokens: micros,
        at: 0,
    };
    let cap = PeriodCap {
        period: day.to_owned(),
        ends_at: u64::MAX / 2,
        max_micros: None,
        max_tokens: None,
    };
    server.spend.reserve(&acme(), &[cap], &hold).await.unwrap();
    let tags = SpendTags {
        day: day.to_owned(),
        day_ends_at: u64::MAX / 2,
        agent: "main".to_owned(),
        model: "openai/gpt-4o-mini".to_owned(),
        session: session.to_owned(),
    };
    let spent = Spent {
        micros,
        tokens: micros,
    };
    server
        .spend
        .settle(&acme(), &[day.to_owned()], &hold, spent, &tags)
        .await
        .unwrap();
}

/// A server where acme has a budget (so its spend is counted).
async fn budgeted() -> LiveServer {
    LiveServer::start(config(tenant_limits(TenantLimits {
        daily_tokens: Some(1 << 40),
        ..TenantLimits::default()
    })))
    .await
}

/// Every page of `query` (`groupBy=…&from=…`), following `nextCursor`: the rows' `(day, key)`
/// and each answer's size.
async fn walk(server: &LiveServer, query: &str) -> (Vec<(String, String)>, Vec<usize>) {
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/usage?{query}&cursor={c}"),
            None => format!("/v1/usage?{query}"),
        };
        let reply = server.get(&path, ACME_KEY).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        sizes.push(reply.body.len());
        let page = reply.json();
        for row in page["rows"].as_array().unwrap() {
            rows.push((
                row["day"].as_str().unwrap().to_owned(),
                row["key"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        match page.get("nextCursor") {
            Some(next) => cursor = Some(next.as_str().unwrap().to_owned()),
            None => break,
        }
        assert!(sizes.len() < 1000, "the pages end");
    }
    (rows, sizes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_pages_stay_under_their_bytes_and_the_cursor_leads_through_every_row_once() {
    // GIVEN 1,000 sessions with 240-character keys that spent on 2026-12-01 (about 300 KB of
    // rows) and 3 more on 2026-12-02
    let server = budgeted().await;
    let long = |i: usize| format!("{i:04}-{}", "k".repeat(235));
    for i in 0..1000 {
        spend(&server, "D2026-12-01", &long(i), 1).await;
    }
    for name in ["b", "a", "c"] {
        spend(&server, "D2026-12-02", name, 2).await;
    }
    let range = "from=2026-12-01&to=2026-12-02";

    // WHEN a client walks the sessions with the largest limit
    let (rows, sizes) = walk(&server, &format!("groupBy=session&{range}&limit=1000")).await;

    // THEN no answer passes 256 KiB, so the first page stops before 1,000 rows
    assert!(sizes.iter().all(|s| *s <= 256 * 1024), "{sizes:?}");
    assert!(sizes.len() >= 2, "{sizes:?}");
    // AND the pages hold every row once, by day then key
    let mut expected: Vec<(String, String)> = (0..1000)
        .map(|i| ("2026-12-01".to_owned(), long(i)))
        .collect();
    for name in ["a", "b", "c"] {
        expected.push(("2026-12-02".to_owned(), name.to_owned()));
    }
    assert_eq!(rows, expected);

    // AND without a limit a page holds 100 rows
    let first = server
        .get(&format!("/v1/usage?groupBy=session&{range}"), ACME_KEY)
        .await
        .json();
    assert_eq!(first["rows"].as_array().unwrap().len(), 100);
    assert!(first["nextCursor"].is_string(), "{first}");
    // AND small pages walk the same rows
    let (small, _) = walk(&server, &format!("groupBy=session&{range}&limit=7")).await;
    assert_eq!(small, expected);
    // AND by day: two rows, then no cursor
    let (days, sizes) = walk(&server, &format!("groupBy=day&{range}&limit=1")).await;
    assert_eq!(
        days,
        vec![
            ("2026-12-01".to_owned(), String::new()),
            ("2026-12-02".to_owned(), String::new())
        ]
    );
    assert_eq!(sizes.len(), 2, "the last row's page says no more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_usage_limit_or_cursor_is_400() {
    // GIVEN acme's usage by session over two pages
    let server = budgeted().await;
    for name in ["a", "b", "c"] {
        spend(&server, "D2026-12-01", name, 1).await;
    }
    let range = "from=2026-12-01&to=2026-12-02";
    let page = server
        .get(
            &format!("/v1/usage?groupBy=session&{range}&limit=2"),
            ACME_KEY,
        )
        .await
        .json();
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    // (the cursor goes on with the next row)
    let rest = server
        .get(
            &format!("/v1/usage?groupBy=session&{range}&limit=2&cursor={cursor}"),
            ACME_KEY,
        )
        .await
        .json();
    assert_eq!(rest["rows"][0]["key"], "c", "{rest}");
    assert!(rest.get("nextCursor").is_none(), "{rest}");

    // WHEN the limit or the cursor is not one to page with
    for bad in [
        format!("groupBy=session&{range}&limit=0"),
        format!("groupBy=session&{range}&limit=1001"),
        format!("groupBy=session&{range}&limit=ten"),
        format!("groupBy=session&{range}&cursor=not-a-cursor"),
        format!("groupBy=session&{range}&cursor=%2F%2F%2F"),
        // another group's, another range's, or without its groupBy
        format!("groupBy=agent&{range}&cursor={cursor}"),
        format!("groupBy=session&from=2026-12-02&to=2026-12-03&cursor={cursor}"),
        format!("cursor={cursor}"),
        format!("groupBy=session&{range}&cursor={}", "A".repeat(3000)),
    ] {
        // THEN each is 400 invalid_request
        let reply = server.get(&format!("/v1/usage?{bad}"), ACME_KEY).await;
        reply.assert_error(400, "invalid_request");
    }
    // AND beta sees none of acme's rows
    let theirs = server
        .get(&format!("/v1/usage?groupBy=session&{range}"), BETA_KEY)
        .await
        .json();
    assert_eq!(theirs["rows"], json!([]), "{theirs}");
    assert!(theirs.get("nextCursor").is_none(), "{theirs}");
}
