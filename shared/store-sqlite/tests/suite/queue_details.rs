//! Queue behaviour the SQLite backend guarantees beyond the shared suite (which must also hold
//! for SQS and its emulators).

use agentlane_conformance::fixtures;
use agentlane_core::{Clock, LaneQueue, QueueError, Receipt};
use agentlane_store_sqlite::{QueueStats, SqliteBackend};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

fn fresh() -> SqliteBackend {
    SqliteBackend::open_temporary().unwrap()
}

#[tokio::test]
async fn a_stale_receipt_is_refused_and_the_message_kept() {
    let queue = fresh();
    let message = fixtures::message(&fixtures::lane());
    queue.enqueue(&message).await.unwrap();
    let first = queue
        .receive(1, Duration::from_millis(100), Duration::ZERO)
        .await
        .unwrap();
    let again = queue
        .receive(1, LONG, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(again[0].message, message);

    assert_eq!(
        queue.ack(&first[0].receipt).await,
        Err(QueueError::StaleReceipt)
    );
    assert_eq!(
        queue
            .set_visibility(&first[0].receipt, Duration::ZERO)
            .await,
        Err(QueueError::StaleReceipt)
    );
    assert_eq!(queue.queue_stats().await.unwrap().in_flight, 1);
    queue.ack(&again[0].receipt).await.unwrap();
    assert_eq!(
        queue.ack(&again[0].receipt).await,
        Err(QueueError::StaleReceipt),
        "a second ack of the same delivery"
    );
    assert_eq!(
        queue.ack(&Receipt("not-a-receipt".into())).await,
        Err(QueueError::StaleReceipt)
    );
}

#[tokio::test]
async fn an_acked_dedup_id_is_not_enqueued_again() {
    let queue = fresh();
    let message = fixtures::message(&fixtures::lane());
    queue.enqueue(&message).await.unwrap();
    let got = queue.receive(1, LONG, Duration::ZERO).await.unwrap();
    queue.ack(&got[0].receipt).await.unwrap();

    queue.enqueue(&message).await.unwrap();

    let later = queue
        .receive(10, LONG, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(
        later.is_empty(),
        "redelivered a processed message: {later:?}"
    );
    assert_eq!(
        queue.queue_stats().await.unwrap(),
        QueueStats {
            waiting: 0,
            in_flight: 0,
            done: 1
        }
    );
}

#[tokio::test]
async fn an_empty_long_poll_waits_its_full_wait() {
    let queue = fresh();
    let started = Instant::now();
    let got = queue
        .receive(10, LONG, Duration::from_millis(700))
        .await
        .unwrap();
    assert!(got.is_empty());
    assert!(
        started.elapsed() >= Duration::from_millis(690),
        "{:?}",
        started.elapsed()
    );
    assert!(
        queue
            .receive(0, LONG, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_waiting_receiver_gets_a_redelivery_as_soon_as_it_is_due() {
    let queue = fresh();
    let message = fixtures::message(&fixtures::lane());
    queue.enqueue(&message).await.unwrap();
    queue
        .receive(1, Duration::from_millis(300), Duration::ZERO)
        .await
        .unwrap();

    let started = Instant::now();
    let again = queue
        .receive(1, LONG, Duration::from_secs(5))
        .await
        .unwrap();

    assert_eq!(again[0].message, message);
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "due after 300 ms, delivered after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_message_goes_to_exactly_one_of_several_pollers() {
    let queue = fresh();
    let pollers: Vec<_> = (0..4)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move { queue.receive(10, LONG, Duration::from_secs(2)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    queue
        .enqueue(&fixtures::message(&fixtures::lane()))
        .await
        .unwrap();
    let mut delivered = 0;
    for poller in pollers {
        delivered += poller.await.unwrap().unwrap().len();
    }
    assert_eq!(delivered, 1);
}

#[tokio::test]
async fn receive_takes_at_most_max_lane_heads_oldest_first() {
    let queue = fresh();
    let sent: Vec<_> = (0..5)
        .map(|_| fixtures::message(&fixtures::lane()))
        .collect();
    for message in &sent {
        queue.enqueue(message).await.unwrap();
    }
    let first = queue.receive(3, LONG, Duration::ZERO).await.unwrap();
    let rest = queue.receive(3, LONG, Duration::ZERO).await.unwrap();
    let got: Vec<_> = first
        .iter()
        .chain(&rest)
        .map(|d| d.message.clone())
        .collect();
    assert_eq!(first.len(), 3);
    assert_eq!(got, sent);
}

/// A clock the test moves by hand.
struct ManualClock(AtomicU64);

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn visibility_follows_the_injected_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock(AtomicU64::new(1_000_000)));
    let queue = SqliteBackend::open_with_clock(dir.path(), clock.clone()).unwrap();
    let message = fixtures::message(&fixtures::lane());
    queue.enqueue(&message).await.unwrap();
    queue
        .receive(1, Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();

    clock.0.fetch_add(59_000, Ordering::SeqCst);
    let early = queue.receive(1, LONG, Duration::ZERO).await.unwrap();
    assert!(
        early.is_empty(),
        "still invisible 59 s into a 60 s visibility"
    );

    clock.0.fetch_add(2_000, Ordering::SeqCst);
    let due = queue.receive(1, LONG, Duration::ZERO).await.unwrap();
    assert_eq!(due[0].message, message);
    assert_eq!(due[0].receive_count, 2);
}

#[tokio::test]
async fn a_malformed_head_is_dropped_instead_of_blocking_its_lane() {
    let queue = fresh();
    let lane = fixtures::lane();
    {
        let conn = rusqlite::Connection::open(queue.database_path()).unwrap();
        conn.execute(
            "INSERT INTO lane_pending (lane, dedup_id, body, enqueued_at) VALUES (?1, 'bad', 'not json', 0)",
            [lane.as_str()],
        )
        .unwrap();
    }
    let good = fixtures::message(&lane);
    queue.enqueue(&good).await.unwrap();

    let first = queue.receive(10, LONG, Duration::ZERO).await.unwrap();
    let got = if first.is_empty() {
        queue.receive(10, LONG, Duration::ZERO).await.unwrap()
    } else {
        first
    };
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message, good);
}

#[tokio::test]
async fn a_malformed_head_is_dead_lettered_with_its_reason() {
    let queue = fresh();
    let lane = fixtures::lane();
    {
        let conn = rusqlite::Connection::open(queue.database_path()).unwrap();
        conn.execute(
            "INSERT INTO lane_pending (lane, dedup_id, body, enqueued_at) VALUES (?1, 'bad', '{\"x\":', 0)",
            [lane.as_str()],
        )
        .unwrap();
    }
    assert!(
        queue
            .receive(10, LONG, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    let dead = queue.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].dedup_id.as_str(), dead[0].reason.as_str()),
        ("bad", "malformed")
    );
    assert_eq!(dead[0].body, None);
}

#[tokio::test]
async fn failed_deliveries_past_the_cap_go_to_the_dead_letter_table_and_the_lane_moves_on() {
    // GIVEN a cap of 2 failed deliveries and two messages on one lane
    let queue = fresh();
    queue.set_max_failed_deliveries(2);
    let lane = fixtures::lane();
    let (stuck, next) = (fixtures::message(&lane), fixtures::message(&lane));
    queue.enqueue(&stuck).await.unwrap();
    queue.enqueue(&next).await.unwrap();
    let short = Duration::from_millis(50);

    // WHEN the head is handed back cleanly three times (not failures) ...
    for _ in 0..3 {
        let got = queue.receive(1, LONG, Duration::ZERO).await.unwrap();
        assert_eq!(got[0].message, stuck);
        queue
            .set_visibility(&got[0].receipt, Duration::ZERO)
            .await
            .unwrap();
    }
    // ... then delivered twice and left to time out each time
    for _ in 0..2 {
        let got = queue
            .receive(1, short, Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(
            got[0].message, stuck,
            "still delivered: fewer than 2 failures so far"
        );
    }

    // THEN the next receive dead-letters it and delivers the lane's next message
    let got = queue
        .receive(1, LONG, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message, next);
    let dead = queue.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body.as_ref(), Some(&stuck.body));
    assert_eq!((dead[0].failures, dead[0].receive_count), (2, 5));
    assert_eq!(dead[0].reason, "failed_deliveries");

    // AND a re-enqueue of the dead message is ignored; a forgotten dead letter is gone
    queue.enqueue(&stuck).await.unwrap();
    queue.ack(&got[0].receipt).await.unwrap();
    assert!(
        queue
            .receive(1, LONG, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    queue.forget_dead_letter(dead[0].id).await.unwrap();
    assert!(queue.dead_letters(10).await.unwrap().is_empty());
}
