//! The [`SpendLedger`] cases (issue 21): a burst of reservations never passes a period's cap;
//! a settlement replaces its hold by what was spent, once; a retried reservation counts once;
//! tenants and periods are counted apart, and a refusal names its period; a call that outlives
//! its pickup (its hold cleared from the attempt ledger) still adds what it spent, once. Every case uses
//! fresh random tenants, so cases may share one backend.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::spend_conformance!(async { Arc::new(make()) as Arc<dyn SpendLedger> });
//! ```

use crate::fixtures::{tenant, wall_ms};
use agentlane_core::SpendLedger;
use agentlane_core::spend::{
    Hold, PeriodCap, Reserved, SpendTags, Spent, UsageCursor, UsageGroup, UsageRow,
};
use std::sync::Arc;

/// Generates `mod spend_conformance` with one `#[tokio::test]` per case. The argument is an
/// expression (typically an `async` block) yielding `Arc<dyn SpendLedger>`, evaluated per case.
#[macro_export]
macro_rules! spend_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests spend_conformance spend ($make);
            case_twenty_concurrent_reservations_against_room_for_five_grant_exactly_five,
            case_a_settlement_replaces_its_hold_by_what_was_spent_once,
            case_a_retried_reservation_counts_once,
            case_tenants_and_periods_are_counted_apart_and_a_refusal_names_its_period,
            case_settled_spend_is_read_by_day_agent_model_and_session,
            case_usage_is_read_a_page_at_a_time_after_a_cursor,
            case_a_call_that_outlives_its_pickup_is_paid_for_once,
            case_a_reservation_retried_after_its_hold_was_cleared_counts_nothing_more,
        }
    };
}

fn cap(period: &str, max_micros: Option<u64>, max_tokens: Option<u64>) -> PeriodCap {
    PeriodCap {
        period: period.to_owned(),
        ends_at: wall_ms() + 3_600_000,
        max_micros,
        max_tokens,
    }
}

fn tags(day: &str, agent: &str, session: &str) -> SpendTags {
    SpendTags {
        day: day.to_owned(),
        day_ends_at: wall_ms() + 3_600_000,
        agent: agent.to_owned(),
        model: "openai/gpt-4o-mini".to_owned(),
        session: session.to_owned(),
    }
}

fn hold(id: &str, micros: u64, tokens: u64) -> Hold {
    Hold {
        id: id.to_owned(),
        micros,
        tokens,
        at: wall_ms(),
    }
}

/// Twenty concurrent reservations against room for five grant exactly five, and every period
/// counts each granted hold and only those.
pub async fn case_twenty_concurrent_reservations_against_room_for_five_grant_exactly_five(
    store: Arc<dyn SpendLedger>,
) {
    let acme = tenant();
    let caps = vec![
        cap("D2026-12-04", Some(500), None),
        cap("M2026-12", Some(10_000), Some(1_000_000)),
    ];
    let reservations = (0..20).map(|i| {
        let (store, acme, caps) = (store.clone(), acme.clone(), caps.clone());
        tokio::spawn(async move {
            store
                .reserve(&acme, &caps, &hold(&format!("run_r{i}.0"), 100, 10))
                .await
        })
    });
    let mut granted = 0;
    for reservation in futures::future::join_all(reservations).await {
        match reservation.unwrap().unwrap() {
            Reserved::Granted => granted += 1,
            Reserved::Refused { period, .. } => assert_eq!(period, "D2026-12-04"),
        }
    }
    assert_eq!(
        granted, 5,
        "20 reservations of 100 against 500 granted {granted}"
    );
    let day = store.period_spend(&acme, "D2026-12-04").await.unwrap();
    assert_eq!((day.micros, day.tokens, day.holds.len()), (500, 50, 5));
    // Both periods took each granted hold, and only those.
    let month = store.period_spend(&acme, "M2026-12").await.unwrap();
    assert_eq!(
        (month.micros, month.tokens, month.holds.len()),
        (500, 50, 5)
    );
}

