//! The SSRF guard: which URLs and addresses a tool may reach. Pure: no I/O.
//!
//! By default only public unicast addresses are reachable. Loopback, private, link-local (the
//! cloud metadata address among them), CGNAT, multicast, documentation and reserved ranges are
//! refused, including when an IPv6 address embeds a refused IPv4 one (IPv4-mapped, NAT64, 6to4).
//! The policy's allow list re-admits named hosts or address ranges.

use crate::ToolError;
use ipnet::IpNet;
use reqwest::Url;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use url::Host;

/// Host names refused whatever they resolve to (compared without case and trailing dot).
const DENIED_HOSTS: &[&str] = &[
    "localhost",
    "localhost.localdomain",
    "ip6-localhost",
    "ip6-loopback",
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Where a tool may connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsrfPolicy {
    /// Allowed even if private: exact host names (`intranet.example`), IP addresses
    /// (`127.0.0.1`, `::1`) or CIDR ranges (`10.0.0.0/8`).
    pub allow_hosts: Vec<String>,
    /// Redirect hops followed at most, each one checked again.
    pub max_redirects: usize,
}

impl Default for SsrfPolicy {
    fn default() -> Self {
        Self {
            allow_hosts: Vec::new(),
            max_redirects: 5,
        }
    }
}

/// Why an address is not publicly routable, or `None` when it is.
pub fn denial_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    }
}

/// Refuses any address that is not public unicast.
pub fn check_ip(ip: IpAddr) -> Result<(), ToolError> {
    match denial_reason(ip) {
        None => Ok(()),
        Some(reason) => Err(ToolError::Blocked(format!(
            "{ip} is a {reason} address; only public addresses may be fetched unless allow-listed"
        ))),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
    u128::from(ip) & mask == u128::from(net) & mask
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    const TABLE: &[([u8; 4], u32, &str)] = &[
        ([169, 254, 169, 254], 32, "cloud metadata (link-local)"),
        ([255, 255, 255, 255], 32, "broadcast"),
        ([0, 0, 0, 0], 8, "unspecified (\"this network\")"),
        ([10, 0, 0, 0], 8, "private"),
        ([100, 64, 0, 0], 10, "carrier-grade NAT (shared)"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([169, 254, 0, 0], 16, "link-local"),
        ([172, 16, 0, 0], 12, "private"),
        ([192, 0, 0, 0], 24, "reserved (IETF protocol assignments)"),
        ([192, 0, 2, 0], 24, "documentation"),
        ([192, 88, 99, 0], 24, "reserved (6to4 relay)"),
        ([192, 168, 0, 0], 16, "private"),
        ([198, 18, 0, 0], 15, "benchmarking"),
        ([198, 51, 100, 0], 24, "documentation"),
        ([203, 0, 113, 0], 24, "documentation"),
        ([224, 0, 0, 0], 4, "multicast"),
        ([240, 0, 0, 0], 4, "reserved"),
    ];
    TABLE
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, reason)| *reason)
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(ip);
    // Addresses that carry an IPv4 address: judged by it.
    let embedded = if let Some(v4) = ip.to_ipv4_mapped() {
        Some(v4)
    } else if in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        Some(Ipv4Addr::from((bits & 0xffff_ffff) as u32)) // NAT64
    } else if in_v6(ip, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32)) // 6to4
    } else {
        None
    };
    if let Some(v4) = embedded {
        return v4_reason(v4);
    }
    const TABLE: &[(Ipv6Addr, u32, &str)] = &[
        (Ipv6Addr::UNSPECIFIED, 128, "unspecified"),
        (Ipv6Addr::LOCALHOST, 128, "loopback"),
        (
            Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0),
            96,
            "reserved (IPv4-compatible)",
        ),
        (
            Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
            48,
            "NAT64 (local use)",
        ),
        (
            Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
            64,
            "reserved (discard-only)",
        ),
        (
            Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
            32,
            "Teredo tunnel",
        ),
        (
            Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0),
            48,
            "benchmarking",
        ),
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
            32,
            "documentation",
        ),
        (
            Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
            20,
            "documentation",
        ),
        (
            Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
            7,
            "unique-local (private)",
        ),
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "link-local"),
        (
            Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
            10,
            "site-local (deprecated)",
        ),
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast"),
    ];
    if let Some((_, _, reason)) = TABLE
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, *net, *prefix))
    {
        return Some(reason);
    }
    // Global unicast is 2000::/3; everything else is unassigned or special.
    (!in_v6(ip, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3)).then_some("reserved")
}

