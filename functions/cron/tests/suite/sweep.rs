//! The cron handler sweeps stuck sessions once per invocation (SPEC §10), against DynamoDB and
//! SQS on the emulator: a session whose runner died mid-run is recovered and the report says
//! so; a turn found in the SQS dead-letter queue ends `dead_lettered`, once, and its message is
//! deleted only after that (kept while its session is locked by a live runner).

use crate::support::{Aws, abandon_mid_turn, accept, event_sent, fresh_aws, ticker};
use agentlane_aws::DynamoStore;
use agentlane_aws::SqsDeadLetters;
use agentlane_aws::aws_sdk_sqs::types::QueueAttributeName;
use agentlane_aws::queue::{message_body, message_group_id};
use agentlane_conformance::fixtures;
use agentlane_core::{
    Clock, Lane, LaneMessage, Layered, LockAttempt, ProcessingIndex, RunStatus, SessionKey,
    SessionStatus, Store, StoreCall, StoreLayer, SystemClock, TenantId, TurnMessage,
};
use agentlane_cron::CronFunction;
use agentlane_host::metrics::EmfWriter;
use agentlane_supervisor::{Supervisor, Thresholds};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cron_invocation_reports_sessions_swept_and_recovered() {
    // GIVEN DynamoDB + SQS on the emulator, one idle session and one whose runner died mid-run
    let aws = fresh_aws("sweep").await;
    let store: Arc<dyn Store> = Arc::new(aws.store.clone());
    let tenant = TenantId::new("acme");
    let mut runs = Vec::new();
    for key in ["idle", "dead"] {
        runs.push(accept(&store, &tenant, key).await);
    }
    let dead = runs[1].clone();
    abandon_mid_turn(&store, &dead).await;
    tokio::time::sleep(Duration::from_millis(400)).await;

    // WHEN a cron invocation runs with a supervisor (abort threshold 200 ms)
    let supervisor = Supervisor::new(
        store.clone(),
        Arc::new(aws.store.clone()),
        Arc::new(SystemClock),
        Thresholds::new(Duration::from_millis(100), Some(Duration::from_millis(200))),
    );
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let captured = lines.clone();
    let handler = CronFunction::new(ticker(&aws), Arc::new(SystemClock))
        .with_supervisor(Arc::new(supervisor))
        .with_emf(EmfWriter::with_sink("agentlane/test", move |line: &str| {
            captured.lock().unwrap().push(line.to_owned())
        }));
    let report = handler
        .handle(event_sent(Duration::from_secs(59)), None)
        .await
        .unwrap();

    // THEN it swept the one processing session and recovered it; the idle one, whose queued
    // run never got a lane message (none was sent), is found through the pending index and
    // counted stuck too (issue 11: queued work without an active run); both had pending work
    // past the threshold
    assert_eq!(
        (
            report.sweep.swept,
            report.sweep.stuck,
            report.sweep.recovered,
            report.sweep.pending
        ),
        (1, 2, 1, 2)
    );
    let ended = fixtures::stored_run(&store, &dead).await;
    assert_eq!(ended.status, RunStatus::Aborted);
    assert_eq!(ended.error.unwrap().code, "stuck");
    let session = fixtures::session(&store, &tenant, &dead.session_key).await;
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
    assert_eq!(
        stuck["stuck_sessions"], 2.0,
        "the processing and the idle one"
    );
    assert_eq!(
        stuck["_aws"]["CloudWatchMetrics"][0],
        serde_json::json!({
            "Namespace": "agentlane/test",
            "Dimensions": [[]],
            "Metrics": [{"Name": "stuck_sessions", "Unit": "Count"}],
        })
    );
}

/// A turn whose lane message sits in the SQS dead-letter queue.
struct DeadLetterWorld {
    store: Arc<dyn Store>,
    aws: Aws,
    dlq_url: String,
    tenant: TenantId,
}

impl DeadLetterWorld {
    async fn new() -> Self {
        let aws = fresh_aws("dlq").await;
        Self {
            store: Arc::new(aws.store.clone()),
            dlq_url: aws.dlq_url.clone().expect("a dead-letter queue"),
            aws,
            tenant: TenantId::new("acme"),
        }
    }

    async fn accept(&self, key: &str) -> agentlane_core::Run {
        accept(&self.store, &self.tenant, key).await
    }

