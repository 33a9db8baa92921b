//! Sessions and the session write lock (owner + lease + fencing token).

use crate::ids::{FencingToken, RunId, SessionId, SessionKey, TenantId};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    #[default]
    Idle,
    Processing,
}

/// A session key's current state. Lock fields are part of the record so that a fenced write can
/// check them in the same conditional write (DynamoDB) or transaction (SQLite).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub tenant: TenantId,
    pub session_key: SessionKey,
    pub session_id: SessionId,
    pub status: SessionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<RunId>,
    pub created_at: u64,
    pub updated_at: u64,
    /// Last time a run of this session made progress (a reply, a tool, a status change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_at: Option<u64>,
    /// Turns accepted for this key (all session ids).
    pub runs_accepted: u64,
    /// Turns that reached a terminal status.
    pub runs_finished: u64,
    /// Bumped by every reset.
    pub generation: u64,
    /// Current lock holder, if any (its lease may have expired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_owner: Option<String>,
    /// Lease end, ms since the epoch.
    pub lock_until: u64,
    /// The last fencing token handed out; only grows.
    pub fence: u64,
}

/// Proof of holding a session's write lock. Pass it to every fenced write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub tenant: TenantId,
    pub session_key: SessionKey,
    pub owner: String,
    pub token: FencingToken,
}

/// The answer to one acquire try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAttempt {
    Acquired(Fence),
    /// Someone else holds an unexpired lease.
    Held {
        owner: String,
        until: u64,
    },
}

/// Activity fields a runner sets on its session while it holds the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUpdate {
    pub status: SessionStatus,
    pub active_run_id: Option<RunId>,
    pub last_progress_at: u64,
    /// Add this to `runs_finished`.
    pub finished_delta: u64,
}
