//! The lane queue's table operations (blocking; each is one transaction or one statement).
//!
//! A message is *pending* (`lane_pending`) until acked; then its dedup id is kept in `lane_done`
//! for [`DEDUP_RETENTION_MS`] so that re-enqueueing an already processed dedup id is ignored.
//! Only a lane's head (its oldest pending message) is deliverable, and only once its `visible_at`
//! has passed; while the head is in flight the whole lane waits.

use crate::error::{Result, int, uint};
use agentlane_core::{Delivery, Lane, LaneMessage, QueueError, Receipt, TurnMessage};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

/// How long an acked message's dedup id keeps suppressing re-enqueues (24 h).
pub const DEDUP_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

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
}

/// Delivers up to `max` due lane heads (oldest first), each now invisible until
/// `now + visibility_ms`.
pub(crate) fn receive(
    conn: &mut Connection,
    max: usize,
    visibility_ms: u64,
    now: u64,
) -> Result<Received> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let heads: Vec<(i64, String, String, String, i64)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT m.id, m.lane, m.dedup_id, m.body, m.receive_count FROM lane_pending m
             WHERE m.visible_at <= ?1
               AND m.id = (SELECT MIN(h.id) FROM lane_pending h WHERE h.lane = m.lane)
             ORDER BY m.id LIMIT ?2",
        )?;
        let rows = stmt.query_map(
            params![int(now), i64::try_from(max).unwrap_or(i64::MAX)],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            },
        )?;
        rows.collect::<rusqlite::Result<_>>()?
    };

    let mut deliveries = Vec::with_capacity(heads.len());
    {
        let mut mark = tx.prepare_cached(
            "UPDATE lane_pending SET visible_at = ?2, receive_count = ?3, receipt = ?4
             WHERE id = ?1",
        )?;
        for (id, lane, dedup_id, body, count) in heads {
            let body: TurnMessage = match serde_json::from_str(&body) {
                Ok(body) => body,
                Err(e) => {
                    // A head that can never be decoded would block its lane forever.
                    tracing::warn!(id, %lane, error = %e, "dropping a malformed lane message");
                    finish(&tx, id, &dedup_id, now)?;
                    continue;
                }
            };
            let receipt = format!("{id}:{}", uuid::Uuid::new_v4().simple());
            let receive_count = count.saturating_add(1);
            mark.execute(params![
                id,
                int(now.saturating_add(visibility_ms)),
                receive_count,
                receipt
            ])?;
            deliveries.push(Delivery {
                message: LaneMessage {
                    lane: Lane::new(lane),
                    dedup_id,
                    body,
                },
                receipt: Receipt(receipt),
                receive_count: u32::try_from(receive_count).unwrap_or(u32::MAX),
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
    tx.commit()?;
    Ok(Received {
        deliveries,
        next_due_at,
    })
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
    let id = receipt_id(receipt)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let dedup_id: Option<String> = tx
        .prepare_cached("SELECT dedup_id FROM lane_pending WHERE id = ?1 AND receipt = ?2")?
        .query_row(params![id, receipt.0], |row| row.get(0))
        .optional()?;
    let Some(dedup_id) = dedup_id else {
        return Err(QueueError::StaleReceipt.into());
    };
    finish(&tx, id, &dedup_id, now)?;
    tx.commit()?;
    Ok(())
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
    let changed = conn
        .prepare_cached("UPDATE lane_pending SET visible_at = ?3 WHERE id = ?1 AND receipt = ?2")?
        .execute(params![
            id,
            receipt.0,
            int(now.saturating_add(visibility_ms))
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
