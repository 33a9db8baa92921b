//! `kill -9` of `serve` at random points over 50 runs (issue 11): with `AGENTLANE_E2E_BACKEND=aws`
//! on DynamoDB + SQS FIFO (the emulator), else on the embedded store. The server is killed and
//! restarted at random moments while 50 turns on 5 sessions run; afterwards every run has ended
//! exactly once (one terminal lifecycle event), and each session's transcript has each user
//! message once and, for each run that ended `ok`, its answer once, right after it.
//! The second soak does the same with turns sent in every queue mode (followup, steer, collect,
//! interrupt) and answers that are quick, slow or call tools: each message still lands once.

use crate::support::{GREETING, LONG, assert_dense, scenario_with};
use agentlane_core::{EventStream, Message, RunStatus};
use agentlane_tests::{Scenario, assistant_text, check_pairing, phase, transcript_items};
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const SESSIONS: usize = 5;
const RUNS: usize = 50;

/// A small deterministic generator (xorshift), seeded from the clock and printed, so a failing
/// schedule of kills can be replayed by hand.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// A server with short leases and visibility (a killed turn comes back quickly) and a poison
/// cap no run reaches by bad luck, and the generator of kill times, its seed printed.
fn soak(what: &str) -> anyhow::Result<(Scenario, Rng)> {
    let seed = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as u64 | 1;
    eprintln!("{what} seed: {seed}");
    let scn = scenario_with(|o| {
        o.env("AGENTLANE_LOCK_LEASE_MS", "900")
            .env("AGENTLANE_VISIBILITY_TIMEOUT_MS", "900")
            .env("AGENTLANE_MAX_FAILED_PICKUPS", "50")
    })?;
    Ok((scn, Rng(seed)))
}

/// How many terminal lifecycle events (phase `end` or `error`) the run has.
async fn terminal_events(a: &agentlane_tests::Client, run_id: &str) -> anyhow::Result<usize> {
    Ok(a.events(run_id)
        .await?
        .iter()
        .filter(|e| e.stream == EventStream::Lifecycle)
        .filter(|e| matches!(phase(e), Some("end" | "error")))
        .count())
}

