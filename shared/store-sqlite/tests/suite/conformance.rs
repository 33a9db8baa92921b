//! The shared conformance suite against the SQLite backend.

use agentlane_core::{LaneQueue, Store};
use agentlane_store_sqlite::SqliteBackend;
use std::sync::Arc;

fn fresh() -> SqliteBackend {
    SqliteBackend::open_temporary().expect("open a temporary database")
}

agentlane_conformance::store_conformance!(async { Arc::new(fresh()) as Arc<dyn Store> });

agentlane_conformance::queue_conformance!(async { Arc::new(fresh()) as Arc<dyn LaneQueue> });

/// All store cases at once on one database, the way the AWS suite shares one table.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_cases_share_one_database() {
    agentlane_conformance::store::run_all_shared(Arc::new(fresh())).await;
}

agentlane_conformance::cron_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_core::cron::CronStore>
});

agentlane_conformance::keys_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_core::KeyStore>
});

agentlane_conformance::pending_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_conformance::pending::PendingBackend>
});

agentlane_conformance::slots_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_core::SlotStore>
});

agentlane_conformance::agents_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_conformance::agents::AgentBackend>
});

agentlane_conformance::spend_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_core::SpendLedger>
});

agentlane_conformance::catalog_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_conformance::sessions::CatalogBackend>
});

agentlane_conformance::erase_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_conformance::erase::EraseBackend>
});

agentlane_conformance::retention_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_conformance::retention::RetentionBackend>
});

agentlane_conformance::secrets_conformance!(async {
    Arc::new(fresh()) as Arc<dyn agentlane_core::SecretStore>
});