    /// Puts the run's lane message straight into the DLQ (as SQS does once its receive count
    /// ran out), with a fresh deduplication id.
    async fn dead_letter(&self, run: &agentlane_core::Run) {
        let message = LaneMessage {
            lane: Lane::for_session(&run.tenant, &run.session_key),
            dedup_id: run.run_id.to_string(),
            body: TurnMessage {
                tenant: run.tenant.clone(),
                run_id: run.run_id.clone(),
                session_key: Some(run.session_key.clone()),
                accepted: None,
            },
        };
        self.aws
            .sqs
            .send_message()
            .queue_url(&self.dlq_url)
            .message_group_id(message_group_id(&message.lane))
            .message_deduplication_id(uuid::Uuid::new_v4().simple().to_string())
            .message_body(message_body(&message))
            .send()
            .await
            .unwrap();
    }

    fn handler(&self) -> CronFunction {
        let supervisor = Supervisor::new(
            self.store.clone(),
            Arc::new(self.aws.store.clone()),
            Arc::new(SystemClock),
            Thresholds::new(Duration::from_secs(60), None),
        )
        .with_dead_letters(Arc::new(SqsDeadLetters::new(
            self.aws.sqs.clone(),
            self.dlq_url.clone(),
        )));
        CronFunction::new(ticker(&self.aws), Arc::new(SystemClock))
            .with_supervisor(Arc::new(supervisor))
    }

