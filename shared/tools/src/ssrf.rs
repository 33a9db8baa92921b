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
    /// (`127.0.0.1`, `::1`) or CIDR ranges (`10.0.0.0/8`), each optionally with a port
    /// (`intranet.example:8443`, `127.0.0.1:9000`, `[::1]:9000`, `[fd00::/8]:443`); an entry
    /// without a port allows every port. See [`AllowEntry::parse`].
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

/// What an allow-list entry names: a host name (normalised) or an address range (a single
/// address is a /32 or /128 range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowTarget {
    /// A host name, compared without case and trailing dot.
    Name(String),
    /// An address or a CIDR range.
    Net(IpNet),
}

/// One parsed entry of [`SsrfPolicy::allow_hosts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    /// The host, address or range.
    pub target: AllowTarget,
    /// The only port allowed; `None`: every port.
    pub port: Option<u16>,
}

impl AllowEntry {
    /// Parses `host`, `host:port`, `ip`, `ip:port`, `cidr`, `cidr:port`, a bare IPv6 address or
    /// range (`::1`, `fd00::/8`: no port), or a bracketed one with an optional port
    /// (`[::1]`, `[::1]:9000`, `[fd00::/8]:443`).
    pub fn parse(entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
        let bad = |why: &str| format!("allow-list entry {entry:?}: {why}");
        let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or_else(|| bad("missing `]`"))?;
            let port = match after {
                "" => None,
                _ => Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| bad("only `:port` may follow `]`"))?,
                ),
            };
            if inside.parse::<IpNet>().is_err() && inside.parse::<Ipv6Addr>().is_err() {
                return Err(bad("brackets must hold an IPv6 address or range"));
            }
            (inside, port)
        } else if entry.matches(':').count() >= 2 {
            (entry, None)
        } else {
            match entry.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (entry, None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?,
            ),
        };
        let target = if let Ok(net) = host.parse::<IpNet>() {
            AllowTarget::Net(net)
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            AllowTarget::Net(IpNet::from(ip.to_canonical()))
        } else {
            let name = normalise(host);
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
            if !valid {
                return Err(bad("not a host name, an address or a CIDR range"));
            }
            AllowTarget::Name(name)
        };
        Ok(Self { target, port })
    }

    /// Whether this entry admits connections to `port` (`None`: the port is not known, so only
    /// an entry without a port admits).
    fn port_matches(&self, port: Option<u16>) -> bool {
        match self.port {
            None => true,
            Some(wanted) => port == Some(wanted),
        }
    }

    /// Whether this entry names host `host` (already normalised) on `port`.
    pub fn allows_name(&self, host: &str, port: Option<u16>) -> bool {
        matches!(&self.target, AllowTarget::Name(name) if name == host) && self.port_matches(port)
    }

    /// Whether this entry covers address `ip` on `port`.
    pub fn allows_ip(&self, ip: IpAddr, port: Option<u16>) -> bool {
        let ip = ip.to_canonical();
        matches!(&self.target, AllowTarget::Net(net) if net.contains(&ip))
            && self.port_matches(port)
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
    /// The allow list's entries that parse (an entry that does not allows nothing), and the
    /// errors of those that do not.
    pub fn entries(&self) -> (Vec<AllowEntry>, Vec<String>) {
        let mut entries = Vec::new();
        let mut errors = Vec::new();
        for entry in &self.allow_hosts {
            match AllowEntry::parse(entry) {
                Ok(parsed) => entries.push(parsed),
                Err(error) => errors.push(error),
            }
        }
        (entries, errors)
    }

    /// Whether `host` (as written in the URL) is allow-listed by name, for `port`.
    fn host_allowed(&self, host: &str, port: Option<u16>) -> bool {
        let host = normalise(host);
        self.entries().0.iter().any(|e| e.allows_name(&host, port))
    }

    /// Whether `ip` falls in an allow-listed address or range, for `port`.
    fn ip_allowed(&self, ip: IpAddr, port: Option<u16>) -> bool {
        self.entries().0.iter().any(|e| e.allows_ip(ip, port))
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
        let port = url.port_or_known_default();
        match url.host() {
            None => Err(ToolError::Blocked("the URL has no host".into())),
            Some(Host::Ipv4(v4)) => self.check(None, IpAddr::V4(v4), port),
            Some(Host::Ipv6(v6)) => self.check(None, IpAddr::V6(v6), port),
            Some(Host::Domain(name)) => {
                let host = normalise(name);
                let denied = DENIED_HOSTS.contains(&host.as_str()) || host.ends_with(".localhost");
                if denied && !self.host_allowed(&host, port) {
                    return Err(ToolError::Blocked(format!(
                        "host {host:?} is a local or metadata name; it may be fetched only if allow-listed"
                    )));
                }
                Ok(())
            }
        }
    }

    /// Checks one address `host` resolved to (`host` empty for an address literal), the port
    /// not being known: allowed when the host name or the address is allow-listed by an entry
    /// without a port, else only if public.
    pub fn check_address(&self, host: &str, ip: IpAddr) -> Result<(), ToolError> {
        self.check(Some(host), ip, None)
    }

    /// [`SsrfPolicy::check_address`] for a connection to `port`: entries naming that port
    /// admit too.
    pub fn check_address_on(&self, host: &str, ip: IpAddr, port: u16) -> Result<(), ToolError> {
        self.check(Some(host), ip, Some(port))
    }

    fn check(&self, host: Option<&str>, ip: IpAddr, port: Option<u16>) -> Result<(), ToolError> {
        let named = host.is_some_and(|h| !h.is_empty() && self.host_allowed(h, port));
        if named || self.ip_allowed(ip, port) {
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
    fn allow_entry_parse_table() {
        use AllowTarget::{Name, Net};
        let net = |s: &str| Net(s.parse().unwrap());
        let ok = |target, port| Ok(AllowEntry { target, port });
        let cases: Vec<(&str, Result<AllowEntry, ()>)> = vec![
            (
                "intranet.example",
                ok(Name("intranet.example".into()), None),
            ),
            (
                "Intranet.Example.:8443",
                ok(Name("intranet.example".into()), Some(8443)),
            ),
            ("127.0.0.1", ok(net("127.0.0.1/32"), None)),
            ("127.0.0.1:9000", ok(net("127.0.0.1/32"), Some(9000))),
            ("10.0.0.0/8", ok(net("10.0.0.0/8"), None)),
            ("10.0.0.0/8:443", ok(net("10.0.0.0/8"), Some(443))),
            ("::1", ok(net("::1/128"), None)),
            ("fd00::/8", ok(net("fd00::/8"), None)),
            ("[::1]", ok(net("::1/128"), None)),
            ("[::1]:9000", ok(net("::1/128"), Some(9000))),
            ("[fd00::/8]:443", ok(net("fd00::/8"), Some(443))),
            ("[::ffff:127.0.0.1]:80", ok(net("127.0.0.1/32"), Some(80))),
            (
                "  localhost:3000 ",
                ok(Name("localhost".into()), Some(3000)),
            ),
            // Refused, with a reason.
            ("host:", Err(())),
            ("host:0", Err(())),
            ("host:65536", Err(())),
            ("host:http", Err(())),
            ("[::1", Err(())),
            ("[::1]9000", Err(())),
            ("[intranet]:80", Err(())),
            ("", Err(())),
            ("bad host", Err(())),
            ("a/b", Err(())),
        ];
        for (entry, want) in cases {
            let got = AllowEntry::parse(entry);
            match (&got, &want) {
                (Err(message), Err(())) => {
                    assert!(message.contains("allow-list entry"), "{message}")
                }
                _ => assert_eq!(got.map_err(|_| ()), want, "{entry:?}"),
            }
        }
    }

    #[test]
    fn allow_list_ports_match_only_their_port() {
        let policy = SsrfPolicy {
            allow_hosts: vec![
                "localhost:3000".into(),
                "127.0.0.1:9000".into(),
                "[::1]:9000".into(),
                "10.0.0.0/8:443".into(),
                "192.168.1.5".into(),
                "not a host".into(),
            ],
            max_redirects: 5,
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let url_ok = |u: &str| policy.check_url(&Url::parse(u).unwrap()).is_ok();
        // (URL, allowed)
        let urls: &[(&str, bool)] = &[
            ("http://localhost:3000/", true),
            ("http://localhost:3001/", false),
            ("http://localhost/", false),
            ("http://127.0.0.1:9000/x", true),
            ("http://127.0.0.1:9001/x", false),
            ("http://127.0.0.1/x", false),
            ("http://[::1]:9000/", true),
            ("http://[::1]:80/", false),
            ("https://10.2.3.4/", true),
            ("http://10.2.3.4/", false),
            ("http://10.2.3.4:443/", true),
            // An entry without a port allows every port.
            ("http://192.168.1.5:1234/", true),
            ("https://192.168.1.5/", true),
        ];
        for (url, want) in urls {
            assert_eq!(url_ok(url), *want, "{url}");
        }
        // Resolved addresses: with the port known, and without it (only portless entries).
        assert!(
            policy
                .check_address_on("localhost", ip("127.0.0.1"), 3000)
                .is_ok()
        );
        assert!(
            policy
                .check_address_on("localhost", ip("127.0.0.1"), 3001)
                .is_err()
        );
        assert!(policy.check_address_on("svc", ip("10.9.9.9"), 443).is_ok());
        assert!(policy.check_address("localhost", ip("127.0.0.1")).is_err());
        assert!(policy.check_address("", ip("192.168.1.5")).is_ok());
        // The entry that does not parse is reported and admits nothing.
        let (entries, errors) = policy.entries();
        assert_eq!(entries.len(), 5);
        assert_eq!(errors.len(), 1, "{errors:?}");
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
