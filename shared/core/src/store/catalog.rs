//! A tenant's sessions and a session's runs as lists, and a session's data deleted (issue 24):
//! the operator's view of the store. Lists come from an index (DynamoDB GSIs `sessions` and
//! `sessionRuns`, SQLite expression indexes), never from a scan, and pages are bounded by
//! count and bytes like the transcript's ([`PageBudget`]).

use super::{PageBudget, StoreResult};
use crate::agent::MAIN_AGENT;
use crate::ids::{SessionKey, TenantId};
use crate::run::{Run, RunStatus};
use crate::session::{Session, SessionStatus};
use async_trait::async_trait;

/// Which sessions a list keeps. `None` fields keep all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    /// Only the sessions of this agent (`main` also keeps sessions from before agents).
    pub agent_id: Option<String>,
    /// Only the sessions in this status.
    pub status: Option<SessionStatus>,
}

impl SessionFilter {
    /// Whether `session` passes the filter: the rule every adapter applies (in its query's
    /// filter) and the tests check.
    pub fn keeps(&self, session: &Session) -> bool {
        let agent = session.agent_id.as_deref().unwrap_or(MAIN_AGENT);
        self.agent_id.as_deref().is_none_or(|want| want == agent)
            && self.status.is_none_or(|want| want == session.status)
    }
}

/// Where a session list goes on: after the session last listed, newest activity first
/// (`updatedAt` descending, then the key descending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCursor {
    /// The `updatedAt` of the last session listed.
    pub updated_at: u64,
    /// Its key.
    pub session_key: SessionKey,
}

impl SessionCursor {
    /// The cursor after `session`.
    pub fn after(session: &Session) -> Self {
        Self {
            updated_at: session.updated_at,
            session_key: session.session_key.clone(),
        }
    }

    /// The cursor as an opaque token for clients: `{updatedAt}_{sessionKey}`.
    pub fn encode(&self) -> String {
        format!("{}_{}", self.updated_at, self.session_key)
    }

    /// The cursor of a token made by [`encode`](Self::encode); `None` for anything else.
    pub fn decode(token: &str) -> Option<Self> {
        let (at, key) = token.split_once('_')?;
        if key.is_empty() || at.is_empty() || !at.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Self {
            updated_at: at.parse().ok()?,
            session_key: SessionKey::new(key),
        })
    }

    /// Whether `session` sorts after this cursor in a list (newest activity first).
    pub fn precedes(&self, session: &Session) -> bool {
        (session.updated_at, session.session_key.as_str())
            < (self.updated_at, self.session_key.as_str())
    }
}

/// One page of a session list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionPage {
    /// The sessions, newest activity first.
    pub sessions: Vec<Session>,
    /// Where the next page starts; `None` when the list is done.
    pub next: Option<SessionCursor>,
}

/// One page of a session's runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunPage {
    /// The runs, newest first (`sessionSeq` descending).
    pub runs: Vec<Run>,
    /// The `sessionSeq` the next page goes below; `None` when the list is done.
    pub next: Option<u64>,
}

/// What deleting a session removed (counts of stored records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionRemoval {
    /// Run records.
    pub runs: u64,
    /// Run events.
    pub events: u64,
    /// Transcript entries (of every session id the key had).
    pub transcript_entries: u64,
    /// Everything else: the session record, idempotency records, pending steers, queued lane
    /// messages.
    pub other: u64,
}

/// Lists a tenant's sessions and a session's runs, and deletes a session's data.
#[async_trait]
pub trait SessionCatalog: Send + Sync {
    /// The tenant's sessions that `filter` keeps, newest activity (`updatedAt`) first, from
    /// after `after` (from the newest when `None`), within `budget` (sizes measured on each
    /// session's JSON). `next` is set whenever the budget ended the page.
    async fn list_sessions(
        &self,
        tenant: &TenantId,
        filter: &SessionFilter,
        after: Option<&SessionCursor>,
        budget: PageBudget,
    ) -> StoreResult<SessionPage>;

    /// The runs of the session key (all its session ids), in `status` when given, newest first
    /// (`sessionSeq` descending), those numbered below `before` when given, within `budget`
    /// (sizes measured on each run's stored JSON). An unknown key lists nothing.
    async fn list_session_runs(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        status: Option<RunStatus>,
        before: Option<u64>,
        budget: PageBudget,
    ) -> StoreResult<RunPage>;

    /// Deletes the session of `key` and everything of it: its transcript (every session id),
    /// its runs and their events, idempotency records, pending steers and queued work.
    /// `None` when the key has no session; `Busy` while a writer holds its lock at `now`
    /// (abort the running turn first). Queued turns whose run is gone are dropped when
    /// delivered.
    async fn delete_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        now: u64,
    ) -> StoreResult<Option<SessionRemoval>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SessionId;

    fn session(key: &str, updated_at: u64, agent: Option<&str>, busy: bool) -> Session {
        Session {
            updated_at,
            agent_id: agent.map(str::to_owned),
            status: if busy {
                SessionStatus::Processing
            } else {
                SessionStatus::Idle
            },
            ..Session::new(
                TenantId::new("t"),
                SessionKey::new(key),
                SessionId::new("s"),
                1,
            )
        }
    }

    #[test]
    fn a_filter_keeps_the_sessions_of_its_agent_and_status() {
        let main_idle = session("a", 1, None, false);
        let main_named = session("b", 1, Some("main"), true);
        let helper = session("c", 1, Some("helper"), false);
        let filter = |agent: Option<&str>, status| SessionFilter {
            agent_id: agent.map(str::to_owned),
            status,
        };
        let cases = [
            (filter(None, None), [true, true, true]),
            (filter(Some("main"), None), [true, true, false]),
            (filter(Some("helper"), None), [false, false, true]),
            (
                filter(None, Some(SessionStatus::Processing)),
                [false, true, false],
            ),
            (
                filter(Some("helper"), Some(SessionStatus::Idle)),
                [false, false, true],
            ),
        ];
        for (filter, want) in cases {
            let got = [&main_idle, &main_named, &helper].map(|s| filter.keeps(s));
            assert_eq!(got, want, "{filter:?}");
        }
    }

    #[test]
    fn a_cursor_round_trips_and_rejects_anything_else() {
        let cursor = SessionCursor {
            updated_at: 1_700_000_000_000,
            session_key: SessionKey::new("user:a_b"),
        };
        assert_eq!(cursor.encode(), "1700000000000_user:a_b");
        assert_eq!(SessionCursor::decode(&cursor.encode()), Some(cursor));
        for bad in [
            "",
            "_k",
            "12_",
            "x1_k",
            "12",
            "-1_k",
            "99999999999999999999999_k",
        ] {
            assert_eq!(SessionCursor::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_cursor_precedes_older_sessions_and_same_time_smaller_keys() {
        let cursor = SessionCursor::after(&session("m", 10, None, false));
        let cases = [
            (session("a", 9, None, false), true),
            (session("z", 9, None, false), true),
            (session("a", 10, None, false), true),
            (session("m", 10, None, false), false),
            (session("z", 10, None, false), false),
            (session("a", 11, None, false), false),
        ];
        for (s, want) in cases {
            assert_eq!(cursor.precedes(&s), want, "{s:?}");
        }
    }
}
