//! One internal error for the SQLite code, mapped onto the seams' error kinds at the
//! async boundary.

use agentlane_core::{QueueError, StoreError};

/// What the blocking side can fail with.
#[derive(Debug)]
pub(crate) enum Error {
    /// SQLite (I/O, busy, constraint we did not expect).
    Sql(rusqlite::Error),
    /// A stored JSON column could not be decoded, or a record could not be encoded.
    Json(serde_json::Error),
    /// A domain answer decided inside the transaction (`FenceLost`, `Conflict`, ...).
    Store(StoreError),
    /// A queue answer decided inside the transaction (`StaleReceipt`, ...).
    Queue(QueueError),
}

impl From<rusqlite::Error> for Error {
    fn from(error: rusqlite::Error) -> Self {
        Error::Sql(error)
    }
}

impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Self {
        Error::Json(error)
    }
}

impl From<StoreError> for Error {
    fn from(error: StoreError) -> Self {
        Error::Store(error)
    }
}

impl From<QueueError> for Error {
    fn from(error: QueueError) -> Self {
        Error::Queue(error)
    }
}

impl From<Error> for StoreError {
    fn from(error: Error) -> Self {
        match error {
            Error::Sql(e) => StoreError::Unavailable(format!("sqlite: {e}")),
            Error::Json(e) => StoreError::Corrupt(e.to_string()),
            Error::Store(e) => e,
            Error::Queue(e) => StoreError::Unavailable(e.to_string()),
        }
    }
}

impl From<Error> for QueueError {
    fn from(error: Error) -> Self {
        match error {
            Error::Sql(e) => QueueError::Unavailable(format!("sqlite: {e}")),
            Error::Json(e) => QueueError::Malformed(e.to_string()),
            Error::Store(e) => QueueError::Unavailable(e.to_string()),
            Error::Queue(e) => e,
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

/// A `u64` (ms timestamp, seq, counter) as SQLite's `INTEGER`, saturating.
pub(crate) fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// An SQLite `INTEGER` we wrote from a `u64` back; negatives (never written) read as 0.
pub(crate) fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
