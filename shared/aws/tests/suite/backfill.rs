//! `agentlane setup-aws --backfill-indexes` on the emulator: a session and run written before
//! the index attributes existed (no `sessTenant`, no `runSession`/`sessionSeq`, no registry
//! item) are listed, and their tenant registered, after the backfill; a second backfill
//! changes nothing more.

use crate::common;
use agentlane_aws::aws_sdk_dynamodb::Client;
use agentlane_aws::aws_sdk_dynamodb::types::AttributeValue;
use agentlane_aws::{DynamoStore, IndexBackfill};
use agentlane_conformance::fixtures;
use agentlane_core::{PageBudget, SessionCatalog, SessionFilter, SessionRetention, Store};
use std::sync::Arc;

fn s(value: String) -> AttributeValue {
    AttributeValue::S(value)
}

#[tokio::test]
async fn a_backfill_indexes_and_registers_items_written_before_the_indexes() {
    // GIVEN a session with a run, stripped back to what was written before the indexes
    let sdk = common::sdk().await;
    let table = common::fresh_table(&sdk).await;
    let client = Client::new(&sdk);
    let store = DynamoStore::new(client.clone(), table.clone());
    let backend: Arc<dyn Store> = Arc::new(store.clone());
    let (t, k, now) = fixtures::fresh();
    let run = fixtures::accept(&backend, &t, &k, now).await;
    client
        .update_item()
        .table_name(&table)
        .key("PK", s(format!("T#{t}#S#{k}")))
        .key("SK", s("SESSION".into()))
        .update_expression("REMOVE sessTenant")
        .send()
        .await
        .unwrap();
    client
        .update_item()
        .table_name(&table)
        .key("PK", s(format!("T#{t}#R#{}", run.run_id)))
        .key("SK", s("RUN".into()))
        .update_expression("REMOVE runSession, sessionSeq")
        .send()
        .await
        .unwrap();
    client
        .delete_item()
        .table_name(&table)
        .key("PK", s("TENANTS".into()))
        .key("SK", s(t.to_string()))
        .send()
        .await
        .unwrap();
    let budget = PageBudget::new(10, 1 << 20);
    let listed = |store: DynamoStore| {
        let (t, k) = (t.clone(), k.clone());
        async move {
            let sessions = store
                .list_sessions(&t, &SessionFilter::default(), None, budget)
                .await
                .unwrap();
            let runs = store
                .list_session_runs(&t, &k, None, None, budget)
                .await
                .unwrap();
            let tenants = store.list_tenants(None, 100).await.unwrap();
            (
                sessions.sessions.len(),
                runs.runs.len(),
                tenants.tenants.contains(&t),
            )
        }
    };
    assert_eq!(listed(store.clone()).await, (0, 0, false));

    // WHEN the indexes are backfilled
    let done = store.backfill_indexes().await.unwrap();

    // THEN the session and the run were indexed and the tenant registered
    assert_eq!(
        done,
        IndexBackfill {
            sessions: 1,
            runs: 1,
            tenants: 1
        }
    );
    assert_eq!(listed(store.clone()).await, (1, 1, true));
    // AND a second backfill finds nothing more to index
    let again = store.backfill_indexes().await.unwrap();
    assert_eq!((again.sessions, again.runs), (0, 0));
}
