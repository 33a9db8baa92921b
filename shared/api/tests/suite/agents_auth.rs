//! An agent's tool `auth` (OAuth client credentials, issue 42): the client secret is a secret
//! reference; a plain value is a 400 naming the field, and is never stored.

use crate::common::{ACME_KEY, Harness};
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

const PLAIN: &str = "plain-client-secret-4f3e2d1c";

fn auth(client_secret: Value) -> Value {
    json!({"type": "oauth2_client_credentials", "tokenUrl": "https://auth.example/token",
           "clientId": "app", "clientSecret": client_secret})
}

fn http_tool(client_secret: Value) -> Value {
    json!({"http": [{"name": "orders", "description": "Orders.", "url": "https://api.example/o",
                     "parameters": {"type": "object"}, "auth": auth(client_secret)}]})
}

fn mcp_server(client_secret: Value) -> Value {
    json!({"mcpServers": [{"name": "crm", "url": "https://mcp.example/mcp",
                           "auth": auth(client_secret)}]})
}

#[tokio::test]
async fn a_plain_client_secret_is_a_400_naming_the_field() {
    let h = Harness::new().await;
    for (tools, field) in [
        (
            http_tool as fn(Value) -> Value,
            "tools.http[0].auth.clientSecret",
        ),
        (mcp_server, "tools.mcpServers[0].auth.clientSecret"),
    ] {
        for plain in [json!(PLAIN), json!(null), json!(42)] {
            let reply = h
                .post(
                    "/v1/agents",
                    ACME_KEY,
                    json!({"agentId": "oauth", "tools": tools(plain.clone())}),
                )
                .await;
            reply.assert_error(400, "invalid_request");
            let message = reply.json["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.starts_with(field) && message.contains("{\"secret\": \"<name>\"}"),
                "{plain}: {message}"
            );
            assert!(!reply.text.contains(PLAIN), "{}", reply.text);
        }
    }
    assert_eq!(
        h.get("/v1/agents/oauth", ACME_KEY).await.status,
        StatusCode::NOT_FOUND,
        "nothing was stored"
    );

    // A reference to a secret of the tenant's is accepted, and a PATCH cannot swap a plain
    // value in.
    let put = h
        .send(Harness::request(
            Method::PUT,
            "/v1/secrets/oauth-client",
            Some(ACME_KEY),
            Body::from(json!({"value": "the-real-secret"}).to_string()),
        ))
        .await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.text);
    let reference = json!({"secret": "oauth-client"});
    let created = h
        .post(
            "/v1/agents",
            ACME_KEY,
            json!({"agentId": "oauth", "tools": http_tool(reference.clone())}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(
        created.json["tools"]["http"][0]["auth"]["clientSecret"],
        reference
    );
    let patched = h
        .patch(
            "/v1/agents/oauth",
            ACME_KEY,
            json!({"tools": mcp_server(json!(PLAIN))}),
        )
        .await;
    patched.assert_error(400, "invalid_request");
    assert!(
        patched.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("tools.mcpServers[0].auth.clientSecret"),
        "{}",
        patched.text
    );
    let current = h.get("/v1/agents/oauth", ACME_KEY).await;
    assert_eq!(current.json["version"], 1, "{}", current.text);
}
