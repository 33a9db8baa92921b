//! A retired cron fire's session item and transcript entries get the TTL attribute, so
//! DynamoDB deletes them; the run item keeps its own retention.

use agentlane_aws::aws_sdk_dynamodb::types::AttributeValue;
use agentlane_conformance::cron::finished_fire;
use agentlane_conformance::fixtures::{tenant, wall_ms};
use agentlane_core::Store;
use agentlane_core::cron::CronStore;
use std::sync::Arc;

#[tokio::test]
async fn a_retired_fire_session_gets_a_ttl_on_every_item() {
    // GIVEN a finished fire
    let sdk = crate::common::sdk().await;
    let table = crate::common::fresh_table(&sdk).await;
    let client = agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk);
    let store = agentlane_aws::DynamoStore::new(client.clone(), table.clone());
    let dyn_store: Arc<dyn Store> = Arc::new(store.clone());
    let t = tenant();
    let (key, session_id) = finished_fire(&dyn_store, &t).await;

    // WHEN it is retired until a day from now
    let keep_until = wall_ms() + 86_400_000;
    store.retire_fire(&t, &key, keep_until).await.unwrap();

    // THEN the session item and both transcript items expire then (epoch seconds)
    let ttl = AttributeValue::N((keep_until / 1000).to_string());
    let session = client
        .get_item()
        .table_name(&table)
        .key("PK", AttributeValue::S(format!("T#{t}#S#{key}")))
        .key("SK", AttributeValue::S("SESSION".into()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(session.get("expiresAt"), Some(&ttl));
    let entries = client
        .query()
        .table_name(&table)
        .key_condition_expression("PK = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(format!("T#{t}#SID#{session_id}")))
        .send()
        .await
        .unwrap()
        .items
        .unwrap();
    assert_eq!(entries.len(), 2);
    assert!(
        entries.iter().all(|e| e.get("expiresAt") == Some(&ttl)),
        "{entries:?}"
    );
    // AND an unknown session is nothing to retire
    store
        .retire_fire(
            &t,
            &agentlane_core::SessionKey::new("cron:none:none"),
            keep_until,
        )
        .await
        .unwrap();
}
