//! DynamoDB-specific behaviour of `DynamoStore` on the emulator: how cancelled transactions map
//! to store errors, a commit at core's limits in one transaction, the sparse `processing` index
//! and TTL attributes.

use crate::common;

use agentlane_aws::DynamoStore;
use agentlane_aws::aws_sdk_dynamodb::Client;
use agentlane_aws::aws_sdk_dynamodb::types::AttributeValue;
use agentlane_aws::store::{EVENT_RETENTION, PROCESSING_INDEX};
use agentlane_conformance::fixtures;
use agentlane_core::{
    Clock, Commit, Event, EventStream, Fence, FencedWriter, HistoryReader, LockAttempt,
    MAX_COMMIT_WRITES, Message, NewTurn, Run, RunId, RunStatus, SessionKey, SessionLock,
    SessionStatus, SessionUpdate, StoreError, SystemClock, TenantId, TranscriptEntry, TurnIntake,
};
use std::collections::HashMap;

struct Fixture {
    store: DynamoStore,
    client: Client,
    table: String,
    tenant: TenantId,
    key: SessionKey,
    run: Run,
    now: u64,
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A fresh session with one accepted run.
async fn fixture() -> Fixture {
    let sdk = common::sdk().await;
    let table = common::fresh_table(&sdk).await;
    let client = Client::new(&sdk);
    let store = DynamoStore::new(client.clone(), table.clone());
    let (tenant, key, now) = (
        TenantId::new(unique("tenant")),
        SessionKey::new(unique("key")),
        SystemClock.now_ms(),
    );
    let mut turn = fixtures::turn(&tenant, &key, now);
    turn.idempotency_key = Some(unique("idem"));
    let run = store.accept_turn(turn).await.expect("accept_turn").run;
    Fixture {
        store,
        client,
        table,
        tenant,
        key,
        run,
        now,
    }
}

impl Fixture {
    async fn lock(&self, owner: &str, lease_ms: u64, now: u64) -> Fence {
        match self
            .store
            .acquire_lock(&self.tenant, &self.key, owner, lease_ms, now)
            .await
            .expect("acquire_lock")
        {
            LockAttempt::Acquired(fence, _) => fence,
            held => panic!("expected the lock, got {held:?}"),
        }
    }

    async fn transcript(&self) -> Vec<TranscriptEntry> {
        self.store
            .read_transcript(&self.tenant, &self.run.session_id, None, 10_000)
            .await
            .expect("read_transcript")
    }

