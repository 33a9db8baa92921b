//! `ensure_resources` against the emulator: what it creates, that a second call changes nothing,
//! a queue managed elsewhere, and the failure when no emulator answers.

use crate::common;

use agentlane_aws::aws_sdk_dynamodb::types::{BillingMode, TimeToLiveStatus};
use agentlane_aws::aws_sdk_sqs::types::QueueAttributeName;
use agentlane_aws::ensure_resources;
use agentlane_aws::setup::{self, AwsConfig, SetupError};
use std::collections::HashMap;

async fn queue_attributes(
    sqs: &agentlane_aws::aws_sdk_sqs::Client,
    url: &str,
) -> HashMap<QueueAttributeName, String> {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .expect("get_queue_attributes")
        .attributes
        .unwrap_or_default()
}

/// A table created before the `pending` GSI existed (issue 11) gets it, and the `sessions` and
/// `sessionRuns` GSIs (issue 24): the sweep's query works afterwards, and so do the lists.
#[tokio::test]
async fn ensure_table_adds_the_later_indexes_to_an_older_table() {
    use agentlane_aws::aws_sdk_dynamodb::types::{
        AttributeDefinition, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    use agentlane_core::{PageBudget, ProcessingIndex, SessionCatalog, SessionFilter, TenantId};
    let sdk = common::sdk().await;
    let config = common::fresh_config();
    let ddb = agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk);
    let attr = |name: &str, kind| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build()
            .unwrap()
    };
    let key = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .unwrap()
    };
    ddb.create_table()
        .table_name(&config.table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("PK", ScalarAttributeType::S))
        .attribute_definitions(attr("SK", ScalarAttributeType::S))
        .key_schema(key("PK", KeyType::Hash))
        .key_schema(key("SK", KeyType::Range))
        .send()
        .await
        .expect("an older table");
    setup::ensure_table(&sdk, &config.table)
        .await
        .expect("ensure_table");
    setup::ensure_table(&sdk, &config.table)
        .await
        .expect("idempotent");
    let table = ddb
        .describe_table()
        .table_name(&config.table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let mut names: Vec<_> = table
        .global_secondary_indexes()
        .iter()
        .filter_map(|i| i.index_name())
        .collect();
    names.sort_unstable();
    assert_eq!(names, vec!["pending", "sessionRuns", "sessions"]);
    let store = agentlane_aws::DynamoStore::new(ddb, config.table.clone());
    assert!(
        store
            .pending_sessions(u64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let listed = store
        .list_sessions(
            &TenantId::new("t"),
            &SessionFilter::default(),
            None,
            PageBudget::new(10, 1 << 20),
        )
        .await
        .unwrap();
    assert!(listed.sessions.is_empty());
}

#[tokio::test]
async fn ensure_resources_creates_everything_once_and_is_idempotent() {
    let sdk = common::sdk().await;
    let config = AwsConfig {
        max_receive_count: 7,
        visibility_timeout_secs: 45,
        ..common::fresh_config()
    };

    let first = ensure_resources(&sdk, &config).await.expect("first call");
    let second = ensure_resources(&sdk, &config).await.expect("second call");

    assert_eq!(first, second, "the second call finds the same resources");
    assert_eq!(first.table, config.table);
    // the KMS key of tenant secrets, under the table's alias
    assert_eq!(
        first.secrets_key.key,
        format!("alias/{}-secrets", config.table)
    );
    let dlq_url = first.dlq_url.clone().expect("a DLQ was created");

    // the table: on demand, PK/SK, the five GSIs, TTL on expiresAt
    let ddb = agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk);
    let table = ddb
        .describe_table()
        .table_name(&config.table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    assert_eq!(
        table.billing_mode_summary().and_then(|b| b.billing_mode()),
        Some(&BillingMode::PayPerRequest)
    );
    let keys: Vec<_> = table
        .key_schema()
        .iter()
        .map(|k| {
            (
                k.attribute_name().to_owned(),
                k.key_type().as_str().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec![("PK".into(), "HASH".into()), ("SK".into(), "RANGE".into())]
    );
    let mut indexes: Vec<_> = table
        .global_secondary_indexes()
        .iter()
        .filter_map(|i| i.index_name().map(str::to_owned))
        .collect();
    indexes.sort();
    assert_eq!(
        indexes,
        vec![
            "cronDue".to_owned(),
            "pending".to_owned(),
            "processing".to_owned(),
            "sessionRuns".to_owned(),
            "sessions".to_owned()
        ]
    );
    let ttl = ddb
        .describe_time_to_live()
        .table_name(&config.table)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .unwrap();
    assert_eq!(ttl.attribute_name(), Some("expiresAt"));
    assert_eq!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled));

    // the queue: FIFO, explicit dedup ids, redrive to the FIFO DLQ
    let sqs = agentlane_aws::aws_sdk_sqs::Client::new(&sdk);
    let queue = queue_attributes(&sqs, &first.queue_url).await;
    let dlq = queue_attributes(&sqs, &dlq_url).await;
    assert_eq!(queue[&QueueAttributeName::FifoQueue], "true");
    assert_eq!(
        queue[&QueueAttributeName::ContentBasedDeduplication],
        "false"
    );
    assert_eq!(queue[&QueueAttributeName::VisibilityTimeout], "45");
    let redrive: serde_json::Value =
        serde_json::from_str(&queue[&QueueAttributeName::RedrivePolicy]).unwrap();
    assert_eq!(
        redrive["deadLetterTargetArn"].as_str(),
        Some(dlq[&QueueAttributeName::QueueArn].as_str())
    );
    assert_eq!(
        redrive["maxReceiveCount"].to_string().trim_matches('"'),
        "7"
    );
    assert_eq!(dlq[&QueueAttributeName::FifoQueue], "true");
}

#[tokio::test]
async fn a_configured_queue_url_is_used_as_is() {
    let sdk = common::sdk().await;
    let existing = ensure_resources(&sdk, &common::fresh_config())
        .await
        .unwrap();
    let config = AwsConfig {
        queue_url: Some(existing.queue_url.clone()),
        ..common::fresh_config()
    };

    let resources = ensure_resources(&sdk, &config)
        .await
        .expect("ensure_resources");

    assert_eq!(resources.queue_url, existing.queue_url);
    assert_eq!(resources.dlq_url, None);
    let sqs = agentlane_aws::aws_sdk_sqs::Client::new(&sdk);
    let named = sqs
        .get_queue_url()
        .queue_name(&config.queue_name)
        .send()
        .await;
    assert!(
        named.is_err(),
        "no queue named {} was created",
        config.queue_name
    );
}

#[tokio::test]
async fn a_configured_standard_queue_is_refused() {
    let sdk = common::sdk().await;
    let sqs = agentlane_aws::aws_sdk_sqs::Client::new(&sdk);
    let standard = sqs
        .create_queue()
        .queue_name(format!("{}-standard", common::fresh_config().table))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let config = AwsConfig {
        queue_url: Some(standard),
        ..common::fresh_config()
    };
    let result = ensure_resources(&sdk, &config).await;
    assert!(
        matches!(result, Err(SetupError::InvalidConfig(_))),
        "{result:?}"
    );
}

#[tokio::test]
#[should_panic(expected = "is not reachable")]
async fn tests_fail_loudly_when_no_emulator_answers() {
    // a loopback port nobody listens on
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let sdk = setup::emulator_sdk_config(&endpoint).await;
    common::require_reachable(&sdk, &endpoint).await;
}
