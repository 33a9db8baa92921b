//! The embedded queue's fair dispatch across tenants (issue 12): a tenant that floods many
//! sessions does not make another tenant's turn wait behind its backlog, and a tenant never
//! has more than its cap of messages in flight.

use agentlane_conformance::fixtures;
use agentlane_core::{Lane, LaneQueue, SessionKey, TenantId};
use agentlane_store_sqlite::SqliteBackend;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn lane(tenant: &str, session: usize) -> Lane {
    Lane::for_session(
        &TenantId::new(tenant),
        &SessionKey::new(format!("s{session}")),
    )
}

/// Enqueues A's flood (`turns` turns round robin over `sessions` sessions), then one turn of B.
async fn flood_then_b(queue: &SqliteBackend, turns: usize, sessions: usize) {
    for i in 0..turns {
        queue
            .enqueue(&fixtures::message(&lane("a", i % sessions)))
            .await
            .unwrap();
    }
    queue
        .enqueue(&fixtures::message(&lane("b", 0)))
        .await
        .unwrap();
}

/// Takes one delivery, processes it at once (ack), and says whose it was; `None` when nothing
/// is deliverable.
async fn one_turn(queue: &SqliteBackend) -> Option<String> {
    let got = queue.receive(1, LONG, Duration::ZERO).await.unwrap();
    let delivery = got.into_iter().next()?;
    queue.ack(&delivery.receipt).await.unwrap();
    Some(delivery.message.lane.tenant_part().to_owned())
}

#[tokio::test]
async fn a_flooding_tenant_does_not_make_another_tenants_turn_wait_behind_its_backlog() {
    // GIVEN tenant A's 500 turns over 100 sessions, enqueued before tenant B's one turn
    let queue = SqliteBackend::open_temporary().unwrap();
    flood_then_b(&queue, 500, 100).await;

    // WHEN one worker takes turns one after the other
    let mut order = Vec::new();
    while order.len() < 5 {
        order.push(one_turn(&queue).await.expect("a turn is ready"));
    }

    // THEN B's turn is among the very first done: A's backlog is still almost all queued
    let b_at = order
        .iter()
        .position(|t| t == "b")
        .expect("B's turn was served");
    assert!(b_at <= 1, "B's turn came {b_at}th: {order:?}");
    let stats = queue.queue_stats().await.unwrap();
    assert!(stats.waiting >= 495, "{stats:?}");
}

#[tokio::test]
async fn one_batch_interleaves_tenants_instead_of_taking_the_oldest_heads() {
    // GIVEN A's heads on 20 sessions, then B's and C's on 2 sessions each
    let queue = SqliteBackend::open_temporary().unwrap();
    for i in 0..20 {
        queue
            .enqueue(&fixtures::message(&lane("a", i)))
            .await
            .unwrap();
    }
    for tenant in ["b", "c"] {
        for i in 0..2 {
            queue
                .enqueue(&fixtures::message(&lane(tenant, i)))
                .await
                .unwrap();
        }
    }

    // WHEN six deliveries are asked for at once
    let got = queue.receive(6, LONG, Duration::ZERO).await.unwrap();

    // THEN each tenant gets two
    let mut tenants: Vec<&str> = got.iter().map(|d| d.message.lane.tenant_part()).collect();
    tenants.sort_unstable();
    assert_eq!(tenants, ["a", "a", "b", "b", "c", "c"]);
}

#[tokio::test]
async fn a_tenant_at_its_in_flight_cap_gets_nothing_more_while_others_do() {
    // GIVEN a cap of 2 messages in flight per tenant, A's 10 ready sessions and B's 1
    let queue = SqliteBackend::open_temporary().unwrap();
    queue.set_tenant_in_flight_cap(2);
    for i in 0..10 {
        queue
            .enqueue(&fixtures::message(&lane("a", i)))
            .await
            .unwrap();
    }
    queue
        .enqueue(&fixtures::message(&lane("b", 0)))
        .await
        .unwrap();

    // WHEN workers keep asking for turns without finishing any
    let mut held = Vec::new();
    for _ in 0..5 {
        held.extend(queue.receive(1, LONG, Duration::ZERO).await.unwrap());
    }

    // THEN A holds 2, B its 1, and nothing more is handed out
    let count = |t: &str| {
        held.iter()
            .filter(|d| d.message.lane.tenant_part() == t)
            .count()
    };
    assert_eq!((count("a"), count("b")), (2, 1));

    // WHEN one of A's turns ends, THEN A gets exactly one more
    let done = held
        .iter()
        .position(|d| d.message.lane.tenant_part() == "a")
        .unwrap();
    queue.ack(&held.remove(done).receipt).await.unwrap();
    let next = queue.receive(4, LONG, Duration::ZERO).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].message.lane.tenant_part(), "a");
}
