//! [`CronStore`] for `SqliteBackend`: one `cron_jobs` table, the job as JSON next to the
//! columns it is found by (`tenant`, `job_id`, `version` for conditional writes, `due_at` for
//! the due index: a partial index on the jobs that are due some time).

use crate::backend::SqliteBackend;
use crate::error::Result;
use agentlane_core::cron::{CronJob, CronStore, JobId};
use agentlane_core::{SessionKey, StoreError, StoreResult, TenantId};
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

/// Migration 3: the cron job table.
pub(crate) const SCHEMA: &str = "
CREATE TABLE cron_jobs (
    tenant TEXT NOT NULL,
    job_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    due_at INTEGER,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant, job_id)
) WITHOUT ROWID;
CREATE INDEX cron_jobs_due ON cron_jobs (due_at) WHERE due_at IS NOT NULL;
CREATE TABLE cron_retired (
    tenant      TEXT NOT NULL,
    session_key TEXT NOT NULL,
    keep_until  INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_key)
) WITHOUT ROWID;
CREATE INDEX cron_retired_by_time ON cron_retired (keep_until);
";

fn due(job: &CronJob) -> Option<i64> {
    job.due_at().map(|d| d.min(i64::MAX as u64) as i64)
}

fn decode(body: String) -> Result<CronJob> {
    Ok(serde_json::from_str(&body)?)
}

fn create(conn: &mut Connection, job: &CronJob, max_jobs: u32) -> Result<()> {
    let tx = conn.savepoint()?;
    let count: i64 = tx.query_row(
        "SELECT COUNT(*) FROM cron_jobs WHERE tenant = ?1",
        params![job.tenant.as_str()],
        |row| row.get(0),
    )?;
    if count >= i64::from(max_jobs) {
        return Err(StoreError::Conflict(format!(
            "the tenant already has {count} cron jobs (the cap is {max_jobs})"
        ))
        .into());
    }
    let inserted = tx.execute(
        "INSERT INTO cron_jobs (tenant, job_id, version, due_at, body) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT DO NOTHING",
        params![
            job.tenant.as_str(),
            job.job_id.as_str(),
            job.version as i64,
            due(job),
            serde_json::to_string(job)?
        ],
    )?;
    if inserted == 0 {
        return Err(StoreError::Conflict(format!("job {} exists", job.job_id)).into());
    }
    tx.commit()?;
    Ok(())
}

fn replace(conn: &mut Connection, job: &CronJob, expected: u64) -> Result<()> {
    let tx = conn.savepoint()?;
    let stored: Option<i64> = tx
        .query_row(
            "SELECT version FROM cron_jobs WHERE tenant = ?1 AND job_id = ?2",
            params![job.tenant.as_str(), job.job_id.as_str()],
            |row| row.get(0),
        )
        .optional()?;
    match stored {
        None => return Err(StoreError::NotFound(format!("job {}", job.job_id)).into()),
        Some(v) if v != expected as i64 => {
            return Err(StoreError::Conflict(format!(
                "job {} changed (version {v}, expected {expected})",
                job.job_id
            ))
            .into());
        }
        Some(_) => {}
    }
    tx.execute(
        "UPDATE cron_jobs SET version = ?3, due_at = ?4, body = ?5 WHERE tenant = ?1 AND job_id = ?2",
        params![
            job.tenant.as_str(),
            job.job_id.as_str(),
            job.version as i64,
            due(job),
            serde_json::to_string(job)?
        ],
    )?;
    tx.commit()?;
    Ok(())
}

