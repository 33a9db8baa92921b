//! The cron handler sweeps stuck sessions once per invocation (SPEC §10), against DynamoDB on
//! the emulator: a session whose runner died mid-run is recovered and the report says so.

use agentlane_agent::writer::{CommitKind, DeltaFlush, Positions, RunWriter};
use agentlane_aws::setup::{self, AwsConfig};
use agentlane_aws::{DynamoStore, SqsLaneQueue, ensure_resources};
use agentlane_core::{
    Clock, LockAttempt, Message, NewTurn, RunId, RunStatus, SessionId, SessionKey, SessionStatus,
    Store, SystemClock, TenantId, TurnRequest,
};
use agentlane_cron::CronFunction;
use agentlane_host::metrics::EmfWriter;
use agentlane_scheduler::{Ticker, TickerConfig, WebhookSender};
use agentlane_supervisor::{Supervisor, Thresholds};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use std::sync::Arc;
use std::time::Duration;

const FIXTURE: &str = include_str!("../fixtures/scheduled-event.json");

fn event_sent(ago: Duration) -> EventBridgeEvent<serde_json::Value> {
    let time = chrono::Utc::now() - chrono::Duration::from_std(ago).unwrap();
    let time = time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    serde_json::from_str(&FIXTURE.replace("2026-11-30T04:00:00Z", &time)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cron_invocation_reports_sessions_swept_and_recovered() {
    // GIVEN DynamoDB + SQS on the emulator, one idle session and one whose runner died mid-run
    let endpoint = std::env::var("AWS_ENDPOINT_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:4566".to_owned());
    let sdk = setup::emulator_sdk_config(&endpoint).await;
    let id = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let config = AwsConfig {
        table: format!("agentlane-sweep-{id}"),
        queue_name: format!("agentlane-sweep-{id}.fifo"),
        dlq_name: format!("agentlane-sweep-{id}-dlq.fifo"),
        ..AwsConfig::default()
    };
    let resources = ensure_resources(&sdk, &config)
        .await
        .expect("emulator resources");
    let dynamo = DynamoStore::new(
        agentlane_aws::aws_sdk_dynamodb::Client::new(&sdk),
        resources.table,
    );
    let queue = SqsLaneQueue::new(
        agentlane_aws::aws_sdk_sqs::Client::new(&sdk),
        resources.queue_url,
    );
    let store: Arc<dyn Store> = Arc::new(dynamo.clone());
    let tenant = TenantId::new("acme");
    let mut runs = Vec::new();
    for key in ["idle", "dead"] {
        let out = store
            .accept_turn(NewTurn {
                tenant: tenant.clone(),
                session_key: SessionKey::new(key),
                run_id: RunId::generate(),
                new_session_id: SessionId::generate(),
                request: TurnRequest {
                    message: "hi".into(),
                    queue_mode: Default::default(),
                    model: None,
                    thinking: None,
                    timeout_seconds: None,
                    extra_system_prompt: None,
                    deadline_at: None,
                    model_idle_timeout_ms: None,
                },
                idempotency_key: None,
                now: SystemClock.now_ms(),
                idempotency_ttl_ms: 1000,
            })
            .await
            .unwrap();
        runs.push(out.run);
    }
    let dead = runs[1].clone();
    let LockAttempt::Acquired(fence, _) = store
        .acquire_lock(
            &tenant,
            &dead.session_key,
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
        dead.clone(),
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
    tokio::time::sleep(Duration::from_millis(400)).await;

    // WHEN a cron invocation runs with a supervisor (abort threshold 200 ms)
    let ticker = Ticker::new(
        Arc::new(dynamo.clone()),
        Arc::new(dynamo.clone()),
        Arc::new(queue),
        Arc::new(SystemClock),
        TickerConfig {
            tick: Duration::from_millis(200),
            ..TickerConfig::default()
        },
        WebhookSender::new(agentlane_tools::ssrf::SsrfPolicy::default()),
    );
    let supervisor = Supervisor::new(
        store.clone(),
        Arc::new(dynamo.clone()),
        Arc::new(SystemClock),
        Thresholds::new(Duration::from_millis(100), Some(Duration::from_millis(200))),
    );
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let captured = lines.clone();
    let handler = CronFunction::new(ticker, Arc::new(SystemClock))
        .with_supervisor(Arc::new(supervisor))
        .with_emf(EmfWriter::with_sink("agentlane/test", move |line: &str| {
            captured.lock().unwrap().push(line.to_owned())
        }));
    let report = handler
        .handle(event_sent(Duration::from_secs(59)), None)
        .await
        .unwrap();

    // THEN it swept the one processing session (not the idle one) and recovered it
    assert_eq!(
        (
            report.sweep.swept,
            report.sweep.stuck,
            report.sweep.recovered
        ),
        (1, 1, 1)
    );
    let ended = store.get_run(&tenant, &dead.run_id).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Aborted);
    assert_eq!(ended.error.unwrap().code, "stuck");
    let session = store
        .get_session(&tenant, &dead.session_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.status, SessionStatus::Idle);
    assert_eq!(session.lock_owner, None);
    // AND the JSON report names the counts
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["sweep"]["recovered"], 1);
    assert_eq!(json["sweep"]["swept"], 1);
    // AND the invocation printed the stuck-session count as an EMF record (the stuck-sessions
    // alarm reads it)
    let records: Vec<serde_json::Value> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stuck = records
        .iter()
        .find(|r| r.get("stuck_sessions").is_some())
        .unwrap_or_else(|| panic!("no stuck_sessions record: {records:#?}"));
    assert_eq!(stuck["stuck_sessions"], 1.0);
    assert_eq!(
        stuck["_aws"]["CloudWatchMetrics"][0],
        serde_json::json!({
            "Namespace": "agentlane/test",
            "Dimensions": [[]],
            "Metrics": [{"Name": "stuck_sessions", "Unit": "Count"}],
        })
    );
}
