//! `agentlane usage`: what the tenant of the API key spent today and this month (UTC) against
//! its budget (`GET /v1/usage`).

use crate::args::ClientArgs;
use crate::client::{api, print};
use clap::Args;
use reqwest::Method;
use serde_json::Value;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub(crate) struct UsageArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

pub(crate) async fn run(a: UsageArgs) -> anyhow::Result<ExitCode> {
    let usage = api(&a.client)?.call(Method::GET, "/v1/usage", None).await?;
    if a.client.json {
        print(&usage);
    } else {
        print!("{}", table(&usage));
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per period: spent, held by calls in flight, and the limits.
fn table(usage: &Value) -> String {
    let mut out = format!(
        "{:<12} {:>12} {:>12} {:>12} {:>14} {:>14}\n",
        "PERIOD", "SPENT USD", "HELD USD", "LIMIT USD", "TOKENS", "LIMIT TOKENS"
    );
    for key in ["day", "month"] {
        let p = &usage[key];
        let limit_usd = p["maxUsd"]
            .as_f64()
            .map_or("-".to_owned(), |v| format!("{v:.6}"));
        let limit_tokens = p["maxTokens"]
            .as_u64()
            .map_or("-".to_owned(), |v| v.to_string());
        out.push_str(&format!(
            "{:<12} {:>12.6} {:>12.6} {:>12} {:>14} {:>14}\n",
            p["period"].as_str().unwrap_or(key),
            p["costUsd"].as_f64().unwrap_or(0.0),
            p["heldUsd"].as_f64().unwrap_or(0.0),
            limit_usd,
            p["tokens"].as_u64().unwrap_or(0),
            limit_tokens,
        ));
    }
    if usage["counted"] == Value::Bool(false) {
        out.push_str("(this tenant has no budget: spend per period is not counted)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_has_a_line_per_period() {
        let usage = json!({"counted": true,
            "day": {"period": "2026-12-04", "costUsd": 0.15, "heldUsd": 0.003, "maxUsd": 20.0,
                    "tokens": 100000, "maxTokens": null},
            "month": {"period": "2026-12", "costUsd": 0.0, "heldUsd": 0.0, "maxUsd": null,
                      "tokens": 0, "maxTokens": 5000000}});
        let text = table(&usage);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[1].starts_with("2026-12-04") && lines[1].contains("0.150000"));
        assert!(lines[1].contains("20.000000") && lines[1].contains("100000"));
        assert!(lines[2].starts_with("2026-12 ") && lines[2].contains("5000000"));
    }
}