/// Sends `RUNS` turns (`turn(n, rng)` gives the n-th one's session, message and request body) in
/// waves of 5 to 11; between waves, and once after the last, the server is killed (SIGKILL) at
/// a random moment (up to `max_pause_ms` after the wave) and restarted on the same data.
/// Returns (session, message, run id) of each turn, and the number of kills.
async fn send_in_waves_with_kills(
    scn: &mut Scenario,
    rng: &mut Rng,
    max_pause_ms: u64,
    mut turn: impl FnMut(usize, &mut Rng) -> (String, String, serde_json::Value),
) -> anyhow::Result<(Vec<(String, String, String)>, u32)> {
    let mut runs = Vec::new();
    let mut kills = 0u32;
    while runs.len() < RUNS {
        let a = scn.a();
        let wave = rng.between(5, 12) as usize;
        for _ in 0..wave.min(RUNS - runs.len()) {
            let (session, message, body) = turn(runs.len(), rng);
            let accepted = a.agent_with(body).await?;
            runs.push((session, message, accepted.run_id));
        }
        tokio::time::sleep(Duration::from_millis(rng.between(50, max_pause_ms))).await;
        scn.server.kill_hard();
        kills += 1;
        scn.server.restart()?;
    }
    tokio::time::sleep(Duration::from_millis(rng.between(50, 600))).await;
    scn.server.kill_hard();
    scn.server.restart()?;
    Ok((runs, kills + 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_over_50_runs_loses_and_duplicates_nothing() -> anyhow::Result<()> {
    // GIVEN a server with short leases and visibility
    let (mut scn, mut rng) = soak("crash soak")?;
    let started = Instant::now();

    // WHEN 50 turns are sent in waves, and between waves the server is killed (SIGKILL) at a
    // random moment and restarted on the same data
    let (runs, kills) = send_in_waves_with_kills(&mut scn, &mut rng, 1200, |n, _| {
        let (session, message) = (format!("soak-{}", n % SESSIONS), format!("hello #{n}"));
        let body = serde_json::json!({ "sessionKey": session, "message": message });
        (session, message, body)
    })
    .await?;

    // THEN every run ends, exactly once
    let a = scn.a();
    let mut ended: HashMap<String, RunStatus> = HashMap::new();
    for (_, message, run_id) in &runs {
        let run = a.wait_done(run_id, LONG).await?;
        assert!(run.status.is_terminal(), "{message}: {run:?}");
        let terminal_events = terminal_events(&a, run_id).await?;
        assert_eq!(terminal_events, 1, "{message} ({run_id}) ended once");
        if run.status == RunStatus::Ok {
            assert_eq!(run.reply_text(), GREETING, "{message}");
        } else {
            let error = run.error.clone().expect("a failed run says why");
            assert!(!error.code.is_empty(), "{message}: {error:?}");
        }
        ended.insert(run_id.clone(), run.status);
    }

    // AND each transcript has each user message once, each ok run's answer once right after
    // it, nothing else, in the order the turns were sent
    for s in 0..SESSIONS {
        let session = format!("soak-{s}");
        let transcript = a.transcript(&session).await?;
        assert_dense(&transcript.seqs(), &session);
        assert_eq!(
            check_pairing(&transcript_items(&transcript.entries)),
            Ok(())
        );
        let sent: Vec<&(String, String, String)> =
            runs.iter().filter(|(k, _, _)| *k == session).collect();
        let users: Vec<&str> = transcript.user_texts();
        let expected: Vec<&str> = sent.iter().map(|(_, m, _)| m.as_str()).collect();
        assert_eq!(
            users, expected,
            "{session}: each user message once, in order"
        );
        let mut total = 0;
        for (_, message, run_id) in &sent {
            let entries = transcript.entries_of(run_id);
            assert_eq!(entries[0].message, Message::user(message.as_str()));
            match ended[run_id.as_str()] {
                RunStatus::Ok => {
                    assert_eq!(entries.len(), 2, "{message}: the message and one answer");
                    assert_eq!(assistant_text(&entries[1].message), Some(GREETING));
                }
                _ => assert_eq!(entries.len(), 1, "{message}: only the message"),
            }
            total += entries.len();
        }
        assert_eq!(transcript.entries.len(), total, "{session}: nothing else");
    }
    let ok = ended.values().filter(|s| **s == RunStatus::Ok).count();
    eprintln!(
        "crash soak: {RUNS} runs, {kills} kills, {ok} ok, {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(240),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

/// What a mixed turn asks the scripted model for (the fixture its message matches).
const KINDS: [&str; 3] = ["hello", "slow", "what time is it"];
/// The queue modes a mixed turn is sent with.
const MODES: [&str; 4] = ["followup", "steer", "collect", "interrupt"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_turns_steer_collect_and_interrupt_loses_and_duplicates_nothing()
-> anyhow::Result<()> {
    // GIVEN a server with short leases and visibility
    let (mut scn, mut rng) = soak("mixed crash soak")?;
    let started = Instant::now();

    // WHEN 50 turns — quick, slow and tool-calling answers, sent as followups, steers, collects
    // and interrupts — arrive in waves, and between waves the server is killed (SIGKILL) at a
    // random moment and restarted on the same data
    let (runs, kills) = send_in_waves_with_kills(&mut scn, &mut rng, 1500, |n, rng| {
        let session = format!("mixed-{}", n % SESSIONS);
        let kind = KINDS[rng.between(0, 10) as usize % KINDS.len()];
        let mode = MODES[rng.between(0, 100) as usize % MODES.len()];
        let message = format!("{kind} #{n} ({mode})");
        let body = serde_json::json!({
            "sessionKey": session, "message": message, "queueMode": mode
        });
        (session, message, body)
    })
    .await?;

    // THEN every run's own record ends, and no run ends twice
    let a = scn.a();
    let mut ended: HashMap<String, agentlane_tests::RunView> = HashMap::new();
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for (_, message, run_id) in &runs {
        let run = a
            .poll_run(run_id, LONG, "ended", |r| r.status.is_terminal())
            .await?;
        let terminal_events = terminal_events(&a, run_id).await?;
        let outcome = run.queue_outcome.clone().unwrap_or_default();
        *outcomes
            .entry(format!("{outcome}/{:?}", run.status))
            .or_default() += 1;
        // a carried run ends with its carrier; one that ran ends once, with its own end event
        let once = if run.into_run_id.is_some() {
            0..=1
        } else {
            1..=1
        };
        assert!(
            once.contains(&terminal_events),
            "{message} ({run_id}): {terminal_events} ends"
        );
        if run.status != RunStatus::Ok {
            let error = run.error.clone().expect("a failed run says why");
            assert!(!error.code.is_empty(), "{message}: {error:?}");
        }
        if let Some(carrier) = &run.into_run_id {
            assert!(
                runs.iter().any(|(_, _, id)| id == carrier),
                "{message}: carried into an unknown run {carrier}"
            );
        }
        ended.insert(run_id.clone(), run);
    }

    // AND each transcript is dense, every tool call paired, each user message in it exactly
    // once and nothing written twice
    for s in 0..SESSIONS {
        let session = format!("mixed-{s}");
        let transcript = a.transcript(&session).await?;
        assert_dense(&transcript.seqs(), &session);
        if let Err(broken) = check_pairing(&transcript_items(&transcript.entries)) {
            panic!(
                "{session}: {broken}\n{}",
                explain(&transcript.entries, &runs, &ended)
            );
        }
        let mut users: Vec<&str> = transcript.user_texts();
        users.sort_unstable();
        let mut sent: Vec<&str> = runs
            .iter()
            .filter(|(k, _, _)| *k == session)
            .map(|(_, m, _)| m.as_str())
            .collect();
        sent.sort_unstable();
        assert_eq!(
            users,
            sent,
            "{session}: each user message exactly once\n{}",
            explain(&transcript.entries, &runs, &ended)
        );
        for window in transcript.entries.windows(2) {
            assert!(
                window[0].message != window[1].message,
                "{session}: an entry written twice: {:?}",
                window[1]
            );
        }
        // a run that ran (not carried) starts with its own message
        for (_, message, run_id) in runs.iter().filter(|(k, _, _)| *k == session) {
            let run = &ended[run_id.as_str()];
            if run.into_run_id.is_none() {
                let first = transcript.entries_of(run_id).first().map(|e| &e.message);
                assert_eq!(first, Some(&Message::user(message.as_str())), "{run:?}");
            }
        }
    }
    eprintln!(
        "mixed crash soak: {RUNS} runs, {kills} kills, outcomes {outcomes:?}, {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(240),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

/// A transcript laid out for a failure message: each entry's seq, run (with the run's message,
/// status, queue outcome, carrier and pickups) and message.
fn explain(
    entries: &[agentlane_core::TranscriptEntry],
    runs: &[(String, String, String)],
    ended: &HashMap<String, agentlane_tests::RunView>,
) -> String {
    let mut out = String::new();
    for entry in entries {
        let id = entry.run_id.as_str();
        let sent = runs
            .iter()
            .find(|(_, _, run_id)| run_id == id)
            .map_or("?", |(_, m, _)| m.as_str());
        let run = ended.get(id).map(|r| {
            format!(
                "{:?} {:?} into {:?} pickups {}",
                r.status, r.queue_outcome, r.into_run_id, r.pickups
            )
        });
        out.push_str(&format!(
            "  {} {id} [{sent}: {}] {:?}\n",
            entry.seq,
            run.unwrap_or_default(),
            entry.message
        ));
    }
    out
}

/// The calls an HTTP tool's receiver got, by (run, tool call id).
#[derive(Default)]
struct Calls(std::sync::Mutex<HashMap<(String, String), u32>>);

async fn pay(
    axum::extract::State(calls): axum::extract::State<std::sync::Arc<Calls>>,
    headers: axum::http::HeaderMap,
) -> String {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let key = (header("x-agentlane-run"), header("x-agentlane-tool-call"));
    // Counted on arrival: a kill during the 300 ms below still counts the call as sent.
    *calls
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_default() += 1;
    tokio::time::sleep(Duration::from_millis(300)).await;
    r#"{"paid": true}"#.to_owned()
}

/// What a pause soak turn asks: a payment (an HTTP tool that needs approval) or a question to
/// the user (a client tool).
const PAUSE_KINDS: [&str; 2] = ["pay the bill", "ask me first"];
const PAID: &str = "Paid.";
const NOTED: &str = "Thanks, noted.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_runs_pause_and_resume_loses_no_answer_and_runs_no_call_twice()
-> anyhow::Result<()> {
    // GIVEN an agent whose HTTP tool `pay` needs approval (its receiver counts every call), a
    // client tool `ask_user` offered per turn, and a server with short leases and visibility
    let calls = std::sync::Arc::new(Calls::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/pay", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/pay", axum::routing::post(pay))
        .with_state(calls.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    let seed = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as u64 | 1;
    eprintln!("pause soak seed: {seed}");
    let mut rng = Rng(seed);
    let mut scn = scenario_with(|o| {
        o.env("AGENTLANE_LOCK_LEASE_MS", "900")
            .env("AGENTLANE_VISIBILITY_TIMEOUT_MS", "900")
            .env("AGENTLANE_MAX_FAILED_PICKUPS", "50")
            .env("AGENTLANE_HTTP_FETCH_ALLOW", "127.0.0.1")
    })?;
    scn.mock.add_fixtures(vec![
        serde_json::json!({"match": {"userMessage": PAUSE_KINDS[0], "hasToolResult": true},
                           "response": {"content": PAID}}),
        serde_json::json!({"match": {"userMessage": PAUSE_KINDS[0], "hasToolResult": false},
                           "response": {"toolCalls": [
                               {"id": "call_pay", "name": "pay", "arguments": {"amount": 10}}]}}),
        serde_json::json!({"match": {"userMessage": PAUSE_KINDS[1], "hasToolResult": true},
                           "response": {"content": NOTED}}),
        serde_json::json!({"match": {"userMessage": PAUSE_KINDS[1], "hasToolResult": false},
                           "response": {"toolCalls": [
                               {"id": "call_ask", "name": "ask_user", "arguments": {"q": "ok?"}}]}}),
    ])?;
    let (status, body) = scn
        .a()
        .json(
            reqwest::Method::POST,
            "/v1/agents",
            Some(serde_json::json!({
                "agentId": "payer",
                "approval": {"tools": ["pay"]},
                "tools": {"http": [{"name": "pay", "description": "Pays a bill.",
                    "parameters": {"type": "object"}, "url": url}]}
            })),
        )
        .await?;
    assert_eq!(status, 201, "{body}");
    let started = Instant::now();

    // WHEN rounds of turns (one per session) pause, and while they are answered — approvals
    // and client outputs, posted again while a run stays paused — the server is killed
    // (SIGKILL) at a random moment and restarted on the same data
    const ROUNDS: usize = 5;
    const PAUSE_SESSIONS: usize = 4;
    let mut runs: Vec<(String, usize, String)> = Vec::new();
    let mut kills = 0u32;
    for round in 0..ROUNDS {
        let a = scn.a();
        let mut pending = Vec::new();
        for s in 0..PAUSE_SESSIONS {
            let kind = (round + s) % 2;
            let session = format!("pause-{s}");
            let message = format!("{} #{round}", PAUSE_KINDS[kind]);
            let accepted = a
                .agent_with(serde_json::json!({
                    "sessionKey": session, "agentId": "payer", "message": message,
                    "tools": [{"name": "ask_user", "description": "Asks the user."}]
                }))
                .await?;
            runs.push((session, kind, accepted.run_id.clone()));
            pending.push((kind, accepted.run_id));
        }
        // Somewhere in the round: before the pause, while paused, between the answer and the
        // resume, during the approved call (the receiver takes 300 ms), or after.
        let kill_after = Duration::from_millis(rng.between(10, 900));
        let round_started = Instant::now();
        let mut killed = false;
        while !pending.is_empty() || !killed {
            anyhow::ensure!(
                round_started.elapsed() < LONG,
                "round {round} never settled"
            );
            if !killed && round_started.elapsed() >= kill_after {
                scn.server.kill_hard();
                kills += 1;
                scn.server.restart()?;
                killed = true;
            }
            let a = scn.a();
            let mut still = Vec::new();
            for (kind, run_id) in pending {
                let Ok((_, run)) = a
                    .json(reqwest::Method::GET, &format!("/v1/runs/{run_id}"), None)
                    .await
                else {
                    still.push((kind, run_id));
                    continue;
                };
                let status = run["status"].as_str().unwrap_or_default();
                if matches!(status, "ok" | "error" | "aborted" | "timeout") {
                    continue;
                }
                if status == "requires_action" {
                    let body = if kind == 0 {
                        serde_json::json!({"approvals": [{"toolCallId": "call_pay", "approve": true}]})
                    } else {
                        serde_json::json!({"toolOutputs": [{"toolCallId": "call_ask", "output": "yes"}]})
                    };
                    // The same body again is harmless (200) and sends the resume again.
                    let _ = a
                        .json(
                            reqwest::Method::POST,
                            &format!("/v1/runs/{run_id}/actions"),
                            Some(body),
                        )
                        .await;
                }
                still.push((kind, run_id));
            }
            pending = still;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // THEN every run ended exactly once, answered from its tool's result
    let a = scn.a();
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for (_, kind, run_id) in &runs {
        let run = a.wait_done(run_id, LONG).await?;
        assert_eq!(terminal_events(&a, run_id).await?, 1, "{run_id} ended once");
        assert_eq!(run.status, RunStatus::Ok, "{run:?}");
        assert_eq!(run.reply_text(), [PAID, NOTED][*kind], "{run:?}");
        *outcomes.entry(format!("{:?}", run.status)).or_default() += 1;
    }
    // AND no approved call reached the receiver twice
    let seen = calls.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        seen.values().all(|n| *n == 1),
        "each approved call at most once: {seen:?}"
    );
    // AND every transcript is paired: each run's message once, one result per call (the
    // receiver's answer, the client's output, or "interrupted" for an approved call cut by a
    // kill, which then never runs again), then its answer once
    let mut ran_once = 0;
    let mut cut = 0;
    for s in 0..PAUSE_SESSIONS {
        let session = format!("pause-{s}");
        let transcript = a.transcript(&session).await?;
        assert_dense(&transcript.seqs(), &session);
        assert_eq!(
            check_pairing(&transcript_items(&transcript.entries)),
            Ok(())
        );
        for (_, kind, run_id) in runs.iter().filter(|(k, _, _)| *k == session) {
            let entries = transcript.entries_of(run_id);
            let results: Vec<&str> = entries
                .iter()
                .filter_map(|e| match &e.message {
                    Message::Tool { content, .. } => Some(content.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(results.len(), 1, "{run_id}: one result: {entries:?}");
            let users = entries
                .iter()
                .filter(|e| matches!(e.message, Message::User { .. }))
                .count();
            assert_eq!(users, 1, "{run_id}: the message once");
            let key = (run_id.clone(), "call_pay".to_owned());
            match (*kind, seen.get(&key)) {
                (0, Some(_)) if results[0].contains("paid") => ran_once += 1,
                (0, Some(_)) => {
                    // Sent, then the kill came before its result was committed: never sent
                    // again, answered "interrupted".
                    assert!(
                        results[0].to_lowercase().contains("interrupted"),
                        "{run_id}: {results:?}"
                    );
                    cut += 1;
                }
                (0, None) => {
                    assert!(
                        results[0].to_lowercase().contains("interrupted"),
                        "{run_id}: an approved call that never ran says why: {results:?}"
                    );
                    cut += 1;
                }
                _ => assert_eq!(results[0], "yes", "{run_id}: the client's output"),
            }
        }
    }
    eprintln!(
        "pause soak: {} runs, {kills} kills, {outcomes:?}, approved calls ran once: {ran_once}, \
         cut by a kill: {cut}, {:?}",
        runs.len(),
        started.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_a_tenant_budget_settles_every_hold_and_counts_what_the_ledgers_say()
-> anyhow::Result<()> {
    // GIVEN a tenant with a daily budget it will not reach, answers of 1,000 tokens in and 1,000
    // out at $1/$2 per million ($0.003), and a server with short leases
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentlane.toml");
    std::fs::write(
        &config,
        format!(
            "[prices.\"{}\"]\ninput = 1.0\noutput = 2.0\n\n[limits.tenants.{}]\ndaily_usd = 100.0\ndaily_tokens = 100000000\n",
            agentlane_tests::MODEL,
            agentlane_tests::TENANT_A.name
        ),
    )?;
    let seed = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as u64 | 1;
    eprintln!("budget soak seed: {seed}");
    let mut rng = Rng(seed);
    let mut scn = scenario_with(|o| {
        o.env("AGENTLANE_LOCK_LEASE_MS", "900")
            .env("AGENTLANE_VISIBILITY_TIMEOUT_MS", "900")
            .env("AGENTLANE_MAX_FAILED_PICKUPS", "50")
            .env("AGENTLANE_CONFIG", config.display().to_string())
    })?;
    scn.mock.add_fixtures(vec![serde_json::json!({"match": {"userMessage": "charge"},
        "response": {"content": "charged", "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}}})])?;

    // WHEN 50 turns are sent in waves, the server killed at random moments between them
    let (runs, kills) = send_in_waves_with_kills(&mut scn, &mut rng, 1200, |n, _| {
        let (session, message) = (format!("budget-{}", n % SESSIONS), format!("charge #{n}"));
        let body = serde_json::json!({ "sessionKey": session, "message": message });
        (session, message, body)
    })
    .await?;
    let a = scn.a();
    let mut ledger_micros = 0u64;
    let mut ledger_tokens = 0u64;
    for (_, message, run_id) in &runs {
        let run = a.wait_done(run_id, LONG).await?;
        assert!(run.status.is_terminal(), "{message}: {run:?}");
        let (_, view) = a
            .json(reqwest::Method::GET, &format!("/v1/runs/{run_id}"), None)
            .await?;
        ledger_micros += (view["costUsd"].as_f64().unwrap_or(0.0) * 1e6).round() as u64;
        ledger_tokens += view["usage"]["inputTokens"].as_u64().unwrap_or(0)
            + view["usage"]["outputTokens"].as_u64().unwrap_or(0);
    }

    // THEN no hold is left open: every call a kill cut was settled by its run's next pickup
    let (_, usage) = a.json(reqwest::Method::GET, "/v1/usage", None).await?;
    eprintln!(
        "budget soak: {kills} kills; usage {usage}; ledgers ${ledger_micros} micros, {ledger_tokens} tokens"
    );
    assert_eq!(usage["counted"], true, "{usage}");
    assert_eq!(usage["day"]["heldTokens"], 0, "{usage}");
    // AND the day's counters are the runs' attempt ledgers, plus at most one call per run in
    // flight at each kill (a call settled whose record the kill lost: the provider did charge
    // it, and the run calls again)
    let counted_tokens = usage["day"]["tokens"].as_u64().unwrap_or(0);
    let counted_micros = (usage["day"]["costUsd"].as_f64().unwrap_or(0.0) * 1e6).round() as u64;
    let slack = u64::from(kills) * SESSIONS as u64;
    assert!(
        counted_tokens >= ledger_tokens && counted_tokens <= ledger_tokens + slack * 2_000,
        "counted {counted_tokens} tokens, ledgers {ledger_tokens}, {kills} kills"
    );
    assert!(
        counted_micros >= ledger_micros && counted_micros <= ledger_micros + slack * 3_000,
        "counted {counted_micros} micros, ledgers {ledger_micros}, {kills} kills"
    );
    Ok(())
}
