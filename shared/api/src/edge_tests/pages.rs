//! Transcript and event pages bounded by bytes, continued with `next`.

use super::*;

fn big_entry(seq: u64, run_id: &str, bytes: usize) -> TranscriptEntry {
    TranscriptEntry {
        seq,
        run_id: RunId::new(run_id),
        ts: seq,
        message: Message::User {
            content: format!("{seq}:{}", "x".repeat(bytes)),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcript_and_event_pages_stay_under_their_byte_budget_and_next_continues() {
    // GIVEN a transcript of 24 entries of 250 KB (6 MB) and a run with 60 events of 10 KB
    let server = LiveServer::start(config(Limits::default())).await;
    let run_id = server.submit(ACME_KEY, "big", "hi").await;
    let run = server.run(&acme(), &run_id).await;
    let fence = server.lock(&acme(), "big").await;
    for chunk in 0..6u64 {
        let transcript = (0..4)
            .map(|i| big_entry(chunk * 4 + i, &run_id, 250_000))
            .collect();
        let events = (0..10)
            .map(|i| Event {
                seq: chunk * 10 + i,
                stream: EventStream::Assistant,
                ts: 0,
                data: json!({"delta": "y".repeat(10_000)}),
            })
            .collect();
        server
            .store
            .commit(
                &fence,
                Commit {
                    run_id: Some(run.run_id.clone()),
                    transcript,
                    events,
                    ..Commit::default()
                },
            )
            .await
            .unwrap();
    }

    // WHEN a client reads the transcript page by page
    let mut seqs = Vec::new();
    let mut after: Option<u64> = None;
    let mut pages = 0;
    loop {
        let path = match after {
            Some(a) => format!("/v1/sessions/big/transcript?after={a}"),
            None => "/v1/sessions/big/transcript".to_owned(),
        };
        let reply = server.get(&path, ACME_KEY).await;
        assert_eq!(reply.status, 200);
        // THEN no page exceeds 4 MiB
        assert!(
            reply.body.len() <= 4 * 1024 * 1024,
            "{} bytes",
            reply.body.len()
        );
        let page = reply.json();
        let entries = page["entries"].as_array().unwrap().clone();
        if entries.is_empty() {
            assert_eq!(page["next"], json!(after));
            break;
        }
        pages += 1;
        seqs.extend(entries.iter().map(|e| e["seq"].as_u64().unwrap()));
        after = page["next"].as_u64();
        assert_eq!(after, seqs.last().copied());
    }
    // AND `next` led through every entry, in order, over several pages
    assert_eq!(seqs, (0..24).collect::<Vec<_>>());
    assert!(pages >= 2, "{pages} pages");

    // AND an events page asked for 1000 events stops at the budget too
    let events = server
        .get(&format!("/v1/runs/{run_id}/events?limit=1000"), ACME_KEY)
        .await;
    let page = events.json();
    assert_eq!(page["events"].as_array().unwrap().len(), 60);
    assert!(events.body.len() <= 4 * 1024 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_page_is_cut_at_the_configured_budget() {
    let server = LiveServer::start(config(Limits {
        max_page_bytes: 64 * 1024,
        ..Limits::default()
    }))
    .await;
    let run_id = server.submit(ACME_KEY, "ev", "hi").await;
    let fence = server.lock(&acme(), "ev").await;
    let events = (0..20)
        .map(|i| Event {
            seq: i,
            stream: EventStream::Assistant,
            ts: 0,
            data: json!({"delta": "z".repeat(10_000)}),
        })
        .collect();
    server
        .store
        .commit(
            &fence,
            Commit {
                run_id: Some(RunId::new(&run_id)),
                events,
                ..Commit::default()
            },
        )
        .await
        .unwrap();
    let first = server
        .get(&format!("/v1/runs/{run_id}/events"), ACME_KEY)
        .await;
    assert!(first.body.len() <= 64 * 1024, "{}", first.body.len());
    let page = first.json();
    let got = page["events"].as_array().unwrap().len() as u64;
    assert!((1..20).contains(&got), "{got}");
    assert_eq!(page["next"], json!(got - 1));
    let rest = server
        .get(
            &format!("/v1/runs/{run_id}/events?after={}", got - 1),
            ACME_KEY,
        )
        .await
        .json();
    assert_eq!(rest["events"][0]["seq"], json!(got));
}

/// Notes the budget of every page read the store is asked for.
struct BudgetLog {
    inner: Arc<dyn Store>,
    seen: Arc<std::sync::Mutex<Vec<(StoreCall, agentlane_core::PageBudget)>>>,
}

impl StoreLayer for BudgetLog {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    fn page_budget(
        &self,
        call: StoreCall,
        budget: agentlane_core::PageBudget,
    ) -> agentlane_core::PageBudget {
        self.seen.lock().unwrap().push((call, budget));
        budget
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_routes_ask_the_store_for_no_more_than_one_answer() {
    // GIVEN a server with 64 KiB pages over a store that notes each page read's budget
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let server = LiveServer::start_over(
        config(Limits {
            max_page_bytes: 64 * 1024,
            ..Limits::default()
        }),
        move |inner| Arc::new(Layered(BudgetLog { inner, seen: log })),
    )
    .await;
    let run_id = server.submit(ACME_KEY, "budget", "hi").await;

    // WHEN a client reads a transcript page and an events page of 5,000 items each
    let transcript = server
        .get("/v1/sessions/budget/transcript?limit=5000", ACME_KEY)
        .await;
    assert_eq!(transcript.status, 200, "{transcript:?}");
    let events = server
        .get(&format!("/v1/runs/{run_id}/events?limit=5000"), ACME_KEY)
        .await;
    assert_eq!(events.status, 200, "{events:?}");

    // THEN the store was asked for 5,000 items within the answer's bytes, less its envelope
    let seen = seen.lock().unwrap().clone();
    let budget = agentlane_core::PageBudget::new(5000, 64 * 1024 - crate::page::ENVELOPE_BYTES);
    assert!(
        seen.contains(&(StoreCall::ReadTranscript, budget)),
        "{seen:?}"
    );
    assert!(seen.contains(&(StoreCall::ReadEvents, budget)), "{seen:?}");
    assert!(
        seen.iter().all(|(_, b)| b.bytes <= 64 * 1024),
        "no page read may pass the answer cap: {seen:?}"
    );
}
