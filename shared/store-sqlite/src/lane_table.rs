//! The lane queue's table operations (blocking; each is one transaction or one statement).
//!
//! A message is *pending* (`lane_pending`) until acked; then its dedup id is kept in `lane_done`
//! for [`DEDUP_RETENTION_MS`] so that re-enqueueing an already processed dedup id is ignored.
//! Only a lane's head (its oldest pending message) is deliverable, and only once its `visible_at`
//! has passed; while the head is in flight the whole lane waits.

use crate::error::{Result, int, uint};
use agentlane_core::{
    DeliveredLock, Delivery, Lane, LaneMessage, LockAttempt, QueueError, Receipt, TurnMessage,
};
use rusqlite::{Connection, OptionalExtension, params};

/// How long an acked message's dedup id keeps suppressing re-enqueues (24 h).
pub const DEDUP_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// Failed deliveries (a delivery whose visibility ran out: neither acked nor handed back) after
/// which a message is moved to the dead-letter table: the runner's poison cap (5 failed pickups)
/// plus the pickup that ends the run `poisoned`.
pub const MAX_FAILED_DELIVERIES: u32 = 6;

/// A lane message moved to the dead-letter table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The dead-letter row id (to forget it once reconciled).
    pub id: i64,
    /// The lane (`{tenant}/{sessionKey}`) it was queued on.
    pub lane: Lane,
    /// Its deduplication id (the run id for an accept).
    pub dedup_id: String,
    /// The turn it carried; `None` for a body that could not be decoded.
    pub body: Option<TurnMessage>,
    /// How many times it was delivered.
    pub receive_count: u32,
    /// Deliveries that failed (visibility ran out, neither acked nor handed back); dead-lettered
    /// at [`MAX_FAILED_DELIVERIES`].
    pub failures: u32,
    /// `failed_deliveries` or `malformed`.
    pub reason: String,
    /// When it was moved to the dead-letter table (ms since the epoch).
    pub dead_at: u64,
}

/// Counts of the lane queue's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Not acked and not in flight (waiting for delivery or behind their lane's head).
    pub waiting: u64,
    /// Delivered, not acked, visibility not yet ended.
    pub in_flight: u64,
    /// Dedup ids of acked messages, kept for deduplication.
    pub done: u64,
}

/// Stores `message` unless its dedup id is known; `true` when stored.
pub(crate) fn enqueue(conn: &Connection, message: &LaneMessage, now: u64) -> Result<bool> {
    let body = serde_json::to_string(&message.body)?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO lane_pending (lane, dedup_id, body, enqueued_at)
             SELECT ?1, ?2, ?3, ?4
             WHERE NOT EXISTS (SELECT 1 FROM lane_done WHERE dedup_id = ?2)
             ON CONFLICT (dedup_id) DO NOTHING",
        )?
        .execute(params![
            message.lane.as_str(),
            message.dedup_id,
            body,
            int(now)
        ])?;
    Ok(inserted == 1)
}

/// What one receive try found: the deliveries, or when the next in-flight head becomes due.
pub(crate) struct Received {
    pub(crate) deliveries: Vec<Delivery>,
    pub(crate) next_due_at: Option<u64>,
    /// Whether it moved a head to the dead-letter table (the lane's next message may be due).
    pub(crate) dead_lettered: bool,
    /// Whether it left a due head behind because it had `max` already.
    pub(crate) more_due: bool,
}

