//! What the crate's own test kit (`testkit`) and its integration suite share (the suite's
//! `tests/suite/common.rs` includes this file by path): the two tenants and their keys, and
//! the runner's moves through the `Store` API (read a run, take a session's lock, the session
//! update of a commit).

use agentlane_core::{
    Fence, LockAttempt, Run, RunId, SessionKey, SessionStatus, SessionUpdate, Store, TenantId,
};

pub const ACME_KEY: &str = "acme-key-0123456789";
pub const BETA_KEY: &str = "beta-key-0123456789";

pub fn acme() -> TenantId {
    TenantId::new("acme")
}

/// Both tenants' keys as `AGENTLANE_API_KEYS` spells them.
pub fn keys_spec() -> String {
    format!("acme:{ACME_KEY},beta:{BETA_KEY}")
}

/// The run, which must exist.
pub async fn read_run(store: &dyn Store, tenant: &TenantId, run_id: &str) -> Run {
    store
        .get_run(tenant, &RunId::new(run_id))
        .await
        .unwrap()
        .unwrap()
}

/// Takes the session's write lock at `now` as a runner would; panics if someone holds it.
pub async fn take_lock(store: &dyn Store, tenant: &TenantId, session_key: &str, now: u64) -> Fence {
    match store
        .acquire_lock(
            tenant,
            &SessionKey::new(session_key),
            "test-runner",
            60_000,
            now,
        )
        .await
        .unwrap()
    {
        LockAttempt::Acquired(fence, _) => fence,
        LockAttempt::Held { owner, until } => panic!("lock held by {owner} until {until}"),
    }
}

/// The session update a runner commits with `run` at `now`: idle once the run is terminal,
/// else processing it.
pub fn session_update(run: &Run, now: u64) -> SessionUpdate {
    let terminal = run.status.is_terminal();
    SessionUpdate {
        status: if terminal {
            SessionStatus::Idle
        } else {
            SessionStatus::Processing
        },
        active_run_id: (!terminal).then(|| run.run_id.clone()),
        last_progress_at: now,
        finished_delta: u64::from(terminal),
    }
}
