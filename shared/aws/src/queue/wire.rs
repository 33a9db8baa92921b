//! What a lane message looks like on SQS: its group id, dedup id and body, and the way back from
//! an SQS record (a `ReceiveMessage` result or a Lambda `SqsEvent` record) to a [`Delivery`].

use crate::hash::hex_sha256;
use agentlane_core::{Delivery, Lane, LaneMessage, QueueError, Receipt, TurnMessage};
use serde::{Deserialize, Serialize};

/// Longest `MessageGroupId` / `MessageDeduplicationId` SQS accepts.
pub const MAX_SQS_ID_LEN: usize = 128;

/// Whether SQS accepts `id` as a group or deduplication id: 1–128 characters of
/// ``[A-Za-z0-9!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~]`` (the printable ASCII characters but space).
pub fn is_valid_sqs_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_SQS_ID_LEN && id.chars().all(|c| c.is_ascii_graphic())
}

/// The `MessageGroupId` of a lane: the lane itself when SQS accepts it, else `h#` and the hex
/// SHA-256 of the lane (66 characters). Lanes are `{tenant}/{sessionKey}` and tenants cannot
/// contain `#`, so a verbatim lane never looks like a hashed one.
pub fn message_group_id(lane: &Lane) -> String {
    if is_valid_sqs_id(lane.as_str()) {
        lane.as_str().to_owned()
    } else {
        format!("h#{}", hex_sha256(lane.as_str()))
    }
}

/// The `MessageGroupId` of a lane when each tenant's sessions share `tenant_lanes` message
/// groups (`0`: one group per session, [`message_group_id`]).
///
/// SQS FIFO delivers at most one message of a group at a time, so a tenant whose sessions map
/// to `tenant_lanes` groups never has more than that many turns in flight, however many sessions
/// it floods: while they are all in flight its backlog is not deliverable, and the next receive
/// returns another tenant's message. A session always maps to the same group (the SHA-256 of its
/// lane modulo `tenant_lanes`), so its turns stay in order in one group. The cost: two sessions
/// of one tenant in the same group run one after the other.
///
/// The group is `{tenant}#{slot}` (no `/`, so it never looks like a verbatim lane), or
/// `t#{hex SHA-256 of the tenant}#{slot}` when that is not a valid SQS id.
pub fn tenant_lane_group_id(lane: &Lane, tenant_lanes: u32) -> String {
    if tenant_lanes == 0 {
        return message_group_id(lane);
    }
    let lane = lane.as_str();
    let tenant = lane.split_once('/').map_or(lane, |(tenant, _)| tenant);
    // The first 64 bits of the lane's hash: uniform, and the same in every process.
    let digest = hex_sha256(lane);
    let bits = u64::from_str_radix(digest.get(..16).unwrap_or("0"), 16).unwrap_or(0);
    let slot = bits % u64::from(tenant_lanes);
    let id = format!("{tenant}#{slot}");
    if is_valid_sqs_id(&id) {
        id
    } else {
        format!("t#{}#{slot}", hex_sha256(tenant))
    }
}

/// The `MessageDeduplicationId` for a dedup id: verbatim when SQS accepts it, else its hex
/// SHA-256 (64 characters).
pub fn deduplication_id(dedup_id: &str) -> String {
    if is_valid_sqs_id(dedup_id) {
        dedup_id.to_owned()
    } else {
        hex_sha256(dedup_id)
    }
}

/// The body travelling through SQS: the whole lane message, so the lane and dedup id come back
/// exactly even when the group id is a hash. Unknown fields are ignored: during a rolling
/// deploy a newer ingress may add some, and a message that cannot be read blocks its lane.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMessage {
    lane: Lane,
    dedup_id: String,
    body: TurnMessage,
}

/// The SQS message body of `message` (JSON).
pub fn message_body(message: &LaneMessage) -> String {
    let wire = WireMessage {
        lane: message.lane.clone(),
        dedup_id: message.dedup_id.clone(),
        body: message.body.clone(),
    };
    // Strings and a derive-only struct: serialisation cannot fail.
    serde_json::to_string(&wire).unwrap_or_default()
}

