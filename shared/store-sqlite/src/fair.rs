//! Fair dispatch of the embedded lane queue across tenants (issue 12: "the lane of one tenant
//! can never starve another's").
//!
//! A receive does not hand out the oldest ready lane heads of the whole queue (a tenant that
//! floods many sessions would then hold every worker until its backlog drained): it picks one
//! head at a time from the tenant with the fewest messages in flight, ties going to the tenant
//! served least recently (round robin), and within a tenant its oldest ready head. A tenant
//! with [`FairState::cap`] messages in flight gets nothing more until one is acked or handed
//! back, so it never holds more than its share of the workers.
//!
//! The tenant of a lane is the part of its name before the first `/` (`{tenant}/{sessionKey}`),
//! kept as a virtual column with two indexes (migration [`SCHEMA`]), so each look costs a few
//! index probes per tenant, not a scan of the backlog.

use crate::error::{Result, int};
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;

/// Migration 5: the tenant of each pending message (virtual), pending messages by tenant in
/// id order, and the delivered ones (a receipt) by tenant.
pub(crate) const SCHEMA: &str = "
ALTER TABLE lane_pending ADD COLUMN tenant TEXT GENERATED ALWAYS AS (
    CASE WHEN instr(lane, '/') > 0 THEN substr(lane, 1, instr(lane, '/') - 1) ELSE lane END
) VIRTUAL;
CREATE INDEX lane_pending_by_tenant ON lane_pending (tenant, id);
CREATE INDEX lane_pending_delivered ON lane_pending (tenant) WHERE receipt IS NOT NULL;
";

/// The dispatcher's memory: when each tenant was last served, and the per-tenant cap.
#[derive(Debug, Default)]
pub(crate) struct FairState {
    /// Tenant → the pick number of its last delivery (higher: more recent).
    served: HashMap<String, u64>,
    /// Picks so far.
    picks: u64,
    /// Messages one tenant may have in flight at once; 0: no cap.
    pub(crate) cap: u32,
}

/// One tenant with pending messages: its ready heads (oldest first) and how many of its
/// messages are in flight.
struct TenantQueue {
    tenant: String,
    heads: Vec<i64>,
    next: usize,
    in_flight: u64,
}

/// The tenants with pending messages, one index probe each.
fn tenants(conn: &Connection) -> Result<Vec<String>> {
    let mut next = conn.prepare_cached(
        "SELECT tenant FROM lane_pending WHERE tenant > ?1 ORDER BY tenant LIMIT 1",
    )?;
    let mut found = Vec::new();
    let mut after = String::new();
    // The empty string sorts first; a lane without a tenant part is its own tenant.
    let mut first = conn.prepare_cached("SELECT 1 FROM lane_pending WHERE tenant = '' LIMIT 1")?;
    if first.query_row([], |_| Ok(())).optional()?.is_some() {
        found.push(String::new());
    }
    while let Some(tenant) = next
        .query_row(params![after], |row| row.get::<_, String>(0))
        .optional()?
    {
        after.clone_from(&tenant);
        found.push(tenant);
    }
    Ok(found)
}

/// The heads [`pick_heads`] picked, and whether it left a head it could have delivered had
/// `max` been larger.
pub(crate) struct Picked {
    pub(crate) ids: Vec<i64>,
    pub(crate) more: bool,
}

/// The ids of up to `max` lane heads to deliver now, in the order to deliver them (see the
/// module docs). Reads only; the caller marks them in flight in the same transaction.
pub(crate) fn pick_heads(
    conn: &Connection,
    max: usize,
    now: u64,
    state: &mut FairState,
) -> Result<Picked> {
    let cap = u64::from(state.cap);
    // One head more than `max` per tenant: whether any is left over.
    let per_tenant = i64::try_from(max.saturating_add(1)).unwrap_or(i64::MAX);
    let mut queues = Vec::new();
    {
        let mut in_flight = conn.prepare_cached(
            "SELECT COUNT(*) FROM lane_pending
             WHERE tenant = ?1 AND receipt IS NOT NULL AND visible_at > ?2",
        )?;
        let mut heads = conn.prepare_cached(
            "SELECT m.id FROM lane_pending m
             WHERE m.tenant = ?1 AND m.visible_at <= ?2
               AND m.id = (SELECT MIN(h.id) FROM lane_pending h WHERE h.lane = m.lane)
             ORDER BY m.id LIMIT ?3",
        )?;
        for tenant in tenants(conn)? {
            let busy: i64 = in_flight.query_row(params![tenant, int(now)], |row| row.get(0))?;
            let busy = u64::try_from(busy).unwrap_or(0);
            if cap > 0 && busy >= cap {
                continue;
            }
            let ids = heads
                .query_map(params![tenant, int(now), per_tenant], |row| row.get(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?;
            if !ids.is_empty() {
                queues.push(TenantQueue {
                    tenant,
                    heads: ids,
                    next: 0,
                    in_flight: busy,
                });
            }
        }
    }

    let mut picked = Vec::with_capacity(max);
    while picked.len() < max {
        let best = queues
            .iter_mut()
            .filter(|q| q.next < q.heads.len() && (cap == 0 || q.in_flight < cap))
            .min_by_key(|q| {
                (
                    q.in_flight,
                    state.served.get(&q.tenant).copied().unwrap_or(0),
                    q.heads[q.next],
                )
            });
        let Some(queue) = best else { break };
        picked.push(queue.heads[queue.next]);
        queue.next += 1;
        queue.in_flight += 1;
        state.picks += 1;
        state.served.insert(queue.tenant.clone(), state.picks);
    }
    let more = queues
        .iter()
        .any(|q| q.next < q.heads.len() && (cap == 0 || q.in_flight < cap));
    Ok(Picked { ids: picked, more })
}
