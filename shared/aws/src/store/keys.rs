//! Key construction for the single table. Every partition key starts with `T#{tenant}#`, so a
//! tenant can only ever address its own items.

use crate::hash::hex_sha256;
use agentlane_core::{RunId, SessionId, SessionKey, TenantId};

/// Partition key attribute.
pub(crate) const PK: &str = "PK";
/// Sort key attribute.
pub(crate) const SK: &str = "SK";
/// Sort key of a session item.
pub(crate) const SESSION_SK: &str = "SESSION";
/// Sort key of a run item.
pub(crate) const RUN_SK: &str = "RUN";
/// Sort key of an idempotency item.
pub(crate) const IDEM_SK: &str = "IDEM";
/// Sort-key prefix of transcript entries.
pub(crate) const ENTRY_PREFIX: &str = "E#";
/// Sort-key prefix of run events.
pub(crate) const EVENT_PREFIX: &str = "V#";

/// Sort-key prefix of a session's pending steer messages (in its session partition).
pub(crate) const PENDING_STEER_PREFIX: &str = "PS#";

/// Idempotency keys longer than this are stored under their SHA-256 (DynamoDB keys are limited
/// to 2 KB).
const MAX_VERBATIM_IDEMPOTENCY_KEY: usize = 512;

pub(crate) fn session_pk(tenant: &TenantId, key: &SessionKey) -> String {
    format!("T#{tenant}#S#{key}")
}

pub(crate) fn transcript_pk(tenant: &TenantId, session_id: &SessionId) -> String {
    format!("T#{tenant}#SID#{session_id}")
}

/// Shared by the run item (`RUN`) and its events (`V#…`).
pub(crate) fn run_pk(tenant: &TenantId, run_id: &RunId) -> String {
    format!("T#{tenant}#R#{run_id}")
}

pub(crate) fn idempotency_pk(tenant: &TenantId, key: &str) -> String {
    if key.len() <= MAX_VERBATIM_IDEMPOTENCY_KEY {
        format!("T#{tenant}#K#{key}")
    } else {
        format!("T#{tenant}#K#h#{}", hex_sha256(key))
    }
}

pub(crate) fn entry_sk(seq: u64) -> String {
    format!("{ENTRY_PREFIX}{seq:012}")
}

/// A pending steer message, by its run's `session_seq`.
pub(crate) fn pending_steer_sk(session_seq: u64) -> String {
    format!("{PENDING_STEER_PREFIX}{session_seq:012}")
}

pub(crate) fn event_sk(seq: u64) -> String {
    format!("{EVENT_PREFIX}{seq:08}")
}

/// The exclusive lower bound of a `SK > :after` query: the prefix alone when reading from the
/// start (every entry key sorts after it).
pub(crate) fn after_bound(prefix: &str, after: Option<u64>, width: usize) -> String {
    match after {
        Some(seq) => format!("{prefix}{seq:0width$}"),
        None => prefix.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_start_with_the_tenant_and_sort_by_seq() {
        let t = TenantId::new("acme");
        assert_eq!(
            session_pk(&t, &SessionKey::new("a:b")),
            "T#acme#S#a:b".to_owned()
        );
        assert_eq!(run_pk(&t, &RunId::new("run_1")), "T#acme#R#run_1");
        assert_eq!(entry_sk(7), "E#000000000007");
        assert_eq!(event_sk(7), "V#00000007");
        assert!(entry_sk(9) < entry_sk(10));
        assert!(after_bound(ENTRY_PREFIX, None, 12) < entry_sk(0));
        assert_eq!(after_bound(EVENT_PREFIX, Some(3), 8), event_sk(3));
        // The run item shares the events' partition and must sort before every event.
        assert!(RUN_SK < EVENT_PREFIX);
    }

    #[test]
    fn long_idempotency_keys_are_hashed() {
        let t = TenantId::new("acme");
        assert_eq!(idempotency_pk(&t, "k1"), "T#acme#K#k1");
        let long = "x".repeat(600);
        let pk = idempotency_pk(&t, &long);
        assert_eq!(pk, format!("T#acme#K#h#{}", hex_sha256(&long)));
        assert_eq!(pk.len(), "T#acme#K#h#".len() + 64);
    }
}
