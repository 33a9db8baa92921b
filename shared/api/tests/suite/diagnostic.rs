//! `GET /v1/sessions/{key}` shows the supervisor's `diagnostic` while one holds (SPEC §10),
//! with the default thresholds (warn 120 s): lease renewals alone are not progress.

use crate::common::*;
use agentlane_core::Clock;

#[tokio::test]
async fn a_processing_session_without_progress_is_diagnosed_stalled_then_stuck() {
    // GIVEN a run a runner started (progress now), holding the lock
    let h = Harness::new().await;
    let run_id = h.submit_run(ACME_KEY, "main", "hi").await;
    let (fence, _) = h.start(&acme(), &run_id, vec![]).await;
    let fresh = h.get("/v1/sessions/main", ACME_KEY).await;
    assert_eq!(fresh.json["status"], "processing");
    assert_eq!(fresh.json.get("diagnostic"), None, "{}", fresh.text);

    // WHEN only the lease is renewed for 130 s (a heartbeat, no progress)
    for _ in 0..2 {
        h.clock.advance(59_000);
        h.store
            .renew_lock(&fence, 60_000, h.clock.now_ms())
            .await
            .unwrap();
    }
    h.clock.advance(12_000);

    // THEN the session is stalled (a live owner without progress)
    let stalled = h.get("/v1/sessions/main", ACME_KEY).await;
    assert_eq!(stalled.json["locked"], true);
    assert_eq!(
        stalled.json["diagnostic"]["class"], "session.stalled",
        "{}",
        stalled.text
    );
    assert_eq!(stalled.json["diagnostic"]["ageMs"], 130_000);

    // AND once the owner's lease ended too, it is stuck
    h.clock.advance(60_001);
    let stuck = h.get("/v1/sessions/main", ACME_KEY).await;
    assert_eq!(stuck.json["locked"], false);
    assert_eq!(
        stuck.json["diagnostic"]["class"], "session.stuck",
        "{}",
        stuck.text
    );
    assert!(
        stuck.json["diagnostic"]["reason"]
            .as_str()
            .unwrap()
            .contains("no live owner")
    );
}