/// Settling a hold replaces it by what was spent, once (settling again changes nothing); the room
/// given back is usable, and settling a hold never taken changes nothing.
pub async fn case_a_settlement_replaces_its_hold_by_what_was_spent_once(
    store: Arc<dyn SpendLedger>,
) {
    let acme = tenant();
    let periods = ["D2026-12-04".to_owned(), "M2026-12".to_owned()];
    let caps = vec![
        cap(&periods[0], Some(1_000), Some(100)),
        cap(&periods[1], Some(1_000), None),
    ];
    let held = hold("run_a.0", 400, 40);
    assert_eq!(
        store.reserve(&acme, &caps, &held).await.unwrap(),
        Reserved::Granted
    );
    let spent = Spent {
        micros: 120,
        tokens: 12,
    };
    let day = tags(&periods[0], "main", "s1");
    store
        .settle(&acme, &periods, &held, spent, &day)
        .await
        .unwrap();
    store
        .settle(&acme, &periods, &held, spent, &day)
        .await
        .unwrap();
    for period in &periods {
        let now = store.period_spend(&acme, period).await.unwrap();
        assert_eq!(
            (now.micros, now.tokens, now.holds.len()),
            (120, 12, 0),
            "{period}: the hold replaced by the spend, once"
        );
    }
    // The room the settlement gave back is usable: 880 left of 1,000.
    assert_eq!(
        store
            .reserve(&acme, &caps, &hold("run_a.1", 880, 1))
            .await
            .unwrap(),
        Reserved::Granted
    );
    assert!(matches!(
        store
            .reserve(&acme, &caps, &hold("run_a.2", 1, 1))
            .await
            .unwrap(),
        Reserved::Refused { .. }
    ));
    // Settling a hold never taken changes nothing.
    store
        .settle(&acme, &periods, &hold("run_none.0", 5, 5), spent, &day)
        .await
        .unwrap();
    assert_eq!(
        store.period_spend(&acme, &periods[0]).await.unwrap().micros,
        1_000
    );
}

/// A reservation retried with the same hold id is granted each time but counted once.
pub async fn case_a_retried_reservation_counts_once(store: Arc<dyn SpendLedger>) {
    let acme = tenant();
    let caps = vec![cap("D2026-12-04", Some(1_000), None)];
    let held = hold("run_b.3", 300, 30);
    for _ in 0..3 {
        assert_eq!(
            store.reserve(&acme, &caps, &held).await.unwrap(),
            Reserved::Granted
        );
    }
    let day = store.period_spend(&acme, "D2026-12-04").await.unwrap();
    assert_eq!((day.micros, day.tokens), (300, 30));
    assert_eq!(day.holds, vec![held]);
}

/// A reservation retried after its hold was cleared (its answer lost, then a replacing pickup
/// cleared it) is granted without counting the hold again; the call's settlement counts once.
pub async fn case_a_reservation_retried_after_its_hold_was_cleared_counts_nothing_more(
    store: Arc<dyn SpendLedger>,
) {
    let acme = tenant();
    let periods = ["D2026-12-05".to_owned(), "M2026-12".to_owned()];
    let caps = vec![
        cap(&periods[0], Some(1_000), None),
        cap(&periods[1], Some(10_000), None),
    ];
    let day = tags(&periods[0], "main", "retried");
    let held = hold("run_lost.0", 400, 40);
    assert_eq!(
        store.reserve(&acme, &caps, &held).await.unwrap(),
        Reserved::Granted
    );
    store
        .clear(&acme, &periods, &held, Spent::default(), &day)
        .await
        .unwrap();
    assert_eq!(
        store.reserve(&acme, &caps, &held).await.unwrap(),
        Reserved::Granted,
        "the retry of a reservation already made"
    );
    for period in &periods {
        let now = store.period_spend(&acme, period).await.unwrap();
        assert_eq!(
            (now.micros, now.tokens, now.holds.len()),
            (0, 0, 0),
            "{period}: the retry counted the cleared hold again"
        );
    }
    let actual = Spent {
        micros: 250,
        tokens: 25,
    };
    store
        .settle(&acme, &periods, &held, actual, &day)
        .await
        .unwrap();
    for period in &periods {
        let now = store.period_spend(&acme, period).await.unwrap();
        assert_eq!((now.micros, now.tokens), (250, 25), "{period}");
    }
}

