//! [`AgentStore`] for `SqliteBackend`: `agents` holds each agent's head (its current version,
//! or the last one when deleted), `agent_versions` every version ever written (immutable).

use crate::backend::SqliteBackend;
use crate::error::Result;
use agentlane_core::{Agent, AgentStore, StoreError, StoreResult, TenantId};
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

/// Migration 10: agents and their versions.
pub(crate) const SCHEMA: &str = "
CREATE TABLE agents (
    tenant   TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    version  INTEGER NOT NULL,
    deleted  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, agent_id)
) WITHOUT ROWID;
CREATE TABLE agent_versions (
    tenant   TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    version  INTEGER NOT NULL,
    body     TEXT NOT NULL,
    PRIMARY KEY (tenant, agent_id, version)
) WITHOUT ROWID;
";

fn decode(tenant: &TenantId, body: String) -> Result<Agent> {
    let mut agent: Agent = serde_json::from_str(&body)?;
    agent.tenant = tenant.clone();
    Ok(agent)
}

/// `(version, deleted)` of an agent's head.
fn head(tx: &Connection, tenant: &TenantId, agent_id: &str) -> Result<Option<(u64, bool)>> {
    Ok(tx
        .prepare_cached("SELECT version, deleted FROM agents WHERE tenant = ?1 AND agent_id = ?2")?
        .query_row(params![tenant.as_str(), agent_id], |row| {
            Ok((row.get::<_, i64>(0)? as u64, row.get::<_, i64>(1)? != 0))
        })
        .optional()?)
}

/// The live current version of an agent, read inside `conn`'s transaction (the accept reads
/// it in its own).
pub(crate) fn current(
    conn: &Connection,
    tenant: &TenantId,
    agent_id: &str,
) -> Result<Option<Agent>> {
    match head(conn, tenant, agent_id)? {
        Some((version, false)) => version_of(conn, tenant, agent_id, version),
        _ => Ok(None),
    }
}

fn version_of(
    conn: &Connection,
    tenant: &TenantId,
    agent_id: &str,
    version: u64,
) -> Result<Option<Agent>> {
    conn.prepare_cached(
        "SELECT body FROM agent_versions WHERE tenant = ?1 AND agent_id = ?2 AND version = ?3",
    )?
    .query_row(params![tenant.as_str(), agent_id, version as i64], |row| {
        row.get::<_, String>(0)
    })
    .optional()?
    .map(|body| decode(tenant, body))
    .transpose()
}

fn write_version(tx: &Connection, agent: &Agent) -> Result<()> {
    tx.execute(
        "INSERT INTO agent_versions (tenant, agent_id, version, body) VALUES (?1, ?2, ?3, ?4)",
        params![
            agent.tenant.as_str(),
            agent.agent_id,
            agent.version as i64,
            serde_json::to_string(agent)?
        ],
    )?;
    tx.execute(
        "INSERT INTO agents (tenant, agent_id, version, deleted) VALUES (?1, ?2, ?3, 0)
         ON CONFLICT (tenant, agent_id) DO UPDATE SET version = excluded.version, deleted = 0",
        params![agent.tenant.as_str(), agent.agent_id, agent.version as i64],
    )?;
    Ok(())
}

fn create(conn: &mut Connection, agent: &Agent, max_agents: u32) -> Result<Agent> {
    let tx = conn.savepoint()?;
    let version = match head(&tx, &agent.tenant, &agent.agent_id)? {
        Some((_, false)) => {
            return Err(StoreError::Conflict(format!("agent {:?} exists", agent.agent_id)).into());
        }
        Some((last, true)) => last + 1,
        None => 1,
    };
    let live: i64 = tx.query_row(
        "SELECT COUNT(*) FROM agents WHERE tenant = ?1 AND deleted = 0",
        params![agent.tenant.as_str()],
        |row| row.get(0),
    )?;
    if live >= i64::from(max_agents) {
        return Err(StoreError::Conflict(format!(
            "the tenant already has the most agents allowed (the cap is {max_agents})"
        ))
        .into());
    }
    let stored = Agent {
        version,
        ..agent.clone()
    };
    write_version(&tx, &stored)?;
    tx.commit()?;
    Ok(stored)
}

fn update(conn: &mut Connection, agent: &Agent) -> Result<()> {
    let tx = conn.savepoint()?;
    match head(&tx, &agent.tenant, &agent.agent_id)? {
        None | Some((_, true)) => {
            return Err(StoreError::NotFound(format!("agent {:?}", agent.agent_id)).into());
        }
        Some((current, false)) if current + 1 != agent.version => {
            return Err(StoreError::Conflict(format!(
                "agent {:?} changed meanwhile (now version {current})",
                agent.agent_id
            ))
            .into());
        }
        Some(_) => {}
    }
    write_version(&tx, agent)?;
    tx.commit()?;
    Ok(())
}

#[async_trait]
impl AgentStore for SqliteBackend {
    async fn create_agent(&self, agent: &Agent, max_agents: u32) -> StoreResult<Agent> {
        let agent = agent.clone();
        self.with_conn(move |c| create(c, &agent, max_agents)).await
    }

    async fn get_agent(&self, tenant: &TenantId, agent_id: &str) -> StoreResult<Option<Agent>> {
        let (tenant, agent_id) = (tenant.clone(), agent_id.to_owned());
        self.with_reader(move |c| current(c, &tenant, &agent_id))
            .await
    }

    async fn get_agent_version(
        &self,
        tenant: &TenantId,
        agent_id: &str,
        version: u64,
    ) -> StoreResult<Option<Agent>> {
        let (tenant, agent_id) = (tenant.clone(), agent_id.to_owned());
        self.with_reader(move |c| version_of(c, &tenant, &agent_id, version))
            .await
    }

    async fn list_agents(
        &self,
        tenant: &TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Agent>> {
        let (tenant, after) = (tenant.clone(), after.unwrap_or_default().to_owned());
        let limit = limit.min(i64::MAX as usize) as i64;
        self.with_reader(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT v.body FROM agents a JOIN agent_versions v
                   ON v.tenant = a.tenant AND v.agent_id = a.agent_id AND v.version = a.version
                 WHERE a.tenant = ?1 AND a.deleted = 0 AND a.agent_id > ?2
                 ORDER BY a.agent_id LIMIT ?3",
            )?;
            let bodies = stmt
                .query_map(params![tenant.as_str(), after, limit], |row| {
                    row.get::<_, String>(0)
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            bodies.into_iter().map(|b| decode(&tenant, b)).collect()
        })
        .await
    }

    async fn update_agent(&self, agent: &Agent) -> StoreResult<()> {
        let agent = agent.clone();
        self.with_conn(move |c| update(c, &agent)).await
    }

    async fn delete_agent(&self, tenant: &TenantId, agent_id: &str) -> StoreResult<bool> {
        let (tenant, agent_id) = (tenant.clone(), agent_id.to_owned());
        self.with_conn(move |c| {
            Ok(c.execute(
                "UPDATE agents SET deleted = 1 WHERE tenant = ?1 AND agent_id = ?2 AND deleted = 0",
                params![tenant.as_str(), agent_id],
            )? > 0)
        })
        .await
    }
}
