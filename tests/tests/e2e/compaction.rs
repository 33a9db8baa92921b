//! Context overflow seen from outside: the runner compacts the earlier history with a real model
//! call, writes a compaction entry, and the run continues from the summary.

use crate::support::{LONG, SERVER_BIN};
use agentlane_core::{EventStream, Message, RunStatus};
use agentlane_tests::{Aimock, Fixtures, Scenario, Server, ServerOptions, message_text, phase};
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflowing_turn_compacts_the_earlier_history_and_answers() -> anyhow::Result<()> {
    // GIVEN a session with one finished turn, and a model that refuses the next prompt as too long
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/compaction.json");
    let mock = Aimock::start(Fixtures::File(fixtures))?;
    let server = Server::start(ServerOptions::new(SERVER_BIN).model_server(&mock))?;
    let scn = Scenario { server, mock };
    let a = scn.a();
    let first = a.agent("long-talk", "cmp-one").await?;
    let first = a.wait_done(&first.run_id, LONG).await?;
    assert_eq!(first.status, RunStatus::Ok, "{first:?}");

    // WHEN the second turn overflows the context window
    let second = a.agent("long-talk", "cmp-two").await?;
    let run = a.wait_done(&second.run_id, LONG).await?;

    // THEN the runner compacts and the turn still ends ok with the answer
    assert_eq!(run.status, RunStatus::Ok, "{run:?}");
    assert_eq!(run.reply_text(), "Second answer, after compaction.");
    let outcomes: Vec<&str> = run.attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["context_overflow", "ok"]);
    // AND the summarizing call is in the run's usage and cost (it is no attempt of the ledger)
    let (_, view) = a
        .json(
            reqwest::Method::GET,
            &format!("/v1/runs/{}", second.run_id),
            None,
        )
        .await?;
    let attempts_cost: f64 = view["attempts"]
        .as_array()
        .map(|all| all.iter().filter_map(|a| a["costUsd"].as_f64()).sum())
        .unwrap_or(0.0);
    let run_cost = view["costUsd"].as_f64().unwrap_or(0.0);
    assert!(
        run_cost > attempts_cost,
        "the summary's cost counts: run {run_cost}, attempts {attempts_cost}: {view}"
    );
    // exactly: turn one, the overflowing request, the summarizing call, the retry
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 4, "{requests:#?}");
    let summarizing = &requests[2];
    assert!(
        summarizing.body.get("tools").is_none(),
        "the summarizing call offers no tools: {}",
        summarizing.body
    );
    let retried = &requests[3];
    let first_text = message_text(&retried.messages()[1]).unwrap_or_default();
    assert!(
        first_text.contains("Earlier, the user asked about cmp-one"),
        "the retry starts from the summary: {first_text}"
    );
    // AND the transcript keeps every entry plus one compaction entry, in order
    let transcript = a.transcript("long-talk").await?;
    let roles = transcript.roles();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "compaction", "assistant"]
    );
    assert!(matches!(
        &transcript.entries[3].message,
        Message::Compaction { through_seq: 1, .. }
    ));
    // AND the run's events show the compaction
    let events = a.events(&run.run_id).await?;
    let compaction: Vec<&str> = events
        .iter()
        .filter(|e| e.stream == EventStream::Compaction)
        .filter_map(phase)
        .collect();
    assert_eq!(compaction, ["start", "end"]);
    Ok(())
}