    /// Messages visible in the DLQ now (received with a zero visibility, so they stay).
    async fn dlq_depth(&self) -> usize {
        self.aws
            .sqs
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
            .len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_in_the_sqs_dead_letter_queue_ends_dead_lettered_once_and_frees_its_session() {
    // GIVEN a run whose runner crashed mid-turn (lock lease run out) and whose lane message
    // then reached the SQS DLQ, and a second turn queued behind it on the same session
    let w = DeadLetterWorld::new().await;
    let run = w.accept("lost").await;
    let next = w.accept("lost").await;
    abandon_mid_turn(&w.store, &run).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    w.dead_letter(&run).await;

    // WHEN a cron invocation sweeps
    let handler = w.handler();
    let report = handler
        .handle(event_sent(Duration::from_secs(59)), None)
        .await
        .unwrap();

    // THEN the run ended `error` (`dead_lettered`), abandoned, and its session is free for
    // the next turn (idle, lock released, one run finished)
    assert_eq!(report.sweep.dead_lettered, 1, "{report:?}");
    let ended = fixtures::stored_run(&w.store, &run).await;
    assert_eq!(ended.status, RunStatus::Error);
    assert_eq!(ended.error.as_ref().unwrap().code, "dead_lettered");
    let session = fixtures::session(&w.store, &w.tenant, &run.session_key).await;
    assert_eq!(session.status, SessionStatus::Idle);
    assert_eq!(session.lock_owner, None);
    assert_eq!(session.runs_finished, 1, "the next turn may start");
    let queued = fixtures::stored_run(&w.store, &next).await;
    assert_eq!(
        queued.status,
        RunStatus::Queued,
        "only the dead-lettered run ended"
    );
    // AND the dead letter is gone
    assert_eq!(w.dlq_depth().await, 0);

    // WHEN the same message reaches the DLQ again (a duplicate) and the sweep runs again
    w.dead_letter(&run).await;
    let again = handler
        .handle(event_sent(Duration::from_secs(59)), None)
        .await
        .unwrap();

    // THEN nothing is ended twice, and the duplicate is deleted too
    assert_eq!(again.sweep.dead_lettered, 0, "{again:?}");
    let same = fixtures::stored_run(&w.store, &run).await;
    assert_eq!(same, ended);
    assert_eq!(w.dlq_depth().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_whose_session_is_locked_by_a_live_runner_is_kept_for_a_later_sweep() {
    // GIVEN a run in the DLQ whose session lock is held with a live lease
    let w = DeadLetterWorld::new().await;
    let run = w.accept("busy").await;
    let LockAttempt::Acquired(..) = w
        .store
        .acquire_lock(
            &w.tenant,
            &run.session_key,
            "runner-1",
            60_000,
            SystemClock.now_ms(),
        )
        .await
        .unwrap()
    else {
        panic!("lock held")
    };
    w.dead_letter(&run).await;

    // WHEN a cron invocation sweeps
    let report = w
        .handler()
        .handle(event_sent(Duration::from_secs(59)), None)
        .await
        .unwrap();

    // THEN the run is untouched and the dead letter is not deleted (it comes back once its
    // visibility runs out)
    assert_eq!(report.sweep.dead_lettered, 0, "{report:?}");
    let same = fixtures::stored_run(&w.store, &run).await;
    assert_eq!(same.status, RunStatus::Queued);
    let attributes = w
        .aws
        .sqs
        .get_queue_attributes()
        .queue_url(&w.dlq_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let in_flight = attributes
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessagesNotVisible))
        .cloned()
        .unwrap_or_default();
    assert_eq!(in_flight, "1", "kept, hidden until a later sweep");
}

/// Counts the store calls (each one DynamoDB request; a commit is one `TransactWriteItems`, plus
/// one `GetItem` when it writes transcript entries) of the store it wraps.
struct CountingStore {
    inner: Arc<dyn Store>,
    calls: Arc<Mutex<Vec<StoreCall>>>,
}

#[async_trait::async_trait]
impl StoreLayer for CountingStore {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    async fn before(&self, call: StoreCall) -> agentlane_core::StoreResult<()> {
        self.calls.lock().unwrap().push(call);
        Ok(())
    }
}

/// Counts the index queries of the processing index it wraps.
struct CountingIndex {
    inner: DynamoStore,
    queries: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl ProcessingIndex for CountingIndex {
    async fn processing_sessions(
        &self,
        progress_before: u64,
        limit: usize,
    ) -> agentlane_core::StoreResult<Vec<agentlane_core::Session>> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        self.inner.processing_sessions(progress_before, limit).await
    }
}

/// The sweep's cost (issue 11's closing figure): on a table of idle sessions (the default 50;
/// `AGENTLANE_SWEEP_COST_IDLE=n` for more; the report quotes n = 300) one sweep is one index query
/// and no other request, whatever their number; one stuck session adds a fixed handful.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_over_a_table_of_idle_sessions_is_one_index_query() {
    let idle: usize = std::env::var("AGENTLANE_SWEEP_COST_IDLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    // GIVEN a table of `idle` idle sessions (each with a turn accepted)
    let w = DeadLetterWorld::new().await;
    let started = std::time::Instant::now();
    // One at a time: the emulator answers 500 to concurrent transactions.
    for i in 0..idle {
        for attempt in 0.. {
            let key = SessionKey::new(format!("idle-{i}"));
            let turn = fixtures::turn(&w.tenant, &key, SystemClock.now_ms());
            let accepted = w.store.accept_turn(turn).await;
            match accepted {
                Ok(_) => break,
                Err(e) if attempt < 3 => eprintln!("retrying an accept: {e}"),
                Err(e) => panic!("{e}"),
            }
        }
    }
    eprintln!("{idle} idle sessions written in {:?}", started.elapsed());
    let calls = Arc::new(Mutex::new(Vec::new()));
    let queries = Arc::new(AtomicUsize::new(0));
    let counted: Arc<dyn Store> = Arc::new(Layered(CountingStore {
        inner: w.store.clone(),
        calls: calls.clone(),
    }));
    let supervisor = Supervisor::new(
        counted.clone(),
        Arc::new(CountingIndex {
            inner: w.aws.store.clone(),
            queries: queries.clone(),
        }),
        Arc::new(SystemClock),
        Thresholds::new(Duration::from_millis(100), Some(Duration::from_millis(200))),
    );

    // WHEN one sweep runs
    let report = supervisor.sweep().await.unwrap();

    // THEN it looked at no session: one index query, no other request
    assert_eq!(report.swept, 0, "{report:?}");
    assert_eq!(queries.load(Ordering::SeqCst), 1);
    assert_eq!(*calls.lock().unwrap(), Vec::<StoreCall>::new());

    // WHEN one session of the table is stuck (its runner died mid-run) and the sweep runs
    let run = w.accept("stuck").await;
    abandon_mid_turn(&w.store, &run).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    calls.lock().unwrap().clear();
    queries.store(0, Ordering::SeqCst);
    let report = supervisor.sweep().await.unwrap();

    // THEN it recovered that one session at a fixed cost
    assert_eq!((report.swept, report.recovered), (1, 1), "{report:?}");
    let made = calls.lock().unwrap().clone();
    eprintln!(
        "sweep cost with {idle} idle sessions: no stuck session: 1 index query; one stuck \
         session recovered: {} index query + {} store calls {made:?}",
        queries.load(Ordering::SeqCst),
        made.len()
    );
    assert_eq!(queries.load(Ordering::SeqCst), 1);
    assert!(made.len() <= 8, "{made:?}");
}