/// Delivers up to `max` due lane heads, fairly across tenants (see [`crate::fair`]), each now
/// invisible until `now + visibility_ms`. Runs in the caller's savepoint (it makes several
/// changes).
pub(crate) fn receive(
    tx: &Connection,
    max: usize,
    visibility_ms: u64,
    max_failed: u32,
    now: u64,
    fair: &mut crate::fair::FairState,
) -> Result<Received> {
    let mut dead_lettered = false;
    // Which heads, and in what order: fair across tenants (see `fair`).
    let crate::fair::Picked {
        ids,
        more: more_due,
    } = crate::fair::pick_heads(tx, max, now, fair)?;
    let heads: Vec<Head> = {
        let mut stmt = tx.prepare_cached(
            "SELECT id, lane, dedup_id, body, receive_count, failures + (receipt IS NOT NULL)
             FROM lane_pending WHERE id = ?1",
        )?;
        let mut heads = Vec::with_capacity(ids.len());
        for id in ids {
            heads.push(stmt.query_row(params![id], |row| {
                Ok(Head {
                    id: row.get(0)?,
                    lane: row.get(1)?,
                    dedup_id: row.get(2)?,
                    body: row.get(3)?,
                    receive_count: row.get(4)?,
                    failures: row.get(5)?,
                })
            })?);
        }
        heads
    };

    let mut deliveries = Vec::with_capacity(heads.len());
    {
        let mut mark = tx.prepare_cached(
            "UPDATE lane_pending SET visible_at = ?2, receive_count = ?3, receipt = ?4,
                 failures = ?5
             WHERE id = ?1",
        )?;
        for head in heads {
            let Head {
                id,
                lane,
                dedup_id,
                failures,
                receive_count: count,
                ..
            } = head.clone();
            let body: TurnMessage = match serde_json::from_str(&head.body) {
                Ok(body) => body,
                Err(e) => {
                    // A head that can never be decoded would block its lane forever.
                    tracing::error!(id, lane = %Lane::new(lane.clone()).fingerprint(), error = %e, "dead-lettering a malformed lane message");
                    dead_letter(tx, &head, "malformed", now)?;
                    dead_lettered = true;
                    continue;
                }
            };
            if failures >= i64::from(max_failed) {
                tracing::error!(id, lane = %Lane::new(lane.clone()).fingerprint(), run = %body.run_id, failures, "dead-lettering a lane message whose deliveries keep failing");
                dead_letter(tx, &head, "failed_deliveries", now)?;
                dead_lettered = true;
                continue;
            }
            let receipt = format!("{id}:{}", uuid::Uuid::new_v4().simple());
            let receive_count = count.saturating_add(1);
            mark.execute(params![
                id,
                int(now.saturating_add(visibility_ms)),
                receive_count,
                receipt,
                failures
            ])?;
            deliveries.push(Delivery {
                message: LaneMessage {
                    lane: Lane::new(lane),
                    dedup_id,
                    body,
                },
                receipt: Receipt(receipt),
                receive_count: u32::try_from(receive_count).unwrap_or(u32::MAX),
                lock: None,
            });
        }
    }
    let next_due_at = if deliveries.is_empty() {
        let due: Option<i64> = tx
            .prepare_cached("SELECT MIN(visible_at) FROM lane_pending WHERE visible_at > ?1")?
            .query_row(params![int(now)], |row| row.get(0))?;
        due.map(uint)
    } else {
        None
    };
    Ok(Received {
        deliveries,
        next_due_at,
        dead_lettered,
        more_due,
    })
}

/// The session lock of `delivery`'s message, taken inside the receive's transaction for an
/// owner `{owner}:{random}` and `lease_ms`; `None` (the runner acquires it) when the message
/// names no session, the session is locked by a live holder, or the acquire failed (a failed
/// acquire writes nothing).
pub(crate) fn lock_for(
    tx: &Connection,
    delivery: &Delivery,
    owner: &str,
    lease_ms: u64,
    now: u64,
) -> Option<DeliveredLock> {
    let body = &delivery.message.body;
    let key = body.session_key.as_ref()?;
    let owner = format!("{owner}:{}", uuid::Uuid::new_v4().simple());
    match crate::lock::acquire(tx, &body.tenant, key, &owner, lease_ms, now) {
        Ok(LockAttempt::Acquired(fence, session)) => Some(DeliveredLock { fence, session }),
        Ok(LockAttempt::Held { .. }) => None,
        Err(e) => {
            tracing::debug!(error = ?e, run = %body.run_id, "no lock taken with the delivery");
            None
        }
    }
}

/// A deliverable lane head as read by `receive`; `failures` counts the delivery before this one
/// when it ended without an ack or a hand-back.
#[derive(Clone)]
struct Head {
    id: i64,
    lane: String,
    dedup_id: String,
    body: String,
    receive_count: i64,
    failures: i64,
}

/// Moves a pending message to the dead-letter table (its dedup id is kept as done, so a
/// re-enqueue of it is ignored).
fn dead_letter(conn: &Connection, head: &Head, reason: &str, now: u64) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO lane_dead (lane, dedup_id, body, receive_count, failures, reason, dead_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        head.lane,
        head.dedup_id,
        head.body,
        head.receive_count,
        head.failures,
        reason,
        int(now)
    ])?;
    finish(conn, head.id, &head.dedup_id, now)
}

