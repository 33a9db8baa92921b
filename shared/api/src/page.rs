//! Pages bounded by bytes as well as by count: a transcript or events page stops before the
//! item that would take the JSON answer over its byte budget, and `next` continues from the
//! last item sent. No answer then exceeds `max_page_bytes` (4 MiB by default, under Lambda's
//! 6 MB response cap), however large the items. The budget goes down to the store
//! ([`budget`]), which stops reading there: a route reads no more records than it answers.

use agentlane_core::PageBudget;
use serde::Serialize;

/// Room kept for the envelope around the items (`{"sessionKey": …, "entries": [ … ], "next": …}`).
pub(crate) const ENVELOPE_BYTES: usize = 4 * 1024;

/// The store budget of a page of at most `limit` items answered within `max_page_bytes`: the
/// items' JSON gets what the envelope leaves.
pub(crate) fn budget(limit: usize, max_page_bytes: usize) -> PageBudget {
    PageBudget::new(limit, max_page_bytes.saturating_sub(ENVELOPE_BYTES))
}

/// The longest prefix of `items` whose JSON fits in `max_page_bytes` (less the envelope): the
/// same rule the store applied to the stored JSON with [`budget`], kept here so the answer holds
/// it even if a record serialises longer than it was stored. The first item is always kept, so a reader always moves on; store limits (a message is at most
/// the configured message size, a DynamoDB item 400 KB) keep it far below the budget.
pub(crate) fn fit<T: Serialize>(mut items: Vec<T>, max_page_bytes: usize) -> Vec<T> {
    let budget = max_page_bytes.saturating_sub(ENVELOPE_BYTES);
    let mut used = 0usize;
    let mut keep = 0usize;
    for item in &items {
        // `,` between items.
        let size = json_len(item) + usize::from(keep > 0);
        if keep > 0 && used + size > budget {
            break;
        }
        used += size;
        keep += 1;
    }
    if keep == 1 && used > budget {
        tracing::warn!(
            bytes = used,
            budget,
            "a single page item is larger than the page budget"
        );
    }
    items.truncate(keep);
    items
}

/// Bytes of `value` as compact JSON, without building the string.
fn json_len<T: Serialize>(value: &T) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        // Unserialisable items fail the whole answer later; count them as nothing here.
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_page_stops_before_the_item_that_would_cross_the_budget() {
        // Each item is `"xxxx…"`: 1000 chars + 2 quotes.
        let items: Vec<String> = (0..10).map(|_| "x".repeat(1000)).collect();
        let budget = ENVELOPE_BYTES + 3 * 1002 + 2;
        assert_eq!(fit(items.clone(), budget).len(), 3);
        assert_eq!(fit(items.clone(), budget - 1).len(), 2);
        assert_eq!(fit(items.clone(), usize::MAX).len(), 10);
        // One oversized item still moves the reader on.
        assert_eq!(fit(items, 10).len(), 1);
        assert_eq!(fit(Vec::<String>::new(), 10).len(), 0);
    }

    #[test]
    fn the_kept_items_serialise_within_the_budget() {
        let items: Vec<serde_json::Value> = (0..500)
            .map(|i| serde_json::json!({"seq": i, "text": "é".repeat(i % 50)}))
            .collect();
        let budget = ENVELOPE_BYTES + 5000;
        let kept = fit(items, budget);
        let size = serde_json::to_vec(&kept).unwrap().len();
        assert!(size <= budget - ENVELOPE_BYTES + 2, "{size}");
        assert!(kept.len() > 10);
    }
}
