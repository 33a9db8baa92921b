//! The [`AgentStore`] cases, and how a turn's accept resolves its agent: versions are
//! immutable and numbered on from a deleted agent's last; the per-tenant cap holds; updates are
//! conditional on the version; a turn records the version it was accepted with, a session keeps
//! the agent of its first turn, an unknown agent is `NotFound`. Every case uses fresh random
//! tenants, so cases may share one backend.
//!
//! In an adapter's integration test:
//!
//! ```ignore
//! agentlane_conformance::agents_conformance!(async { Arc::new(make()) as Arc<dyn AgentBackend> });
//! ```

use crate::fixtures::{session_key, tenant, turn, wall_ms};
use agentlane_core::{
    Agent, AgentSpec, AgentStore, QueueMode, Store, StoreError, TenantId, TurnRequest,
};
use std::sync::Arc;

/// A backend that stores agents and accepts turns (both adapters are).
pub trait AgentBackend: Store + AgentStore {}

impl<T: Store + AgentStore + ?Sized> AgentBackend for T {}

/// Generates `mod agents_conformance` with one `#[tokio::test]` per case. The argument is an
/// expression (typically an `async` block) yielding `Arc<dyn AgentBackend>`, evaluated per case.
#[macro_export]
macro_rules! agents_conformance {
    ($make:expr) => {
        $crate::__expand_cases! { tests agents_conformance agents ($make);
            case_agents_are_created_read_listed_changed_and_deleted_per_tenant,
            case_the_per_tenant_agent_cap_holds,
            case_an_update_is_conditional_on_the_version,
            case_a_recreated_agent_numbers_on_and_old_versions_stay_readable,
            case_a_turn_records_its_agents_version_and_a_session_keeps_its_agent,
        }
    };
}

fn agent(tenant: &TenantId, id: &str, instructions: &str) -> Agent {
    let now = wall_ms();
    Agent {
        tenant: tenant.clone(),
        agent_id: id.to_owned(),
        version: 0,
        created_at: now,
        updated_at: now,
        spec: AgentSpec {
            instructions: Some(instructions.to_owned()),
            ..AgentSpec::default()
        },
    }
}

fn next(agent: &Agent, instructions: &str) -> Agent {
    Agent {
        version: agent.version + 1,
        updated_at: agent.updated_at + 1,
        spec: AgentSpec {
            instructions: Some(instructions.to_owned()),
            ..agent.spec.clone()
        },
        ..agent.clone()
    }
}

/// A new agent is version 1; it reads back whole, lists in id order with a cursor, and is
/// invisible to other tenants. A second create of the id conflicts; an update makes the current
/// version while older ones stay readable; a delete hides the agent but keeps its versions.
pub async fn case_agents_are_created_read_listed_changed_and_deleted_per_tenant(
    store: Arc<dyn AgentBackend>,
) {
    let (acme, beta) = (tenant(), tenant());
    let a = store
        .create_agent(&agent(&acme, "alpha", "A1"), 10)
        .await
        .unwrap();
    assert_eq!(a.version, 1, "a new agent is version 1");
    store
        .create_agent(&agent(&acme, "beta-bot", "B1"), 10)
        .await
        .unwrap();
    assert_eq!(
        store.get_agent(&acme, "alpha").await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(
        store.get_agent(&beta, "alpha").await.unwrap(),
        None,
        "another tenant's agent is invisible"
    );
    assert!(store.list_agents(&beta, None, 10).await.unwrap().is_empty());
    assert!(matches!(
        store
            .create_agent(&agent(&acme, "alpha", "again"), 10)
            .await,
        Err(StoreError::Conflict(_))
    ));

    let a2 = next(&a, "A2");
    store.update_agent(&a2).await.unwrap();
    assert_eq!(
        store.get_agent(&acme, "alpha").await.unwrap(),
        Some(a2.clone())
    );
    assert_eq!(
        store.get_agent_version(&acme, "alpha", 1).await.unwrap(),
        Some(a.clone()),
        "an older version stays readable"
    );

    let ids = |agents: Vec<Agent>| agents.into_iter().map(|a| a.agent_id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_agents(&acme, None, 10).await.unwrap()),
        ["alpha", "beta-bot"]
    );
    assert_eq!(
        ids(store.list_agents(&acme, None, 1).await.unwrap()),
        ["alpha"]
    );
    assert_eq!(
        ids(store.list_agents(&acme, Some("alpha"), 10).await.unwrap()),
        ["beta-bot"],
        "a page goes on after the cursor"
    );
    let listed = store.list_agents(&acme, None, 10).await.unwrap();
    assert_eq!(listed[0], a2, "the list shows each agent's current version");

    assert!(store.delete_agent(&acme, "alpha").await.unwrap());
    assert!(!store.delete_agent(&acme, "alpha").await.unwrap());
    assert!(!store.delete_agent(&beta, "beta-bot").await.unwrap());
    assert_eq!(store.get_agent(&acme, "alpha").await.unwrap(), None);
    assert_eq!(
        store.get_agent_version(&acme, "alpha", 2).await.unwrap(),
        Some(a2),
        "a deleted agent's versions stay for the runs that use them"
    );
    assert_eq!(
        ids(store.list_agents(&acme, None, 10).await.unwrap()),
        ["beta-bot"]
    );
}

