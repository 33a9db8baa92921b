//! Model names of the OpenAI-compatible routes: each of a tenant's agents is a model,
//! `agentlane` for `main` and `agentlane/<agentId>` for the others.

use agentlane_core::agent::{MAIN_AGENT, validate_agent_id};
use agentlane_core::{Agent, TenantId};
use serde::Serialize;

/// The model that names the agent `main` (and the prefix of the others).
pub(crate) const MAIN_MODEL: &str = "agentlane";

/// The agent `model` names: `agentlane` and `agentlane/main` are `main`, `agentlane/<agentId>`
/// is that agent (whether it exists is the store's to say). `None`: not one of ours.
pub(crate) fn agent_of(model: &str) -> Option<&str> {
    if model == MAIN_MODEL {
        return Some(MAIN_AGENT);
    }
    let id = model.strip_prefix(MAIN_MODEL)?.strip_prefix('/')?;
    validate_agent_id(id).ok()?;
    Some(id)
}

/// The model id of an agent.
pub(crate) fn model_of(agent_id: &str) -> String {
    if agent_id == MAIN_AGENT {
        MAIN_MODEL.to_owned()
    } else {
        format!("{MAIN_MODEL}/{agent_id}")
    }
}

/// `GET /v1/models`: OpenAI's list shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct ModelList {
    /// Always `list`.
    #[schema(example = "list")]
    pub object: String,
    pub data: Vec<ModelView>,
}

/// One model: an agent of the tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct ModelView {
    /// `agentlane` (the agent `main`) or `agentlane/<agentId>`.
    #[schema(example = "agentlane/support")]
    pub id: String,
    /// Always `model`.
    #[schema(example = "model")]
    pub object: String,
    /// When the agent was created (seconds since the epoch; 0 for the deployment's own `main`).
    pub created: u64,
    /// The tenant.
    pub owned_by: String,
}

/// The models of `tenant`: `main` first (the tenant's own definition when it has one, else the
/// deployment's), then its other agents in id order.
pub(crate) fn model_list(tenant: &TenantId, agents: &[Agent]) -> ModelList {
    let view = |agent_id: &str, created_ms: u64| ModelView {
        id: model_of(agent_id),
        object: "model".to_owned(),
        created: created_ms / 1000,
        owned_by: tenant.as_str().to_owned(),
    };
    let main = agents.iter().find(|a| a.agent_id == MAIN_AGENT);
    let mut data = vec![view(MAIN_AGENT, main.map_or(0, |a| a.created_at))];
    data.extend(
        agents
            .iter()
            .filter(|a| a.agent_id != MAIN_AGENT)
            .map(|a| view(&a.agent_id, a.created_at)),
    );
    ModelList {
        object: "list".to_owned(),
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_map_to_agents() {
        let cases = [
            ("agentlane", Some("main")),
            ("agentlane/main", Some("main")),
            ("agentlane/support", Some("support")),
            ("agentlane/", None),
            ("agentlane/Support", None),
            ("agentlane/a/b", None),
            ("agentlanex", None),
            ("gpt-4o-mini", None),
            ("openai/gpt-4o-mini", None),
            ("", None),
        ];
        for (model, agent) in cases {
            assert_eq!(agent_of(model), agent, "{model:?}");
        }
        assert_eq!(model_of("main"), "agentlane");
        assert_eq!(model_of("support"), "agentlane/support");
    }

    fn agent(id: &str, created_at: u64) -> Agent {
        Agent {
            tenant: TenantId::new("acme"),
            agent_id: id.to_owned(),
            version: 1,
            created_at,
            updated_at: created_at,
            spec: Default::default(),
        }
    }

    #[test]
    fn main_is_listed_first_whether_or_not_the_tenant_defined_it() {
        let tenant = TenantId::new("acme");
        let ids = |list: ModelList| {
            list.data
                .into_iter()
                .map(|m| (m.id, m.created))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(model_list(&tenant, &[])), [("agentlane".into(), 0)]);
        let agents = [
            agent("billing", 5_000),
            agent("main", 2_500),
            agent("support", 9_999),
        ];
        assert_eq!(
            ids(model_list(&tenant, &agents)),
            [
                ("agentlane".into(), 2),
                ("agentlane/billing".into(), 5),
                ("agentlane/support".into(), 9),
            ]
        );
        let list = model_list(&tenant, &agents);
        assert_eq!(list.object, "list");
        assert!(
            list.data
                .iter()
                .all(|m| m.object == "model" && m.owned_by == "acme")
        );
    }
}