/// A host name without case or trailing dot, as compared against lists.
fn normalise(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl SsrfPolicy {
    /// Whether `host` (as written in the URL) is allow-listed by name.
    fn host_allowed(&self, host: &str) -> bool {
        let host = normalise(host);
        self.allow_hosts.iter().any(|a| normalise(a) == host)
    }

    /// Whether `ip` falls in an allow-listed address or range.
    fn ip_allowed(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.allow_hosts.iter().any(|entry| {
            let entry = entry.trim();
            if let Ok(net) = entry.parse::<IpNet>() {
                net.contains(&ip)
            } else if let Ok(allowed) = entry.trim_matches(['[', ']']).parse::<IpAddr>() {
                allowed.to_canonical() == ip
            } else {
                false
            }
        })
    }

    /// Checks a URL before any connection: scheme http(s), no credentials, a host, and a host
    /// that is neither a refused name nor a refused address literal.
    pub fn check_url(&self, url: &Url) -> Result<(), ToolError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::Blocked(format!(
                "scheme {:?} is not allowed; only http and https",
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(ToolError::Blocked(
                "URLs with credentials (user:pass@) are not allowed".into(),
            ));
        }
        match url.host() {
            None => Err(ToolError::Blocked("the URL has no host".into())),
            Some(Host::Ipv4(v4)) => self.check_address("", IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => self.check_address("", IpAddr::V6(v6)),
            Some(Host::Domain(name)) => {
                let host = normalise(name);
                let denied = DENIED_HOSTS.contains(&host.as_str()) || host.ends_with(".localhost");
                if denied && !self.host_allowed(&host) {
                    return Err(ToolError::Blocked(format!(
                        "host {host:?} is a local or metadata name; it may be fetched only if allow-listed"
                    )));
                }
                Ok(())
            }
        }
    }

    /// Checks one address `host` resolved to (`host` empty for an address literal): allowed when
    /// the host name or the address is allow-listed, else only if public.
    pub fn check_address(&self, host: &str, ip: IpAddr) -> Result<(), ToolError> {
        if (!host.is_empty() && self.host_allowed(host)) || self.ip_allowed(ip) {
            return Ok(());
        }
        check_ip(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_table() {
        let cases: &[(&str, Option<&str>)] = &[
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("93.184.215.14", None),
            ("127.0.0.1", Some("loopback")),
            ("127.255.0.9", Some("loopback")),
            ("10.1.2.3", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("172.32.0.1", None),
            ("192.168.1.1", Some("private")),
            ("169.254.169.254", Some("cloud metadata (link-local)")),
            ("169.254.1.1", Some("link-local")),
            ("100.64.0.1", Some("carrier-grade NAT (shared)")),
            ("100.127.255.255", Some("carrier-grade NAT (shared)")),
            ("100.128.0.1", None),
            ("0.0.0.0", Some("unspecified (\"this network\")")),
            ("255.255.255.255", Some("broadcast")),
            ("224.0.0.1", Some("multicast")),
            ("192.0.2.7", Some("documentation")),
            ("198.51.100.7", Some("documentation")),
            ("203.0.113.7", Some("documentation")),
            ("198.18.0.1", Some("benchmarking")),
            ("240.0.0.1", Some("reserved")),
            ("2606:4700:4700::1111", None),
            ("::", Some("unspecified")),
            ("::1", Some("loopback")),
            ("::ffff:127.0.0.1", Some("loopback")),
            (
                "::ffff:169.254.169.254",
                Some("cloud metadata (link-local)"),
            ),
            ("::ffff:8.8.8.8", None),
            ("::10.0.0.1", Some("reserved (IPv4-compatible)")),
            ("64:ff9b::a00:1", Some("private")),
            ("64:ff9b::808:808", None),
            ("2002:7f00:1::", Some("loopback")),
            ("2002:a9fe:a9fe::1", Some("cloud metadata (link-local)")),
            ("2002:808:808::1", None),
            ("2001:0:4136:e378::1", Some("Teredo tunnel")),
            ("2001:db8::1", Some("documentation")),
            ("fc00::1", Some("unique-local (private)")),
            ("fd00:ec2::254", Some("unique-local (private)")),
            ("fe80::1", Some("link-local")),
            ("fec0::1", Some("site-local (deprecated)")),
            ("ff02::1", Some("multicast")),
            ("4000::1", Some("reserved")),
        ];
        for (ip, want) in cases {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(denial_reason(ip), *want, "{ip}");
            assert_eq!(check_ip(ip).is_ok(), want.is_none(), "{ip}");
        }
    }

    #[test]
    fn blocked_message_says_why() {
        let err = check_ip("169.254.169.254".parse().unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "blocked: 169.254.169.254 is a cloud metadata (link-local) address; only public addresses \
             may be fetched unless allow-listed"
        );
    }

    #[test]
    fn url_table() {
        let policy = SsrfPolicy::default();
        let cases: &[(&str, bool)] = &[
            ("https://example.com/page", true),
            ("http://example.com:8080/", true),
            ("ftp://example.com/file", false),
            ("file:///etc/passwd", false),
            ("gopher://example.com/", false),
            ("http://user:pass@example.com/", false),
            ("http://user@example.com/", false),
            ("http://localhost:8080/", false),
            ("http://LOCALHOST./", false),
            ("http://api.localhost/", false),
            ("http://metadata.google.internal/computeMetadata/v1/", false),
            ("http://127.0.0.1/", false),
            ("http://169.254.169.254/latest/meta-data/", false),
            // Alternative spellings of 127.0.0.1 the URL parser normalises.
            ("http://2130706433/", false),
            ("http://0x7f.0.0.1/", false),
            ("http://017700000001/", false),
            ("http://[::1]/", false),
            ("http://[::ffff:7f00:1]/", false),
            ("http://[2606:4700:4700::1111]/", true),
            ("http://8.8.8.8/", true),
        ];
        for (url, ok) in cases {
            let parsed = Url::parse(url).unwrap();
            assert_eq!(policy.check_url(&parsed).is_ok(), *ok, "{url}");
        }
    }

    #[test]
    fn allow_list_admits_names_addresses_and_ranges() {
        let policy = SsrfPolicy {
            allow_hosts: vec![
                "LocalHost".into(),
                "127.0.0.1".into(),
                "10.0.0.0/8".into(),
                "[::1]".into(),
            ],
            max_redirects: 5,
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(
            policy
                .check_url(&Url::parse("http://localhost:1/").unwrap())
                .is_ok()
        );
        assert!(policy.check_address("localhost", ip("127.0.0.1")).is_ok());
        assert!(policy.check_address("", ip("127.0.0.1")).is_ok());
        assert!(policy.check_address("", ip("::ffff:127.0.0.1")).is_ok());
        assert!(policy.check_address("", ip("10.200.0.1")).is_ok());
        assert!(policy.check_address("", ip("::1")).is_ok());
        // Only what is listed.
        assert!(policy.check_address("", ip("127.0.0.2")).is_err());
        assert!(policy.check_address("", ip("192.168.0.1")).is_err());
        assert!(
            policy
                .check_address("evil.example", ip("169.254.169.254"))
                .is_err()
        );
        assert!(
            policy
                .check_url(&Url::parse("http://metadata.google.internal/").unwrap())
                .is_err()
        );
    }
}
