//! The agents API (`/v1/agents`): stored agent definitions a turn names with `agentId`.

use super::{ApiClient, ApiError};
use reqwest::Method;
use serde_json::Value;

/// `value` percent-encoded for a path segment or a query value: everything but RFC 3986's
/// unreserved characters is escaped, so an id can never reach another route.
pub(crate) fn encode_component(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn agent_path(agent_id: &str) -> String {
    format!("/v1/agents/{}", encode_component(agent_id))
}

impl ApiClient {
    /// `POST /v1/agents`: creates an agent from `agent` (the agent JSON without `version`,
    /// `createdAt`, `updatedAt`); the created agent (version 1).
    pub async fn create_agent(&self, agent: &Value) -> Result<Value, ApiError> {
        self.call(Method::POST, "/v1/agents", Some(agent.clone()))
            .await
    }

    /// `GET /v1/agents?limit=&cursor=`: one page, `{"agents": [...], "nextCursor": ...}`.
    pub async fn list_agents(
        &self,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut query = Vec::new();
        if let Some(limit) = limit {
            query.push(format!("limit={limit}"));
        }
        if let Some(cursor) = cursor {
            query.push(format!("cursor={}", encode_component(cursor)));
        }
        let path = if query.is_empty() {
            "/v1/agents".to_owned()
        } else {
            format!("/v1/agents?{}", query.join("&"))
        };
        self.call(Method::GET, &path, None).await
    }

    /// `GET /v1/agents/{agentId}[?version=N]`: the agent, its latest version unless `version`.
    pub async fn get_agent(&self, agent_id: &str, version: Option<u64>) -> Result<Value, ApiError> {
        let mut path = agent_path(agent_id);
        if let Some(version) = version {
            path.push_str(&format!("?version={version}"));
        }
        self.call(Method::GET, &path, None).await
    }

    /// `PATCH /v1/agents/{agentId}`: sets the fields of `patch` (a `null` clears one); the
    /// agent as updated (version + 1).
    pub async fn patch_agent(&self, agent_id: &str, patch: &Value) -> Result<Value, ApiError> {
        self.call(Method::PATCH, &agent_path(agent_id), Some(patch.clone()))
            .await
    }

    /// `DELETE /v1/agents/{agentId}` (204, no body).
    pub async fn delete_agent(&self, agent_id: &str) -> Result<(), ApiError> {
        self.call(Method::DELETE, &agent_path(agent_id), None)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_percent_encoded() {
        assert_eq!(encode_component("support-bot_1.x~"), "support-bot_1.x~");
        assert_eq!(encode_component("../keys"), "..%2Fkeys");
        assert_eq!(encode_component("a b&c=d?é"), "a%20b%26c%3Dd%3F%C3%A9");
    }
}
