//! Hosts as permission rules compare them: canonical, not as text. A host is lower-cased with
//! its trailing dots removed; an IP address is read in the URL's own notation by the URL parser
//! (`0x7f.1`, `2130706433` and `0177.0.0.1` are all 127.0.0.1) and an IPv4-mapped IPv6 address
//! (`[::ffff:127.0.0.1]`) is its IPv4 address; and every way of naming this machine —
//! `localhost` and its subdomains, `127.0.0.0/8`, `::1`, `0.0.0.0`, `::` — is one loopback
//! class: a rule that names one of them names them all.
//!
//! A rule's host pattern is `*`, a name (`example.com`), `*.example.com` (any subdomain, not
//! the domain itself), an IP address, or a CIDR block (`10.0.0.0/8`, `fd00::/8`). A name never
//! matches an address or the other way round (rules do not resolve names: the egress check,
//! which does, is a separate boundary), except through the loopback class.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A host as a rule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// A host name as a URL parser gave it (already lower-cased and IDNA-mapped), or an address.
    pub fn name(text: &str) -> Host {
        let trimmed = text.trim_end_matches('.').to_ascii_lowercase();
        let bare = trimmed.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(&trimmed);
        match bare.parse::<IpAddr>() {
            Ok(ip) => Host::ip(ip),
            Err(_) => Host::Name(trimmed),
        }
    }

    pub fn ip(ip: IpAddr) -> Host {
        Host::Ip(unmapped(ip))
    }

    /// `localhost` (and `*.localhost`, RFC 6761), `127.0.0.0/8`, `::1`, `0.0.0.0` or `::`.
    pub fn is_loopback(&self) -> bool {
        match self {
            Host::Name(n) => n == "localhost" || n.ends_with(".localhost"),
            Host::Ip(ip) => ip.is_loopback() || ip.is_unspecified(),
        }
    }
}

impl fmt::Display for Host {
    /// The canonical form the audit shows: `loopback` marks the class.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let loopback = if self.is_loopback() { " (loopback)" } else { "" };
        match self {
            Host::Name(n) => write!(f, "{n}{loopback}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]{loopback}"),
            Host::Ip(ip) => write!(f, "{ip}{loopback}"),
        }
    }
}

fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// A rule's host pattern, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    Any,
    Name(String),
    Subdomains(String),
    Block { net: IpAddr, prefix: u8 },
}

impl HostPattern {
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let wrong = || {
            format!(
                "`{text}` is not a host pattern: use a host name (example.com), *.example.com, an IP address (10.0.0.1, ::1), a CIDR block (10.0.0.0/8) or *"
            )
        };
        let text = text.trim();
        if text == "*" {
            return Ok(HostPattern::Any);
        }
        if let Some((addr, prefix)) = text.split_once('/') {
            let net = parse_ip(addr).ok_or_else(wrong)?;
            let max = if net.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix.parse().ok().filter(|p| *p <= max).ok_or_else(wrong)?;
            return Ok(HostPattern::Block { net, prefix });
        }
        if let Some(ip) = parse_ip(text) {
            let prefix = if ip.is_ipv4() { 32 } else { 128 };
            return Ok(HostPattern::Block { net: ip, prefix });
        }
        let lowered = text.trim_end_matches('.').to_ascii_lowercase();
        let (name, wild) = match lowered.strip_prefix("*.") {
            Some(domain) => (domain.to_string(), true),
            None => (lowered, false),
        };
        let labels_ok = !name.is_empty()
            && name.split('.').all(|label| {
                !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        // All-numeric labels that are not a dotted quad would be a name no URL ever has (the
        // parser reads them as an address): say how to write the address.
        let numeric = name.split('.').all(|l| l.chars().all(|c| c.is_ascii_hexdigit() || c == 'x'))
            && name.split('.').any(|l| l.starts_with(|c: char| c.is_ascii_digit()));
        if !labels_ok || (numeric && !wild) {
            return Err(wrong());
        }
        Ok(if wild { HostPattern::Subdomains(name) } else { HostPattern::Name(name) })
    }

    /// Whether this pattern names anything of the loopback class.
    fn names_loopback(&self) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Name(n) => Host::Name(n.clone()).is_loopback(),
            HostPattern::Subdomains(d) => d == "localhost",
            HostPattern::Block { net, prefix } => [
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            ]
            .iter()
            .any(|ip| in_block(*net, *prefix, *ip)),
        }
    }

    pub fn matches(&self, host: &Host) -> bool {
        if host.is_loopback() && self.names_loopback() {
            return true;
        }
        match (self, host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Name(n), Host::Name(h)) => n == h,
            (HostPattern::Subdomains(d), Host::Name(h)) => {
                h.strip_suffix(d.as_str()).is_some_and(|sub| sub.len() > 1 && sub.ends_with('.'))
            }
            (HostPattern::Block { net, prefix }, Host::Ip(ip)) => in_block(*net, *prefix, *ip),
            _ => false,
        }
    }
}

