//! Connecting behind the [`ssrf`](crate::ssrf) guard, shared by every tool that makes HTTP
//! requests ([`http_fetch`](crate::http_fetch), [`http_tool`](crate::http_tool)).
//!
//! The URL is checked, its host name resolved here, every resolved address checked, and the
//! client pinned to the checked addresses (so a second, rebinding DNS answer is never used). The
//! client follows no redirect and uses no proxy (a proxy would connect for us, unchecked).

use crate::ToolError;
use crate::ssrf::SsrfPolicy;
use async_trait::async_trait;
use reqwest::Url;
use std::net::SocketAddr;
use url::Host;

/// Resolves host names (a seam so tests can resolve without DNS).
#[async_trait]
pub trait Resolve: Send + Sync + 'static {
    /// Every address `host` resolves to, with `port`.
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The system resolver (`tokio::net::lookup_host`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

#[async_trait]
impl Resolve for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// Where a checked URL may connect: the checked addresses of its host name (none for an
/// address literal, which [`SsrfPolicy::check_url`] checked itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pin {
    name: String,
    addrs: Vec<SocketAddr>,
}

impl Pin {
    /// Whether `other` allows the same addresses, in any order (round-robin DNS reorders them).
    pub(crate) fn same_addresses(&self, other: &Pin) -> bool {
        let sorted = |pin: &Pin| {
            let mut addrs = pin.addrs.clone();
            addrs.sort();
            addrs
        };
        self.name == other.name && sorted(self) == sorted(other)
    }

    /// `builder` (the caller's timeouts, user agent...) built into a client that can only
    /// connect to the pinned addresses, follows no redirect and uses no proxy.
    pub(crate) fn client(
        &self,
        builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::Client, ToolError> {
        let mut builder = builder
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if !self.addrs.is_empty() {
            builder = builder.resolve_to_addrs(&self.name, &self.addrs);
        }
        builder
            .build()
            .map_err(|e| ToolError::Failed(format!("could not build the HTTP client: {e}")))
    }
}

/// Checks `url` against `policy`, resolves its host name with `resolver` and checks every
/// address it resolves to.
pub(crate) async fn check(
    policy: &SsrfPolicy,
    resolver: &dyn Resolve,
    url: &Url,
) -> Result<Pin, ToolError> {
    policy.check_url(url)?;
    let Some(Host::Domain(name)) = url.host() else {
        return Ok(Pin {
            name: String::new(),
            addrs: Vec::new(),
        });
    };
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs = resolver
        .resolve(name, port)
        .await
        .map_err(|e| ToolError::Failed(format!("could not resolve {name}: {e}")))?;
    if addrs.is_empty() {
        return Err(ToolError::Failed(format!("{name} has no address")));
    }
    for addr in &addrs {
        policy
            .check_address_on(name, addr.ip(), port)
            .map_err(|e| match e {
                ToolError::Blocked(why) => ToolError::Blocked(format!("{name} resolves to {why}")),
                other => other,
            })?;
    }
    Ok(Pin {
        name: name.to_owned(),
        addrs,
    })
}

/// [`check`], then a client for `builder` pinned to the checked addresses ([`Pin::client`]).
pub(crate) async fn pinned_client(
    policy: &SsrfPolicy,
    resolver: &dyn Resolve,
    url: &Url,
    builder: reqwest::ClientBuilder,
) -> Result<reqwest::Client, ToolError> {
    check(policy, resolver, url).await?.client(builder)
}

/// `err` and its sources, joined with `": "` (reqwest's own message is terse: "error sending
/// request", the cause is in the sources).
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}
