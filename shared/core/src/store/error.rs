//! What a store call can fail with.

/// Store failures keep their kind: callers decide retry vs stop from the variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The fence is stale: another writer took the lock (or it was released). Stop writing.
    #[error("the session lock was lost (stale fencing token)")]
    FenceLost,
    /// A conditional create found the item already there (e.g. a transcript seq).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The thing to change does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The session is locked by a live writer.
    #[error("session is busy")]
    Busy,
    /// The backend asked us to slow down; retry later.
    #[error("throttled: {0}")]
    Throttled(String),
    /// Any other backend failure (I/O, network, service error).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored item could not be decoded.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// The write is larger than the store takes: a commit beyond
    /// [`MAX_COMMIT_WRITES`](crate::MAX_COMMIT_WRITES) / [`MAX_COMMIT_BYTES`](crate::MAX_COMMIT_BYTES)
    /// (split it with [`Commit::split`](crate::Commit::split)), or a run record or transcript
    /// entry that even the [size rule](crate::record_size) cannot bring under
    /// [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES). Nothing was written; the same call fails
    /// again.
    #[error("too large: {0}")]
    TooLarge(String),
    /// The session already has `cap` runs queued or running (accepted, not finished): the turn
    /// was not accepted (see [`NewTurn::max_open_runs`](crate::NewTurn::max_open_runs)).
    #[error("session full: {open} runs queued or running (at most {cap})")]
    SessionFull {
        /// Runs of the session queued or running now.
        open: u64,
        /// The most the session may have.
        cap: u64,
    },
    /// The tenant's budget for `period` is spent: the turn was not accepted (see
    /// [`NewTurn::spend_caps`](crate::NewTurn::spend_caps)); the period ends at `ends_at` (ms).
    #[error("budget spent for {period}")]
    BudgetSpent {
        /// The period key (`D2026-12-04` for a UTC day, `M2026-12` for a month).
        period: String,
        /// When the period ends (ms since the epoch): a turn may be accepted again then.
        ends_at: u64,
    },
}

impl StoreError {
    /// Whether the same call may succeed if tried again later.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Throttled(_) | StoreError::Unavailable(_) | StoreError::Busy => true,
            StoreError::FenceLost
            | StoreError::Conflict(_)
            | StoreError::NotFound(_)
            | StoreError::Corrupt(_)
            | StoreError::TooLarge(_)
            | StoreError::SessionFull { .. }
            | StoreError::BudgetSpent { .. } => false,
        }
    }
}

/// The result of a store call.
pub type StoreResult<T> = Result<T, StoreError>;