/// An address as a rule writes it: `10.0.0.1`, `::1`, `[::1]`, `::ffff:10.0.0.1` (as 10.0.0.1).
fn parse_ip(text: &str) -> Option<IpAddr> {
    let bare = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text);
    bare.parse::<IpAddr>().ok().map(unmapped)
}

fn in_block(net: IpAddr, prefix: u8, ip: IpAddr) -> bool {
    match (unmapped(net), unmapped(ip)) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix.min(32))) };
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix.min(128))) };
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Host {
        Host::name(text)
    }

    fn matches(pattern: &str, text: &str) -> bool {
        HostPattern::parse(pattern).unwrap().matches(&host(text))
    }

    #[test]
    fn loopback_is_one_class_whichever_member_a_rule_names() {
        let members = [
            "localhost",
            "localhost.",
            "LOCALHOST",
            "app.localhost",
            "127.0.0.1",
            "127.0.0.2",
            "0.0.0.0",
            "::1",
            "[::1]",
            "::",
            "::ffff:127.0.0.1",
            "[::ffff:127.0.0.1]",
        ];
        for pattern in ["localhost", "127.0.0.1", "::1", "0.0.0.0", "127.0.0.0/8"] {
            for member in members {
                assert!(matches(pattern, member), "{pattern} must match {member}");
            }
            assert!(!matches(pattern, "example.com"), "{pattern}");
            assert!(!matches(pattern, "10.0.0.1"), "{pattern}");
            assert!(!matches(pattern, "localhost.example.com"), "{pattern}");
        }
    }

    #[test]
    fn names_are_lower_cased_without_trailing_dots() {
        assert!(matches("example.com", "Example.COM."));
        assert!(matches("*.example.com", "api.example.com."));
        assert!(!matches("*.example.com", "example.com"));
        assert!(!matches("*.example.com", "badexample.com"));
        assert!(matches("EXAMPLE.com.", "example.com"));
    }

    #[test]
    fn blocks_and_addresses() {
        assert!(matches("10.0.0.0/8", "10.200.3.4"));
        assert!(!matches("10.0.0.0/8", "11.0.0.1"));
        assert!(matches("10.0.0.0/8", "::ffff:10.1.2.3"), "an IPv4-mapped address is its IPv4 address");
        assert!(matches("169.254.169.254", "169.254.169.254"));
        assert!(matches("fd00::/8", "fd12::1"));
        assert!(!matches("fd00::/8", "fe80::1"));
        assert!(matches("0.0.0.0/0", "8.8.8.8"));
        assert!(!matches("10.0.0.1", "ten.example"), "a name is not resolved");
    }

    #[test]
    fn patterns_that_cannot_match_are_refused() {
        for bad in ["", "10.0.0.0/33", "::/129", "x/8", "0x7f.1", "2130706433", "a..b", "exa mple.com", "*."] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
        }
        for good in
            ["*", "example.com", "*.example.com", "10.0.0.1", "::1", "[::1]", "10.0.0.0/8", "localhost", "x-1.example"]
        {
            assert!(HostPattern::parse(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn the_canonical_form_names_the_class() {
        assert_eq!(host("::ffff:127.0.0.1").to_string(), "127.0.0.1 (loopback)");
        assert_eq!(host("Example.com.").to_string(), "example.com");
        assert_eq!(host("[fd00::1]").to_string(), "[fd00::1]");
    }
}