/// A [`Delivery`] from the parts of an SQS record (`body`, `receiptHandle`,
/// `attributes.ApproximateReceiveCount`), as found in a `ReceiveMessage` answer or a Lambda
/// `SqsEvent`. A missing receive count counts as the first delivery.
pub fn delivery_from_parts(
    body: &str,
    receipt_handle: &str,
    approximate_receive_count: Option<&str>,
) -> Result<Delivery, QueueError> {
    let wire: WireMessage = serde_json::from_str(body)
        .map_err(|e| QueueError::Malformed(format!("message body is not a lane message: {e}")))?;
    if receipt_handle.is_empty() {
        return Err(QueueError::Malformed(
            "the record has no receipt handle".into(),
        ));
    }
    let receive_count = match approximate_receive_count {
        None => 1,
        Some(count) => count.trim().parse::<u32>().map_err(|_| {
            QueueError::Malformed(format!("ApproximateReceiveCount {count:?} is not a number"))
        })?,
    };
    Ok(Delivery {
        message: LaneMessage {
            lane: wire.lane,
            dedup_id: wire.dedup_id,
            body: wire.body,
        },
        receipt: Receipt(receipt_handle.to_owned()),
        receive_count: receive_count.max(1),
        lock: None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use agentlane_core::{RunId, TenantId};

    fn message(lane: &str, dedup: &str) -> LaneMessage {
        LaneMessage {
            lane: Lane::new(lane),
            dedup_id: dedup.into(),
            body: TurnMessage {
                session_key: None,
                tenant: TenantId::new("acme"),
                run_id: RunId::new("run_1"),
                accepted: None,
            },
        }
    }

    #[test]
    fn group_ids_are_the_lane_when_sqs_accepts_it() {
        assert_eq!(
            message_group_id(&Lane::new("acme/agent:main:main")),
            "acme/agent:main:main"
        );
        let punctuation = "a!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~z";
        assert_eq!(message_group_id(&Lane::new(punctuation)), punctuation);
        assert_eq!(
            message_group_id(&Lane::new("x".repeat(128))),
            "x".repeat(128)
        );
    }

    #[test]
    fn group_ids_are_hashed_when_too_long_or_not_printable_ascii() {
        for lane in [
            "x".repeat(129),
            "acme/with space".into(),
            "acme/é".into(),
            String::new(),
        ] {
            let id = message_group_id(&Lane::new(lane.clone()));
            assert_eq!(id, format!("h#{}", hex_sha256(&lane)), "{lane:?}");
            assert!(is_valid_sqs_id(&id), "{id}");
        }
        // distinct lanes keep distinct groups
        assert_ne!(
            message_group_id(&Lane::new("y".repeat(200))),
            message_group_id(&Lane::new("z".repeat(200)))
        );
    }

    #[test]
    fn tenant_lanes_off_keep_one_group_per_session() {
        let lane = Lane::new("acme/chat-1");
        assert_eq!(tenant_lane_group_id(&lane, 0), message_group_id(&lane));
    }

    #[test]
    fn tenant_lanes_map_every_session_of_a_tenant_to_one_of_its_groups_stably() {
        let groups: std::collections::BTreeSet<String> = (0..400)
            .map(|i| tenant_lane_group_id(&Lane::new(format!("acme/chat-{i}")), 4))
            .collect();
        // Four groups, all the tenant's, and every one of them used.
        let expected: std::collections::BTreeSet<String> =
            (0..4).map(|slot| format!("acme#{slot}")).collect();
        assert_eq!(groups, expected);
        // The same session lands in the same group every time, in any process.
        let lane = Lane::new("acme/chat-7");
        assert_eq!(
            tenant_lane_group_id(&lane, 4),
            tenant_lane_group_id(&lane.clone(), 4)
        );
        // Another tenant's sessions never share a group with this one's.
        let other = tenant_lane_group_id(&Lane::new("globex/chat-7"), 4);
        assert!(other.starts_with("globex#"), "{other}");
    }

    #[test]
    fn tenant_lanes_spread_sessions_evenly() {
        let mut counts = [0u32; 8];
        for i in 0..8_000 {
            let group = tenant_lane_group_id(&Lane::new(format!("t/s-{i}")), 8);
            let slot: usize = group.rsplit('#').next().unwrap().parse().unwrap();
            counts[slot] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1_200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn tenant_lane_groups_are_valid_sqs_ids_even_for_exotic_tenants() {
        let long_tenant = "t".repeat(200);
        for lane in [
            format!("{long_tenant}/s"),
            "t\u{e9}/s".to_owned(),
            "plain".to_owned(),
        ] {
            let id = tenant_lane_group_id(&Lane::new(lane.clone()), 16);
            assert!(is_valid_sqs_id(&id), "{lane:?} -> {id:?}");
            assert!(!id.contains('/'), "{id}");
        }
    }

    #[test]
    fn dedup_ids_are_hashed_only_when_needed() {
        assert_eq!(deduplication_id("run_0190abc"), "run_0190abc");
        let long = "d".repeat(300);
        assert_eq!(deduplication_id(&long), hex_sha256(&long));
        assert!(is_valid_sqs_id(&deduplication_id(&long)));
    }

    #[test]
    fn body_round_trips_the_lane_exactly() {
        let sent = message(&"é/long".repeat(40), "dedup 1");
        let delivery = delivery_from_parts(&message_body(&sent), "rh-1", Some("3")).unwrap();
        assert_eq!(
            delivery,
            Delivery {
                message: sent,
                receipt: Receipt("rh-1".into()),
                receive_count: 3,
                lock: None,
            }
        );
    }

    #[test]
    fn malformed_records_are_reported() {
        let body = message_body(&message("a/b", "d"));
        assert_eq!(
            delivery_from_parts(&body, "rh", None)
                .unwrap()
                .receive_count,
            1
        );
        for (body, receipt, count) in [
            ("not json", "rh", None),
            ("{\"runId\":\"x\"}", "rh", None),
            (body.as_str(), "", None),
            (body.as_str(), "rh", Some("many")),
        ] {
            let result = delivery_from_parts(body, receipt, count);
            assert!(
                matches!(result, Err(QueueError::Malformed(_))),
                "{body} {receipt} {count:?}: {result:?}"
            );
        }
    }
}
