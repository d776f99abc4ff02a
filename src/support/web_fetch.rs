//! `web.fetch`, run in the controller (not in the container, which has no network): http and
//! https only, no credentials in the URL, a size cap and a time cap (reference §4.9), and —
//! beyond the reference — loopback, private and link-local addresses refused unless the project
//! sets `tools.webFetch.allowPrivateAddresses`. The address check runs on the resolved IPs and
//! the connection is pinned to them, so DNS cannot swap in a private address afterwards.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::{Value, json};

use super::ToolOutput;
use crate::config::WebFetchConfig;
use crate::toolpack::ToolError;

const DEFAULT_MAX: usize = 20_000;
const MAX_CAP: usize = 100_000;
const DEFAULT_TIMEOUT_MS: u64 = 30_000;
const TIMEOUT_CAP_MS: u64 = 120_000;

/// Fetch a URL: a URL the rules refuse is `Rejected`, a fetch that went wrong is `Failed`.
pub async fn fetch(config: &WebFetchConfig, input: &Value) -> Result<ToolOutput, ToolError> {
    let raw = input.get("url").and_then(Value::as_str).unwrap_or_default().to_string();
    let max = input.get("maxBytes").and_then(Value::as_u64).map_or(DEFAULT_MAX, |n| n as usize).clamp(1, MAX_CAP);
    let timeout = input.get("timeoutMs").and_then(Value::as_u64).unwrap_or(DEFAULT_TIMEOUT_MS).clamp(1, TIMEOUT_CAP_MS);
    let format = input.get("format").and_then(Value::as_str).unwrap_or("text");
    let fail = |e: String| ToolError::Failed(format!("web.fetch failed for {raw}: {e}"));
    let url = reqwest::Url::parse(&raw).map_err(|e| ToolError::Rejected(format!("web.fetch failed for {raw}: {e}")))?;
    let client = egress_client(config, &url, "web.fetch", |b| b.timeout(Duration::from_millis(timeout))).await?;
    let mut response = client.get(url.clone()).send().await.map_err(|e| fail(describe(&e)))?;
    let status = response.status().as_u16();
    let content_type =
        response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    // Read at most a little more than the cap (text mode shrinks HTML a lot, so allow 8x).
    let byte_budget = if format == "raw" { max } else { max * 8 };
    let mut body: Vec<u8> = Vec::new();
    let mut cut = false;
    while let Some(chunk) = response.chunk().await.map_err(|e| fail(describe(&e)))? {
        body.extend_from_slice(&chunk);
        if body.len() > byte_budget {
            body.truncate(byte_budget);
            cut = true;
            break;
        }
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    let text = if format == "text" && content_type.contains("html") { html_to_text(&text) } else { text };
    let (mut shown, truncated) = match text.char_indices().nth(max) {
        Some((i, _)) => (text[..i].to_string(), true),
        None => (text, cut),
    };
    if truncated {
        shown.push_str("\n[truncated]");
    }
    Ok(ToolOutput {
        title: Some(format!("{status} {url}")),
        output: shown,
        metadata: json!({
            "url": url.as_str(), "status": status, "contentType": content_type, "format": format, "truncated": truncated,
        })
        .as_object()
        .cloned(),
        ..ToolOutput::default()
    })
}

/// Every HTTP client of the controller uses rustls with the ring provider (reqwest is built
/// without one: the default, aws-lc, needs cmake and a long C build). Call before building one.
pub fn tls_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client for `url` under the egress rules every connection of the controller obeys (`who`
/// names the caller in refusals): http or https, no credentials in the URL, the host resolved
/// first and refused if it is a loopback, private or link-local address (unless the project sets
/// `tools.webFetch.allowPrivateAddresses`), connections pinned to the resolved addresses so that
/// DNS cannot swap in another one, no redirects. `configure` adds the caller's timeouts.
pub async fn egress_client(
    config: &WebFetchConfig,
    url: &reqwest::Url,
    who: &str,
    configure: impl FnOnce(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
) -> Result<reqwest::Client, ToolError> {
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(ToolError::Rejected(format!("Unsupported URL protocol: {}:", url.scheme())));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ToolError::Rejected("URL credentials are not allowed".into()));
    }
    let (lookup_host, addrs) = resolve_allowed(config, url, who).await?;
    tls_provider();
    let builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .resolve_to_addrs(&lookup_host, &addrs)
        .user_agent(concat!("suzumio/", env!("CARGO_PKG_VERSION")));
    configure(builder).build().map_err(|e| ToolError::Failed(format!("{who} failed for {url}: {e}")))
}

/// The addresses `url`'s host resolves to, when the egress rules let `who` reach them.
async fn resolve_allowed(
    config: &WebFetchConfig,
    url: &reqwest::Url,
    who: &str,
) -> Result<(String, Vec<SocketAddr>), ToolError> {
    let raw = url.as_str();
    let fail = |e: String| ToolError::Failed(format!("{who} failed for {raw}: {e}"));
    let host = url
        .host_str()
        .ok_or_else(|| ToolError::Rejected(format!("{who} failed for {raw}: the URL has no host")))?
        .to_string();
    let port = url.port_or_known_default().unwrap_or(80);
    let lookup_host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((lookup_host.as_str(), port))
        .await
        .map_err(|e| fail(format!("cannot resolve {host}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(fail(format!("cannot resolve {host}")));
    }
    if !config.allow_private_addresses
        && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip()))
    {
        return Err(ToolError::Rejected(format!(
            "{who} refuses {host}: it resolves to {}, a loopback, private or link-local address (set tools.webFetch.allowPrivateAddresses to allow it)",
            bad.ip()
        )));
    }
    Ok((lookup_host, addrs))
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() { "timed out".into() } else { e.to_string() }
}

/// Public unicast addresses only.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.octets()[0] == 100 && (64..128).contains(&v4.octets()[1]) // carrier-grade NAT
                || v4.octets()[0] == 0)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback() || v6.is_unspecified() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80)
        }
    }
}

/// HTML to readable text: scripts and styles dropped, tags removed, a few entities decoded,
/// whitespace collapsed (block tags become line breaks).
pub fn html_to_text(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut out = String::with_capacity(html.len() / 2);
    let mut i = 0;
    while i < html.len() {
        if lower[i..].starts_with("<script") || lower[i..].starts_with("<style") {
            let close = if lower[i..].starts_with("<script") { "</script>" } else { "</style>" };
            i = lower[i..].find(close).map_or(html.len(), |j| i + j + close.len());
            continue;
        }
        if html[i..].starts_with('<') {
            let end = html[i..].find('>').map_or(html.len(), |j| i + j + 1);
            let tag = &lower[i..end];
            if ["<br", "<p", "</p", "<div", "</div", "<li", "<h", "</h", "<tr", "</tr"]
                .iter()
                .any(|t| tag.starts_with(t))
            {
                out.push('\n');
            }
            i = end;
            continue;
        }
        let next = html[i..].find('<').map_or(html.len(), |j| i + j);
        out.push_str(&html[i..next]);
        i = next;
    }
    let decoded = out
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    let lines: Vec<String> =
        decoded.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).filter(|l| !l.is_empty()).collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_text() {
        let html = "<html><head><style>p{}</style><script>x()</script></head><body><h1>Title</h1><p>A &amp; B&nbsp;c</p></body></html>";
        assert_eq!(html_to_text(html), "Title\nA & B c");
    }

    #[test]
    fn address_classes() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.5",
            "169.254.1.1",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }
}
