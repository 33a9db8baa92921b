//! Fair dispatch of the embedded lane queue across tenants (issue 12: "the lane of one tenant
//! can never starve another's").
//!
//! A receive does not hand out the oldest ready lane heads of the whole queue (a tenant that
//! floods many sessions would then hold every worker until its backlog drained): it picks one
//! head at a time from the tenant with the fewest messages in flight, ties going to the tenant
//! served least recently (round robin), and within a tenant its oldest head. A tenant with
//! [`FairState::cap`] messages in flight gets nothing more until one is acked or handed back,
//! so it never holds more than its share of the workers. The tenant of a lane is the part of
//! its name before the first `/` (`{tenant}/{sessionKey}`).

use crate::error::{Result, int};
use rusqlite::{Connection, params};
use std::collections::HashMap;

/// The tenant part of a lane name, in SQL (the whole name when it has no `/`).
const TENANT_OF_LANE: &str =
    "CASE WHEN instr(lane, '/') > 0 THEN substr(lane, 1, instr(lane, '/') - 1) ELSE lane END";

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

/// One tenant's ready heads (oldest first) and how many of its messages are in flight.
#[derive(Default)]
struct TenantQueue {
    heads: Vec<i64>,
    next: usize,
    in_flight: u64,
}

/// The ids of up to `max` lane heads to deliver now, in the order to deliver them (see the
/// module docs). Reads only; the caller marks them in flight in the same transaction.
pub(crate) fn pick_heads(
    conn: &Connection,
    max: usize,
    now: u64,
    state: &mut FairState,
) -> Result<Vec<i64>> {
    let per_tenant = i64::try_from(max).unwrap_or(i64::MAX);
    let mut tenants: HashMap<String, TenantQueue> = HashMap::new();
    {
        let mut stmt = conn.prepare_cached(&format!(
            "WITH heads AS (
                 SELECT m.id, {TENANT_OF_LANE} AS tenant
                 FROM lane_pending m
                 WHERE m.visible_at <= ?1
                   AND m.id = (SELECT MIN(h.id) FROM lane_pending h WHERE h.lane = m.lane)
             )
             SELECT id, tenant FROM (
                 SELECT id, tenant, ROW_NUMBER() OVER (PARTITION BY tenant ORDER BY id) AS rank
                 FROM heads
             ) WHERE rank <= ?2 ORDER BY tenant, id"
        ))?;
        let rows = stmt.query_map(params![int(now), per_tenant], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })?;
        for row in rows {
            let (id, tenant) = row?;
            tenants.entry(tenant).or_default().heads.push(id);
        }
    }
    if tenants.is_empty() {
        return Ok(Vec::new());
    }
    {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {TENANT_OF_LANE} AS tenant, COUNT(*) FROM lane_pending
             WHERE receipt IS NOT NULL AND visible_at > ?1 GROUP BY tenant"
        ))?;
        let rows = stmt.query_map(params![int(now)], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })?;
        for row in rows {
            let (tenant, count) = row?;
            if let Some(queue) = tenants.get_mut(&tenant) {
                queue.in_flight = u64::try_from(count).unwrap_or(0);
            }
        }
    }

    let cap = u64::from(state.cap);
    let mut picked = Vec::with_capacity(max);
    while picked.len() < max {
        let best = tenants
            .iter()
            .filter(|(_, q)| q.next < q.heads.len() && (cap == 0 || q.in_flight < cap))
            .min_by_key(|(tenant, q)| {
                (
                    q.in_flight,
                    state.served.get(tenant.as_str()).copied().unwrap_or(0),
                    q.heads[q.next],
                )
            })
            .map(|(tenant, _)| tenant.clone());
        let Some(tenant) = best else { break };
        let Some(queue) = tenants.get_mut(&tenant) else {
            break;
        };
        picked.push(queue.heads[queue.next]);
        queue.next += 1;
        queue.in_flight += 1;
        state.picks += 1;
        state.served.insert(tenant, state.picks);
    }
    Ok(picked)
}
