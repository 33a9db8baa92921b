//! Input rules shared by the API and the CLI.

/// Longest accepted `sessionKey`.
pub const MAX_SESSION_KEY_LEN: usize = 256;

/// `sessionKey`: 1–256 characters of `[A-Za-z0-9:._@/-]`. OpenClaw's keys may hold `/`; in a URL
/// path the key is one segment, so clients percent-encode it (`a%2Fb`).
pub fn validate_session_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("sessionKey must not be empty".into());
    }
    if key.len() > MAX_SESSION_KEY_LEN {
        return Err(format!(
            "sessionKey is {} characters long; at most {MAX_SESSION_KEY_LEN} are allowed",
            key.len()
        ));
    }
    match key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '_' | '@' | '/' | '-')))
    {
        Some(c) => Err(format!(
            "sessionKey contains {c:?}; only letters, digits and : . _ @ / - are allowed"
        )),
        None => Ok(()),
    }
}

/// `value` as one URL path segment: every byte but `[A-Za-z0-9-._~:@]` percent-encoded, so a
/// session key holding `/` stays one segment (`agent:main/dm` → `agent:main%2Fdm`).
pub fn path_segment(value: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':' | b'@') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Tenant names: 1–64 characters of `[A-Za-z0-9_-]`.
pub fn validate_tenant(tenant: &str) -> Result<(), String> {
    if tenant.is_empty() || tenant.len() > 64 {
        return Err("tenant must be 1-64 characters".into());
    }
    if tenant
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        Ok(())
    } else {
        Err(format!(
            "tenant {tenant:?} may only use letters, digits, _ and -"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_keys() {
        for ok in [
            "a",
            "agent:main:main",
            "user@example.com",
            "x.y_z-1",
            "agent:main/dm/42",
        ] {
            assert_eq!(validate_session_key(ok), Ok(()), "{ok}");
        }
        let long = "a".repeat(257);
        for bad in ["", "a%2Fb", "a b", "é", long.as_str(), "a?b"] {
            assert!(
                validate_session_key(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert!(validate_session_key(&"a".repeat(256)).is_ok());
    }

    #[test]
    fn path_segments() {
        for (value, segment) in [
            ("agent:main:main", "agent:main:main"),
            ("agent:main/dm/42", "agent:main%2Fdm%2F42"),
            ("a b?#%", "a%20b%3F%23%25"),
            ("é", "%C3%A9"),
        ] {
            assert_eq!(path_segment(value), segment, "{value}");
        }
    }

    #[test]
    fn tenants() {
        assert!(validate_tenant("acme-1").is_ok());
        assert!(validate_tenant("").is_err());
        assert!(validate_tenant("a:b").is_err());
    }
}
