//! Waits and event streams woken by this process's commits instead of polling.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_in_this_process_answers_a_wait_at_once_without_polling_meanwhile() {
    // GIVEN a run this process's runner holds (committed running through the store)
    let (reads, counting) = counting_reads();
    let server = LiveServer::start_over(config(Limits::default()), counting).await;
    let run_id = server.submit(ACME_KEY, "live", "hi").await;
    let mut run = server.run(&acme(), &run_id).await;
    let fence = server.lock(&acme(), "live").await;
    server
        .commit_run(&fence, run.clone(), RunStatus::Running)
        .await;
    assert!(server.notifier.is_live_here(&acme(), &RunId::new(&run_id)));

    // WHEN a client waits while the run works for 600 ms, then the run commits its end
    let wait = spawn_wait(&server, &run_id, 10_000);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let before = reads.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let idle_reads = reads.load(Ordering::SeqCst) - before;
    run = server.run(&acme(), &run_id).await;
    run.payloads = vec![Payload {
        text: "Hello!".into(),
        is_error: false,
    }];
    run.usage = Usage {
        input_tokens: 12,
        output_tokens: 3,
        ..Default::default()
    };
    run.model = Some("openai/gpt-4o-mini".into());
    let committed = Instant::now();
    server.commit_run(&fence, run, RunStatus::Ok).await;
    let (reply, answered) = wait.await.unwrap();

    // THEN the wait did not read the store while it waited, and answered right after the
    // commit with the final payloads, usage and model
    assert_eq!(idle_reads, 0, "the wait polled a run live in this process");
    let after_commit = answered.saturating_duration_since(committed);
    assert!(
        after_commit < Duration::from_millis(100),
        "{after_commit:?}"
    );
    let body = reply.json();
    assert_eq!(body["status"], "ok", "{reply:?}");
    assert_eq!(body["payloads"], json!([{"text": "Hello!"}]));
    assert_eq!(body["usage"], json!({"inputTokens": 12, "outputTokens": 3}));
    assert_eq!(body["model"], "openai/gpt-4o-mini");
    assert!(body.get("timeoutPhase").is_none(), "{body}");
    assert_eq!(server.notifier.tracked_runs(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_this_process_picks_up_is_not_polled_once_it_runs() {
    // GIVEN a queued run, and a client waiting on it
    let (reads, counting) = counting_reads();
    let server = LiveServer::start_over(config(Limits::default()), counting).await;
    let run_id = server.submit(ACME_KEY, "picked", "hi").await;
    let before = reads.load(Ordering::SeqCst);
    let wait = spawn_wait(&server, &run_id, 10_000);
    tokio::time::sleep(Duration::from_millis(20)).await;

    // WHEN this process's runner picks it up before the wait's first poll, works for 600 ms
    // and commits its end
    let fence = server
        .commit_status(&acme(), &run_id, RunStatus::Running)
        .await;
    let mid = reads.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let idle_reads = reads.load(Ordering::SeqCst) - mid;
    let mut run = server.run(&acme(), &run_id).await;
    let after = reads.load(Ordering::SeqCst);
    run.payloads = vec![Payload {
        text: "Done".into(),
        is_error: false,
    }];
    server.commit_run(&fence, run, RunStatus::Ok).await;
    let (reply, _) = wait.await.unwrap();

    // THEN the wait read the run once, at its start, and was answered by the end's commit
    assert_eq!(idle_reads, 0, "the wait polled a run its process picked up");
    assert_eq!(
        reads.load(Ordering::SeqCst) - after,
        0,
        "read again at the end"
    );
    assert!(
        mid - before <= 2,
        "{} reads before the pickup",
        mid - before
    );
    assert_eq!(reply.json()["status"], "ok", "{reply:?}");
    assert_eq!(reply.json()["payloads"], json!([{"text": "Done"}]));
}

/// A server over a store that queues what it accepts, counting the API's run reads.
async fn queueing_server() -> (LiveServer, Arc<AtomicUsize>) {
    let (reads, counting) = counting_reads();
    let server = LiveServer::start_queueing_over(config(Limits::default()), counting).await;
    (server, reads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_right_after_a_turn_this_process_queued_reads_nothing_and_ends_with_the_commit() {
    // GIVEN a turn this process accepted into its own queue, and a client waiting on it at once
    let (server, reads) = queueing_server().await;
    let run_id = server.submit(ACME_KEY, "queued-here", "hi").await;
    let before = reads.load(Ordering::SeqCst);
    let wait = spawn_wait(&server, &run_id, 10_000);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let queued_reads = reads.load(Ordering::SeqCst) - before;

    // WHEN this process's runner picks it up, and then commits its end
    let fence = server
        .commit_status(&acme(), &run_id, RunStatus::Running)
        .await;
    let mut run = server.run(&acme(), &run_id).await;
    let after = reads.load(Ordering::SeqCst);
    run.payloads = vec![Payload {
        text: "Done".into(),
        is_error: false,
    }];
    let committed = Instant::now();
    server.commit_run(&fence, run, RunStatus::Ok).await;
    let (reply, answered) = wait.await.unwrap();

    // THEN the wait never read the run (not even a first look), and answered at the commit
    assert_eq!(
        queued_reads, 0,
        "the wait read a run it knew was queued here"
    );
    assert_eq!(reads.load(Ordering::SeqCst) - after, 0, "read at the end");
    let after_commit = answered.saturating_duration_since(committed);
    assert!(
        after_commit < Duration::from_millis(100),
        "{after_commit:?}"
    );
    assert_eq!(reply.json()["status"], "ok", "{reply:?}");
    assert_eq!(reply.json()["payloads"], json!([{"text": "Done"}]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_a_turn_queued_here_that_already_ended_or_was_aborted_reads_it_at_once() {
    let (server, reads) = queueing_server().await;
    // GIVEN a turn accepted here that ended before anyone waited on it
    let ended = server.submit(ACME_KEY, "ended-here", "hi").await;
    let fence = server
        .commit_status(&acme(), &ended, RunStatus::Running)
        .await;
    let run = server.run(&acme(), &ended).await;
    server.commit_run(&fence, run, RunStatus::Ok).await;
    // AND one whose abort was asked while it was queued
    let aborted = server.submit(ACME_KEY, "aborted-here", "hi").await;
    let reply = server
        .post(&format!("/v1/runs/{aborted}/abort"), ACME_KEY, json!({}))
        .await;
    assert!(reply.status < 300, "{reply:?}");

    for (run_id, status) in [(ended, "ok"), (aborted, "pending")] {
        // WHEN a client waits on it
        let before = reads.load(Ordering::SeqCst);
        let started = Instant::now();
        let wait = spawn_wait(&server, &run_id, 400);
        tokio::time::sleep(Duration::from_millis(100)).await;

        // THEN it has read the run at once (the mark went with the end, or the abort
        // request): the ended one is answered then, the aborted one waits for its runner
        assert!(reads.load(Ordering::SeqCst) > before, "{run_id}: not read");
        let (reply, answered) = wait.await.unwrap();
        let took = answered.duration_since(started);
        assert_eq!(reply.json()["status"], status, "{reply:?}");
        if status == "ok" {
            assert!(took < Duration::from_millis(100), "{took:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_gets_a_commits_events_at_once() {
    // GIVEN a stream on a run this process holds: nothing but a commit's signal wakes its
    // follower before the live recheck (5 s after its last read)
    let server = LiveServer::start(config(Limits::default())).await;
    let run_id = server.submit(ACME_KEY, "sse", "hi").await;
    let run = server.run(&acme(), &run_id).await;
    let fence = server.lock(&acme(), "sse").await;
    server
        .commit_run(&fence, run.clone(), RunStatus::Running)
        .await;
    assert!(server.notifier.is_live_here(&acme(), &RunId::new(&run_id)));
    // (the follower reads the run only after this instant, so its recheck is due no sooner
    // than `recheck`)
    let recheck = tokio::time::Instant::now() + crate::wait::LIVE_RECHECK;
    let mut stream = open_stream(&server, ACME_KEY, &run_id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // WHEN the runner commits an event and then the end
    let event = Event {
        seq: 0,
        stream: EventStream::Assistant,
        ts: 0,
        data: json!({"delta": "Hi"}),
    };
    server
        .store
        .commit(
            &fence,
            Commit {
                run_id: Some(RunId::new(&run_id)),
                events: vec![event],
                ..Commit::default()
            },
        )
        .await
        .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    // THEN the event arrives before the recheck could have found it: the commit woke the
    // stream (however slow the machine is, as long as it is not 5 s slow)
    while !seen.contains("\"delta\":\"Hi\"") {
        let n = tokio::time::timeout_at(
            recheck,
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
        )
        .await
        .expect("the event arrives before the stream's recheck")
        .unwrap();
        assert!(n > 0, "stream closed early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    // AND the end follows once committed
    server
        .commit_run(&fence, server.run(&acme(), &run_id).await, RunStatus::Ok)
        .await;
    while !seen.contains("event: end") {
        let n = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
        )
        .await
        .expect("end arrives")
        .unwrap();
        assert!(n > 0, "stream closed early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_writer_lost_the_lock_is_polled_again() {
    // GIVEN a run this process holds
    let server = LiveServer::start(config(Limits::default())).await;
    let run_id = server.submit(ACME_KEY, "stolen", "hi").await;
    let fence = server
        .commit_status(&acme(), &run_id, RunStatus::Running)
        .await;
    let id = RunId::new(&run_id);
    assert!(server.notifier.is_live_here(&acme(), &id));

    // WHEN another writer takes the session after the lease ran out, and this one's next
    // commit is refused
    let later = agentlane_core::Clock::now_ms(&agentlane_core::SystemClock) + 120_000;
    let taken = server
        .store
        .acquire_lock(
            &acme(),
            &agentlane_core::SessionKey::new("stolen"),
            "other-process",
            60_000,
            later,
        )
        .await
        .unwrap();
    assert!(matches!(taken, agentlane_core::LockAttempt::Acquired(..)));
    let run = server.run(&acme(), &run_id).await;
    let refused = server
        .store
        .commit(
            &fence,
            Commit {
                run: Some(run),
                ..Commit::default()
            },
        )
        .await;

    // THEN the run is no longer live here: its waiters poll the store again
    assert_eq!(refused, Err(agentlane_core::StoreError::FenceLost));
    assert!(!server.notifier.is_live_here(&acme(), &id));
}

/// `POST /v1/agent.wait` for `run_id` on its own connection: the reply, and when it came.
fn spawn_wait(
    server: &LiveServer,
    run_id: &str,
    timeout_ms: u64,
) -> tokio::task::JoinHandle<(crate::testkit::Reply, Instant)> {
    let addr = server.addr;
    let body = json!({"runId": run_id, "timeoutMs": timeout_ms}).to_string();
    tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        send_request(&mut stream, "POST", "/v1/agent.wait", Some(ACME_KEY), &body).await;
        (read_reply(&mut stream).await, Instant::now())
    })
}
