//! A page of large transcript entries costs about one answer of memory, however many there are.

use agentlane_core::Store;
use agentlane_store_sqlite::SqliteBackend;
use std::sync::Arc;

const MIB: usize = 1024 * 1024;

/// 200 entries of 300 KB (60 MB) read with the API's default answer budget (4 MiB, less the
/// envelope): the Rust heap grows by about one page at its peak, where reading them all grows
/// it by the whole 60 MB. Measured with the counting global allocator of this test binary
/// (`agentlane_conformance::alloc`), which sees every decoded record and every copied body but
/// not SQLite's own page cache (C `malloc`, bounded by its cache size).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_large_entries_holds_about_one_answer() {
    let store = Arc::new(SqliteBackend::open_temporary().expect("open")) as Arc<dyn Store>;
    let budget = 4 * MIB - 4 * 1024;
    let (bounded, unbounded) =
        agentlane_conformance::store::read_large_entries(store, 200, 300_000, budget).await;
    eprintln!("peak heap growth: bounded page {bounded} B, unbounded read {unbounded} B");
    assert!(
        bounded < budget + MIB,
        "a bounded page grew the heap by {bounded} bytes"
    );
    assert!(
        unbounded > 50 * MIB,
        "the unbounded read holds all 60 MB: {unbounded}"
    );
}
