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
        assert_eq!(
            check_pairing(&transcript_items(&transcript.entries)),
            Ok(())
        );
        let mut users: Vec<&str> = transcript.user_texts();
        users.sort_unstable();
        let mut sent: Vec<&str> = runs
            .iter()
            .filter(|(k, _, _)| *k == session)
            .map(|(_, m, _)| m.as_str())
            .collect();
        sent.sort_unstable();
        assert_eq!(users, sent, "{session}: each user message exactly once");
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
