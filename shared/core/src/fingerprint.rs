//! Stand-ins for session keys in logs. A session key is client data (often a user id or an
//! e-mail address): no log line at any level writes it in clear; they write its
//! [`fingerprint`] instead, the same in every crate, so one session can be followed across the
//! API, the runner, the supervisor and cron.

use crate::ids::{Lane, SessionKey};
use sha2::{Digest, Sha256};

/// A stable, non-reversible stand-in for `text` (a session key) in logs: the first 12 hex
/// digits of its SHA-256.
pub fn fingerprint(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

impl SessionKey {
    /// This key's [`fingerprint`], for logs.
    pub fn fingerprint(&self) -> String {
        fingerprint(self.as_str())
    }
}

impl Lane {
    /// This lane for logs: `{tenant}/{fingerprint of the session key}` (a lane names its
    /// session key in clear).
    pub fn fingerprint(&self) -> String {
        match self.as_str().split_once('/') {
            Some((tenant, key)) => format!("{tenant}/{}", fingerprint(key)),
            None => fingerprint(self.as_str()),
        }
    }

    /// The tenant part of a session lane (`{tenant}/{sessionKey}`); the whole name for a lane
    /// of another shape.
    pub fn tenant_part(&self) -> &str {
        self.as_str()
            .split_once('/')
            .map_or(self.as_str(), |(tenant, _)| tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TenantId;

    #[test]
    fn fingerprints_are_stable_short_and_hide_the_key() {
        let a = fingerprint("user:alice@example.com");
        assert_eq!(a, fingerprint("user:alice@example.com"));
        assert_ne!(a, fingerprint("user:bob@example.com"));
        assert_eq!(a.len(), 12);
        assert!(!a.contains("alice"));
        let key = SessionKey::new("user:alice@example.com");
        assert_eq!(key.fingerprint(), a);
    }

    #[test]
    fn a_lane_keeps_its_tenant_and_hides_its_key() {
        let lane = Lane::for_session(&TenantId::new("acme"), &SessionKey::new("alice"));
        assert_eq!(lane.fingerprint(), format!("acme/{}", fingerprint("alice")));
        assert_eq!(lane.tenant_part(), "acme");
        assert!(!lane.fingerprint().contains("alice"));
    }
}
