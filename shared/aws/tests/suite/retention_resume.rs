//! A retention expiry cut off after it marked its session (a crash, a timeout) on the
//! emulator: the marked session accepts no turn (`unavailable`, retry later) and the next pass
//! finishes it whatever the retention says by then; after that the key starts a new session.

use crate::common;
use agentlane_aws::DynamoStore;
use agentlane_aws::aws_sdk_dynamodb::Client;
use agentlane_aws::aws_sdk_dynamodb::types::AttributeValue;
use agentlane_conformance::{fixtures, retention::answered};
use agentlane_core::store::DAY;
use agentlane_core::{Expiry, SessionRetention, Store, StoreError};
use std::sync::Arc;

#[tokio::test]
async fn an_expiry_cut_off_after_its_mark_is_finished_by_the_next_pass() {
    // GIVEN a session answered two days ago whose expiry was cut off right after its mark
    let sdk = common::sdk().await;
    let table = common::fresh_table(&sdk).await;
    let client = Client::new(&sdk);
    let dynamo = DynamoStore::new(client.clone(), table.clone());
    let store: Arc<dyn Store> = Arc::new(dynamo.clone());
    let (t, now) = (fixtures::tenant(), fixtures::wall_ms());
    let old = answered(&store, &t, now - 2 * DAY.as_millis() as u64).await;
    client
        .update_item()
        .table_name(&table)
        .key(
            "PK",
            AttributeValue::S(format!("T#{t}#S#{}", old.session_key)),
        )
        .key("SK", AttributeValue::S("SESSION".into()))
        .update_expression("SET expiringSince = :now")
        .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
        .send()
        .await
        .unwrap();

    // WHEN a turn is sent to it
    let refused = store
        .accept_turn(fixtures::turn(&t, &old.session_key, now))
        .await;
    // THEN it is refused as retryable and nothing of it is written
    assert!(
        matches!(refused, Err(StoreError::Unavailable(ref why)) if why.contains("retention")),
        "{refused:?}"
    );
    let stored = fixtures::session(&store, &t, &old.session_key).await;
    assert_eq!(stored.runs_accepted, 1);

    // WHEN the next pass comes, with a retention the session is within by now
    let expiry = dynamo
        .expire_session(&t, &old.session_key, 30 * DAY, now)
        .await
        .unwrap();
    // THEN it finishes the expiry: run, events and transcript gone with the session
    let Expiry::Removed(removed) = expiry else {
        panic!("the marked session was kept: {expiry:?}");
    };
    assert_eq!(
        (removed.runs, removed.events, removed.transcript_entries),
        (1, 2, 2)
    );
    assert_eq!(store.get_session(&t, &old.session_key).await.unwrap(), None);
    assert_eq!(store.get_run(&t, &old.run_id).await.unwrap(), None);
    let entries = store.read_transcript(&t, &old.session_id, None, 10).await;
    assert_eq!(entries.unwrap(), vec![]);

    // AND the key then starts a new session
    let next = fixtures::accept(&store, &t, &old.session_key, now + 1).await;
    assert_ne!(next.session_id, old.session_id);
}
