//! The ingress Lambda's main: see the library (`AGENTLANE_INGRESS_MODE` picks buffered or
//! streaming responses).
#![warn(unreachable_pub)]
#![warn(missing_docs)]

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    agentlane_ingress::run().await
}