/// Tenants and periods count apart; a token cap refuses on tokens alone; a refusal names the
/// period and when it ends, and writes nothing in any period.
pub async fn case_tenants_and_periods_are_counted_apart_and_a_refusal_names_its_period(
    store: Arc<dyn SpendLedger>,
) {
    let (acme, beta) = (tenant(), tenant());
    let full = cap("D2026-12-04", Some(100), None);
    assert_eq!(
        store
            .reserve(&acme, std::slice::from_ref(&full), &hold("run_c.0", 100, 1))
            .await
            .unwrap(),
        Reserved::Granted
    );
    // A token cap refuses on tokens alone; the refusal names the period and when it ends.
    let tokens = cap("M2026-12", None, Some(5));
    match store
        .reserve(&acme, std::slice::from_ref(&tokens), &hold("run_c.1", 1, 6))
        .await
        .unwrap()
    {
        Reserved::Refused { period, ends_at } => {
            assert_eq!((period.as_str(), ends_at), ("M2026-12", tokens.ends_at));
        }
        other => panic!("6 tokens over a cap of 5: {other:?}"),
    }
    match store
        .reserve(
            &acme,
            &[full.clone(), tokens.clone()],
            &hold("run_c.2", 1, 1),
        )
        .await
        .unwrap()
    {
        Reserved::Refused { period, .. } => assert_eq!(period, "D2026-12-04"),
        other => panic!("the day is full: {other:?}"),
    }
    // Nothing of a refused reservation was written, in any period.
    let month = store.period_spend(&acme, "M2026-12").await.unwrap();
    assert_eq!((month.micros, month.tokens, month.holds.len()), (0, 0, 0));
    // Another tenant, and another day, have their own counts.
    assert_eq!(
        store
            .reserve(&beta, std::slice::from_ref(&full), &hold("run_d.0", 100, 1))
            .await
            .unwrap(),
        Reserved::Granted
    );
    assert_eq!(
        store
            .reserve(
                &acme,
                &[cap("D2026-12-05", Some(100), None)],
                &hold("run_c.3", 100, 1)
            )
            .await
            .unwrap(),
        Reserved::Granted
    );
}

/// Settled spend reads back summed by day and by agent, model or session, for the days in the
/// range asked (the month period left out), and only for its tenant.
pub async fn case_settled_spend_is_read_by_day_agent_model_and_session(
    store: Arc<dyn SpendLedger>,
) {
    let acme = tenant();
    let calls = [
        ("D2026-12-03", "main", "s1", 100),
        ("D2026-12-04", "main", "s1", 200),
        ("D2026-12-04", "support", "s2", 300),
        ("D2026-12-04", "support", "s3", 400),
        ("D2026-12-06", "main", "s1", 500),
    ];
    for (i, (day, agent, session, micros)) in calls.iter().enumerate() {
        let caps = vec![cap(day, None, None), cap("M2026-12", None, None)];
        let held = hold(&format!("run_u{i}.0"), 1_000, 100);
        assert_eq!(
            store.reserve(&acme, &caps, &held).await.unwrap(),
            Reserved::Granted
        );
        let periods = [day.to_string(), "M2026-12".to_owned()];
        let spent = Spent {
            micros: *micros,
            tokens: micros / 10,
        };
        store
            .settle(&acme, &periods, &held, spent, &tags(day, agent, session))
            .await
            .unwrap();
    }
    let rows = |group| {
        let store = store.clone();
        let acme = acme.clone();
        async move {
            store
                .usage(&acme, group, "D2026-12-04", "D2026-12-06", None, 100)
                .await
                .unwrap()
                .into_iter()
                .map(|r| (r.day, r.key, r.micros, r.tokens))
                .collect::<Vec<_>>()
        }
    };
    let s = |v: &str| v.to_owned();
    assert_eq!(
        rows(UsageGroup::Day).await,
        vec![
            (s("D2026-12-04"), s(""), 900, 90),
            (s("D2026-12-06"), s(""), 500, 50)
        ],
        "the days in range, the month left out"
    );
    assert_eq!(
        rows(UsageGroup::Agent).await,
        vec![
            (s("D2026-12-04"), s("main"), 200, 20),
            (s("D2026-12-04"), s("support"), 700, 70),
            (s("D2026-12-06"), s("main"), 500, 50)
        ]
    );
    assert_eq!(
        rows(UsageGroup::Session).await,
        vec![
            (s("D2026-12-04"), s("s1"), 200, 20),
            (s("D2026-12-04"), s("s2"), 300, 30),
            (s("D2026-12-04"), s("s3"), 400, 40),
            (s("D2026-12-06"), s("s1"), 500, 50)
        ]
    );
    assert_eq!(
        rows(UsageGroup::Model).await,
        vec![
            (s("D2026-12-04"), s("openai/gpt-4o-mini"), 900, 90),
            (s("D2026-12-06"), s("openai/gpt-4o-mini"), 500, 50)
        ]
    );
    // Another tenant sees none of it.
    assert!(
        store
            .usage(
                &tenant(),
                UsageGroup::Day,
                "D2026-12-01",
                "D2026-12-31",
                None,
                100
            )
            .await
            .unwrap()
            .is_empty()
    );
}

