//! [`SpendLedger`] for `SqliteBackend`: one row per tenant period (settled spend and open
//! holds summed) and one row per open hold. Every reservation runs on the writer thread in one
//! savepoint (check each period, then add to each), so reservations are serialized and a cap
//! is exact.

use crate::backend::SqliteBackend;
use crate::error::Result;
use agentlane_core::spend::{
    Hold, PeriodCap, PeriodSpend, Reserved, SpendTags, Spent, UsageCursor, UsageGroup, UsageRow,
};
use agentlane_core::{SpendLedger, StoreResult, TenantId};
use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

/// Migration 12: tenant spend per period, and the open holds.
pub(crate) const SCHEMA: &str = "
CREATE TABLE spend_periods (
    tenant TEXT NOT NULL,
    period TEXT NOT NULL,
    micros INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, period)
) WITHOUT ROWID;
CREATE TABLE spend_groups (
    tenant TEXT NOT NULL,
    grp    TEXT NOT NULL,
    day    TEXT NOT NULL,
    key    TEXT NOT NULL,
    micros INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, grp, day, key)
) WITHOUT ROWID;
CREATE TABLE spend_holds (
    tenant  TEXT NOT NULL,
    period  TEXT NOT NULL,
    hold_id TEXT NOT NULL,
    micros  INTEGER NOT NULL,
    tokens  INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    PRIMARY KEY (tenant, period, hold_id)
) WITHOUT ROWID;
";

/// Migration 17: a hold cleared for a call whose pickup is gone stays as a marker of what the
/// clear counted (`cleared` set, `micros`/`tokens` then the counted spend), so a late
/// settlement of that call adds only what it spent beyond. Open holds have `cleared` NULL.
pub(crate) const CLEARED_SCHEMA: &str = "
ALTER TABLE spend_holds ADD COLUMN cleared INTEGER;
";

/// What a settlement did to one period.
enum Settled {
    /// The open hold was replaced by the spend.
    Open,
    /// A cleared hold's marker was raised by this much more spend.
    Late(u64, u64),
    /// Nothing (settled before, or never taken).
    Nothing,
}

