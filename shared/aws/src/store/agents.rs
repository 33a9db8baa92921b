//! [`AgentStore`] for [`DynamoStore`].
//!
//! | item | `PK` | `SK` | attributes |
//! |---|---|---|---|
//! | agent head | `T#{t}#AGENTS` | `A#{agentId}` | `agent` (JSON of the current version), `version` (N), `deleted` (BOOL, only once deleted) |
//! | agent version | `T#{t}#AGENTS` | `V#{agentId}#{version:010}` | `agent` (JSON), immutable |
//! | agent count | `T#{t}#AGENTS` | `COUNT` | `agents` (N): the tenant's live agents, for the cap |
//!
//! - A turn's accept reads the head in its own `BatchGetItem` (no extra request); a runner
//!   reads a version once per `(tenant, agentId, version)` and caches it.
//! - Create, update and delete are one transaction each: head (conditional on the version
//!   read), version (if absent), count (`ADD ±1`, under the cap on create).
//! - Listing is one `Query` on the tenant's partition (`SK` begins with `A#`), deleted heads
//!   skipped.

use super::DynamoStore;
use super::error::{build_error, classify};
use super::item::{Item, get_str, n, s};
use super::keys::{PK, SK};
use agentlane_core::{Agent, AgentStore, StoreError, StoreResult, TenantId};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};

const AGENT_JSON: &str = "agent";
const VERSION: &str = "version";
const DELETED: &str = "deleted";
const COUNT_SK: &str = "COUNT";
const AGENT_COUNT: &str = "agents";
const HEAD_PREFIX: &str = "A#";

pub(crate) fn agents_pk(tenant: &TenantId) -> String {
    format!("T#{tenant}#AGENTS")
}

pub(crate) fn head_sk(agent_id: &str) -> String {
    format!("{HEAD_PREFIX}{agent_id}")
}

fn version_sk(agent_id: &str, version: u64) -> String {
    format!("V#{agent_id}#{version:010}")
}

