//! A page of large transcript entries costs about one answer of memory on DynamoDB too.

use agentlane_core::Store;
use std::sync::Arc;

const MIB: usize = 1024 * 1024;

/// 40 entries of 300 KB (12 MB; the emulator's item cap is 400 KB) read with a 1 MiB budget:
/// the Rust heap grows by about the page plus one DynamoDB answer (at most 1 MB of items, with
/// the SDK's copies of it), where reading them all grows it by the whole 12 MB. Measured with
/// the counting global allocator of this test binary (`agentlane_conformance::alloc`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_large_entries_holds_about_one_answer() {
    let store = Arc::new(crate::common::store().await) as Arc<dyn Store>;
    let budget = MIB;
    let (bounded, unbounded) =
        agentlane_conformance::store::read_large_entries(store, 40, 300_000, budget).await;
    eprintln!("peak heap growth: bounded page {bounded} B, unbounded read {unbounded} B");
    assert!(
        bounded < budget + 4 * MIB,
        "a bounded page grew the heap by {bounded} bytes"
    );
    assert!(
        unbounded > 10 * MIB,
        "the unbounded read holds all 12 MB: {unbounded}"
    );
    assert!(unbounded > 2 * bounded, "{bounded} vs {unbounded}");
}