/// Usage rows read a page at a time: each page holds at most its count, starts after the cursor
/// (the last row of the page before), and the pages together are the whole range in order,
/// every row once, by day and by session, keys compared bytewise; a cursor outside the range
/// reads nothing or the range from its start.
pub async fn case_usage_is_read_a_page_at_a_time_after_a_cursor(store: Arc<dyn SpendLedger>) {
    let acme = tenant();
    // Sessions whose keys sort bytewise ("Z" < "a" < "a:b" < "a_b"), over three days.
    let sessions = ["a", "a:b", "Z", "a_b", "b"];
    let days = ["D2026-11-30", "D2026-12-01", "D2026-12-02"];
    let mut i = 0;
    for day in days {
        for session in sessions {
            let caps = vec![cap(day, None, None)];
            let held = hold(&format!("run_p{i}.0"), 1_000, 100);
            assert_eq!(
                store.reserve(&acme, &caps, &held).await.unwrap(),
                Reserved::Granted
            );
            i += 1;
            let spent = Spent {
                micros: i,
                tokens: i,
            };
            store
                .settle(
                    &acme,
                    &[day.to_owned()],
                    &held,
                    spent,
                    &tags(day, "main", session),
                )
                .await
                .unwrap();
        }
    }
    let walk = |group, from: &'static str, to: &'static str, count| {
        let store = store.clone();
        let acme = acme.clone();
        async move {
            let mut seen: Vec<UsageRow> = Vec::new();
            let mut after: Option<UsageCursor> = None;
            loop {
                let page = store
                    .usage(&acme, group, from, to, after.as_ref(), count)
                    .await
                    .unwrap();
                assert!(page.len() <= count, "{page:?}");
                let Some(last) = page.last() else { break };
                after = Some(UsageCursor::after(last));
                seen.extend(page);
                assert!(seen.len() <= 100, "the pages end");
            }
            seen.into_iter().map(|r| (r.day, r.key)).collect::<Vec<_>>()
        }
    };
    let mut keys = sessions.to_vec();
    keys.sort_unstable();
    assert_eq!(keys, ["Z", "a", "a:b", "a_b", "b"]);
    let expected: Vec<(String, String)> = days[1..]
        .iter()
        .flat_map(|d| keys.iter().map(move |k| (d.to_string(), k.to_string())))
        .collect();
    for count in [1, 2, 3, 10] {
        assert_eq!(
            walk(UsageGroup::Session, "D2026-12-01", "D2026-12-02", count).await,
            expected,
            "pages of {count}"
        );
    }
    let by_day = walk(UsageGroup::Day, "D2026-11-01", "D2026-12-31", 2).await;
    assert_eq!(
        by_day,
        days.iter()
            .map(|d| (d.to_string(), String::new()))
            .collect::<Vec<_>>()
    );
    // A page after a cursor past the range is empty; before it, the range from its start.
    let past = UsageCursor {
        day: "D2026-12-09".to_owned(),
        key: "a".to_owned(),
    };
    let before = UsageCursor {
        day: "D2026-11-01".to_owned(),
        key: "zzz".to_owned(),
    };
    let page = |after| {
        let store = store.clone();
        let acme = acme.clone();
        async move {
            store
                .usage(
                    &acme,
                    UsageGroup::Session,
                    "D2026-12-01",
                    "D2026-12-02",
                    Some(&after),
                    3,
                )
                .await
                .unwrap()
                .into_iter()
                .map(|r| (r.day, r.key))
                .collect::<Vec<_>>()
        }
    };
    assert!(page(past).await.is_empty());
    assert_eq!(page(before).await, expected[..3].to_vec());
    // The cursor of a row in the middle of a day goes on with that day's next key.
    let mid = UsageCursor {
        day: "D2026-12-02".to_owned(),
        key: "a:b".to_owned(),
    };
    assert_eq!(page(mid).await, expected[8..].to_vec());
}