    async fn raw_item(&self, pk: String, sk: &str) -> HashMap<String, AttributeValue> {
        self.client
            .get_item()
            .table_name(&self.table)
            .key("PK", AttributeValue::S(pk))
            .key("SK", AttributeValue::S(sk.into()))
            .consistent_read(true)
            .send()
            .await
            .expect("get_item")
            .item
            .expect("item exists")
    }
}

fn entry(seq: u64, run_id: &RunId, ts: u64) -> TranscriptEntry {
    TranscriptEntry {
        seq,
        run_id: run_id.clone(),
        ts,
        message: Message::user(format!("message {seq}")),
    }
}

fn event(seq: u64, ts: u64) -> Event {
    Event {
        seq,
        stream: EventStream::Assistant,
        ts,
        data: serde_json::json!({ "text": format!("delta {seq}") }),
    }
}

fn number(item: &HashMap<String, AttributeValue>, name: &str) -> u64 {
    item[name].as_n().expect("a number").parse().expect("a u64")
}

#[tokio::test]
async fn a_commit_with_a_stale_fence_is_fence_lost_even_when_its_seqs_are_free() {
    // GIVEN runner A's lease expired and runner B took the lock
    let f = fixture().await;
    let stale = f.lock("runner-a", 1_000, f.now).await;
    let _current = f.lock("runner-b", 30_000, f.now + 2_000).await;

    // WHEN A commits entries, events and the run
    let commit = Commit {
        transcript: vec![entry(1, &f.run.run_id, f.now)],
        events: vec![event(1, f.now)],
        run: Some(Run {
            status: RunStatus::Running,
            ..f.run.clone()
        }),
        ..Commit::default()
    };
    let result = f.store.commit(&stale, commit).await;

    // THEN the cancelled transaction reads as FenceLost, not as a conflict
    assert_eq!(result, Err(StoreError::FenceLost));
    assert!(f.transcript().await.is_empty());
    let run = f
        .store
        .get_run(&f.tenant, &f.run.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Queued);
}

#[tokio::test]
async fn a_taken_seq_is_a_conflict_naming_the_entry_and_the_fence_stays_valid() {
    let f = fixture().await;
    let fence = f.lock("runner-a", 30_000, f.now).await;
    let first = Commit {
        transcript: vec![entry(1, &f.run.run_id, f.now)],
        ..Commit::default()
    };
    f.store.commit(&fence, first).await.expect("first commit");

    let again = Commit {
        transcript: vec![
            entry(2, &f.run.run_id, f.now),
            entry(1, &f.run.run_id, f.now),
        ],
        ..Commit::default()
    };
    match f.store.commit(&fence, again).await {
        Err(StoreError::Conflict(what)) => {
            assert!(what.contains("transcript entry 1"), "{what}");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // one seq twice within a commit is refused the same way, before DynamoDB sees it
    let twice = Commit {
        transcript: vec![
            entry(2, &f.run.run_id, f.now),
            entry(2, &f.run.run_id, f.now),
        ],
        ..Commit::default()
    };
    assert!(matches!(
        f.store.commit(&fence, twice).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(f.transcript().await, vec![entry(1, &f.run.run_id, f.now)]);
    f.store
        .release_lock(&fence)
        .await
        .expect("a conflict does not cost the lock");
}

/// Core's limits keep the largest commit one transaction: `MAX_COMMIT_WRITES` entries and events,
/// the run, the session update and the release are 99 items, within DynamoDB's 100.
#[tokio::test]
async fn a_commit_at_the_limits_is_one_transaction() {
    let f = fixture().await;
    let fence = f.lock("runner-a", 30_000, f.now).await;
    let writes = MAX_COMMIT_WRITES as u64;
    let entries: Vec<_> = (1..=writes - 7)
        .map(|s| entry(s, &f.run.run_id, f.now))
        .collect();
    let events: Vec<_> = (1..=7).map(|s| event(s, f.now)).collect();
    let finished = Run {
        status: RunStatus::Ok,
        ended_at: Some(f.now + 1),
        ..f.run.clone()
    };
    let commit = Commit {
        run_id: None,
        transcript: entries.clone(),
        events: events.clone(),
        run: Some(finished.clone()),
        session: Some(SessionUpdate {
            status: SessionStatus::Idle,
            active_run_id: None,
            last_progress_at: f.now + 1,
            finished_delta: 1,
        }),
        release_lock: true,
    };
    assert!(commit.fits());

    f.store.commit(&fence, commit).await.expect("full commit");

    assert_eq!(f.transcript().await, entries);
    let stored_events = f
        .store
        .read_events(&f.tenant, &f.run.run_id, None, 1_000)
        .await
        .unwrap();
    assert_eq!(stored_events, events);
    assert_eq!(
        f.store.get_run(&f.tenant, &f.run.run_id).await.unwrap(),
        Some(finished)
    );
    let session = f
        .store
        .get_session(&f.tenant, &f.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.runs_finished, 1);
    assert_eq!(session.lock_owner, None);
}

#[tokio::test]
async fn a_full_commit_with_a_stale_fence_writes_nothing() {
    let f = fixture().await;
    let stale = f.lock("runner-a", 1_000, f.now).await;
    let _current = f.lock("runner-b", 30_000, f.now + 2_000).await;
    let commit = Commit {
        transcript: (1..=MAX_COMMIT_WRITES as u64)
            .map(|s| entry(s, &f.run.run_id, f.now))
            .collect(),
        ..Commit::default()
    };
    assert_eq!(
        f.store.commit(&stale, commit).await,
        Err(StoreError::FenceLost)
    );
    assert!(f.transcript().await.is_empty());
}

#[tokio::test]
async fn processing_sessions_are_in_the_sparse_index_only_while_processing() {
    let f = fixture().await;
    let fence = f.lock("runner-a", 30_000, f.now).await;
    let session_pk = format!("T#{}#S#{}", f.tenant, f.key);
    let in_index = || async {
        let out = f
            .client
            .query()
            .table_name(&f.table)
            .index_name(PROCESSING_INDEX)
            .key_condition_expression("procPk = :p AND procAt >= :since")
            .filter_expression("PK = :pk")
            .expression_attribute_values(":p", AttributeValue::S("PROCESSING".into()))
            .expression_attribute_values(":since", AttributeValue::N(f.now.to_string()))
            .expression_attribute_values(":pk", AttributeValue::S(session_pk.clone()))
            .send()
            .await
            .expect("query the processing index");
        out.items.unwrap_or_default()
    };
    assert!(
        in_index().await.is_empty(),
        "an idle session is not indexed"
    );

    let begin = Commit {
        session: Some(SessionUpdate {
            status: SessionStatus::Processing,
            active_run_id: Some(f.run.run_id.clone()),
            last_progress_at: f.now + 7,
            finished_delta: 0,
        }),
        ..Commit::default()
    };
    f.store.commit(&fence, begin).await.expect("commit");
    let indexed = in_index().await;
    assert_eq!(indexed.len(), 1, "{indexed:?}");
    assert_eq!(number(&indexed[0], "procAt"), f.now + 7);
    assert_eq!(
        indexed[0]["activeRunId"].as_s().unwrap(),
        f.run.run_id.as_str()
    );

    let end = Commit {
        session: Some(SessionUpdate {
            status: SessionStatus::Idle,
            active_run_id: None,
            last_progress_at: f.now + 9,
            finished_delta: 1,
        }),
        release_lock: true,
        ..Commit::default()
    };
    f.store.commit(&fence, end).await.expect("commit");
    assert!(in_index().await.is_empty(), "idle again: out of the index");
}

#[tokio::test]
async fn events_and_idempotency_records_carry_a_ttl_in_epoch_seconds() {
    let f = fixture().await;
    let fence = f.lock("runner-a", 30_000, f.now).await;
    let commit = Commit {
        events: vec![event(1, f.now)],
        run: Some(f.run.clone()),
        ..Commit::default()
    };
    f.store.commit(&fence, commit).await.expect("commit");

    let now_secs = f.now / 1000;
    let event_item = f
        .raw_item(format!("T#{}#R#{}", f.tenant, f.run.run_id), "V#00000001")
        .await;
    let expires = number(&event_item, "expiresAt");
    let retention = EVENT_RETENTION.as_secs();
    assert!(
        (now_secs + retention - 5..=now_secs + retention + 5).contains(&expires),
        "event expiresAt {expires}, now {now_secs}"
    );
    let idem = f.run.idempotency_key.clone().expect("an idempotency key");
    let idem_item = f.raw_item(format!("T#{}#K#{idem}", f.tenant), "IDEM").await;
    let expires = number(&idem_item, "expiresAt");
    assert!(
        (now_secs + 86_400..=now_secs + 86_400 + 5).contains(&expires),
        "idempotency expiresAt {expires}, now {now_secs}"
    );
    assert_eq!(number(&idem_item, "expiresAtMs"), f.now + 86_400_000);
}

#[tokio::test]
async fn the_abort_flag_lives_in_its_own_attribute() {
    let f = fixture().await;
    let aborted = f
        .store
        .request_abort(&f.tenant, &f.run.run_id)
        .await
        .unwrap()
        .expect("the run exists");
    assert!(aborted.abort_requested);
    let item = f
        .raw_item(format!("T#{}#R#{}", f.tenant, f.run.run_id), "RUN")
        .await;
    assert_eq!(item["abortRequested"], AttributeValue::Bool(true));
    let json: serde_json::Value = serde_json::from_str(item["run"].as_s().unwrap()).unwrap();
    assert_eq!(
        json["abortRequested"],
        serde_json::json!(false),
        "the JSON is not touched"
    );
}

#[tokio::test]
async fn concurrent_accepts_with_one_idempotency_key_create_one_run() {
    let f = fixture().await;
    let key = SessionKey::new(unique("racing"));
    let idem = unique("idem");
    let racers = (0..6).map(|i| {
        let (store, tenant, key, idem) =
            (f.store.clone(), f.tenant.clone(), key.clone(), idem.clone());
        let now = f.now + i;
        tokio::spawn(async move {
            // The same request each time (a retried submit): a different one is a conflict.
            let turn = NewTurn {
                request: fixtures::request("try"),
                idempotency_key: Some(idem),
                idempotency_ttl_ms: 60_000,
                ..fixtures::turn(&tenant, &key, now)
            };
            store.accept_turn(turn).await
        })
    });
    let outcomes: Vec<_> = futures_join(racers).await;

    let created: Vec<_> = outcomes.iter().filter(|o| o.created).collect();
    assert_eq!(created.len(), 1, "{outcomes:?}");
    for outcome in &outcomes {
        assert_eq!(outcome.run.run_id, created[0].run.run_id);
    }
    let session = f.store.get_session(&f.tenant, &key).await.unwrap().unwrap();
    assert_eq!(session.runs_accepted, 1);
}

async fn futures_join<T: Send + 'static>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<Result<T, StoreError>>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        out.push(task.await.expect("task").expect("accept_turn"));
    }
    out
}