/// Up to `limit` dead letters, oldest first.
pub(crate) fn dead_letters(conn: &Connection, limit: usize) -> Result<Vec<DeadLetter>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, lane, dedup_id, body, receive_count, failures, reason, dead_at
         FROM lane_dead ORDER BY id LIMIT ?1",
    )?;
    let rows = stmt.query_map(params![i64::try_from(limit).unwrap_or(i64::MAX)], |row| {
        let body: String = row.get(3)?;
        Ok(DeadLetter {
            id: row.get(0)?,
            lane: Lane::new(row.get::<_, String>(1)?),
            dedup_id: row.get(2)?,
            body: serde_json::from_str(&body).ok(),
            receive_count: u32::try_from(row.get::<_, i64>(4)?).unwrap_or(u32::MAX),
            failures: u32::try_from(row.get::<_, i64>(5)?).unwrap_or(u32::MAX),
            reason: row.get(6)?,
            dead_at: uint(row.get(7)?),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Forgets a dead letter (its run was reconciled).
pub(crate) fn forget_dead_letter(conn: &Connection, id: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM lane_dead WHERE id = ?1")?
        .execute(params![id])?;
    Ok(())
}

/// The message id a receipt names, if it is one of ours.
fn receipt_id(receipt: &Receipt) -> Result<i64> {
    receipt
        .0
        .split_once(':')
        .and_then(|(id, _)| id.parse().ok())
        .ok_or_else(|| QueueError::StaleReceipt.into())
}

/// Moves a pending message to the done set.
fn finish(conn: &Connection, id: i64, dedup_id: &str, now: u64) -> Result<()> {
    conn.prepare_cached("DELETE FROM lane_pending WHERE id = ?1")?
        .execute(params![id])?;
    conn.prepare_cached(
        "INSERT INTO lane_done (dedup_id, done_at) VALUES (?1, ?2)
         ON CONFLICT (dedup_id) DO UPDATE SET done_at = excluded.done_at",
    )?
    .execute(params![dedup_id, int(now)])?;
    Ok(())
}

/// Marks the delivered message done; `StaleReceipt` unless `receipt` is its latest delivery.
pub(crate) fn ack(conn: &mut Connection, receipt: &Receipt, now: u64) -> Result<()> {
    let tx = conn.savepoint()?;
    ack_in(&tx, receipt, now)?;
    tx.commit()?;
    Ok(())
}

/// [`ack`] inside the caller's savepoint.
pub(crate) fn ack_in(tx: &Connection, receipt: &Receipt, now: u64) -> Result<()> {
    let id = receipt_id(receipt)?;
    let dedup_id: Option<String> = tx
        .prepare_cached("SELECT dedup_id FROM lane_pending WHERE id = ?1 AND receipt = ?2")?
        .query_row(params![id, receipt.0], |row| row.get(0))
        .optional()?;
    let Some(dedup_id) = dedup_id else {
        return Err(QueueError::StaleReceipt.into());
    };
    finish(tx, id, &dedup_id, now)
}

/// Sets the message invisible until `now + visibility_ms`; `StaleReceipt` unless `receipt` is
/// its latest delivery.
pub(crate) fn set_visibility(
    conn: &Connection,
    receipt: &Receipt,
    visibility_ms: u64,
    now: u64,
) -> Result<()> {
    let id = receipt_id(receipt)?;
    // A zero visibility hands the message back: the delivery ended cleanly (not a failure), and
    // its receipt is spent.
    let changed = conn
        .prepare_cached(
            "UPDATE lane_pending SET visible_at = ?3,
                 receipt = CASE WHEN ?4 THEN NULL ELSE receipt END
             WHERE id = ?1 AND receipt = ?2",
        )?
        .execute(params![
            id,
            receipt.0,
            int(now.saturating_add(visibility_ms)),
            visibility_ms == 0
        ])?;
    if changed == 0 {
        return Err(QueueError::StaleReceipt.into());
    }
    Ok(())
}

/// Forgets the dedup ids of messages acked more than [`DEDUP_RETENTION_MS`] ago.
pub(crate) fn prune_done(conn: &Connection, now: u64) -> Result<usize> {
    let cutoff = now.saturating_sub(DEDUP_RETENTION_MS);
    Ok(conn
        .prepare_cached("DELETE FROM lane_done WHERE done_at < ?1")?
        .execute(params![int(cutoff)])?)
}

pub(crate) fn stats(conn: &Connection, now: u64) -> Result<QueueStats> {
    let (waiting, in_flight): (i64, i64) = conn
        .prepare_cached(
            "SELECT COALESCE(SUM(visible_at <= ?1), 0), COALESCE(SUM(visible_at > ?1), 0)
             FROM lane_pending",
        )?
        .query_row(params![int(now)], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let done: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM lane_done")?
        .query_row([], |row| row.get(0))?;
    Ok(QueueStats {
        waiting: uint(waiting),
        in_flight: uint(in_flight),
        done: uint(done),
    })
}