/// A tenant at its agent cap (2 here) is refused with a `Conflict` naming the cap; another
/// tenant counts apart, and a delete frees a place.
pub async fn case_the_per_tenant_agent_cap_holds(store: Arc<dyn AgentBackend>) {
    let acme = tenant();
    for id in ["a1", "a2"] {
        store.create_agent(&agent(&acme, id, "x"), 2).await.unwrap();
    }
    let refused = store.create_agent(&agent(&acme, "a3", "x"), 2).await;
    assert!(
        matches!(&refused, Err(StoreError::Conflict(m)) if m.contains("cap")),
        "{refused:?}"
    );
    // Another tenant has its own count; a delete frees a place.
    store
        .create_agent(&agent(&tenant(), "a3", "x"), 2)
        .await
        .unwrap();
    assert!(store.delete_agent(&acme, "a1").await.unwrap());
    store
        .create_agent(&agent(&acme, "a3", "x"), 2)
        .await
        .unwrap();
}

/// An update from a stale read (version 1 after version 2 was written) is a `Conflict` and
/// writes nothing; updating a deleted agent is `NotFound`.
pub async fn case_an_update_is_conditional_on_the_version(store: Arc<dyn AgentBackend>) {
    let acme = tenant();
    let a = store
        .create_agent(&agent(&acme, "bot", "v1"), 10)
        .await
        .unwrap();
    let a2 = next(&a, "v2");
    store.update_agent(&a2).await.unwrap();
    // A writer that read version 1 loses.
    let stale = next(&a, "lost");
    assert!(matches!(
        store.update_agent(&stale).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.get_agent(&acme, "bot").await.unwrap(),
        Some(a2.clone())
    );
    store.delete_agent(&acme, "bot").await.unwrap();
    assert!(matches!(
        store.update_agent(&next(&a2, "gone")).await,
        Err(StoreError::NotFound(_))
    ));
}

/// An agent re-created after a delete numbers on from its last version (3, not 1), so
/// (tenant, agent id, version) always names one definition, and every old version stays readable.
pub async fn case_a_recreated_agent_numbers_on_and_old_versions_stay_readable(
    store: Arc<dyn AgentBackend>,
) {
    let acme = tenant();
    let a = store
        .create_agent(&agent(&acme, "bot", "v1"), 10)
        .await
        .unwrap();
    store.update_agent(&next(&a, "v2")).await.unwrap();
    store.delete_agent(&acme, "bot").await.unwrap();
    let again = store
        .create_agent(&agent(&acme, "bot", "v3"), 10)
        .await
        .unwrap();
    assert_eq!(
        again.version, 3,
        "(tenant, agentId, version) always names one definition"
    );
    let instructions = |v| {
        let store = store.clone();
        let acme = acme.clone();
        async move {
            store
                .get_agent_version(&acme, "bot", v)
                .await
                .unwrap()
                .and_then(|a| a.spec.instructions)
        }
    };
    assert_eq!(instructions(1).await.as_deref(), Some("v1"));
    assert_eq!(instructions(2).await.as_deref(), Some("v2"));
    assert_eq!(instructions(3).await.as_deref(), Some("v3"));
}

/// Accepting a turn: `main` without a tenant definition records version 0; an unknown agent is
/// `NotFound` and creates nothing; a defined agent's current version (and queue mode) is recorded;
/// a session keeps the agent of its first turn (another agent conflicts); a tenant's own `main`
/// replaces the deployment's; a deleted agent takes no more turns.
pub async fn case_a_turn_records_its_agents_version_and_a_session_keeps_its_agent(
    store: Arc<dyn AgentBackend>,
) {
    let acme = tenant();
    let now = wall_ms();
    let named = |key, agent: Option<&str>| {
        let mut t = turn(&acme, key, now);
        t.request = TurnRequest {
            agent_id: agent.map(str::to_owned),
            queue_mode: None,
            ..t.request
        };
        t
    };

    // `main` without a definition of the tenant's own is the deployment's: version 0.
    let plain = session_key();
    let run = store.accept_turn(named(&plain, None)).await.unwrap().run;
    assert_eq!(run.request.agent_version, Some(0));

    // An unknown agent is refused, naming it; nothing is created.
    let key = session_key();
    let refused = store.accept_turn(named(&key, Some("ghost"))).await;
    assert!(
        matches!(&refused, Err(StoreError::NotFound(m)) if m.contains("ghost")),
        "{refused:?}"
    );
    assert_eq!(store.get_session(&acme, &key).await.unwrap(), None);

    // A defined agent: the run records its current version, and its queue mode applies.
    let mut bot = agent(&acme, "bot", "v1");
    bot.spec.queue_mode = Some(QueueMode::Collect);
    let bot = store.create_agent(&bot, 10).await.unwrap();
    let run = store
        .accept_turn(named(&key, Some("bot")))
        .await
        .unwrap()
        .run;
    assert_eq!(run.request.agent_id.as_deref(), Some("bot"));
    assert_eq!(run.request.agent_version, Some(1));
    assert_eq!(run.request.queue_mode, Some(QueueMode::Collect));
    store.update_agent(&next(&bot, "v2")).await.unwrap();
    let run = store
        .accept_turn(named(&key, Some("bot")))
        .await
        .unwrap()
        .run;
    assert_eq!(
        run.request.agent_version,
        Some(2),
        "the next turn sees the change"
    );

    // The session belongs to `bot`: a turn naming another agent is a conflict naming both.
    let other = store.accept_turn(named(&key, None)).await;
    assert!(
        matches!(&other, Err(StoreError::Conflict(m)) if m.contains("bot") && m.contains("main")),
        "{other:?}"
    );
    let other = store.accept_turn(named(&plain, Some("bot"))).await;
    assert!(matches!(other, Err(StoreError::Conflict(_))), "{other:?}");

    // A tenant's own `main` replaces the deployment's for its later turns.
    store
        .create_agent(&agent(&acme, "main", "ours"), 10)
        .await
        .unwrap();
    let run = store.accept_turn(named(&plain, None)).await.unwrap().run;
    assert_eq!(run.request.agent_version, Some(1));
    // A deleted agent takes no more turns.
    store.delete_agent(&acme, "bot").await.unwrap();
    assert!(matches!(
        store.accept_turn(named(&key, Some("bot"))).await,
        Err(StoreError::NotFound(_))
    ));
}
