//! Which `Host` and `Origin` the API answers: the defence against DNS rebinding, where a page on
//! an attacker's domain that resolves to 127.0.0.1 would otherwise read and drive a project
//! from the user's own browser (the browser then sends the attacker's name as `Host`).
//!
//! - On a loopback bind only `localhost`, `127.0.0.1` and `[::1]` on the bound port are
//!   accepted; with a token (any other bind) also any IP address on the bound port: an address
//!   cannot be rebound, only a name can.
//! - `--allowed-host NAME[:PORT]` adds a name (a reverse proxy's), on any port unless one is given.
//! - `Origin`, when a browser sends one, must be one of those hosts with its scheme and port:
//!   `http` for the controller's own, `http` or `https` for an allowed host (a proxy may end
//!   TLS). Everything else is refused, whatever the method.
//!
//! It only decides; the guard in `mod.rs` turns a refusal into the API's error body.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use axum::http::uri::{Authority, Uri};
use axum::http::{HeaderMap, header};

/// One `--allowed-host` value: a host name (or address), optionally with a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHost {
    /// Lower case; an IPv6 address in brackets, as in a `Host` header.
    host: String,
    /// `None`: any port.
    port: Option<u16>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid allowed host {0:?}: expected a host name or address, optionally with :PORT (no scheme, path or user)")]
pub struct InvalidAllowedHost(String);

impl FromStr for AllowedHost {
    type Err = InvalidAllowedHost;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidAllowedHost(value.to_string());
        let authority = Authority::from_str(value.trim()).map_err(|_| invalid())?;
        let (host, port) = host_and_port(&authority).ok_or_else(invalid)?;
        if host.is_empty() {
            return Err(invalid());
        }
        Ok(AllowedHost { host, port })
    }
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// The host (lower case) and the port of an authority; `None` for userinfo or a port that is
/// not a number (which `Authority::port` would quietly drop).
fn host_and_port(authority: &Authority) -> Option<(String, Option<u16>)> {
    let text = authority.as_str();
    if text.contains('@') {
        return None;
    }
    let host = authority.host();
    let port = match &text[host.len()..] {
        "" => None,
        rest => Some(rest.strip_prefix(':')?.parse::<u16>().ok()?),
    };
    Some((host.to_ascii_lowercase(), port))
}

/// How a host was accepted: as the controller's own (loopback name or address) or as one the
/// user allowed.
#[derive(Clone, Copy, PartialEq)]
enum Accepted {
    Own,
    Allowed,
}

/// Why a request was refused.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// No `Host` (or two): 400.
    BadHost(String),
    /// A host this server does not answer for: 421.
    Misdirected(String),
    /// A page of another origin: 403.
    ForeignOrigin(String),
}

/// The hosts and origins one server accepts.
#[derive(Clone, Debug)]
pub struct HostPolicy {
    /// Loopback bind: loopback names only. Otherwise (token mode) any IP address as well.
    loopback: bool,
    /// The bound port; `None` accepts any (a router whose caller bound the socket).
    port: Option<u16>,
    allowed: Vec<AllowedHost>,
}

impl HostPolicy {
    /// The policy of a server bound to `bound` (its real port, not 0).
    pub fn new(bound: SocketAddr, allowed: Vec<AllowedHost>) -> HostPolicy {
        HostPolicy { loopback: bound.ip().is_loopback(), port: Some(bound.port()), allowed }
    }

    /// Loopback names on any port: for a router served on a loopback socket bound by its caller.
    pub fn loopback_any_port() -> HostPolicy {
        HostPolicy { loopback: true, port: None, allowed: Vec::new() }
    }

    fn accepts(&self, host: &str, port: u16) -> Option<Accepted> {
        if self.allowed.iter().any(|a| a.host == host && a.port.is_none_or(|p| p == port)) {
            return Some(Accepted::Allowed);
        }
        let own = matches!(host, "localhost" | "127.0.0.1" | "[::1]") || (!self.loopback && is_ip_literal(host));
        (own && self.port.is_none_or(|p| p == port)).then_some(Accepted::Own)
    }

