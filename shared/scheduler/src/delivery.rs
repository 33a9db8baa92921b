//! Delivery of a finished fire's payloads to the job's webhook: the `http_fetch` SSRF guard
//! (only public addresses unless allow-listed, the resolved addresses pinned), a bearer token,
//! no redirects, a few tries with backoff. It runs in its own task: a failing webhook never
//! blocks a lane or the ticker.

use agentlane_core::backoff::jittered;
use agentlane_core::cron::WebhookTarget;
use agentlane_tools::http_fetch::{Resolve, SystemResolver};
use agentlane_tools::ssrf::SsrfPolicy;
use reqwest::Url;
use std::sync::Arc;
use std::time::Duration;
use url::Host;

/// How deliveries are made.
#[derive(Clone)]
pub struct WebhookSender {
    policy: SsrfPolicy,
    resolver: Arc<dyn Resolve>,
    /// Tries per delivery.
    pub attempts: u32,
    /// Pause before the second try; doubled for each later one.
    pub first_backoff: Duration,
    /// Per-try time limit.
    pub timeout: Duration,
}

impl std::fmt::Debug for WebhookSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSender")
            .field("policy", &self.policy)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl WebhookSender {
    /// Deliveries under `policy` (its allow list re-admits private hosts such as a loopback
    /// test server).
    pub fn new(policy: SsrfPolicy) -> Self {
        Self {
            policy,
            resolver: Arc::new(SystemResolver),
            attempts: 3,
            first_backoff: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
        }
    }

    /// POSTs `body` to `target`, trying up to `attempts` times. The error names the last
    /// failure; a URL the guard refuses is not retried.
    pub async fn deliver(
        &self,
        target: &WebhookTarget,
        body: &serde_json::Value,
    ) -> Result<(), String> {
        let url = Url::parse(&target.url).map_err(|e| format!("invalid webhook URL: {e}"))?;
        let mut last = String::new();
        for attempt in 0..self.attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(jittered(self.first_backoff * 2u32.pow(attempt - 1))).await;
            }
            let client = self.pinned_client(&url).await?;
            let mut request = client.post(url.clone()).json(body);
            if let Some(token) = &target.token {
                request = request.bearer_auth(token);
            }
            match request.send().await {
                Ok(response) if response.status().is_success() => return Ok(()),
                Ok(response) => last = format!("webhook answered {}", response.status()),
                Err(e) => last = format!("webhook unreachable: {e}"),
            }
        }
        Err(last)
    }

    async fn pinned_client(&self, url: &Url) -> Result<reqwest::Client, String> {
        self.policy.check_url(url).map_err(|e| e.to_string())?;
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(self.timeout);
        if let Some(Host::Domain(name)) = url.host() {
            let port = url.port_or_known_default().unwrap_or(80);
            let addrs = self
                .resolver
                .resolve(name, port)
                .await
                .map_err(|e| format!("could not resolve {name}: {e}"))?;
            if addrs.is_empty() {
                return Err(format!("{name} has no address"));
            }
            for addr in &addrs {
                self.policy
                    .check_address(name, addr.ip())
                    .map_err(|e| e.to_string())?;
            }
            builder = builder.resolve_to_addrs(name, &addrs);
        }
        builder.build().map_err(|e| e.to_string())
    }
}
