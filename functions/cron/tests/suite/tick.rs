//! A scheduled event ticks; any other event is refused with its reason.
use aws_lambda_events::event::eventbridge::EventBridgeEvent;

fn event(json: &str) -> EventBridgeEvent<serde_json::Value> {
    serde_json::from_str(json).unwrap()
}

#[tokio::test]
async fn a_scheduled_event_ticks_and_fires_nothing_yet() {
    let report = agentlane_cron::tick(event(include_str!("../fixtures/scheduled-event.json")))
        .await
        .unwrap();
    assert_eq!(report.scheduled_for, "2026-11-30T04:00:00+00:00");
    assert_eq!(report.jobs_fired, 0);
}

#[tokio::test]
async fn another_event_is_refused() {
    let json = include_str!("../fixtures/scheduled-event.json")
        .replace("Scheduled Event", "Object Created");
    let err = agentlane_cron::tick(event(&json)).await.unwrap_err();
    assert_eq!(
        err,
        agentlane_cron::TickError::NotScheduled("Object Created".into())
    );
}
