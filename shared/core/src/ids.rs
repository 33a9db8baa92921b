//! Identifiers. Each is a string newtype so a run id can never be passed where a session key is
//! expected.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        #[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
        pub struct $name(String);

        impl $name {
            /// Wraps `value` as is; nothing is checked (the API validates what clients send).
            pub fn new(value: impl Into<String>) -> Self {
                Self(value.into())
            }
            /// The id's text, as sent and stored.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self(value.to_owned())
            }
        }
    };
}

string_id!(
    /// The owner of sessions, runs and jobs; every API key maps to exactly one tenant.
    TenantId
);
string_id!(
    /// The routing bucket a client names (`sessionKey`): stable across resets.
    SessionKey
);
string_id!(
    /// The current transcript identity behind a session key; a reset mints a new one.
    SessionId
);
string_id!(
    /// One accepted turn.
    RunId
);

impl RunId {
    /// A fresh, time-ordered run id.
    pub fn generate() -> Self {
        Self(format!("run_{}", uuid::Uuid::now_v7().simple()))
    }
}

impl SessionId {
    /// A fresh session id.
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }
}

/// The serialisation unit: one session of one tenant. The queue never delivers a lane's next
/// message while its current one is in flight; different lanes are independent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Lane(String);

impl Lane {
    /// The lane of a session: `{tenant}/{sessionKey}`. Session keys cannot contain `/`, so the
    /// mapping is injective.
    pub fn for_session(tenant: &TenantId, key: &SessionKey) -> Self {
        Self(format!("{}/{}", tenant.as_str(), key.as_str()))
    }
    /// Wraps `value` (a `{tenant}/{sessionKey}` name) as is; nothing is checked.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The lane's name, `{tenant}/{sessionKey}`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A monotonically increasing number handed out with each lock acquisition. Every fenced write
/// carries it; a writer whose token is no longer current writes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(pub u64);
