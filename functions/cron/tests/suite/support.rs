//! What the tick and sweep tests share: the scheduled-event fixture, fresh emulator resources, the
//! ticker a handler runs, and turns accepted (and abandoned) on the table.

use agentlane_agent::writer::{CommitKind, DeltaFlush, Positions, RunWriter};
use agentlane_aws::setup::{self, AwsConfig};
use agentlane_aws::{DynamoStore, SqsLaneQueue, ensure_resources};
use agentlane_conformance::fixtures;
use agentlane_core::{Clock, LockAttempt, Message, Run, SessionKey, Store, SystemClock, TenantId};
use agentlane_scheduler::{Ticker, TickerConfig, WebhookSender};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use std::sync::Arc;
use std::time::Duration;

/// A real EventBridge scheduled event.
pub const FIXTURE: &str = include_str!("../fixtures/scheduled-event.json");
/// The fixture's `time`.
const FIXTURE_TIME: &str = "2026-11-30T04:00:00Z";

/// An EventBridge event from its JSON.
pub fn event(json: &str) -> EventBridgeEvent<serde_json::Value> {
    serde_json::from_str(json).unwrap()
}

/// The fixture with its `time` set `ago` before now (whole seconds, as EventBridge sends it).
pub fn event_sent(ago: Duration) -> EventBridgeEvent<serde_json::Value> {
    let time = chrono::Utc::now() - chrono::Duration::from_std(ago).unwrap();
    let time = time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    event(&FIXTURE.replace(FIXTURE_TIME, &time))
}

/// A fresh table, lane queue and dead-letter queue on the emulator.
pub struct Aws {
    pub store: DynamoStore,
    pub queue: SqsLaneQueue,
    pub sqs: agentlane_aws::aws_sdk_sqs::Client,
    pub dlq_url: Option<String>,
}

/// Fresh resources named `agentlane-{prefix}-{random}` on the emulator at `AWS_ENDPOINT_URL`
/// (default `http://127.0.0.1:4566`).
pub async fn fresh_aws(prefix: &str) -> Aws {
    let endpoint = std::env::var("AWS_ENDPOINT_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:4566".to_owned());
    let sdk = setup::emulator_sdk_config(&endpoint).await;
    let id = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let config = AwsConfig {
        table: format!("agentlane-{prefix}-{id}"),
        queue_name: format!("agentlane-{prefix}-{id}.fifo"),
        dlq_name: format!("agentlane-{prefix}-{id}-dlq.fifo"),
        ..AwsConfig::default()
    };
    let resources = ensure_resources(&sdk, &config).await.unwrap_or_else(|e| {
        panic!("the AWS emulator at {endpoint} is needed (localstack/start-emulator.sh): {e}")
    });
    let sqs = agentlane_aws::aws_sdk_sqs::Client::new(&sdk);
    Aws {
        store: DynamoStore::new(
            agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk),
            resources.table,
        ),
        queue: SqsLaneQueue::new(sqs.clone(), resources.queue_url),
        sqs,
        dlq_url: resources.dlq_url,
    }
}

/// A ticker over `aws` with a 200 ms tick.
pub fn ticker(aws: &Aws) -> Ticker {
    Ticker::new(
        Arc::new(aws.store.clone()),
        Arc::new(aws.store.clone()),
        Arc::new(aws.queue.clone()),
        Arc::new(SystemClock),
        TickerConfig {
            tick: Duration::from_millis(200),
            ..TickerConfig::default()
        },
        WebhookSender::new(agentlane_tools::ssrf::SsrfPolicy::default()),
    )
}

/// Accepts a turn on session `key` of `tenant` now and returns its run.
pub async fn accept(store: &Arc<dyn Store>, tenant: &TenantId, key: &str) -> Run {
    let turn = fixtures::turn(tenant, &SessionKey::new(key), SystemClock.now_ms());
    store.accept_turn(turn).await.unwrap().run
}

/// A runner that died mid-turn: it took the lock of `run`'s session with a 50 ms lease, picked
/// the run up and committed its first progress, then nothing more.
pub async fn abandon_mid_turn(store: &Arc<dyn Store>, run: &Run) {
    let LockAttempt::Acquired(fence, _) = store
        .acquire_lock(
            &run.tenant,
            &run.session_key,
            "runner-1",
            50,
            SystemClock.now_ms(),
        )
        .await
        .unwrap()
    else {
        panic!("lock held")
    };
    let mut writer = RunWriter::new(
        store.clone(),
        Arc::new(SystemClock),
        fence,
        run.clone(),
        Positions {
            next_seq: 0,
            next_event_seq: 0,
        },
        DeltaFlush {
            bytes: 512,
            every: Duration::ZERO,
        },
    );
    writer.begin_pickup("demo/m".into());
    writer
        .commit(CommitKind::Progress(vec![Message::user("hi")]))
        .await
        .unwrap();
}