/// Deletes the sessions (record and transcript) of retired fires due at `now`, a batch at a time.
fn prune(conn: &mut Connection, now: i64) -> Result<u64> {
    let tx = conn.savepoint()?;
    let due: Vec<(String, String)> = tx
        .prepare_cached(
            "SELECT tenant, session_key FROM cron_retired WHERE keep_until <= ?1 LIMIT 500",
        )?
        .query_map(params![now], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (tenant, key) in &due {
        let session_id: Option<String> = tx
            .query_row(
                "SELECT json_extract(body, '$.sessionId') FROM sessions
                 WHERE tenant = ?1 AND session_key = ?2",
                params![tenant, key],
                |row| row.get(0),
            )
            .optional()?
            .flatten();
        if let Some(id) = session_id {
            tx.execute(
                "DELETE FROM transcript WHERE tenant = ?1 AND session_id = ?2",
                params![tenant, id],
            )?;
        }
        tx.execute(
            "DELETE FROM sessions WHERE tenant = ?1 AND session_key = ?2",
            params![tenant, key],
        )?;
        tx.execute(
            "DELETE FROM cron_retired WHERE tenant = ?1 AND session_key = ?2",
            params![tenant, key],
        )?;
    }
    tx.commit()?;
    Ok(due.len() as u64)
}

#[async_trait]
impl CronStore for SqliteBackend {
    async fn create_job(&self, job: &CronJob, max_jobs: u32) -> StoreResult<()> {
        let job = job.clone();
        self.with_conn(move |c| create(c, &job, max_jobs)).await
    }

    async fn get_job(&self, tenant: &TenantId, job_id: &JobId) -> StoreResult<Option<CronJob>> {
        let (tenant, job_id) = (tenant.clone(), job_id.clone());
        self.with_conn(move |c| {
            c.prepare_cached("SELECT body FROM cron_jobs WHERE tenant = ?1 AND job_id = ?2")?
                .query_row(params![tenant.as_str(), job_id.as_str()], |row| row.get(0))
                .optional()?
                .map(decode)
                .transpose()
        })
        .await
    }

    async fn list_jobs(&self, tenant: &TenantId) -> StoreResult<Vec<CronJob>> {
        let tenant = tenant.clone();
        self.with_conn(move |c| {
            let mut stmt =
                c.prepare_cached("SELECT body FROM cron_jobs WHERE tenant = ?1 ORDER BY job_id")?;
            let bodies = stmt
                .query_map(params![tenant.as_str()], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            bodies.into_iter().map(decode).collect()
        })
        .await
    }

    async fn replace_job(&self, job: &CronJob, expected_version: u64) -> StoreResult<()> {
        let job = job.clone();
        self.with_conn(move |c| replace(c, &job, expected_version))
            .await
    }

    async fn delete_job(&self, tenant: &TenantId, job_id: &JobId) -> StoreResult<bool> {
        let (tenant, job_id) = (tenant.clone(), job_id.clone());
        self.with_conn(move |c| {
            Ok(c.execute(
                "DELETE FROM cron_jobs WHERE tenant = ?1 AND job_id = ?2",
                params![tenant.as_str(), job_id.as_str()],
            )? > 0)
        })
        .await
    }

    async fn retire_fire(
        &self,
        tenant: &TenantId,
        session_key: &SessionKey,
        keep_until: u64,
    ) -> StoreResult<()> {
        let (tenant, key) = (tenant.clone(), session_key.clone());
        let keep_until = keep_until.min(i64::MAX as u64) as i64;
        self.with_conn(move |c| {
            c.execute(
                "INSERT INTO cron_retired (tenant, session_key, keep_until) VALUES (?1, ?2, ?3)
                 ON CONFLICT (tenant, session_key) DO UPDATE SET keep_until = excluded.keep_until",
                params![tenant.as_str(), key.as_str(), keep_until],
            )?;
            Ok(())
        })
        .await
    }

    async fn prune_fires(&self, now: u64) -> StoreResult<u64> {
        let now = now.min(i64::MAX as u64) as i64;
        self.with_conn(move |c| prune(c, now)).await
    }

    async fn due_jobs(&self, until: u64, limit: usize) -> StoreResult<Vec<CronJob>> {
        let until = until.min(i64::MAX as u64) as i64;
        let limit = limit.min(i64::MAX as usize) as i64;
        self.with_conn(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT body FROM cron_jobs WHERE due_at IS NOT NULL AND due_at <= ?1
                 ORDER BY due_at LIMIT ?2",
            )?;
            let bodies = stmt
                .query_map(params![until, limit], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            bodies.into_iter().map(decode).collect()
        })
        .await
    }
}