fn agent_json(agent: &Agent) -> StoreResult<String> {
    serde_json::to_string(agent).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn decode(tenant: &TenantId, item: &Item) -> StoreResult<Agent> {
    let mut agent: Agent = serde_json::from_str(get_str(item, AGENT_JSON)?)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    agent.tenant = tenant.clone();
    Ok(agent)
}

fn is_deleted(item: &Item) -> bool {
    matches!(item.get(DELETED), Some(AttributeValue::Bool(true)))
}

fn stored_version(item: &Item) -> StoreResult<u64> {
    super::item::opt_u64(item, VERSION)?
        .ok_or_else(|| StoreError::Corrupt("agent head without a version".into()))
}

/// The live agent a head item holds (`None` for a deleted one). Used by the accept, which
/// reads the head in its own batch.
pub(crate) fn live_from_head(tenant: &TenantId, item: Option<&Item>) -> StoreResult<Option<Agent>> {
    match item {
        Some(item) if !is_deleted(item) => decode(tenant, item).map(Some),
        _ => Ok(None),
    }
}

impl DynamoStore {
    /// The head of `agent`'s current version, written if `condition` holds (`#v` is the
    /// version attribute, `#d` the deleted mark, `values` the condition's values).
    fn head_put(
        &self,
        agent: &Agent,
        condition: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> StoreResult<Put> {
        let mut put = Put::builder()
            .table_name(self.table())
            .item(PK, s(agents_pk(&agent.tenant)))
            .item(SK, s(head_sk(&agent.agent_id)))
            .item(AGENT_JSON, s(agent_json(agent)?))
            .item(VERSION, n(agent.version))
            .condition_expression(condition);
        if condition.contains("#v") {
            put = put.expression_attribute_names("#v", VERSION);
        }
        if condition.contains("#d") {
            put = put.expression_attribute_names("#d", DELETED);
        }
        for (name, value) in values {
            put = put.expression_attribute_values(name, value);
        }
        put.build().map_err(build_error)
    }

    fn version_put(&self, agent: &Agent) -> StoreResult<Put> {
        Put::builder()
            .table_name(self.table())
            .item(PK, s(agents_pk(&agent.tenant)))
            .item(SK, s(version_sk(&agent.agent_id, agent.version)))
            .item(AGENT_JSON, s(agent_json(agent)?))
            .condition_expression("attribute_not_exists(PK)")
            .build()
            .map_err(build_error)
    }

    fn count_update(&self, tenant: &TenantId, delta: i64, cap: Option<u32>) -> StoreResult<Update> {
        let mut update = Update::builder()
            .table_name(self.table())
            .key(PK, s(agents_pk(tenant)))
            .key(SK, s(COUNT_SK))
            .update_expression("ADD #n :delta")
            .expression_attribute_names("#n", AGENT_COUNT)
            .expression_attribute_values(":delta", AttributeValue::N(delta.to_string()));
        if let Some(cap) = cap {
            update = update
                .condition_expression("attribute_not_exists(#n) OR #n < :cap")
                .expression_attribute_values(":cap", n(u64::from(cap)));
        }
        update.build().map_err(build_error)
    }
}

#[async_trait]
impl AgentStore for DynamoStore {
    async fn create_agent(&self, agent: &Agent, max_agents: u32) -> StoreResult<Agent> {
        let head = self
            .get_item(agents_pk(&agent.tenant), &head_sk(&agent.agent_id))
            .await?;
        let version = match &head {
            Some(item) if !is_deleted(item) => {
                return Err(StoreError::Conflict(format!(
                    "agent {:?} exists",
                    agent.agent_id
                )));
            }
            Some(item) => stored_version(item)? + 1,
            None => 1,
        };
        let stored = Agent {
            version,
            ..agent.clone()
        };
        let head_put = match &head {
            // A deleted agent's head, still at the version read: its numbering goes on.
            Some(_) => self.head_put(
                &stored,
                "#v = :prev AND #d = :yes",
                vec![
                    (":prev", n(version - 1)),
                    (":yes", AttributeValue::Bool(true)),
                ],
            )?,
            None => self.head_put(&stored, "attribute_not_exists(PK)", Vec::new())?,
        };
        let writes = vec![
            TransactWriteItem::builder()
                .update(self.count_update(&agent.tenant, 1, Some(max_agents))?)
                .build(),
            TransactWriteItem::builder().put(head_put).build(),
            TransactWriteItem::builder()
                .put(self.version_put(&stored)?)
                .build(),
        ];
        match self.transact(writes, "create_agent").await? {
            Ok(()) => Ok(stored),
            Err(failed) if failed.contains(&0) => Err(StoreError::Conflict(format!(
                "the tenant already has the most agents allowed (the cap is {max_agents})"
            ))),
            Err(_) => Err(StoreError::Conflict(format!(
                "agent {:?} was created or changed meanwhile",
                agent.agent_id
            ))),
        }
    }

    async fn get_agent(&self, tenant: &TenantId, agent_id: &str) -> StoreResult<Option<Agent>> {
        let head = self.get_item(agents_pk(tenant), &head_sk(agent_id)).await?;
        live_from_head(tenant, head.as_ref())
    }

    async fn get_agent_version(
        &self,
        tenant: &TenantId,
        agent_id: &str,
        version: u64,
    ) -> StoreResult<Option<Agent>> {
        let item = self
            .get_item(agents_pk(tenant), &version_sk(agent_id, version))
            .await?;
        item.as_ref().map(|i| decode(tenant, i)).transpose()
    }

    async fn list_agents(
        &self,
        tenant: &TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Agent>> {
        let mut agents = Vec::new();
        let mut start = after.map(|id| {
            std::collections::HashMap::from([
                (PK.to_owned(), s(agents_pk(tenant))),
                (SK.to_owned(), s(head_sk(id))),
            ])
        });
        while agents.len() < limit {
            let out = self
                .client
                .query()
                .table_name(self.table())
                .key_condition_expression(format!("{PK} = :pk AND begins_with({SK}, :prefix)"))
                .expression_attribute_values(":pk", s(agents_pk(tenant)))
                .expression_attribute_values(":prefix", s(HEAD_PREFIX))
                .consistent_read(true)
                .limit(i32::try_from(limit - agents.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(classify)?;
            for item in out.items() {
                if !is_deleted(item) {
                    agents.push(decode(tenant, item)?);
                }
            }
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        agents.truncate(limit);
        Ok(agents)
    }

    async fn update_agent(&self, agent: &Agent) -> StoreResult<()> {
        let prev = agent.version.saturating_sub(1);
        let head_put = self.head_put(
            agent,
            "attribute_exists(PK) AND #v = :prev AND attribute_not_exists(#d)",
            vec![(":prev", n(prev))],
        )?;
        let writes = vec![
            TransactWriteItem::builder().put(head_put).build(),
            TransactWriteItem::builder()
                .put(self.version_put(agent)?)
                .build(),
        ];
        match self.transact(writes, "update_agent").await? {
            Ok(()) => Ok(()),
            Err(_) => match self.get_agent(&agent.tenant, &agent.agent_id).await? {
                None => Err(StoreError::NotFound(format!("agent {:?}", agent.agent_id))),
                Some(current) => Err(StoreError::Conflict(format!(
                    "agent {:?} changed meanwhile (now version {})",
                    agent.agent_id, current.version
                ))),
            },
        }
    }

    async fn delete_agent(&self, tenant: &TenantId, agent_id: &str) -> StoreResult<bool> {
        let mark = Update::builder()
            .table_name(self.table())
            .key(PK, s(agents_pk(tenant)))
            .key(SK, s(head_sk(agent_id)))
            .update_expression("SET #d = :yes")
            .condition_expression("attribute_exists(PK) AND attribute_not_exists(#d)")
            .expression_attribute_names("#d", DELETED)
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .build()
            .map_err(build_error)?;
        let writes = vec![
            TransactWriteItem::builder().update(mark).build(),
            TransactWriteItem::builder()
                .update(self.count_update(tenant, -1, None)?)
                .build(),
        ];
        match self.transact(writes, "delete_agent").await? {
            Ok(()) => Ok(true),
            Err(_) => Ok(false),
        }
    }
}
