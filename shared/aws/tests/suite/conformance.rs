//! The shared `Store` / `LaneQueue` conformance suite against DynamoDB and SQS FIFO on the local
//! emulator (`localstack/start-emulator.sh`; endpoint from `AWS_ENDPOINT_URL`).

use agentlane_core::{LaneQueue, Store};
use std::sync::Arc;

agentlane_conformance::store_conformance!(async {
    Arc::new(crate::common::store().await) as Arc<dyn Store>
});

agentlane_conformance::queue_conformance!(async {
    Arc::new(crate::common::fresh_queue().await) as Arc<dyn LaneQueue>
});

agentlane_conformance::cron_conformance!(async {
    Arc::new(crate::common::store().await) as Arc<dyn agentlane_core::cron::CronStore>
});

agentlane_conformance::keys_conformance!(async {
    Arc::new(crate::common::store().await) as Arc<dyn agentlane_core::KeyStore>
});

agentlane_conformance::pending_conformance!(async {
    Arc::new(crate::common::store().await)
        as Arc<dyn agentlane_conformance::pending::PendingBackend>
});

agentlane_conformance::slots_conformance!(async {
    Arc::new(crate::common::store().await) as Arc<dyn agentlane_core::SlotStore>
});

agentlane_conformance::agents_conformance!(async {
    Arc::new(crate::common::store().await) as Arc<dyn agentlane_conformance::agents::AgentBackend>
});

agentlane_conformance::spend_conformance!(async {
    Arc::new(crate::common::store().await) as Arc<dyn agentlane_core::SpendLedger>
});

agentlane_conformance::catalog_conformance!(async {
    Arc::new(crate::common::store().await)
        as Arc<dyn agentlane_conformance::sessions::CatalogBackend>
});

agentlane_conformance::erase_conformance!(async {
    Arc::new(crate::common::store().await) as Arc<dyn agentlane_conformance::erase::EraseBackend>
});

agentlane_conformance::retention_conformance!(async {
    Arc::new(crate::common::store().await)
        as Arc<dyn agentlane_conformance::retention::RetentionBackend>
});

agentlane_conformance::secrets_conformance!(async {
    Arc::new(crate::common::store().await) as Arc<dyn agentlane_core::SecretStore>
});
