//! The embedded store as its own lane queue, told to lock on receive (as `serve` runs it): the
//! queue takes the session's lock in the write that delivers the message, the runner runs the
//! turn under that lock without acquiring one, and a delivery handed back unrun gives its lock
//! back at once instead of holding the session for the lock's lease.

use crate::support::*;
use agentlane_agent::TurnExit;
use agentlane_core::{DeliveredLock, LaneQueue, LockAttempt, Receipt, RunStatus, TurnMessage};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `f`'s queue delivers the next message, `msg`'s: its receipt and the lock taken with it.
async fn delivered(f: &Fixture, msg: &TurnMessage) -> (Receipt, DeliveredLock) {
    let got = f
        .backend
        .receive(1, Duration::from_secs(30), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message.body.run_id, msg.run_id);
    let lock = got[0]
        .lock
        .clone()
        .expect("the lock comes with the delivery");
    (got[0].receipt.clone(), lock)
}

#[tokio::test]
async fn a_turn_runs_under_the_lock_its_delivery_brought_and_an_unrun_one_gives_it_back() {
    let f = fixture(
        vec![Script::Text("answered"), Script::Text("never asked")],
        config(),
    );
    f.backend.queue_accepted_turns();
    f.backend.lock_on_receive("test", config().lock_lease);

    // GIVEN a turn delivered with its session's lock
    let msg = f.accept("hello").await;
    let (receipt, lock) = delivered(&f, &msg).await;

    // WHEN the runner executes it from that lock
    let exit = f
        .runner
        .execute_delivered(&msg, Some(lock.clone()), &CancellationToken::new())
        .await
        .unwrap();

    // THEN the turn ran under that very lock (no acquire of its own moved the fence) and
    // released it
    assert_eq!(exit, TurnExit::Finished(RunStatus::Ok));
    assert_eq!(f.run(&msg.run_id).await.payloads[0].text, "answered");
    let session = f.session().await;
    assert_eq!(session.fence, lock.fence.token.0);
    assert_eq!(session.lock_owner, None);
    f.backend.ack(&receipt).await.unwrap();

    // AND a delivery handed back unrun (the process shuts down) gives its lock back at once
    let second = f.accept("again").await;
    let (_, lock) = delivered(&f, &second).await;
    let shutdown = CancellationToken::new();
    shutdown.cancel();
    let exit = f
        .runner
        .execute_delivered(&second, Some(lock), &shutdown)
        .await
        .unwrap();
    assert_eq!(exit, TurnExit::HandBack);
    assert_eq!(f.session().await.lock_owner, None);
    let now = agentlane_conformance::fixtures::wall_ms();
    let again = f
        .store
        .acquire_lock(&f.tenant, &f.key, "next", 30_000, now)
        .await
        .unwrap();
    assert!(matches!(again, LockAttempt::Acquired(..)), "{again:?}");
    assert_eq!(f.model.requests().len(), 1);
}