/// Replaces the open hold `hold_id` of `period` by `spent` (`clear`: leaving a marker of it),
/// or adds a cleared hold's shortfall; inside a transaction.
fn settle_period(
    tx: &rusqlite::Connection,
    tenant: &str,
    period: &str,
    hold_id: &str,
    spent: Spent,
    clear: bool,
) -> Result<Settled> {
    let held: Option<(i64, i64, Option<i64>)> = tx
        .query_row(
            "SELECT micros, tokens, cleared FROM spend_holds
             WHERE tenant = ?1 AND period = ?2 AND hold_id = ?3",
            params![tenant, period, hold_id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .optional()?;
    let (micros, tokens, cleared) = match held {
        None => return Ok(Settled::Nothing),
        Some((m, t, c)) => (uint(m), uint(t), c.is_some()),
    };
    let (add_micros, add_tokens, settled) = if cleared {
        if clear {
            return Ok(Settled::Nothing);
        }
        let more = (
            spent.micros.saturating_sub(micros),
            spent.tokens.saturating_sub(tokens),
        );
        if more == (0, 0) {
            return Ok(Settled::Nothing);
        }
        tx.execute(
            "UPDATE spend_holds SET micros = ?4, tokens = ?5
             WHERE tenant = ?1 AND period = ?2 AND hold_id = ?3",
            params![
                tenant,
                period,
                hold_id,
                int(micros.max(spent.micros)),
                int(tokens.max(spent.tokens))
            ],
        )?;
        (int(more.0), int(more.1), Settled::Late(more.0, more.1))
    } else {
        if clear {
            tx.execute(
                "UPDATE spend_holds SET micros = ?4, tokens = ?5, cleared = 1
                 WHERE tenant = ?1 AND period = ?2 AND hold_id = ?3",
                params![
                    tenant,
                    period,
                    hold_id,
                    int(spent.micros),
                    int(spent.tokens)
                ],
            )?;
        } else {
            tx.execute(
                "DELETE FROM spend_holds WHERE tenant = ?1 AND period = ?2 AND hold_id = ?3",
                params![tenant, period, hold_id],
            )?;
        }
        (
            int(spent.micros) - int(micros),
            int(spent.tokens) - int(tokens),
            Settled::Open,
        )
    };
    tx.execute(
        "UPDATE spend_periods SET micros = max(0, micros + ?3), tokens = max(0, tokens + ?4)
         WHERE tenant = ?1 AND period = ?2",
        params![tenant, period, add_micros, add_tokens],
    )?;
    Ok(settled)
}

/// [`SpendLedger::settle`] (`clear` false) or [`SpendLedger::clear`] on the writer thread.
fn settle_all(
    c: &mut rusqlite::Connection,
    tenant: &str,
    periods: &[String],
    hold_id: &str,
    spent: Spent,
    tags: &SpendTags,
    clear: bool,
) -> Result<()> {
    let tx = c.savepoint()?;
    // What the agent, model and session counters get: the spend when an open hold was
    // settled, else a late settlement's shortfall (the same in every period).
    let mut counted: Option<(u64, u64)> = None;
    for period in periods {
        match settle_period(&tx, tenant, period, hold_id, spent, clear)? {
            Settled::Open => counted = Some((spent.micros, spent.tokens)),
            Settled::Late(m, t) => {
                counted.get_or_insert((m, t));
            }
            Settled::Nothing => {}
        }
    }
    if let Some((micros, tokens)) = counted {
        for (group, key) in tags.groups() {
            tx.execute(
                "INSERT INTO spend_groups (tenant, grp, day, key, micros, tokens)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (tenant, grp, day, key)
                 DO UPDATE SET micros = micros + excluded.micros,
                 tokens = tokens + excluded.tokens",
                params![
                    tenant,
                    group.as_str(),
                    tags.day,
                    key,
                    int(micros),
                    int(tokens)
                ],
            )?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// A period's totals (no holds listed), inside a transaction.
pub(crate) fn period_totals(
    c: &rusqlite::Connection,
    tenant: &TenantId,
    period: &str,
) -> Result<PeriodSpend> {
    let held: Option<(i64, i64)> = c
        .query_row(
            "SELECT micros, tokens FROM spend_periods WHERE tenant = ?1 AND period = ?2",
            params![tenant.as_str(), period],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    let (micros, tokens) = held.map_or((0, 0), |(m, t)| (uint(m), uint(t)));
    Ok(PeriodSpend {
        micros,
        tokens,
        holds: Vec::new(),
    })
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[async_trait]
impl SpendLedger for SqliteBackend {
    async fn reserve(
        &self,
        tenant: &TenantId,
        caps: &[PeriodCap],
        hold: &Hold,
    ) -> StoreResult<Reserved> {
        let (id, caps, hold) = (tenant.clone(), caps.to_vec(), hold.clone());
        self.with_conn(move |c| -> Result<Reserved> {
            let tenant = id.as_str();
            let tx = c.savepoint()?;
            for cap in &caps {
                let PeriodSpend { micros, tokens, .. } = period_totals(&tx, &id, &cap.period)?;
                let over_micros = cap
                    .max_micros
                    .is_some_and(|max| micros.saturating_add(hold.micros) > max);
                let over_tokens = cap
                    .max_tokens
                    .is_some_and(|max| tokens.saturating_add(hold.tokens) > max);
                if over_micros || over_tokens {
                    return Ok(Reserved::Refused {
                        period: cap.period.clone(),
                        ends_at: cap.ends_at,
                    });
                }
            }
            for cap in &caps {
                let added = tx.execute(
                    "INSERT INTO spend_holds (tenant, period, hold_id, micros, tokens, at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
                    params![
                        tenant,
                        cap.period,
                        hold.id,
                        int(hold.micros),
                        int(hold.tokens),
                        int(hold.at)
                    ],
                )?;
                if added == 0 {
                    // Reserved before (a retried call): counted once.
                    continue;
                }
                tx.execute(
                    "INSERT INTO spend_periods (tenant, period, micros, tokens) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (tenant, period) DO UPDATE
                     SET micros = micros + excluded.micros, tokens = tokens + excluded.tokens",
                    params![tenant, cap.period, int(hold.micros), int(hold.tokens)],
                )?;
            }
            tx.commit()?;
            Ok(Reserved::Granted)
        })
        .await
    }

    async fn settle(
        &self,
        tenant: &TenantId,
        periods: &[String],
        hold: &Hold,
        spent: Spent,
        tags: &SpendTags,
    ) -> StoreResult<()> {
        let (tenant, periods, hold_id, tags) = (
            tenant.as_str().to_owned(),
            periods.to_vec(),
            hold.id.clone(),
            tags.clone(),
        );
        self.with_conn(move |c| -> Result<()> {
            settle_all(c, &tenant, &periods, &hold_id, spent, &tags, false)
        })
        .await
    }

    async fn clear(
        &self,
        tenant: &TenantId,
        periods: &[String],
        hold: &Hold,
        spent: Spent,
        tags: &SpendTags,
    ) -> StoreResult<()> {
        let (tenant, periods, hold_id, tags) = (
            tenant.as_str().to_owned(),
            periods.to_vec(),
            hold.id.clone(),
            tags.clone(),
        );
        self.with_conn(move |c| -> Result<()> {
            settle_all(c, &tenant, &periods, &hold_id, spent, &tags, true)
        })
        .await
    }

    async fn usage(
        &self,
        tenant: &TenantId,
        group: UsageGroup,
        from: &str,
        to: &str,
        after: Option<&UsageCursor>,
        count: usize,
    ) -> StoreResult<Vec<UsageRow>> {
        let (tenant, from, to) = (tenant.as_str().to_owned(), from.to_owned(), to.to_owned());
        // Every row of the range sorts after ("", "").
        let (after_day, after_key) =
            after.map_or_else(Default::default, |c| (c.day.clone(), c.key.clone()));
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        self.with_conn(move |c| -> Result<Vec<UsageRow>> {
            let row = |r: &rusqlite::Row<'_>| {
                Ok(UsageRow {
                    day: r.get(0)?,
                    key: r.get(1)?,
                    micros: uint(r.get(2)?),
                    tokens: uint(r.get(3)?),
                })
            };
            let rows = if group == UsageGroup::Day {
                c.prepare(
                    "SELECT period, '', micros, tokens FROM spend_periods
                     WHERE tenant = ?1 AND period BETWEEN ?2 AND ?3 AND period > ?4
                     ORDER BY period LIMIT ?5",
                )?
                .query_map(params![tenant, from, to, after_day, count], row)?
                .collect::<rusqlite::Result<Vec<_>>>()?
            } else {
                c.prepare(
                    "SELECT day, key, micros, tokens FROM spend_groups
                     WHERE tenant = ?1 AND grp = ?2 AND day BETWEEN ?3 AND ?4
                       AND (day, key) > (?5, ?6)
                     ORDER BY day, key LIMIT ?7",
                )?
                .query_map(
                    params![
                        tenant,
                        group.as_str(),
                        from,
                        to,
                        after_day,
                        after_key,
                        count
                    ],
                    row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?
            };
            Ok(rows)
        })
        .await
    }

    async fn period_spend(&self, tenant: &TenantId, period: &str) -> StoreResult<PeriodSpend> {
        let (tenant, period) = (tenant.clone(), period.to_owned());
        self.with_conn(move |c| -> Result<PeriodSpend> {
            let mut spend = period_totals(c, &tenant, &period)?;
            let mut statement = c.prepare(
                "SELECT hold_id, micros, tokens, at FROM spend_holds
                 WHERE tenant = ?1 AND period = ?2 AND cleared IS NULL ORDER BY at",
            )?;
            spend.holds = statement
                .query_map(params![tenant.as_str(), period], |row| {
                    Ok(Hold {
                        id: row.get(0)?,
                        micros: uint(row.get(1)?),
                        tokens: uint(row.get(2)?),
                        at: uint(row.get(3)?),
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(spend)
        })
        .await
    }
}
