//! The ingress Lambda under test (`agentlane-ingress`'s main), run against a fake Lambda
//! Runtime API by the streaming scenarios.

#[tokio::main]
async fn main() -> Result<(), agentlane_ingress::Error> {
    agentlane_ingress::run().await
}