    /// The `Host` header (and the authority of an absolute-form request line, or HTTP/2's
    /// `:authority`, when there is one) must name a host this server answers for.
    pub fn check_host(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), Refusal> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let header = hosts.next();
        if hosts.next().is_some() {
            return Err(Refusal::BadHost("the request has more than one Host header".into()));
        }
        let header = match header.map(|v| v.to_str()) {
            None => None,
            Some(Ok(v)) => Some(v),
            Some(Err(_)) => return Err(Refusal::Misdirected(self.misdirected("(not text)"))),
        };
        let from_uri = uri.authority().map(Authority::as_str);
        if header.is_none() && from_uri.is_none() {
            return Err(Refusal::BadHost("the request has no Host header".into()));
        }
        for value in header.into_iter().chain(from_uri) {
            let parsed = Authority::from_str(value).ok().and_then(|a| host_and_port(&a));
            // No port in `Host`: the client used the scheme's default, and this server speaks http.
            let accepted = parsed.and_then(|(host, port)| self.accepts(&host, port.unwrap_or(80)));
            if accepted.is_none() {
                return Err(Refusal::Misdirected(self.misdirected(value)));
            }
        }
        Ok(())
    }

    /// `Origin`, when present, must be an accepted host with a fitting scheme and its port.
    pub fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(value) = headers.get(header::ORIGIN) else { return Ok(()) };
        let origin = value.to_str().unwrap_or("(not text)");
        if self.accepts_origin(origin) {
            Ok(())
        } else {
            Err(Refusal::ForeignOrigin(format!(
                "requests from the origin {origin} are refused: only pages served by this controller ({}) may use the API",
                self.described()
            )))
        }
    }

    fn accepts_origin(&self, origin: &str) -> bool {
        // `null` (sandboxed frames, file: pages) and anything with a path fail to parse or are
        // caught by the path check.
        let Ok(uri) = Uri::from_str(origin) else { return false };
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else { return false };
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return false;
        }
        let default = match scheme {
            "http" => 80,
            "https" => 443,
            _ => return false,
        };
        let Some((host, port)) = host_and_port(authority) else { return false };
        match self.accepts(&host, port.unwrap_or(default)) {
            Some(Accepted::Allowed) => true,
            Some(Accepted::Own) => scheme == "http",
            None => false,
        }
    }

    /// What this server answers for, in words.
    fn described(&self) -> String {
        let port = self.port.map_or_else(|| "its port".to_string(), |p| format!("port {p}"));
        let own = if self.loopback {
            format!("localhost, 127.0.0.1 and [::1] on {port}")
        } else {
            format!("its IP addresses and localhost on {port}")
        };
        if self.allowed.is_empty() {
            own
        } else {
            let allowed: Vec<String> = self.allowed.iter().map(ToString::to_string).collect();
            format!("{own}, and {}", allowed.join(", "))
        }
    }

    fn misdirected(&self, host: &str) -> String {
        format!(
            "this server does not answer for the host {host}: it accepts {}; to reach it under another name (a reverse proxy's), start it with --allowed-host NAME",
            self.described()
        )
    }
}

fn is_ip_literal(host: &str) -> bool {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse::<IpAddr>().is_ok_and(|ip| host.starts_with('[') == ip.is_ipv6())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn loopback(allowed: &[&str]) -> HostPolicy {
        let allowed = allowed.iter().map(|a| a.parse().unwrap()).collect();
        HostPolicy::new("127.0.0.1:39400".parse().unwrap(), allowed)
    }

    fn host(policy: &HostPolicy, value: &str) -> Result<(), Refusal> {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(value).unwrap());
        policy.check_host(&headers, &Uri::from_static("/api/projects"))
    }

    fn origin(policy: &HostPolicy, value: &str) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, HeaderValue::from_str(value).unwrap());
        policy.check_origin(&headers).is_ok()
    }

    #[test]
    fn a_loopback_bind_answers_only_loopback_names_on_its_port() {
        let p = loopback(&[]);
        for ok in ["localhost:39400", "127.0.0.1:39400", "[::1]:39400", "LOCALHOST:39400"] {
            assert_eq!(host(&p, ok), Ok(()), "{ok}");
        }
        for bad in [
            "evil.example:39400",
            "localhost:8080",
            "localhost",
            "127.0.0.2:39400",
            "10.0.0.1:39400",
            "localhost.:39400",
            "user@localhost:39400",
            "localhost:39400x",
            "localhost:99999",
        ] {
            assert!(matches!(host(&p, bad), Err(Refusal::Misdirected(_))), "{bad}");
        }
        let missing = p.check_host(&HeaderMap::new(), &Uri::from_static("/"));
        assert!(matches!(missing, Err(Refusal::BadHost(_))));
        let absolute = p.check_host(&HeaderMap::new(), &Uri::from_static("http://evil.example:39400/"));
        assert!(matches!(absolute, Err(Refusal::Misdirected(_))), "the request line's authority counts too");
    }

    #[test]
    fn allowed_hosts_with_and_without_a_port() {
        let p = loopback(&["proxy.example", "Other.Example:8443", "localhost:8080"]);
        for ok in ["proxy.example", "proxy.example:443", "other.example:8443", "localhost:8080", "localhost:39400"] {
            assert_eq!(host(&p, ok), Ok(()), "{ok}");
        }
        for bad in ["other.example", "other.example:443", "sub.proxy.example", "proxy.example.evil"] {
            assert!(host(&p, bad).is_err(), "{bad}");
        }
        for bad in ["http://x", "x/y", "u@x", "x:port", ""] {
            assert!(bad.parse::<AllowedHost>().is_err(), "{bad}");
        }
    }

    #[test]
    fn token_mode_answers_ip_addresses_but_not_other_names() {
        let p = HostPolicy::new("0.0.0.0:39400".parse().unwrap(), Vec::new());
        for ok in ["192.168.1.5:39400", "[fe80::1]:39400", "localhost:39400", "0.0.0.0:39400"] {
            assert_eq!(host(&p, ok), Ok(()), "{ok}");
        }
        for bad in ["evil.example:39400", "192.168.1.5:1", "[192.168.1.5]:39400", "::1:39400"] {
            assert!(host(&p, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn origins_must_match_scheme_host_and_port() {
        let p = loopback(&["proxy.example"]);
        for ok in ["http://localhost:39400", "http://127.0.0.1:39400", "http://[::1]:39400", "https://proxy.example"] {
            assert!(origin(&p, ok), "{ok}");
        }
        for bad in [
            "https://localhost:39400",
            "http://localhost:39401",
            "http://localhost",
            "http://evil.example:39400",
            "null",
            "ws://localhost:39400",
            "http://localhost:39400/path",
            "http://user@localhost:39400",
            "localhost:39400",
        ] {
            assert!(!origin(&p, bad), "{bad}");
        }
        assert!(origin(&HostPolicy::loopback_any_port(), "http://127.0.0.1:5555"));
    }
}