/// A long call: its pickup is replaced and the replacing pickup clears its hold from the attempt
/// ledger (which has no record of the call yet: 0), then the call ends and settles what it
/// really spent. The real cost is counted, once, in every period and by session; a clear after
/// that, or a settlement again, changes nothing, and a clear that counted more keeps its count.
pub async fn case_a_call_that_outlives_its_pickup_is_paid_for_once(store: Arc<dyn SpendLedger>) {
    let acme = tenant();
    let periods = ["D2026-12-04".to_owned(), "M2026-12".to_owned()];
    let caps = vec![
        cap(&periods[0], Some(1_000), None),
        cap(&periods[1], Some(10_000), None),
    ];
    let day = tags(&periods[0], "main", "long");
    let long = hold("run_long.0", 400, 40);
    assert_eq!(
        store.reserve(&acme, &caps, &long).await.unwrap(),
        Reserved::Granted
    );
    // The replacing pickup clears it: the ledger knows of no spend.
    store
        .clear(&acme, &periods, &long, Spent::default(), &day)
        .await
        .unwrap();
    for period in &periods {
        let now = store.period_spend(&acme, period).await.unwrap();
        assert_eq!(
            (now.micros, now.tokens, now.holds.len()),
            (0, 0, 0),
            "{period}"
        );
    }
    // The call ends after all and settles what it spent: counted in full.
    let actual = Spent {
        micros: 660,
        tokens: 66,
    };
    for _ in 0..2 {
        store
            .settle(&acme, &periods, &long, actual, &day)
            .await
            .unwrap();
        store
            .clear(&acme, &periods, &long, Spent::default(), &day)
            .await
            .unwrap();
    }
    for period in &periods {
        let now = store.period_spend(&acme, period).await.unwrap();
        assert_eq!(
            (now.micros, now.tokens, now.holds.len()),
            (660, 66, 0),
            "{period}: the long call's real cost, once"
        );
    }
    // A clear that counted from the ledger, then a late settlement: only the difference.
    let second = hold("run_long.1", 200, 20);
    assert_eq!(
        store.reserve(&acme, &caps, &second).await.unwrap(),
        Reserved::Granted
    );
    let ledger = Spent {
        micros: 100,
        tokens: 10,
    };
    store
        .clear(&acme, &periods, &second, ledger, &day)
        .await
        .unwrap();
    store
        .settle(
            &acme,
            &periods,
            &second,
            Spent {
                micros: 150,
                tokens: 15,
            },
            &day,
        )
        .await
        .unwrap();
    // A late settlement below what the clear counted takes nothing back.
    store
        .settle(
            &acme,
            &periods,
            &second,
            Spent {
                micros: 50,
                tokens: 5,
            },
            &day,
        )
        .await
        .unwrap();
    let now = store.period_spend(&acme, &periods[0]).await.unwrap();
    assert_eq!((now.micros, now.tokens), (810, 81));
    let sessions: Vec<_> = store
        .usage(
            &acme,
            UsageGroup::Session,
            &periods[0],
            &periods[0],
            None,
            100,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.micros, r.tokens))
        .collect();
    assert_eq!(sessions, vec![("long".to_owned(), 810, 81)]);
    // The cap holds what was really spent: 190 left of 1,000.
    assert!(matches!(
        store
            .reserve(&acme, &caps, &hold("run_long.2", 191, 1))
            .await
            .unwrap(),
        Reserved::Refused { .. }
    ));
}
